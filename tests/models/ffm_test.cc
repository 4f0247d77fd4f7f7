#include "models/kernels/ffm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/models/kernel_test_util.h"

namespace ferry::models {
namespace {

using testing::KernelCase;
using testing::RandomCase;
using testing::RecordingTable;

TEST(FfmKernel, RowWidth) {
  EXPECT_EQ(FfmRowWidth(4, 39), 156u);
  EXPECT_EQ(FfmRowWidth(1, 1), 1u);
}

// F = 2 fields, k = 2. Rows are [V_{u,0} | V_{u,1}]:
//   u0 = [9, 9 | 1, 2]    u1 = [0.5, -1 | 7, 7]    linear w = [0.25, -0.5], bias (u2) = 1
// Sample 0 (y = 1): u0 in field 0 with x = 1, u1 in field 1 with x = 2.
//   pair  = <V_{u0,1}, V_{u1,0}> x0 x1 = (1 * 0.5 + 2 * -1) * 2 = -3
//   z0    = 1 + 0.25 - 1 - 3 = -2.75
// Sample 1 (y = 0): u0 and u1 both in field 0, x = 1 each (a same-field pair).
//   pair  = <V_{u0,0}, V_{u1,0}> = 9 * 0.5 + 9 * -1 = -4.5
//   z1    = 1 + 0.25 - 0.5 - 4.5 = -3.75
// Gradients, dz_i = p_i - y_i:
//   V_{u0,1} += dz0 x0 x1 V_{u1,0} = dz0 [1, -2]      V_{u1,0} += dz0 x0 x1 V_{u0,1} = dz0 [2, 4]
//   V_{u0,0} += dz1 V_{u1,0} = dz1 [0.5, -1]         V_{u1,0} += dz1 V_{u0,0} = dz1 [9, 9]
//   V_{u1,1} is never touched.
TEST(FfmKernel, HandComputed) {
  Batch b;
  b.labels = {1.0f, 0.0f};
  b.offsets = {0, 2, 4};
  b.ids = {5, 6, 5, 6};
  b.values = {1.0f, 2.0f, 1.0f, 1.0f};
  b.fields = {0, 1, 0, 0};
  const std::vector<uint32_t> uidx = {0, 1, 0, 1};
  std::vector<float> w = {0.25f, -0.5f, 1.0f};
  std::vector<float> gw(3, 0.0f);
  std::vector<float> v = {9, 9, 1, 2, 0.5f, -1, 7, 7};
  std::vector<float> gv(8, 0.0f);
  std::vector<float> probs(2);
  auto loss = FfmForwardBackward(
      2, 2, b, uidx, 2, [&](uint32_t u) { return &w[u]; }, [&](uint32_t u) { return &gw[u]; },
      [&](uint32_t u) { return &v[4 * u]; }, [&](uint32_t u) { return &gv[4 * u]; }, probs);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double p0 = 1.0 / (1.0 + std::exp(2.75));
  const double p1 = 1.0 / (1.0 + std::exp(3.75));
  const double dz0 = p0 - 1.0;
  const double dz1 = p1;
  EXPECT_NEAR(*loss, std::log1p(std::exp(2.75)) + std::log1p(std::exp(-3.75)), 1e-6);
  EXPECT_NEAR(probs[0], p0, 1e-6);
  EXPECT_NEAR(probs[1], p1, 1e-6);
  EXPECT_NEAR(gw[0], dz0 + dz1, 1e-6);
  EXPECT_NEAR(gw[1], 2 * dz0 + dz1, 1e-6);
  EXPECT_NEAR(gw[2], dz0 + dz1, 1e-6);
  const std::vector<double> want = {0.5 * dz1,         -dz1, dz0, -2 * dz0, 2 * dz0 + 9 * dz1,
                                    4 * dz0 + 9 * dz1, 0.0,  0.0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(gv[i], want[i], 1e-6) << "gv[" << i << "]";
}

// Reference: the FFM loss in double, indexing the flat tables directly (row u, field block g).
double RefFfmLoss(const KernelCase& c, uint32_t k, uint32_t num_fields,
                  const std::vector<double>& w, const std::vector<double>& v, uint32_t bias_u) {
  const Batch& b = c.batch;
  auto factor = [&](uint32_t j, uint32_t other_field, uint32_t t) {
    return v[(static_cast<size_t>(c.uidx[j]) * num_fields + other_field) * k + t];
  };
  double loss = 0;
  for (size_t s = 0; s < b.size(); ++s) {
    double z = bias_u == kNoBias ? 0.0 : w[bias_u];
    for (uint32_t i = b.offsets[s]; i < b.offsets[s + 1]; ++i) {
      z += w[c.uidx[i]] * b.values[i];
      for (uint32_t j = i + 1; j < b.offsets[s + 1]; ++j) {
        double dot = 0;
        for (uint32_t t = 0; t < k; ++t)
          dot += factor(i, b.fields[j], t) * factor(j, b.fields[i], t);
        z += dot * b.values[i] * b.values[j];
      }
    }
    loss += testing::RefLogLoss(z, b.labels[s]);
  }
  return loss;
}

TEST(FfmKernel, MatchesFiniteDifferences) {
  constexpr uint32_t kK = 3;
  constexpr uint32_t kFields = 4;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const KernelCase c = RandomCase(seed, 8, 9, kFields);
    const uint32_t bias_u = seed % 2 == 0 ? kNoBias : c.num_unique;
    RecordingTable lin(c.num_unique + 1, 1, seed, 0.5f);
    RecordingTable ffm(c.num_unique + 1, FfmRowWidth(kK, kFields), seed + 100, 0.6f);
    std::vector<float> probs(c.batch.size());
    auto loss = FfmForwardBackward(kK, kFields, c.batch, c.uidx, bias_u, lin.Reader(), lin.Writer(),
                                   ffm.Reader(), ffm.Writer(), probs);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();

    const std::vector<double> w = testing::ToDouble(lin.w);
    const std::vector<double> v = testing::ToDouble(ffm.w);
    EXPECT_NEAR(*loss, RefFfmLoss(c, kK, kFields, w, v, bias_u), 1e-4);
    // Covers every coordinate: untouched rows and blocks must stay 0, touched ones must match.
    testing::ExpectGradientNear(
        lin.g,
        testing::NumericGradient(
            [&](const std::vector<double>& x) { return RefFfmLoss(c, kK, kFields, x, v, bias_u); },
            w),
        "ffm linear gradient");
    testing::ExpectGradientNear(
        ffm.g,
        testing::NumericGradient(
            [&](const std::vector<double>& x) { return RefFfmLoss(c, kK, kFields, w, x, bias_u); },
            v),
        "ffm factor gradient");
    if (bias_u != kNoBias) {
      EXPECT_NE(lin.g[bias_u], 0.0f);
    }

    testing::ExpectTouchedRows(lin, c, bias_u, "ffm linear table");
    // The factor table is never asked for the bias row.
    testing::ExpectTouchedRows(ffm, c, kNoBias, "ffm factor table");

    std::vector<float> probs2(c.batch.size());
    auto loss2 =
        FfmForward(kK, kFields, c.batch, c.uidx, bias_u, lin.Reader(), ffm.Reader(), probs2);
    ASSERT_TRUE(loss2.ok()) << loss2.status().ToString();
    EXPECT_DOUBLE_EQ(*loss2, *loss);
    EXPECT_EQ(probs2, probs);
  }
}

TEST(FfmKernel, RefusesBadInputsWithoutTouchingAnything) {
  constexpr uint32_t kK = 2;
  constexpr uint32_t kFields = 3;
  const KernelCase good = RandomCase(7, 4, 5, kFields);
  KernelCase bad_field = good;
  bad_field.batch.fields[2] = kFields;
  KernelCase no_fields = good;
  no_fields.batch.fields.clear();
  struct Bad {
    const char* why;
    uint32_t k;
    uint32_t fields;
    const KernelCase& input;
    size_t probs;
    const char* message_has;
  };
  const size_t n = good.batch.size();
  const Bad cases[] = {
      {"field out of range", kK, kFields, bad_field, n, "feature 2 has field 3"},
      {"batch without fields", kK, kFields, no_fields, n, "field"},
      {"k = 0", 0, kFields, good, n, "k=0"},
      {"no fields in the model", kK, 0, good, n, "fields=0"},
      {"row of 2^21 floats", 1u << 11, 1u << 10, good, n, "at most"},
      {"row of 2^32 floats (k * F wraps in 32 bits)", 1u << 16, 1u << 16, good, n, "at most"},
      {"probs of the wrong size", kK, kFields, good, n - 1, "probability output"},
  };
  RecordingTable lin(good.num_unique, 1, 1, 0.5f);
  RecordingTable ffm(good.num_unique, FfmRowWidth(kK, kFields), 2, 0.5f);
  for (const Bad& b : cases) {
    std::vector<float> probs(b.probs);
    const Status s = FfmForwardBackward(b.k, b.fields, b.input.batch, b.input.uidx, 0, lin.Reader(),
                                        lin.Writer(), ffm.Reader(), ffm.Writer(), probs)
                         .status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << b.why;
    EXPECT_NE(s.message().find(b.message_has), std::string::npos) << b.why << ": " << s.message();
  }
  EXPECT_TRUE(lin.read.empty() && lin.written.empty());
  EXPECT_TRUE(ffm.read.empty() && ffm.written.empty());
  EXPECT_EQ(lin.g, std::vector<float>(lin.g.size(), 0.0f));
  EXPECT_EQ(ffm.g, std::vector<float>(ffm.g.size(), 0.0f));
  // The same input with good arguments runs (the refusals above were for the stated reasons).
  std::vector<float> probs(n);
  EXPECT_TRUE(FfmForwardBackward(kK, kFields, good.batch, good.uidx, 0, lin.Reader(), lin.Writer(),
                                 ffm.Reader(), ffm.Writer(), probs)
                  .ok());
}

}  // namespace
}  // namespace ferry::models
