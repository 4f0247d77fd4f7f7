#include "models/kernels/lr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "models/kernels/logistic.h"
#include "tests/models/kernel_test_util.h"

namespace ferry::models {
namespace {

using testing::KernelCase;
using testing::RandomCase;
using testing::RecordingTable;

TEST(Logistic, StableAtExtremeLogits) {
  EXPECT_EQ(Sigmoid(0.0f), 0.5f);
  EXPECT_EQ(Sigmoid(1000.0f), 1.0f);
  EXPECT_EQ(Sigmoid(-1000.0f), 0.0f);
  EXPECT_GT(Sigmoid(-80.0), 0.0);  // relative precision kept for tiny probabilities
  EXPECT_NEAR(Sigmoid(-80.0) / std::exp(-80.0), 1.0, 1e-12);
  // log(1 + e^-z) forms: finite where the naive -log(sigmoid) overflows or returns inf.
  EXPECT_DOUBLE_EQ(LogLoss(1000.0, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(LogLoss(-1000.0, 1.0), 1000.0);
  EXPECT_DOUBLE_EQ(LogLoss(1000.0, 0.0), 1000.0);
  EXPECT_NEAR(LogLoss(0.0, 1.0), std::log(2.0), 1e-15);
  EXPECT_NEAR(LogLoss(2.0, 0.0), 2.0 + std::log1p(std::exp(-2.0)), 1e-15);
  EXPECT_NEAR(LogLoss(-30.0, 1.0), 30.0 + std::log1p(std::exp(-30.0)), 1e-12);
  EXPECT_NEAR(LogLossGrad(0.3, 1.0), Sigmoid(0.3) - 1.0, 1e-15);
  EXPECT_TRUE(std::isfinite(LogLoss(-100.0f, 1.0f)));
}

// One sample by hand: w = [0.5, -1], x = [2, 1], bias 0.25, y = 1.
TEST(LrKernel, HandComputed) {
  Batch b;
  b.labels = {1.0f};
  b.offsets = {0, 2};
  b.ids = {11, 12};
  b.values = {2.0f, 1.0f};
  const std::vector<uint32_t> uidx = {0, 1};
  std::vector<float> w = {0.5f, -1.0f, 0.25f};  // unique 2 is the bias
  std::vector<float> g(3, 0.0f);
  std::vector<float> probs(1);
  auto loss = LrForwardBackward(
      b, uidx, 2, [&](uint32_t u) { return &w[u]; }, [&](uint32_t u) { return &g[u]; }, probs);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double z = 0.25;
  const double p = 1.0 / (1.0 + std::exp(-z));
  EXPECT_NEAR(*loss, std::log1p(std::exp(-z)), 1e-6);
  EXPECT_NEAR(probs[0], p, 1e-6);
  EXPECT_NEAR(g[0], (p - 1) * 2.0, 1e-6);
  EXPECT_NEAR(g[1], (p - 1) * 1.0, 1e-6);
  EXPECT_NEAR(g[2], p - 1, 1e-6);
}

// Reference: the LR loss in double.
double RefLrLoss(const KernelCase& c, const std::vector<double>& w, uint32_t bias_u) {
  double loss = 0;
  for (size_t i = 0; i < c.batch.size(); ++i) {
    double z = bias_u == kNoBias ? 0.0 : w[bias_u];
    for (uint32_t j = c.batch.offsets[i]; j < c.batch.offsets[i + 1]; ++j) {
      z += w[c.uidx[j]] * c.batch.values[j];
    }
    loss += testing::RefLogLoss(z, c.batch.labels[i]);
  }
  return loss;
}

class LrGradient : public ::testing::TestWithParam<bool> {};

TEST_P(LrGradient, MatchesFiniteDifferences) {
  const bool with_bias = GetParam();
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const KernelCase c = RandomCase(seed, 9, 10, 3);
    const uint32_t bias_u = with_bias ? c.num_unique : kNoBias;
    RecordingTable t(c.num_unique + 1, 1, seed * 31, 0.8f);
    std::vector<float> probs(c.batch.size());
    auto loss = LrForwardBackward(c.batch, c.uidx, bias_u, t.Reader(), t.Writer(), probs);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();

    const std::vector<double> w = testing::ToDouble(t.w);
    EXPECT_NEAR(*loss, RefLrLoss(c, w, bias_u), 1e-4);
    const auto numeric = testing::NumericGradient(
        [&](const std::vector<double>& x) { return RefLrLoss(c, x, bias_u); }, w);
    testing::ExpectGradientNear(t.g, numeric, "lr weight gradient");
    // Accessors see exactly the unique indices of the batch (and the bias).
    EXPECT_EQ(t.read, testing::ExpectedRows(c, bias_u));
    EXPECT_EQ(t.written, testing::ExpectedRows(c, bias_u));

    // The forward-only variant agrees and reads the same rows.
    std::vector<float> probs2(c.batch.size());
    RecordingTable t2 = t;
    t2.read.clear();
    auto loss2 = LrForward(c.batch, c.uidx, bias_u, t2.Reader(), probs2);
    ASSERT_TRUE(loss2.ok());
    EXPECT_DOUBLE_EQ(*loss2, *loss);
    EXPECT_EQ(probs2, probs);
    EXPECT_EQ(t2.read, testing::ExpectedRows(c, bias_u));
    // Empty sample 1: the logit is the bias alone.
    EXPECT_NEAR(probs[1], testing::RefSigmoid(with_bias ? t.w[bias_u] : 0.0), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Bias, LrGradient, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "WithBias" : "NoBias"; });

TEST(LrKernel, GradientsAddIntoExistingValues) {
  const KernelCase c = RandomCase(7, 6, 5, 2);
  RecordingTable t(c.num_unique, 1, 3, 0.5f);
  std::vector<float> probs(c.batch.size());
  ASSERT_TRUE(LrForwardBackward(c.batch, c.uidx, kNoBias, t.Reader(), t.Writer(), probs).ok());
  const std::vector<float> once = t.g;
  ASSERT_TRUE(LrForwardBackward(c.batch, c.uidx, kNoBias, t.Reader(), t.Writer(), probs).ok());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(t.g[i], 2 * once[i]);
}

TEST(LrKernel, RefusesMismatchedShapesWithoutTouchingGradients) {
  KernelCase c = RandomCase(3, 5, 6, 2);
  RecordingTable t(c.num_unique, 1, 3, 0.5f);
  std::vector<float> probs(c.batch.size());
  std::vector<float> short_probs(c.batch.size() - 1);
  auto r = LrForwardBackward(c.batch, c.uidx, kNoBias, t.Reader(), t.Writer(), short_probs);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::vector<uint32_t> short_uidx(c.uidx.begin(), c.uidx.end() - 1);
  r = LrForwardBackward(c.batch, short_uidx, kNoBias, t.Reader(), t.Writer(), probs);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("uidx"), std::string::npos) << r.status().message();
  KernelCase bad = c;
  bad.batch.offsets[2] = bad.batch.offsets[3] + 1;  // decreasing
  r = LrForwardBackward(bad.batch, bad.uidx, kNoBias, t.Reader(), t.Writer(), probs);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  bad = c;
  bad.batch.offsets.pop_back();
  r = LrForwardBackward(bad.batch, bad.uidx, kNoBias, t.Reader(), t.Writer(), probs);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(t.read.empty());
  EXPECT_TRUE(t.written.empty());
  for (float g : t.g) EXPECT_EQ(g, 0.0f);
}

TEST(LrKernel, EmptyBatch) {
  Batch b;
  b.offsets = {0};
  std::vector<float> probs;
  std::vector<float> w = {1.0f};
  std::vector<float> g = {0.0f};
  auto r = LrForwardBackward(
      b, std::span<const uint32_t>(), 0, [&](uint32_t u) { return &w[u]; },
      [&](uint32_t u) { return &g[u]; }, probs);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0.0);
  EXPECT_EQ(g[0], 0.0f);
}

}  // namespace
}  // namespace ferry::models
