// The generator's truth model: parameters computed from the seed, calibration, and the truth
// file (writing it, and reading it back as a TruthTable).
//
// Raw parameter distributions (before calibration multiplies the score by scale):
//   w[f][v] ~ N(0, 1)                                       lr, fm, ffm
//   u[f][v] ~ N(0, s^2 I_k), s = (2 / ((F - 1) k))^(1/4)    fm: the F(F-1)/2 pairwise terms
//                                                           then add about as much variance
//                                                           as the F linear ones
//   u[f][v][g] ~ U(-sqrt(3) s, sqrt(3) s)^k, the same s     ffm: variance s^2 per entry, so
//                                                           each pairwise term
//                                                           <u[f][v][g], u[g][v'][f]> has
//                                                           variance k s^4, as fm's; the
//                                                           vectors of different g are
//                                                           independent (uniform entries:
//                                                           FfmHash says why)
//   e[f][v] ~ N(0, I_k); W ~ N(0, 4 / (F k)); b ~ N(0, 0.25); c ~ N(0, 1)    mlp: W's scale
//                                                           drives tanh into its curved part
//   a_k ~ N(0, 0.25)                                        numeric features, all kinds
//   beta_w = sign(z) (0.5 + |z|) for topic words, 0.02 z for the rest, z ~ N(0, 1)    text:
//                                                           topic words are 5% (by a hash) of
//                                                           the words of rank 10 to vocab / 50:
//                                                           frequent enough that a few thousand
//                                                           documents teach a linear model what
//                                                           they mean (uniform over all ranks,
//                                                           most would be seen once or never,
//                                                           and LIBLINEAR itself reached an AUC
//                                                           of 0.7 where the truth has 0.95);
//                                                           the 10 most frequent (stop words)
//                                                           never are
// N(0, 1) is BitsGauss (Irwin-Hall of four 16-bit lanes) of a hash.
//
// Drift (gen.h): the parameters of value v are those of the key v + 2^32 g, g = (epoch +
// phase(f, v)) / P with phase uniform in 0..P-1 by a hash: each id is redrawn every P epochs,
// its redraws spread evenly over the epochs, and nothing is stored per id.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "models/data/gen_internal.h"
#include "models/data/parse_internal.h"

namespace ferry::models {

using internal::HashGauss;
using internal::Mix64;

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr double kTopicFraction = 0.05;
constexpr uint64_t kStopWords = 10;
constexpr double kUniformUnit = 1.7320508075688772;  // sqrt(3): U(-1, 1) has variance 1/3

// ffm vectors. There are F(F-1) of them per sample, so they are made cheap: one hash gives four
// entries, each a 16-bit lane as an odd integer in [-65535, 65535] (uniform, variance ~2^32/3),
// and u[f][v][g]_j = s sqrt(3) lane / 65536. HashGauss would take three hashes per entry and
// generation would be several times slower than with the other truths; the pairwise sums are
// near-normal all the same. Raw sums the lane products exactly in integers and scales once.
inline uint64_t FfmHash(uint64_t fv, uint32_t g, uint32_t chunk) {
  return Mix64(fv + (uint64_t{g} * 16 + chunk + 1) * kGolden);  // factors <= 64: chunk < 16
}
inline int64_t FfmLane(uint64_t h, uint32_t lane) {
  return 2 * static_cast<int64_t>((h >> (16 * lane)) & 0xFFFF) - 65535;
}

}  // namespace

Generator::Model::Model(const GenOptions& o)
    : kind_(o.truth),
      layout_(o.layout),
      fields_(o.fields),
      numeric_(o.numeric),
      factors_(o.truth == Truth::kLr ? 0 : o.factors),
      hidden_(o.truth == Truth::kMlp ? o.hidden : 0),
      logit_sd_(o.logit_sd),
      positive_rate_(o.positive_rate),
      topic_ranks_(std::max<uint64_t>(kStopWords + 1, o.vocab / 50)),
      seed_w_(Mix64(o.seed ^ 0x7777)),
      seed_u_(Mix64(o.seed ^ 0x7575)),
      seed_a_(Mix64(o.seed ^ 0x6161)),
      seed_d_(Mix64(o.seed ^ 0x6464)) {
  if (o.drift > 0) drift_period_ = std::max<uint64_t>(1, std::llround(1.0 / o.drift));
  factor_sd_ = 1.0;
  if (kind_ == Truth::kFm || kind_ == Truth::kFfm) {
    factor_sd_ = fields_ > 1 ? std::pow(2.0 / ((fields_ - 1.0) * factors_), 0.25) : 0.0;
  }
  if (kind_ == Truth::kMlp) {
    internal::Rng rng{Mix64(o.seed ^ 0x6d6d)};
    const size_t inputs = size_t{fields_} * factors_;
    const double w_sd = 2.0 / std::sqrt(static_cast<double>(inputs));
    in_weight_.resize(size_t{hidden_} * inputs);
    for (double& w : in_weight_) w = w_sd * rng.Normal();
    hidden_bias_.resize(hidden_);
    for (double& b : hidden_bias_) b = 0.5 * rng.Normal();
    out_weight_.resize(hidden_);
    for (double& c : out_weight_) c = rng.Normal();
  }
  scratch_.resize(size_t{fields_} * factors_ + 1);
  keys_.resize(fields_);
}

double Generator::Model::Weight(uint32_t f, uint64_t v) const {
  return HashGauss(seed_w_, f, v);
}
double Generator::Model::WordWeight(uint64_t w) const {
  const double z = HashGauss(seed_w_, 0, w);
  const uint64_t t = Mix64(seed_w_ ^ Mix64(w + kGolden));
  const bool topic = w >= kStopWords && w < topic_ranks_ &&
                     static_cast<double>(t >> 11) * 0x1.0p-53 < kTopicFraction;
  return topic ? std::copysign(0.5 + std::abs(z), z) : 0.02 * z;
}
double Generator::Model::Vector(uint32_t f, uint64_t v, uint32_t j) const {
  return factor_sd_ * HashGauss(seed_u_ + j, f, v);
}
uint64_t Generator::Model::FfmKey(uint32_t f, uint64_t v) const {
  return Mix64(Mix64(seed_u_ ^ Mix64(f)) + v);
}
void Generator::Model::FfmVector(uint64_t fv, uint32_t g, double* out) const {
  const double unit = factor_sd_ * kUniformUnit / 65536.0;
  for (uint32_t j = 0; j < factors_; ++j) {
    out[j] = unit * static_cast<double>(FfmLane(FfmHash(fv, g, j / 4), j % 4));
  }
}

int64_t Generator::Model::FfmPairs(const uint64_t* keys) const {
  int64_t sum = 0;  // < F^2/2 * 64 lanes * 2^32 < 2^57
  for (uint32_t f = 0; f < fields_; ++f) {
    for (uint32_t g = f + 1; g < fields_; ++g) {
      for (uint32_t c = 0; c * 4 < factors_; ++c) {
        const uint64_t a = FfmHash(keys[f], g, c), b = FfmHash(keys[g], f, c);
        if (4 * c + 4 <= factors_) {  // unrolled: the products are independent
          sum += (FfmLane(a, 0) * FfmLane(b, 0) + FfmLane(a, 1) * FfmLane(b, 1)) +
                 (FfmLane(a, 2) * FfmLane(b, 2) + FfmLane(a, 3) * FfmLane(b, 3));
        } else {
          for (uint32_t l = 0; l < factors_ - 4 * c; ++l) sum += FfmLane(a, l) * FfmLane(b, l);
        }
      }
    }
  }
  return sum;
}

double Generator::Model::NumericWeight(uint32_t k) const {
  return 0.5 * HashGauss(seed_a_, k, 0);
}

uint64_t Generator::Model::TruthKey(uint32_t f, uint64_t v, uint64_t epoch) const {
  if (drift_period_ == 0) return v;
  const uint64_t phase = Mix64(Mix64(seed_d_ ^ Mix64(f)) + v) % drift_period_;
  return v + ((epoch + phase) / drift_period_ << 32);
}

double Generator::Model::Raw(const GenSample& s) const {
  double r = 0;
  if (layout_ == Layout::kText) {
    for (size_t i = 0; i < s.words.size(); ++i) r += WordWeight(s.words[i]) * s.word_values[i];
    return r;
  }
  // The key of each field's value: its id, or with drift the id in its current truth epoch.
  uint64_t* keys = keys_.data();
  for (uint32_t f = 0; f < fields_; ++f) keys[f] = TruthKey(f, s.values[f], s.epoch);
  for (uint32_t k = 0; k < numeric_; ++k) r += NumericWeight(k) * std::log1p(s.counts[k]);
  if (kind_ != Truth::kMlp) {
    for (uint32_t f = 0; f < fields_; ++f) r += Weight(f, keys[f]);
  }
  if (kind_ == Truth::kFm) {
    // sum_{f<g} <u_f, u_g> = 1/2 sum_j ((sum_f u_fj)^2 - sum_f u_fj^2): O(F k), not O(F^2 k).
    double* sums = scratch_.data();
    std::fill(sums, sums + factors_, 0.0);
    double squares = 0;
    for (uint32_t f = 0; f < fields_; ++f) {
      for (uint32_t j = 0; j < factors_; ++j) {
        const double u = Vector(f, keys[f], j);
        sums[j] += u;
        squares += u * u;
      }
    }
    double pairs = 0;
    for (uint32_t j = 0; j < factors_; ++j) pairs += sums[j] * sums[j];
    r += 0.5 * (pairs - squares);
  }
  if (kind_ == Truth::kFfm) {
    // No FM-style identity here: every pair has its own two vectors, O(F^2 k).
    for (uint32_t f = 0; f < fields_; ++f) keys[f] = FfmKey(f, keys[f]);
    const double unit = factor_sd_ * factor_sd_ * 3.0 / 4294967296.0;  // (s sqrt(3) / 2^16)^2
    r += unit * static_cast<double>(FfmPairs(keys));
  }
  if (kind_ == Truth::kMlp) {
    double* x = scratch_.data();
    for (uint32_t f = 0; f < fields_; ++f) {
      for (uint32_t j = 0; j < factors_; ++j) x[f * factors_ + j] = Vector(f, keys[f], j);
    }
    const size_t inputs = size_t{fields_} * factors_;
    for (uint32_t h = 0; h < hidden_; ++h) {
      const double* w = &in_weight_[h * inputs];
      double a = hidden_bias_[h];
      for (size_t i = 0; i < inputs; ++i) a += w[i] * x[i];
      r += out_weight_[h] * std::tanh(a);
    }
  }
  return r;
}

void Generator::Model::Calibrate(const std::vector<double>& raws) {
  double mean = 0, lowest = raws[0], highest = raws[0];
  for (double r : raws) {
    mean += r;
    lowest = std::min(lowest, r);
    highest = std::max(highest, r);
  }
  mean /= static_cast<double>(raws.size());
  double var = 0;
  for (double r : raws) var += (r - mean) * (r - mean);
  var /= static_cast<double>(raws.size());
  scale_ = var > 1e-12 ? logit_sd_ / std::sqrt(var) : 1.0;
  // Mean probability is increasing in the bias: bisect. [-40, 40] around the mean brackets the
  // usual targets; the bracket widens to [every logit below, every logit above logit(rate)]
  // where that is wider (extreme rates or standard deviations).
  const double target = std::log(positive_rate_ / (1 - positive_rate_));
  double lo = std::min(-40 - scale_ * mean, target - 1 - scale_ * highest);
  double hi = std::max(40 - scale_ * mean, target + 1 - scale_ * lowest);
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    double p = 0;
    for (double r : raws) p += 1.0 / (1.0 + std::exp(-(mid + scale_ * r)));
    (p / static_cast<double>(raws.size()) < positive_rate_ ? lo : hi) = mid;
  }
  bias_ = 0.5 * (lo + hi);
}

namespace {

void PutNumber(std::string* out, double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest exact round trip
  out->push_back(' ');
  out->append(buf, static_cast<size_t>(r.ptr - buf));
}

void PutInt(std::string* out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out->push_back(' ');
  out->append(buf, static_cast<size_t>(r.ptr - buf));
}

}  // namespace

Status Generator::Model::Write(const std::string& path, const std::vector<uint64_t>& vocab) const {
  FERRY_ASSIGN_OR_RETURN(auto file, internal::OutputFile::Open(path, false));
  std::string& b = file->buffer();
  b +=
      "# ferry-gen truth model; format in docs/data-formats.md.\n"
      "# logit(x) = bias + the terms of the lines below; P(label = 1 | x) = 1 / (1 + exp(-logit))\n"
      "ferry-gen-truth 1\nkind ";
  b += TruthName(kind_);
  // ctr files have no layout line, so they read as they did before text existed.
  if (layout_ == Layout::kText) b += "\nlayout text";
  b += "\nfields";
  PutInt(&b, fields_);
  b += "\nnumeric";
  PutInt(&b, numeric_);
  b += "\nfactors";
  PutInt(&b, factors_);
  b += "\nhidden";
  PutInt(&b, hidden_);
  b += "\nvocab";
  for (uint64_t v : vocab) PutInt(&b, v);
  b += "\nbias";
  PutNumber(&b, bias_);
  b += '\n';
  for (uint32_t k = 0; k < numeric_; ++k) {
    b += "numeric_weight";
    PutInt(&b, k);
    PutNumber(&b, scale_ * NumericWeight(k));
    b += '\n';
  }
  const size_t inputs = size_t{fields_} * factors_;
  for (uint32_t h = 0; h < hidden_; ++h) {
    b += "hidden_unit";
    PutInt(&b, h);
    PutNumber(&b, hidden_bias_[h]);
    PutNumber(&b, scale_ * out_weight_[h]);
    for (size_t i = 0; i < inputs; ++i) PutNumber(&b, in_weight_[h * inputs + i]);
    b += '\n';
    FERRY_RETURN_IF_ERROR(file->MaybeFlush());
  }
  // Calibration scales the score: linear weights by scale, FM / FFM factors by sqrt(scale)
  // (they enter in products of two), MLP embeddings not at all (the output weights carry it).
  const bool pairwise = kind_ == Truth::kFm || kind_ == Truth::kFfm;
  const double vector_scale = pairwise ? std::sqrt(scale_) : 1.0;
  std::vector<double> u(factors_);
  for (uint32_t f = 0; f < fields_; ++f) {
    for (uint64_t v = 0; v < vocab[f]; ++v) {
      b += "feature";
      PutInt(&b, f);
      PutInt(&b, v);
      if (layout_ == Layout::kText) {
        PutNumber(&b, scale_ * WordWeight(v));
      } else if (kind_ != Truth::kMlp) {
        PutNumber(&b, scale_ * Weight(f, v));
      }
      if (kind_ == Truth::kFfm) {
        // One block per field g; the block of the value's own field is unused, written as 0.
        const uint64_t key = FfmKey(f, v);
        for (uint32_t g = 0; g < fields_; ++g) {
          if (g == f) {
            std::fill(u.begin(), u.end(), 0.0);
          } else {
            FfmVector(key, g, u.data());
            for (double& x : u) x *= vector_scale;
          }
          for (double x : u) PutNumber(&b, x);
        }
      } else {
        for (uint32_t j = 0; j < factors_; ++j) PutNumber(&b, vector_scale * Vector(f, v, j));
      }
      b += '\n';
      FERRY_RETURN_IF_ERROR(file->MaybeFlush());
    }
  }
  return file->Close();
}

double TruthTable::Logit(const GenSample& s) const {
  double r = bias;
  if (layout == Layout::kText) {
    for (size_t i = 0; i < s.words.size(); ++i) r += weight[s.words[i]] * s.word_values[i];
    return r;
  }
  for (uint32_t k = 0; k < numeric; ++k) r += numeric_weight[k] * std::log1p(s.counts[k]);
  if (kind != Truth::kMlp) {
    for (uint32_t f = 0; f < fields; ++f) r += weight[offsets[f] + s.values[f]];
  }
  if (kind == Truth::kFm || kind == Truth::kFfm) {
    const size_t stride = VectorStride();
    const bool ffm = kind == Truth::kFfm;
    for (uint32_t f = 0; f < fields; ++f) {
      for (uint32_t g = f + 1; g < fields; ++g) {
        // fm: u[f][v_f] . u[g][v_g]; ffm: u[f][v_f][g] . u[g][v_g][f].
        const double* u = &vectors[(offsets[f] + s.values[f]) * stride + (ffm ? g * factors : 0)];
        const double* w = &vectors[(offsets[g] + s.values[g]) * stride + (ffm ? f * factors : 0)];
        for (uint32_t j = 0; j < factors; ++j) r += u[j] * w[j];
      }
    }
  }
  if (kind == Truth::kMlp) {
    const size_t inputs = size_t{fields} * factors;
    for (uint32_t h = 0; h < hidden; ++h) {
      double a = hidden_bias[h];
      for (uint32_t f = 0; f < fields; ++f) {
        const double* e = &vectors[(offsets[f] + s.values[f]) * factors];
        for (uint32_t j = 0; j < factors; ++j) a += in_weight[h * inputs + f * factors + j] * e[j];
      }
      r += out_weight[h] * std::tanh(a);
    }
  }
  return r;
}

}  // namespace ferry::models
