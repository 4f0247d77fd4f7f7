// The keys ferry-ps-bench and its in-process reference (perf/psbench/ps_reference.cc) work on:
// a key space of N indices, each mapped to a 64-bit feature id by a fixed bijection, and batches
// of keys drawn from it. Both programs build their batches with this file from the same seeds,
// so the reference gathers exactly the rows the benchmark pulls.
//
//   index i in [0, N)  ->  key KeyOf(i)   (splitmix64's finalizer: bijective, so N indices give N
//                                          distinct keys, spread over the hash space the way
//                                          hashed feature ids are)
//
// Batches (KeyBatches):
//   unique  windows of one seeded permutation of [0, N): a batch holds `batch` distinct keys, and
//           consecutive batches are disjoint until the walk wraps around the key space. Rows are
//           therefore touched in random order and not re-touched soon (no flattering of caches).
//           The permutation is materialised (8 bytes per index): N <= kMaxUniqueSpace.
//   zipf    i.i.d. ranks r in [1, N] with P(r) proportional to 1 / r^s (s = 0: uniform), key
//           KeyOf(r - 1); batches repeat keys. A pool of at most kZipfPoolBytes of batches is
//           drawn up front and cycled, so no sampling happens in a timed loop.
//
// Thread-safety: value types; a KeyBatches belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/status.h"

namespace ferry::psbench {

inline constexpr uint64_t kMaxUniqueSpace = uint64_t{1} << 27;  // 1 GiB of permutation
inline constexpr uint64_t kZipfPoolBytes = uint64_t{64} << 20;

inline uint64_t KeyOf(uint64_t index) {
  uint64_t z = index + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A small, fast, seedable generator (SplitMix64). Not for cryptography.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0), by Lemire's multiply-shift (bias < n / 2^64, negligible here).
  uint64_t Below(uint64_t n) {
    __extension__ using U128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<U128>(Next()) * n) >> 64);
  }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Zipf(s) ranks over [1, n] by rejection-inversion (Hoermann and Derflinger 1996, as in Apache
// Commons RNG): O(1) per sample for any n, exact for every s > 0; s == 0 is uniform.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s);
  uint64_t Sample(Rng& rng) const;
  uint64_t n() const { return n_; }
  double s() const { return s_; }

 private:
  double H(double x) const;          // 1 / x^s
  double HIntegral(double x) const;  // integral of H from 1 to x, shifted
  double HIntegralInverse(double x) const;

  uint64_t n_;
  double s_;
  double h_integral_x1_ = 0, h_integral_n_ = 0, threshold_ = 0;
};

// s for the "--zipf" flag: the exponent; 0 gives uniform i.i.d. keys (with repeats).
struct KeySpec {
  enum class Dist : uint8_t { kUnique, kZipf };
  Dist dist = Dist::kUnique;
  double zipf_s = 0;
  uint64_t space = 0;  // N
};

// Checks a KeySpec against a batch size: space >= 1, unique needs batch <= space <=
// kMaxUniqueSpace, zipf needs a finite s >= 0.
Status ValidateKeySpec(const KeySpec& spec, uint32_t batch);

class KeyBatches {
 public:
  // `batches` is how many Next() calls the caller will make (zipf draws min(batches, pool) of
  // them and cycles); it does not matter for unique.
  static Result<KeyBatches> Create(const KeySpec& spec, uint32_t batch, uint64_t seed,
                                   uint64_t batches);
  // The next batch: `batch` keys, valid until this object is destroyed.
  std::span<const uint64_t> Next();
  uint32_t batch() const { return batch_; }

 private:
  KeyBatches() = default;
  KeySpec spec_;
  uint32_t batch_ = 0;
  std::vector<uint64_t> keys_;  // unique: the permutation + its first `batch` keys again
  uint64_t windows_ = 0;        // zipf: batches in the pool
  uint64_t next_ = 0;
};

// The seed of a worker's batches for one phase: distinct per (seed, worker, phase), the same in
// the benchmark and in the reference (which plays worker 0).
uint64_t BatchSeed(uint64_t seed, uint32_t worker, uint32_t phase);

// A deterministic gradient coordinate for key and coordinate d, in [-0.05, 0.05): what pushes
// send, so that a checked pass can recompute the expected rows.
inline float GradientOf(uint64_t key, uint32_t d) {
  const uint64_t h = KeyOf(key ^ (uint64_t{d} << 56));
  return (static_cast<float>(h >> 40) * (1.0f / 16777216.0f) - 0.5f) * 0.1f;
}

}  // namespace ferry::psbench
