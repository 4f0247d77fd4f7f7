#include "tests/common/pattern.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace ferry::testing {
namespace {

inline uint64_t Word(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint8_t ByteAt(uint64_t seed, uint64_t pos) {
  return static_cast<uint8_t>(Word(seed, pos / 8) >> (8 * (pos % 8)));
}

}  // namespace

void FillPattern(void* dst, size_t len, uint64_t seed, uint64_t pos) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  size_t i = 0;
  // Head up to a word boundary of the stream, then whole words, then the tail.
  while (i < len && (pos + i) % 8 != 0) {
    p[i] = ByteAt(seed, pos + i);
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w = Word(seed, (pos + i) / 8);  // little-endian: byte k is bits 8k..8k+7
    std::memcpy(p + i, &w, 8);
  }
  for (; i < len; ++i) p[i] = ByteAt(seed, pos + i);
}

::testing::AssertionResult CheckPattern(const void* src, size_t len, uint64_t seed, uint64_t pos) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  constexpr size_t kChunk = 1 << 16;
  uint8_t want[kChunk];
  for (size_t off = 0; off < len; off += kChunk) {
    size_t n = std::min(kChunk, len - off);
    FillPattern(want, n, seed, pos + off);
    if (std::memcmp(p + off, want, n) == 0) continue;
    size_t first = off;
    while (p[first] == ByteAt(seed, pos + first)) ++first;
    size_t differ = 0;
    for (size_t k = first; k < len; ++k) differ += p[k] != ByteAt(seed, pos + k);
    std::ostringstream m;
    m << "pattern (seed " << seed << ") mismatch at offset " << first << " of " << len << ": got 0x"
      << std::hex << int{p[first]} << ", want 0x" << int{ByteAt(seed, pos + first)} << std::dec
      << "; " << differ << " bytes differ";
    return ::testing::AssertionFailure() << m.str();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameBytes(const char* what, const void* got, const void* want,
                                     size_t len) {
  if (len == 0 || std::memcmp(got, want, len) == 0) return ::testing::AssertionSuccess();
  const uint8_t* g = static_cast<const uint8_t*>(got);
  const uint8_t* w = static_cast<const uint8_t*>(want);
  size_t first = 0;
  while (g[first] == w[first]) ++first;
  size_t last = first, differ = 0;
  for (size_t k = first; k < len; ++k) {
    if (g[k] != w[k]) {
      ++differ;
      last = k;
    }
  }
  std::ostringstream m;
  m << what << ": " << differ << " of " << len << " bytes differ, first at offset " << first
    << " (got 0x" << std::hex << int{g[first]} << ", want 0x" << int{w[first]} << std::dec
    << "), last at offset " << last;
  return ::testing::AssertionFailure() << m.str();
}

Buffer::Buffer(size_t size) : size_(size) {
  size_t rounded = (size + 4095) / 4096 * 4096;
  if (rounded == 0) rounded = 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  data_.reset(static_cast<uint8_t*>(p));
}

void Buffer::Free::operator()(uint8_t* p) const {
  std::free(p);
}

}  // namespace ferry::testing
