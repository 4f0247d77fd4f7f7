// Internals of the generator (gen.cc, gen_truth.cc, gen_output.cc). Not part of the public API.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/gen.h"
#include "transport/status.h"

namespace ferry::models::internal {

// splitmix64's finaliser: a bijection on 64-bit integers with good avalanche.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64: small, fast and the same on every platform (std:: distributions are not).
struct Rng {
  uint64_t state;
  uint64_t Next() { return Mix64(state += 0x9E3779B97F4A7C15ull); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Normal() {                                                           // Box-Muller
    const double u = 1.0 - Uniform();                                         // (0, 1]
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * Uniform());
  }
};

// An approximately standard normal number made of the 64 bits of h: the sum of its four 16-bit
// lanes as uniforms (Irwin-Hall), centred and scaled to unit variance.
inline double BitsGauss(uint64_t h) {
  const double sum =
      static_cast<double>((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48)) /
      65536.0;
  return (sum - 2.0) * 1.7320508075688772;  // var of a sum of 4 U(0,1) is 1/3
}

// BitsGauss of a hash of (seed, a, b): a pure function of its arguments, cheap enough to
// compute every truth parameter on demand instead of storing tables.
inline double HashGauss(uint64_t seed, uint64_t a, uint64_t b) {
  return BitsGauss(Mix64(Mix64(seed ^ Mix64(a)) + b));
}

// Zipf over ranks 1..n with P(k) ~ k^-s by rejection-inversion (Hörmann & Derflinger 1996, as
// in Apache Commons RNG): O(1) time and memory per draw for any n. s = 0 is uniform.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s);
  uint64_t Sample(Rng* rng) const;  // 1..n

 private:
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;

  uint64_t n_;
  double s_;
  double h_x1_, h_n_, threshold_;
};

// A file written front to back through a 1 MiB buffer, plain or gzip (level 1: gzip at level 6
// would be several times slower than generating the data).
class OutputFile {
 public:
  static Result<std::unique_ptr<OutputFile>> Open(const std::string& path, bool gzip);
  ~OutputFile();
  // Appends; flushes the buffer when full. buffer() may be appended to directly, then Flush*.
  std::string& buffer() { return buffer_; }
  Status MaybeFlush() { return buffer_.size() >= kFlushBytes ? Flush() : Status::Ok(); }
  Status Close();  // flushes and closes; errors (disk full) name the file

 private:
  static constexpr size_t kFlushBytes = 1 << 20;
  explicit OutputFile(std::string path) : path_(std::move(path)) {}
  Status Flush();

  std::string path_;
  std::FILE* file_ = nullptr;
  void* gz_ = nullptr;  // gzFile
  std::string buffer_;
};

}  // namespace ferry::models::internal

namespace ferry::models {

// The truth model with parameters computed from the seed (see gen.h for the functions).
class Generator::Model {
 public:
  // options as normalised by Generator::Create (text: fields = 1).
  explicit Model(const GenOptions& options);
  // The score before calibration; logit = bias + scale * Raw.
  double Raw(const GenSample& s) const;
  // Picks scale so that the logits' standard deviation is options.logit_sd over `raws` (a
  // sample of the data) and bias so that the mean predicted probability is
  // options.positive_rate.
  void Calibrate(const std::vector<double>& raws);
  double Logit(const GenSample& s) const { return bias_ + scale_ * Raw(s); }
  Status Write(const std::string& path, const std::vector<uint64_t>& vocab) const;
  double bias() const { return bias_; }
  double scale() const { return scale_; }

 private:
  // Raw (uncalibrated) parameters.
  double Weight(uint32_t f, uint64_t v) const;              // ctr
  double WordWeight(uint64_t w) const;                      // text
  double Vector(uint32_t f, uint64_t v, uint32_t j) const;  // fm factor / mlp embedding
  // ffm: the vector u[f][v][g] (factors long) into out, with fv = FfmKey(f, v); and the
  // pairwise sum of a sample (keys[f] = FfmKey(f, v_f)) in units of (s sqrt(3) / 2^16)^2.
  uint64_t FfmKey(uint32_t f, uint64_t v) const;
  void FfmVector(uint64_t fv, uint32_t g, double* out) const;
  int64_t FfmPairs(const uint64_t* keys) const;
  double NumericWeight(uint32_t k) const;
  // The id the parameters of value v of field f are drawn for in drift epoch `epoch`: v itself
  // without drift; with it v + 2^32 g, g the number of times v's truth was redrawn so far.
  uint64_t TruthKey(uint32_t f, uint64_t v, uint64_t epoch) const;

  Truth kind_;
  Layout layout_;
  uint32_t fields_, numeric_, factors_, hidden_;
  double logit_sd_, positive_rate_;
  uint64_t topic_ranks_ = 0;  // text: topic words are among the words of rank below this
  uint64_t seed_w_, seed_u_, seed_a_, seed_d_;
  uint64_t drift_period_ = 0;  // P = round(1 / drift) epochs between redraws; 0: no drift
  double factor_sd_;
  std::vector<double> in_weight_, hidden_bias_, out_weight_;  // mlp
  mutable std::vector<double> scratch_;                       // mlp input / fm sums
  mutable std::vector<uint64_t> keys_;                        // per field: TruthKey (ffm: FfmKey)
  double bias_ = 0, scale_ = 1;
};

}  // namespace ferry::models
