// The generator's truth model: parameters computed from the seed, calibration, and the truth
// file (writing it, and reading it back as a TruthTable).
//
// Raw parameter distributions (before calibration multiplies the score by scale):
//   w[f][v] ~ N(0, 1)                                       lr, fm
//   u[f][v] ~ N(0, s^2 I_k), s = (2 / ((F - 1) k))^(1/4)    fm: the F(F-1)/2 pairwise terms
//                                                           then add about as much variance
//                                                           as the F linear ones
//   e[f][v] ~ N(0, I_k); W ~ N(0, 4 / (F k)); b ~ N(0, 0.25); c ~ N(0, 1)    mlp: W's scale
//                                                           drives tanh into its curved part
//   a_k ~ N(0, 0.25)                                        numeric features, all kinds
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

Generator::Model::Model(const GenOptions& o)
    : kind_(o.truth),
      fields_(o.fields),
      numeric_(o.numeric),
      factors_(o.truth == Truth::kLr ? 0 : o.factors),
      hidden_(o.truth == Truth::kMlp ? o.hidden : 0),
      seed_w_(Mix64(o.seed ^ 0x7777)),
      seed_u_(Mix64(o.seed ^ 0x7575)),
      seed_a_(Mix64(o.seed ^ 0x6161)) {
  factor_sd_ = 1.0;
  if (kind_ == Truth::kFm) {
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
  scratch_.resize(std::max<size_t>(size_t{fields_} * factors_, factors_) + 1);
}

double Generator::Model::Weight(uint32_t f, uint64_t v) const {
  return HashGauss(seed_w_, f, v);
}
double Generator::Model::Vector(uint32_t f, uint64_t v, uint32_t j) const {
  return factor_sd_ * HashGauss(seed_u_ + j, f, v);
}
double Generator::Model::NumericWeight(uint32_t k) const {
  return 0.5 * HashGauss(seed_a_, k, 0);
}

double Generator::Model::Raw(const GenSample& s) const {
  double r = 0;
  for (uint32_t k = 0; k < numeric_; ++k) r += NumericWeight(k) * std::log1p(s.counts[k]);
  if (kind_ != Truth::kMlp) {
    for (uint32_t f = 0; f < fields_; ++f) r += Weight(f, s.values[f]);
  }
  if (kind_ == Truth::kFm) {
    // sum_{f<g} <u_f, u_g> = 1/2 sum_j ((sum_f u_fj)^2 - sum_f u_fj^2): O(F k), not O(F^2 k).
    double* sums = scratch_.data();
    std::fill(sums, sums + factors_, 0.0);
    double squares = 0;
    for (uint32_t f = 0; f < fields_; ++f) {
      for (uint32_t j = 0; j < factors_; ++j) {
        const double u = Vector(f, s.values[f], j);
        sums[j] += u;
        squares += u * u;
      }
    }
    double pairs = 0;
    for (uint32_t j = 0; j < factors_; ++j) pairs += sums[j] * sums[j];
    r += 0.5 * (pairs - squares);
  }
  if (kind_ == Truth::kMlp) {
    double* x = scratch_.data();
    for (uint32_t f = 0; f < fields_; ++f) {
      for (uint32_t j = 0; j < factors_; ++j) x[f * factors_ + j] = Vector(f, s.values[f], j);
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
  double mean = 0;
  for (double r : raws) mean += r;
  mean /= static_cast<double>(raws.size());
  double var = 0;
  for (double r : raws) var += (r - mean) * (r - mean);
  var /= static_cast<double>(raws.size());
  scale_ = var > 1e-12 ? kLogitSd / std::sqrt(var) : 1.0;
  // Mean probability is increasing in the bias: bisect.
  double lo = -40 - scale_ * mean, hi = 40 - scale_ * mean;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    double p = 0;
    for (double r : raws) p += 1.0 / (1.0 + std::exp(-(mid + scale_ * r)));
    (p / static_cast<double>(raws.size()) < kPositiveRate ? lo : hi) = mid;
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
  // Calibration scales the score: linear weights by scale, FM factors by sqrt(scale) (they
  // enter in products of two), MLP embeddings not at all (the output weights carry it).
  const double vector_scale = kind_ == Truth::kFm ? std::sqrt(scale_) : 1.0;
  for (uint32_t f = 0; f < fields_; ++f) {
    for (uint64_t v = 0; v < vocab[f]; ++v) {
      b += "feature";
      PutInt(&b, f);
      PutInt(&b, v);
      if (kind_ != Truth::kMlp) PutNumber(&b, scale_ * Weight(f, v));
      for (uint32_t j = 0; j < factors_; ++j) PutNumber(&b, vector_scale * Vector(f, v, j));
      b += '\n';
      FERRY_RETURN_IF_ERROR(file->MaybeFlush());
    }
  }
  return file->Close();
}

double TruthTable::Logit(const GenSample& s) const {
  double r = bias;
  for (uint32_t k = 0; k < numeric; ++k) r += numeric_weight[k] * std::log1p(s.counts[k]);
  if (kind != Truth::kMlp) {
    for (uint32_t f = 0; f < fields; ++f) r += weight[offsets[f] + s.values[f]];
  }
  if (kind == Truth::kFm) {
    for (uint32_t f = 0; f < fields; ++f) {
      for (uint32_t g = f + 1; g < fields; ++g) {
        const double* u = &vectors[(offsets[f] + s.values[f]) * factors];
        const double* w = &vectors[(offsets[g] + s.values[g]) * factors];
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
