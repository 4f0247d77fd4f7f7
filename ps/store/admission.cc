#include "ps/store/admission.h"

#include <algorithm>
#include <bit>

#include "ps/store/mix.h"

namespace ferry::ps {

CountMinFilter::CountMinFilter(size_t width, uint64_t aging_period)
    : width_(std::bit_ceil(std::max<size_t>(width, 64))),
      aging_period_(aging_period),
      counters_(width_ * kDepth, 0) {}

size_t CountMinFilter::Index(uint64_t key, int row) const {
  // Row r uses its own seeded mix; the low bits select the counter.
  const uint64_t h =
      SplitMix64Finalize(key + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(row + 1));
  return static_cast<size_t>(row) * width_ + (h & (width_ - 1));
}

uint32_t CountMinFilter::Estimate(uint64_t key) const {
  uint32_t est = 255;
  for (int r = 0; r < kDepth; ++r) est = std::min<uint32_t>(est, counters_[Index(key, r)]);
  return est;
}

uint32_t CountMinFilter::Add(uint64_t key) {
  size_t idx[kDepth];
  uint32_t est = 255;
  for (int r = 0; r < kDepth; ++r) {
    idx[r] = Index(key, r);
    est = std::min<uint32_t>(est, counters_[idx[r]]);
  }
  if (est < 255) {
    for (size_t i : idx) {
      if (counters_[i] == est) counters_[i] = static_cast<uint8_t>(est + 1);
    }
    ++est;
  }
  if (aging_period_ != 0 && ++adds_ % aging_period_ == 0) Age();
  return est;
}

void CountMinFilter::Age() {
  for (uint8_t& c : counters_) c = static_cast<uint8_t>(c >> 1);
}

}  // namespace ferry::ps
