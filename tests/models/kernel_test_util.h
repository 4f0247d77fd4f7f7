// Shared fixtures for the kernel tests: random minibatches with the awkward cases (empty samples,
// ids repeated within a sample), recording accessors, and double-precision central differences.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <span>
#include <vector>

#if __has_include("models/data/batch.h")
#include "models/data/batch.h"
#else
namespace ferry::models {
// Local copy of models/data/batch.h's Batch (the readers' library may not be there yet).
struct Batch {
  std::vector<float> labels;
  std::vector<uint32_t> offsets = {0};
  std::vector<uint64_t> ids;
  std::vector<float> values;
  std::vector<uint32_t> fields;
  size_t size() const { return labels.size(); }
};
}  // namespace ferry::models
#endif

namespace ferry::models::testing {

struct KernelCase {
  Batch batch;
  std::vector<uint32_t> uidx;  // uidx[j] < num_unique
  uint32_t num_unique = 0;
};

// `samples` samples over `num_unique` unique ids and `num_fields` fields. Sample 1 is always
// empty and sample 0 always repeats one id (within one field and across fields).
KernelCase RandomCase(uint64_t seed, size_t samples, uint32_t num_unique, uint32_t num_fields);

// A table of rows x dim floats with a gradient buffer, recording which rows the kernel touched.
struct RecordingTable {
  RecordingTable(uint32_t rows, uint32_t dim, uint64_t seed, float scale);

  uint32_t rows;
  uint32_t dim;
  std::vector<float> w;
  std::vector<float> g;
  std::set<uint32_t> read;
  std::set<uint32_t> written;

  auto Reader() {
    return [this](uint32_t u) -> const float* {
      EXPECT_LT(u, rows);
      read.insert(u);
      return w.data() + static_cast<size_t>(u) * dim;
    };
  }
  auto Writer() {
    return [this](uint32_t u) -> float* {
      EXPECT_LT(u, rows);
      written.insert(u);
      return g.data() + static_cast<size_t>(u) * dim;
    };
  }
};

// The unique indices a kernel may touch: every uidx value, plus the bias when there is one.
std::set<uint32_t> ExpectedRows(const KernelCase& c, uint32_t bias_u);

// The kernel read and wrote exactly ExpectedRows(c, bias_u) of `table` (pass kNoBias for a
// table whose bias row must stay unread).
void ExpectTouchedRows(const RecordingTable& table, const KernelCase& c, uint32_t bias_u,
                       const char* what);

// d f / d x_i by central differences in double precision: (f(x + h e_i) - f(x - h e_i)) / 2h.
std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                    std::vector<double> x, double h = 1e-5);

std::vector<double> ToDouble(std::span<const float> v);

// |analytic - numeric| <= atol + rtol * |numeric| for every coordinate.
void ExpectGradientNear(std::span<const float> analytic, std::span<const double> numeric,
                        const char* what, double rtol = 1e-3, double atol = 1e-4);

// Double-precision reference logloss of a logit (independent of models/kernels/logistic.h).
double RefLogLoss(double z, double y);
double RefSigmoid(double z);

}  // namespace ferry::models::testing
