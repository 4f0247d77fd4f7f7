// Writes the seed corpora of the tcp_frames, snapshot and tools fuzz targets from real encodings
// (EncodeHeader, ArrayHashMap::SaveSnapshot, EncodeConfig, the tools' documented flags), so that
// fuzzing starts from valid inputs and mutates its way outwards. Rerun after a format change:
//   build/tests/fuzz/make_seeds tests/fuzz/corpus
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ps/store/array_hash_map.h"
#include "tools/bench/config.h"
#include "transport/common/segment_codec.h"
#include "transport/tcp/wire.h"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using ferry::tcp::FrameHeader;
using ferry::tcp::FrameKind;

bool Write(const fs::path& dir, const std::string& name, const Bytes& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

void Frame(Bytes& out, const FrameHeader& h, const std::vector<ferry::Segment>& table = {},
           uint64_t payload = 0) {
  uint8_t raw[ferry::tcp::kHeaderSize];
  ferry::tcp::EncodeHeader(h, raw);
  out.insert(out.end(), raw, raw + sizeof raw);
  const auto* t = reinterpret_cast<const uint8_t*>(table.data());
  out.insert(out.end(), t, t + table.size() * sizeof(ferry::Segment));
  for (uint64_t i = 0; i < payload; ++i) out.push_back(static_cast<uint8_t>(i * 7 + 1));
}

FrameHeader Hdr(FrameKind kind, uint64_t req_id, uint64_t key, uint64_t arg, uint64_t length) {
  FrameHeader h;
  h.kind = kind;
  h.req_id = req_id;
  h.key = key;
  h.arg = arg;
  h.length = length;
  return h;
}

bool TcpFrames(const fs::path& dir) {
  // Keys of the fuzz target's fake regions: 0x1111 rw 4096 B, 0x2222 read-only 100 B.
  Bytes one_sided;
  Frame(one_sided, Hdr(FrameKind::kWrite, 1, 0x1111, 100, 300), {}, 300);
  Frame(one_sided, Hdr(FrameKind::kRead, 2, 0x1111, 0, 4096));
  Frame(one_sided, Hdr(FrameKind::kRead, 3, 0x2222, 90, 10));
  Bytes sparse;
  const std::vector<ferry::Segment> segs = {{0, 0, 16}, {16, 1000, 0}, {16, 4000, 96}};
  Frame(sparse, Hdr(FrameKind::kSparseWrite, 4, 0x1111, segs.size(), 112), segs, 112);
  Frame(sparse, Hdr(FrameKind::kSparseRead, 5, 0x1111, segs.size(), 112), segs);
  FrameHeader notify = Hdr(FrameKind::kWrite, 6, 0x1111, 0, 8);
  notify.flags = ferry::tcp::kFrameNotify;
  notify.imm = 0xabcd;
  Frame(sparse, notify, {}, 8);
  Bytes replies;
  Frame(replies, Hdr(FrameKind::kMessage, 0, 0, 0, 64), {}, 64);
  Frame(replies, Hdr(FrameKind::kReadResponse, 7, 0, 0, 32), {}, 32);
  FrameHeader refused = Hdr(FrameKind::kResponse, 8, 0, 0, 24);
  refused.imm = static_cast<uint32_t>(ferry::Code::kPermissionDenied);
  Frame(replies, refused, {}, 24);
  Frame(replies, Hdr(FrameKind::kHeartbeat, 0, 0, 0, 0));
  Bytes refusals;  // bounds, access and unknown keys: answered, the stream goes on
  Frame(refusals, Hdr(FrameKind::kWrite, 9, 0x2222, 0, 10), {}, 10);
  Frame(refusals, Hdr(FrameKind::kWrite, 10, 0x1111, 4090, 10), {}, 10);
  Frame(refusals, Hdr(FrameKind::kRead, 11, 0x9999, 0, 10));
  const std::vector<ferry::Segment> outside = {{0, 4095, 2}};
  Frame(refusals, Hdr(FrameKind::kSparseWrite, 12, 0x1111, 1, 2), outside, 2);
  // Packed tables (what Ferry sends since protocol 2): the same rows, and one that leaves the
  // region (refused after the whole table is decoded).
  Bytes packed;
  auto packed_frame = [&packed](FrameHeader h, const std::vector<ferry::Segment>& table,
                                uint64_t payload) {
    Bytes t;
    const size_t bytes = ferry::common::EncodePackedTable(table, &t);
    h.flags |= ferry::tcp::kFramePackedTable;
    h.arg = table.size() | (uint64_t{bytes} << 32);
    uint8_t raw[ferry::tcp::kHeaderSize];
    ferry::tcp::EncodeHeader(h, raw);
    packed.insert(packed.end(), raw, raw + sizeof raw);
    packed.insert(packed.end(), t.begin(), t.end());
    for (uint64_t i = 0; i < payload; ++i) packed.push_back(static_cast<uint8_t>(i * 5 + 3));
  };
  packed_frame(Hdr(FrameKind::kSparseWrite, 13, 0x1111, 0, 112), segs, 112);
  packed_frame(Hdr(FrameKind::kSparseRead, 14, 0x1111, 0, 112), segs, 0);
  const std::vector<ferry::Segment> rows = {{0, 64, 64}, {64, 4032, 64}, {128, 0, 64}};
  packed_frame(Hdr(FrameKind::kSparseWrite, 15, 0x1111, 0, 192), rows, 192);
  packed_frame(Hdr(FrameKind::kSparseWrite, 16, 0x1111, 0, 2), outside, 2);
  return Write(dir, "one_sided", one_sided) && Write(dir, "sparse", sparse) &&
         Write(dir, "replies", replies) && Write(dir, "refusals", refusals) &&
         Write(dir, "packed", packed);
}

bool Snapshot(const fs::path& dir, const fs::path& tmp, const std::string& name, uint8_t mode,
              size_t rows, size_t erase_every) {
  ferry::ps::TableOptions o;
  o.dim = 4;
  o.state_floats = (mode & 8) ? 2 : 0;
  o.metadata = (mode & 4) != 0;
  o.initial_rows = 16;
  o.huge_pages = false;
  auto m = ferry::ps::ArrayHashMap::Create(o);
  if (!m.ok()) return false;
  for (size_t i = 0; i < rows; ++i) {
    auto ins = (*m)->Insert(0x1000 + i * 0x9e3779b97f4a7c15ull);
    if (!ins.ok()) return false;
    (*m)->Embedding(ins->row)[0] = static_cast<float>(i);
  }
  for (size_t i = 0; erase_every > 0 && i < rows; i += erase_every) {
    (*m)->Erase(0x1000 + i * 0x9e3779b97f4a7c15ull);
  }
  const fs::path file = tmp / name;
  if (!(*m)->SaveSnapshot(file.string()).ok()) return false;
  std::ifstream in(file, std::ios::binary);
  Bytes bytes{static_cast<uint8_t>(mode)};
  bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return Write(dir, name, bytes);
}

bool Tools(const fs::path& dir) {
  auto with = [](uint8_t mode, const Bytes& rest) {
    Bytes b{mode};
    b.insert(b.end(), rest.begin(), rest.end());
    return b;
  };
  auto text = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
  ferry::bench::BenchConfig lat;
  ferry::bench::BenchConfig bw;
  bw.mode = ferry::bench::Mode::kBandwidth;
  bw.op = ferry::bench::BenchOp::kSparseWrite;
  bw.sizes = {16384};
  bw.duration_s = 1.5;
  bw.depth = 64;
  bw.bidir = true;
  return Write(dir, "config_latency", with(0, ferry::bench::EncodeConfig(lat))) &&
         Write(dir, "config_sparse_bw", with(0, ferry::bench::EncodeConfig(bw))) &&
         Write(dir, "size_4k", with(1, text("4K"))) &&
         Write(dir, "size_8mib", with(1, text("8MiB"))) &&
         Write(dir, "lat_sizes",
               with(2, text("-s\n8,4K,1M\n--transport\ntcp\n-n\n100\n127.0.0.1:18515"))) &&
         Write(dir, "lat_all", with(2, text("-a\n--op\nwrite\n--local\n--json\n-"))) &&
         Write(dir, "bw_sparse",
               with(3, text("--op\nsparse_read\n--rows\n16\n--row-size\n1K\n--region-size\n1M\n"
                            "-t\n32\n--bidir\n--param\nUCX_TLS=tcp\n--local")));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (e.g. tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec) / ("ferry-seeds-" + std::to_string(getpid()));
  fs::create_directories(tmp, ec);
  bool ok = !ec && TcpFrames(root / "tcp_frames") && Tools(root / "tools") &&
            Snapshot(root / "snapshot", tmp, "meta_40rows_holes", 1 | 4, 40, 3) &&
            Snapshot(root / "snapshot", tmp, "state_200rows", 1 | 8, 200, 0) &&
            Snapshot(root / "snapshot", tmp, "empty_fixgeometry", 1 | 2, 0, 0);
  fs::remove_all(tmp, ec);
  if (!ok) {
    std::fprintf(stderr, "make_seeds: could not write the corpora under %s\n", argv[1]);
    return 1;
  }
  std::printf("wrote seeds under %s\n", argv[1]);
  return 0;
}
