// The data readers take files from anywhere: every byte is hostile. The first input byte picks
// the configuration, the rest is the file:
//   bits 0-1: format (0 libsvm, 1 criteo, 2 libffm, 3 libsvm with hash_bits 16)
//   bit 2:    gzip the file first (the inflate path on valid streams; raw inputs starting with
//             1f 8b take it on hostile ones)
//   bit 3:    also read with 2 parsing threads     bits 4-5: also read as 2..4 shards
//   bit 6:    a 64-byte read buffer (overlong lines, refills) instead of 4 KiB
//   bit 7:    strict mode
// Checks, beyond "no crash, no sanitizer report":
//  - every line parser either appends one valid sample or fails with a message and leaves the
//    batch exactly as it was; masked ids stay below 2^hash_bits and out of the reserved range;
//  - the streaming reader yields exactly the samples the line parsers accept (lines that do not
//    fit the buffer are skipped), threads change nothing, and the shards together yield the
//    same number of samples as one reader;
//  - a failure (corrupt gzip, strict mode) is a Status with a message naming the file.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/hashing.h"
#include "models/data/parse.h"
#include "models/data/reader.h"

namespace {

using ferry::models::Batch;
using ferry::models::Format;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

std::string Gzip(std::string_view in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  Check(deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, in.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  Check(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The samples the line parsers accept, as the reader must see them: blank lines skipped, lines
// that do not fit a buffer of `buffer` bytes skipped.
Batch ParseLines(Format format, std::string_view text, uint32_t bits, size_t buffer) {
  Batch all;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const bool has_nl = nl != std::string_view::npos;
    const std::string_view line = text.substr(0, has_nl ? nl : text.size());
    text.remove_prefix(has_nl ? nl + 1 : text.size());
    // The buffer must hold the line and its '\n'; a last line without one must be shorter.
    const bool fits = has_nl ? line.size() + 1 <= buffer : line.size() < buffer;
    if (ferry::models::IsBlankLine(format, line)) continue;
    const size_t samples = all.size(), nnz = all.nnz();
    ferry::Status s = ferry::models::ParseLine(format, line, 7, bits, &all);
    if (!s.ok()) {
      Check(!s.message().empty() && all.size() == samples && all.nnz() == nnz);
      Check(all.offsets.size() == samples + 1);
      continue;
    }
    Check(all.size() == samples + 1);
    for (size_t i = nnz; i < all.nnz(); ++i) {
      Check(all.ids[i] >= ferry::models::kReservedIds);
      if (bits) Check(all.ids[i] < (uint64_t{1} << bits));
    }
    if (!fits) all.Truncate(samples);
  }
  Check(all.Validate().ok());
  return all;
}

struct ReadResult {
  bool ok = true;
  Batch batch;
};

ReadResult ReadAll(const ferry::models::ReaderOptions& options) {
  ReadResult r;
  auto reader = ferry::models::Reader::Open(options);
  Check(reader.ok());
  while (true) {
    auto n = (*reader)->Next(5, &r.batch);
    if (!n.ok()) {
      // Refusals say why and where.
      Check(n.status().message().find(options.files[0]) != std::string::npos);
      r.ok = false;
      return r;
    }
    if (*n == 0) break;
  }
  Check(r.batch.Validate().ok());
  Check((*reader)->stats().samples == r.batch.size());
  return r;
}

bool Same(const Batch& a, const Batch& b) {
  return a.labels == b.labels && a.offsets == b.offsets && a.ids == b.ids && a.values == b.values &&
         a.fields == b.fields;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Format format = (mode & 3) == 1   ? Format::kCriteo
                        : (mode & 3) == 2 ? Format::kLibffm
                                          : Format::kLibsvm;
  const uint32_t bits = (mode & 3) == 3 ? 16 : 0;
  const size_t buffer = (mode & 0x40) ? 64 : 4096;
  const bool strict = (mode & 0x80) != 0;
  const Batch expected = ParseLines(format, text, bits, buffer);

  const std::string file = (mode & 4) ? Gzip(text) : std::string(text);
  static const int fd = memfd_create("fuzz-readers", 0);
  Check(fd >= 0);
  Check(ftruncate(fd, 0) == 0);
  Check(pwrite(fd, file.data(), file.size(), 0) == static_cast<ssize_t>(file.size()));
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  ferry::models::ReaderOptions o;
  o.format = format;
  o.files = {path};
  o.hash_seed = 7;
  o.hash_bits = bits;
  o.buffer_bytes = buffer;
  o.strict = strict;
  o.on_malformed = [](const std::string& m) { Check(!m.empty()); };
  const ReadResult one = ReadAll(o);
  // A hostile gzip stream may fail; a valid one (or plain text) only fails in strict mode.
  const bool raw_gzip = !(mode & 4) && file.size() >= 2 && static_cast<uint8_t>(file[0]) == 0x1f &&
                        static_cast<uint8_t>(file[1]) == 0x8b;
  if (!raw_gzip) {
    Check(one.ok || strict);
    if (one.ok) Check(Same(one.batch, expected));
  }
  if (mode & 8) {
    o.threads = 2;
    const ReadResult many = ReadAll(o);
    Check(many.ok == one.ok);
    if (one.ok) Check(Same(many.batch, one.batch));
    o.threads = 1;
  }
  if ((mode & 0x30) && one.ok) {
    o.num_shards = 1 + ((mode >> 4) & 3);
    size_t samples = 0;
    bool all_ok = true;
    for (o.shard = 0; o.shard < o.num_shards; ++o.shard) {
      const ReadResult part = ReadAll(o);
      all_ok = all_ok && part.ok;
      samples += part.batch.size();
    }
    if (all_ok) Check(samples == one.batch.size());
  }
  return 0;
}
