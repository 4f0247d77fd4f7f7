// Admission control for new feature ids: a key gets a row only once it has been seen often
// enough (a count-min sketch estimates the frequency) or by a coin flip.
//
// Thread-safety: none (owned by one ArrayHashMap, serialised by its writer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::ps {

struct AdmissionOptions {
  enum class Kind : uint8_t {
    kAlways,       // every new key gets a row
    kFrequency,    // admit on the min_count-th sighting (count-min estimate)
    kProbability,  // admit each sighting of an absent key with `probability`
  };
  Kind kind = Kind::kAlways;
  uint32_t min_count = 2;
  double probability = 1.0;
  // Count-min geometry: 4 rows of `filter_width` one-byte saturating counters (4 x width bytes).
  size_t filter_width = 1u << 16;
  // Every `aging_period` sightings all counters are halved (0: never), so old bursts fade.
  uint64_t aging_period = 0;
  uint64_t seed = 1;  // kProbability's generator
};

// A count-min sketch with conservative update: Add() increments only the counters equal to the
// current minimum, which keeps over-estimates low. Estimates never under-count (until aging or
// saturation at 255).
class CountMinFilter {
 public:
  static constexpr int kDepth = 4;
  explicit CountMinFilter(size_t width = 1u << 16, uint64_t aging_period = 0);

  // Records one sighting and returns the new estimate.
  uint32_t Add(uint64_t key);
  uint32_t Estimate(uint64_t key) const;
  void Age();  // halves every counter
  size_t bytes() const { return counters_.size(); }

 private:
  size_t Index(uint64_t key, int row) const;

  size_t width_;  // power of two
  uint64_t aging_period_;
  uint64_t adds_ = 0;
  std::vector<uint8_t> counters_;
};

}  // namespace ferry::ps
