// SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a bijective 64-bit mixer whose every output bit depends on every
// input bit. For values that must not correlate with the tables' key hash (hash_index.h): the
// consistent-hashing ring's point positions (ps/job/partition.cc), the admission sketch's rows
// (admission.cc). Private to ps/ (not installed).
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

namespace ferry::ps {

constexpr uint64_t SplitMix64Finalize(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace ferry::ps
