// Key spaces, Zipf sampling and batch pools (see keys.h).
#include "tools/ps/keys.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry::psbench {
namespace {

// log1p(x) / x and expm1(x) / x, with their Taylor series near 0 (where the ratios lose digits).
double Helper1(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double Helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                             : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(std::max<uint64_t>(n, 1)), s_(s) {
  if (s_ <= 0) return;
  h_integral_x1_ = HIntegral(1.5) - 1.0;
  h_integral_n_ = HIntegral(static_cast<double>(n_) + 0.5);
  threshold_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
}

double ZipfSampler::H(double x) const {
  return std::exp(-s_ * std::log(x));
}

double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1.0 - s_) * log_x) * log_x;
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // rounding near the end of the range
  return std::exp(Helper1(t) * x);
}

uint64_t ZipfSampler::Sample(Rng& rng) const {
  if (s_ <= 0) return 1 + rng.Below(n_);
  const double max_k = static_cast<double>(n_);
  while (true) {
    const double u = h_integral_n_ + rng.Unit() * (h_integral_x1_ - h_integral_n_);
    const double x = HIntegralInverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1) k = 1;
    if (k > max_k) k = max_k;
    // Accept at once inside the squeeze, else by the exact test.
    if (k - x <= threshold_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<uint64_t>(k);
  }
}

Status ValidateKeySpec(const KeySpec& spec, uint32_t batch) {
  if (spec.space == 0) return InvalidArgument("the key space must hold at least one key");
  if (batch == 0) return InvalidArgument("a batch needs at least one key");
  if (spec.dist == KeySpec::Dist::kUnique) {
    if (batch > spec.space) {
      return InvalidArgument(std::to_string(batch) +
                             " unique keys per op do not fit a key space of " +
                             std::to_string(spec.space) + " (raise --key-space)");
    }
    if (spec.space > kMaxUniqueSpace) {
      return InvalidArgument("unique keys need a key space of at most " +
                             std::to_string(kMaxUniqueSpace) +
                             " (the permutation is kept in memory); " +
                             "use --zipf 0 for uniform keys over a larger space");
    }
  } else if (!(std::isfinite(spec.zipf_s) && spec.zipf_s >= 0 && spec.zipf_s <= 100)) {
    return InvalidArgument("the Zipf exponent must be in [0, 100]");
  }
  return Status::Ok();
}

Result<KeyBatches> KeyBatches::Create(const KeySpec& spec, uint32_t batch, uint64_t seed,
                                      uint64_t batches) {
  FERRY_RETURN_IF_ERROR(ValidateKeySpec(spec, batch));
  KeyBatches kb;
  kb.spec_ = spec;
  kb.batch_ = batch;
  Rng rng(seed);
  if (spec.dist == KeySpec::Dist::kUnique) {
    // Fisher-Yates over the indices, then the first `batch` again so that every window
    // [off, off + batch) with off < space is contiguous.
    kb.keys_.resize(spec.space + batch);
    for (uint64_t i = 0; i < spec.space; ++i) kb.keys_[i] = i;
    for (uint64_t i = spec.space - 1; i > 0; --i)
      std::swap(kb.keys_[i], kb.keys_[rng.Below(i + 1)]);
    for (uint64_t i = 0; i < spec.space; ++i) kb.keys_[i] = KeyOf(kb.keys_[i]);
    std::copy_n(kb.keys_.begin(), batch, kb.keys_.begin() + static_cast<ptrdiff_t>(spec.space));
    return kb;
  }
  const uint64_t cap = std::max<uint64_t>(1, kZipfPoolBytes / (uint64_t{batch} * 8));
  kb.windows_ = std::clamp<uint64_t>(batches, 1, cap);
  kb.keys_.resize(kb.windows_ * batch);
  const ZipfSampler zipf(spec.space, spec.zipf_s);
  for (uint64_t& k : kb.keys_) k = KeyOf(zipf.Sample(rng) - 1);
  return kb;
}

std::span<const uint64_t> KeyBatches::Next() {
  uint64_t off;
  if (spec_.dist == KeySpec::Dist::kUnique) {
    off = (next_ * batch_) % spec_.space;
  } else {
    off = (next_ % windows_) * batch_;
  }
  ++next_;
  return std::span<const uint64_t>(keys_.data() + off, batch_);
}

uint64_t BatchSeed(uint64_t seed, uint32_t worker, uint32_t phase) {
  return KeyOf(seed * 0x100000001b3ull ^ (uint64_t{worker} << 20) ^ phase);
}

}  // namespace ferry::psbench
