#include "models/kernels/fm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/models/kernel_test_util.h"

namespace ferry::models {
namespace {

using testing::KernelCase;
using testing::RandomCase;
using testing::RecordingTable;

// Two features x = [1, 2], v0 = [1, 0], v1 = [0.5, 1], w = 0, no bias, y = 0:
// pairwise term = <v0, v1> x0 x1 = 0.5 * 2 = 1.
TEST(FmKernel, HandComputed) {
  Batch b;
  b.labels = {0.0f};
  b.offsets = {0, 2};
  b.ids = {5, 6};
  b.values = {1.0f, 2.0f};
  const std::vector<uint32_t> uidx = {0, 1};
  std::vector<float> w = {0.0f, 0.0f};
  std::vector<float> gw(2, 0.0f);
  std::vector<float> v = {1.0f, 0.0f, 0.5f, 1.0f};
  std::vector<float> gv(4, 0.0f);
  std::vector<float> probs(1);
  auto loss = FmForwardBackward(
      2, b, uidx, kNoBias, [&](uint32_t u) { return &w[u]; }, [&](uint32_t u) { return &gw[u]; },
      [&](uint32_t u) { return &v[2 * u]; }, [&](uint32_t u) { return &gv[2 * u]; }, probs);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double p = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(*loss, std::log1p(std::exp(1.0)), 1e-6);
  EXPECT_NEAR(probs[0], p, 1e-6);
  EXPECT_NEAR(gw[0], p * 1.0, 1e-6);
  EXPECT_NEAR(gw[1], p * 2.0, 1e-6);
  // d/dv0 = v1 x0 x1 = [1, 2]; d/dv1 = v0 x0 x1 = [2, 0].
  EXPECT_NEAR(gv[0], p * 1.0, 1e-6);
  EXPECT_NEAR(gv[1], p * 2.0, 1e-6);
  EXPECT_NEAR(gv[2], p * 2.0, 1e-6);
  EXPECT_NEAR(gv[3], 0.0, 1e-6);
}

// Reference: the FM loss in double, written as the explicit pairwise sum over occurrences
// i < j (a different form from the kernel's O(nk) identity).
double RefFmLoss(const KernelCase& c, uint32_t k, const std::vector<double>& w,
                 const std::vector<double>& v, uint32_t bias_u) {
  double loss = 0;
  for (size_t s = 0; s < c.batch.size(); ++s) {
    double z = bias_u == kNoBias ? 0.0 : w[bias_u];
    const uint32_t begin = c.batch.offsets[s];
    const uint32_t end = c.batch.offsets[s + 1];
    for (uint32_t i = begin; i < end; ++i) {
      z += w[c.uidx[i]] * c.batch.values[i];
      for (uint32_t j = i + 1; j < end; ++j) {
        double dot = 0;
        for (uint32_t f = 0; f < k; ++f) dot += v[c.uidx[i] * k + f] * v[c.uidx[j] * k + f];
        z += dot * c.batch.values[i] * c.batch.values[j];
      }
    }
    loss += testing::RefLogLoss(z, c.batch.labels[s]);
  }
  return loss;
}

TEST(FmKernel, MatchesFiniteDifferences) {
  constexpr uint32_t kK = 4;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const KernelCase c = RandomCase(seed, 8, 9, 3);
    const uint32_t bias_u = seed % 2 == 0 ? kNoBias : c.num_unique;
    RecordingTable lin(c.num_unique + 1, 1, seed, 0.5f);
    RecordingTable fac(c.num_unique + 1, kK, seed + 100, 0.6f);
    std::vector<float> probs(c.batch.size());
    auto loss = FmForwardBackward(kK, c.batch, c.uidx, bias_u, lin.Reader(), lin.Writer(),
                                  fac.Reader(), fac.Writer(), probs);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();

    const std::vector<double> w = testing::ToDouble(lin.w);
    const std::vector<double> v = testing::ToDouble(fac.w);
    EXPECT_NEAR(*loss, RefFmLoss(c, kK, w, v, bias_u), 1e-4);
    testing::ExpectGradientNear(
        lin.g,
        testing::NumericGradient(
            [&](const std::vector<double>& x) { return RefFmLoss(c, kK, x, v, bias_u); }, w),
        "fm linear gradient");
    testing::ExpectGradientNear(
        fac.g,
        testing::NumericGradient(
            [&](const std::vector<double>& x) { return RefFmLoss(c, kK, w, x, bias_u); }, v),
        "fm factor gradient");

    EXPECT_EQ(lin.read, testing::ExpectedRows(c, bias_u));
    EXPECT_EQ(lin.written, testing::ExpectedRows(c, bias_u));
    // The factor table is never asked for the bias row.
    EXPECT_EQ(fac.read, testing::ExpectedRows(c, kNoBias));
    EXPECT_EQ(fac.written, testing::ExpectedRows(c, kNoBias));

    std::vector<float> probs2(c.batch.size());
    auto loss2 = FmForward(kK, c.batch, c.uidx, bias_u, lin.Reader(), fac.Reader(), probs2);
    ASSERT_TRUE(loss2.ok());
    EXPECT_DOUBLE_EQ(*loss2, *loss);
    EXPECT_EQ(probs2, probs);
  }
}

TEST(FmKernel, RefusesBadFactorDimension) {
  const KernelCase c = RandomCase(1, 3, 4, 2);
  RecordingTable lin(c.num_unique, 1, 1, 0.5f);
  RecordingTable fac(c.num_unique, 1, 1, 0.5f);
  std::vector<float> probs(c.batch.size());
  auto r = FmForwardBackward(0, c.batch, c.uidx, kNoBias, lin.Reader(), lin.Writer(), fac.Reader(),
                             fac.Writer(), probs);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(fac.read.empty());
}

}  // namespace
}  // namespace ferry::models
