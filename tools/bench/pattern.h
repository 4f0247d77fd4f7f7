// Seeded data patterns: every benchmark transfer carries one and is checked on arrival.
//
// A pattern is an endless byte stream chosen by a 64-bit seed; a transfer carries a window of it
// starting at some `pattern_offset`. Filling and checking are memcpy/memcmp against one shared
// random table, so checking runs at memory speed and does not distort bandwidth much:
//
//   P(seed)[j] = table[(Start(seed) + j) mod kPatternPeriod]
//
// kPatternPeriod is a prime (65521), so a chunk misplaced by any power-of-two distance is caught,
// and different seeds start at different table positions, so stale data from an earlier transfer
// (another seed) is caught too (a false match needs the same start: probability 1/65521).
//
// Thread-safety: pure functions over an immutable table built on first use (thread-safe static).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/status.h"

namespace ferry::bench {

inline constexpr uint64_t kPatternPeriod = 65521;

// Mixes up to four values into one seed (splitmix64 finaliser chain).
uint64_t MixSeed(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0);

// Writes P(seed)[pattern_offset, pattern_offset + len) to dst.
void FillPattern(uint8_t* dst, size_t len, uint64_t seed, uint64_t pattern_offset = 0);

// Checks data against P(seed)[pattern_offset, +len). On mismatch returns a Code::kProtocol error
// naming `what`, the first bad byte offset, the expected and the found value.
Status CheckPattern(const uint8_t* data, size_t len, uint64_t seed, uint64_t pattern_offset,
                    const std::string& what);

// True when data matches (no message built); for polling loops.
bool MatchesPattern(const uint8_t* data, size_t len, uint64_t seed, uint64_t pattern_offset = 0);

// The expected byte at one position (for poisoning read targets before a transfer).
uint8_t PatternByte(uint64_t seed, uint64_t pattern_offset);

}  // namespace ferry::bench
