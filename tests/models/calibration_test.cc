#include "models/eval/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ferry::models {
namespace {

// Newton to the optimum: afterwards the mean calibrated prediction is the positive rate, and
// the offset undoes a shift put into the logits on purpose.
TEST(Calibration, OffsetFitUndoesAShiftOfTheLogits) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> z(0.0, 1.5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> logits;
  std::vector<float> labels, probs;
  for (int i = 0; i < 20000; ++i) {
    const double t = z(rng) - 1.0;
    labels.push_back(u(rng) < 1.0 / (1.0 + std::exp(-t)) ? 1.0f : 0.0f);
    const float p = static_cast<float>(1.0 / (1.0 + std::exp(-(t + 0.7))));  // 0.7 too high
    probs.push_back(p);
    logits.push_back(LogitOf(p));
  }
  OffsetFit fit;
  int steps = 0;
  for (; steps < kOffsetIterations; ++steps) {
    if (!fit.Step(SumsAt(fit.offset, logits, labels))) break;
  }
  EXPECT_LT(steps, kOffsetIterations) << "Newton converges in a few steps";
  EXPECT_NEAR(fit.offset, -0.7, 0.06);
  const OffsetSums at = SumsAt(fit.offset, logits, labels);
  EXPECT_NEAR(at.gradient / static_cast<double>(at.count), 0.0, 1e-9) << "mean prediction = rate";
  // The calibrated loss is below the raw one, and applying 0 changes nothing.
  std::vector<float> raw = probs, calibrated = probs;
  const double before = ApplyOffset(0.0, raw, labels);
  EXPECT_EQ(raw, probs);
  const double after = ApplyOffset(fit.offset, calibrated, labels);
  EXPECT_LT(after, before);
  double mean = 0, rate = 0;
  for (size_t i = 0; i < labels.size(); ++i) mean += calibrated[i], rate += labels[i];
  EXPECT_NEAR(mean / rate, 1.0, 1e-3);
}

TEST(Calibration, DegenerateLabelsAndExtremes) {
  const std::vector<double> logits = {0.0, 1.0, -2.0};
  const std::vector<float> ones = {1, 1, 1};
  OffsetFit fit;
  int steps = 0;
  while (fit.Step(SumsAt(fit.offset, logits, ones)) && steps < 100) ++steps;
  EXPECT_LE(std::abs(fit.offset), kMaxOffset) << "all positives: bounded, never infinite";
  OffsetFit none;
  EXPECT_FALSE(none.Step(OffsetSums{}));
  EXPECT_EQ(none.offset, 0.0);
  EXPECT_TRUE(std::isfinite(LogitOf(0.0f)));
  EXPECT_TRUE(std::isfinite(LogitOf(1.0f)));
  std::vector<float> p = {0.0f, 1.0f};
  const std::vector<float> y = {1.0f, 0.0f};
  EXPECT_TRUE(std::isfinite(ApplyOffset(0.5, p, y)));
}

}  // namespace
}  // namespace ferry::models
