#include "tools/bench/pattern.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ferry::bench {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The table holds two periods back to back, so any window of up to one period starting inside the
// first period is contiguous:  [ t0 t1 ... t(P-1) | t0 t1 ... t(P-1) ].
const uint8_t* Table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(2 * kPatternPeriod);
    uint64_t state = 0x5eedf00dull;
    for (uint64_t i = 0; i < kPatternPeriod; ++i) {
      state = SplitMix(state);
      t[i] = static_cast<uint8_t>(state >> 24);
      t[i + kPatternPeriod] = t[i];
    }
    return t;
  }();
  return table.data();
}

uint64_t Start(uint64_t seed, uint64_t pattern_offset) {
  return (SplitMix(seed) % kPatternPeriod + pattern_offset % kPatternPeriod) % kPatternPeriod;
}

}  // namespace

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = SplitMix(a);
  h = SplitMix(h ^ b);
  h = SplitMix(h ^ c);
  return SplitMix(h ^ d);
}

void FillPattern(uint8_t* dst, size_t len, uint64_t seed, uint64_t pattern_offset) {
  const uint8_t* table = Table();
  uint64_t pos = Start(seed, pattern_offset);
  while (len > 0) {
    const size_t n = std::min<uint64_t>(len, kPatternPeriod);
    std::memcpy(dst, table + pos, n);
    dst += n;
    len -= n;
    pos = (pos + n) % kPatternPeriod;
  }
}

bool MatchesPattern(const uint8_t* data, size_t len, uint64_t seed, uint64_t pattern_offset) {
  const uint8_t* table = Table();
  uint64_t pos = Start(seed, pattern_offset);
  while (len > 0) {
    const size_t n = std::min<uint64_t>(len, kPatternPeriod);
    if (std::memcmp(data, table + pos, n) != 0) return false;
    data += n;
    len -= n;
    pos = (pos + n) % kPatternPeriod;
  }
  return true;
}

uint8_t PatternByte(uint64_t seed, uint64_t pattern_offset) {
  return Table()[Start(seed, pattern_offset)];
}

Status CheckPattern(const uint8_t* data, size_t len, uint64_t seed, uint64_t pattern_offset,
                    const std::string& what) {
  if (MatchesPattern(data, len, seed, pattern_offset)) return Status::Ok();
  const uint8_t* table = Table();
  const uint64_t start = Start(seed, pattern_offset);
  for (size_t i = 0; i < len; ++i) {
    const uint8_t want = table[(start + i) % kPatternPeriod];
    if (data[i] != want) {
      size_t bad = 0;
      for (size_t j = i; j < len; ++j) bad += data[j] != table[(start + j) % kPatternPeriod];
      return Status(Code::kProtocol,
                    "verification failed: " + what + ": byte " + std::to_string(i) + " of " +
                        std::to_string(len) + " is " + std::to_string(data[i]) + ", expected " +
                        std::to_string(want) + " (" + std::to_string(bad) + " bytes differ)");
    }
  }
  return Status::Ok();
}

}  // namespace ferry::bench
