// ArrayHashMap snapshot files come from disk (another run, another machine, a torn copy). The
// input's first byte picks the restoring table's layout and two helpers; the rest is the file,
// written to a memfd and restored with ArrayHashMap::LoadSnapshot through /proc/self/fd:
//   bit 0: recompute the section and header checksums after mutation, so the fuzzer reaches the
//          geometry and structure checks behind them instead of stopping at the first checksum;
//   bit 1: first rewrite the geometry fields to a consistent layout for small high_water and
//          index sizes taken from the input, and size the file to match (zero padding);
//   bit 2: metadata on/off; bit 3: optimizer state floats 0/2 (dim is 4).
// A restore must either fail with a clear status or yield a table whose index and rows agree:
// every live row is found by its key at its own slot, and erasing and re-inserting work.
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ps/store/array_hash_map.h"

namespace {

constexpr size_t kHeader = 160;  // sizeof(SnapshotHeader), snapshot.cc
constexpr uint64_t kAlign = 4096;
// Field offsets inside the header (snapshot.cc documents the layout).
constexpr size_t kStride = 28, kHighWater = 32, kIndexCapacity = 48, kIndexBuckets = 56;
constexpr size_t kRowsOffset = 80, kRowsBytes = 88, kLiveOffset = 96, kLiveBytes = 104;
constexpr size_t kIndexOffset = 112, kIndexBytes = 120, kRowsXxh = 128, kLiveXxh = 136;
constexpr size_t kIndexXxh = 144, kHeaderXxh = 152;

uint64_t Get(const std::vector<uint8_t>& f, size_t at) {
  uint64_t v;
  std::memcpy(&v, f.data() + at, sizeof v);
  return v;
}
void Put(std::vector<uint8_t>& f, size_t at, uint64_t v) {
  std::memcpy(f.data() + at, &v, sizeof v);
}
uint64_t AlignUp(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

void FixGeometry(std::vector<uint8_t>& f) {
  uint32_t stride;
  std::memcpy(&stride, f.data() + kStride, sizeof stride);
  stride = stride % 512;  // keeps the file small; a wrong stride is refused as a layout mismatch
  std::memcpy(f.data() + kStride, &stride, sizeof stride);
  const uint64_t hw = Get(f, kHighWater) % 300;
  // HashIndex geometry: a power of two of at least 64 buckets, 5 bytes each; an odd bucket
  // count now and then, which must be refused.
  const uint64_t pick = Get(f, kIndexCapacity);
  const uint64_t buckets = (uint64_t{64} << (pick % 5)) + (Get(f, kIndexBuckets) % 7 == 0 ? 16 : 0);
  Put(f, kHighWater, hw);
  Put(f, kIndexCapacity, buckets);
  Put(f, kIndexBuckets, buckets);
  Put(f, kRowsOffset, kAlign);
  Put(f, kRowsBytes, hw * stride);
  Put(f, kLiveOffset, AlignUp(kAlign + hw * stride));
  Put(f, kLiveBytes, (hw + 63) / 64 * 8);
  Put(f, kIndexOffset, AlignUp(Get(f, kLiveOffset) + Get(f, kLiveBytes)));
  Put(f, kIndexBytes, buckets * 5);
  f.resize(Get(f, kIndexOffset) + buckets * 5);
}

void FixChecksums(std::vector<uint8_t>& f) {
  const size_t sections[3][3] = {{kRowsOffset, kRowsBytes, kRowsXxh},
                                 {kLiveOffset, kLiveBytes, kLiveXxh},
                                 {kIndexOffset, kIndexBytes, kIndexXxh}};
  for (const auto& s : sections) {
    const uint64_t off = Get(f, s[0]), len = Get(f, s[1]);
    if (off <= f.size() && len <= f.size() - off) Put(f, s[2], XXH3_64bits(f.data() + off, len));
  }
  Put(f, kHeaderXxh, XXH3_64bits(f.data(), kHeaderXxh));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  if ((mode & 2) && file.size() >= kHeader) FixGeometry(file);
  if ((mode & 1) && file.size() >= kHeader) FixChecksums(file);

  static const int fd = memfd_create("fuzz-snapshot", 0);
  if (fd < 0) __builtin_trap();
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, file.data(), file.size(), 0) != static_cast<ssize_t>(file.size())) {
    __builtin_trap();
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  ferry::ps::TableOptions options;
  options.dim = 4;
  options.state_floats = (mode & 8) ? 2 : 0;
  options.metadata = (mode & 4) != 0;
  options.initial_rows = 16;
  options.huge_pages = false;
  auto loaded = ferry::ps::ArrayHashMap::LoadSnapshot(path, options);
  if (!loaded.ok()) {
    if (loaded.status().message().empty()) __builtin_trap();  // refusals must say why
    return 0;
  }
  ferry::ps::ArrayHashMap& m = **loaded;
  std::vector<uint64_t> keys;
  m.ForEach([&](uint32_t slot, const uint8_t* row) {
    const uint64_t key = ferry::ps::ArrayHashMap::RowKey(row);
    if (m.FindSlot(key) != slot) __builtin_trap();  // a live row its key does not reach
    keys.push_back(key);
  });
  if (keys.size() != m.size()) __builtin_trap();
  for (uint64_t key : keys) {
    if (!m.Erase(key)) __builtin_trap();
  }
  if (m.size() != 0) __builtin_trap();
  for (uint64_t key = 1; key <= 8; ++key) {
    auto ins = m.Insert(key * 0x9e3779b97f4a7c15ull);
    if (!ins.ok() || m.Find(key * 0x9e3779b97f4a7c15ull) != ins->row) __builtin_trap();
  }
  return 0;
}
