#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "models/eval/metrics.h"

namespace ferry::models {
namespace {

// O(P N) definition: P(score+ > score-) + 1/2 P(score+ == score-).
double BruteForceAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double wins = 0;
  double pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] <= 0.5f) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] > 0.5f) continue;
      pairs += 1;
      if (scores[i] > scores[j]) wins += 1;
      if (scores[i] == scores[j]) wins += 0.5;
    }
  }
  return wins / pairs;
}

TEST(ExactAuc, MatchesBruteForceWithTies) {
  std::mt19937_64 rng(99);
  for (int round = 0; round < 40; ++round) {
    const size_t n = 2 + rng() % 300;
    const int levels = round % 4 == 0 ? 3 : 1000;  // few levels: heavy ties
    std::vector<float> scores(n);
    std::vector<float> labels(n);
    for (size_t i = 0; i < n; ++i) {
      labels[i] = static_cast<float>(rng() % 3 == 0);
      scores[i] = static_cast<float>(rng() % levels) / levels + 0.3f * labels[i] * (round % 2);
    }
    labels[0] = 1.0f;
    labels[1] = 0.0f;
    auto r = ExactAuc(scores, labels);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->defined());
    EXPECT_NEAR(r->auc, BruteForceAuc(scores, labels), 1e-12) << "round " << round;
    EXPECT_EQ(r->Explain(), "");
  }
}

TEST(ExactAuc, MatchesBruteForceOverTheWholeFloatOrder) {
  // The sort orders the scores' bits (models/eval/metrics.cc): negative scores, both zeros
  // (equal, so tied), infinities and denormals must rank as the floats compare.
  const std::vector<float> special = {-std::numeric_limits<float>::infinity(),
                                      -1e30f,
                                      -2.5f,
                                      -1e-40f,
                                      -0.0f,
                                      0.0f,
                                      1e-40f,
                                      0.5f,
                                      3e38f,
                                      std::numeric_limits<float>::infinity()};
  std::mt19937_64 rng(7);
  for (int round = 0; round < 30; ++round) {
    const size_t n = 2 + rng() % 2000;
    std::vector<float> scores(n), labels(n);
    for (size_t i = 0; i < n; ++i) {
      labels[i] = static_cast<float>(rng() % 2);
      scores[i] = rng() % 2 == 0
                      ? special[rng() % special.size()]
                      : static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 100.0f;
    }
    labels[0] = 1.0f;
    labels[1] = 0.0f;
    auto r = ExactAuc(scores, labels);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->auc, BruteForceAuc(scores, labels), 1e-12) << "round " << round;
  }
}

TEST(ExactAuc, HandComputed) {
  // Perfect, inverted, all tied, and one tie across classes.
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 1})->auc, 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<float>{0.9f, 0.1f}, std::vector<float>{0, 1})->auc, 0.0);
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<float>{0.5f, 0.5f, 0.5f}, std::vector<float>{0, 1, 1})->auc,
                   0.5);
  // pos {0.8, 0.5}, neg {0.5, 0.2}: pairs (0.8>0.5) (0.8>0.2) (0.5=0.5) (0.5>0.2) = 3.5 / 4.
  EXPECT_DOUBLE_EQ(
      ExactAuc(std::vector<float>{0.8f, 0.5f, 0.5f, 0.2f}, std::vector<float>{1, 1, 0, 0})->auc,
      0.875);
  // -0.0 and +0.0 are the same score.
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<float>{-0.0f, 0.0f}, std::vector<float>{1, 0})->auc, 0.5);
}

TEST(ExactAuc, UndefinedCasesReportNaNAndSaySo) {
  auto pos = ExactAuc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1});
  ASSERT_TRUE(pos.ok());
  EXPECT_TRUE(std::isnan(pos->auc));
  EXPECT_FALSE(pos->defined());
  EXPECT_NE(pos->Explain().find("positive"), std::string::npos) << pos->Explain();
  auto neg = ExactAuc(std::vector<float>{0.1f}, std::vector<float>{0});
  EXPECT_TRUE(std::isnan(neg->auc));
  EXPECT_NE(neg->Explain().find("negative"), std::string::npos) << neg->Explain();
  auto empty = ExactAuc(std::vector<float>{}, std::vector<float>{});
  EXPECT_TRUE(std::isnan(empty->auc));
  EXPECT_NE(empty->Explain().find("no samples"), std::string::npos);
  auto nan = ExactAuc(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 0.2f, 0.3f},
                      std::vector<float>{1, 0, 1});
  EXPECT_TRUE(std::isnan(nan->auc));
  EXPECT_EQ(nan->nan_scores, 1u);
  EXPECT_NE(nan->Explain().find("NaN"), std::string::npos);
  EXPECT_EQ(ExactAuc(std::vector<float>{0.1f}, std::vector<float>{}).status().code(),
            Code::kInvalidArgument);
}

TEST(AucAccumulator, MergedWorkersEqualOneAccumulator) {
  std::mt19937_64 rng(5);
  AucAccumulator all;
  std::vector<AucAccumulator> workers(3);
  for (int i = 0; i < 500; ++i) {
    const float label = static_cast<float>(rng() % 2);
    const float score = static_cast<float>(rng() % 50) / 50.0f + 0.2f * label;
    all.Add(score, label);
    ASSERT_TRUE(workers[i % 3].Add(std::vector<float>{score}, std::vector<float>{label}).ok());
  }
  AucAccumulator merged;
  for (const auto& w : workers) merged.Merge(w);
  EXPECT_EQ(merged.size(), 500u);
  EXPECT_DOUBLE_EQ(merged.Compute().auc, all.Compute().auc);
  // The raw state alone suffices to rebuild it (what a gather sends).
  AucAccumulator rebuilt;
  for (const auto& w : workers) ASSERT_TRUE(rebuilt.Add(w.scores(), w.labels()).ok());
  EXPECT_DOUBLE_EQ(rebuilt.Compute().auc, all.Compute().auc);
  merged.Merge(merged);  // self-merge doubles every pair: same AUC
  EXPECT_EQ(merged.size(), 1000u);
  EXPECT_DOUBLE_EQ(merged.Compute().auc, all.Compute().auc);
  EXPECT_EQ(all.Add(std::vector<float>{1, 2}, std::vector<float>{1}).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(all.size(), 500u);
}

TEST(LoglossAccumulator, MeanSumsAndMerge) {
  LoglossAccumulator a;
  EXPECT_TRUE(std::isnan(a.Mean()));
  a.AddSum(3.0, 4);
  LoglossAccumulator b;
  ASSERT_TRUE(b.AddProbabilities(std::vector<float>{0.5f, 0.25f}, std::vector<float>{1, 0}).ok());
  EXPECT_NEAR(b.sum(), std::log(2.0) - std::log(0.75), 1e-7);
  a.Merge(b);
  EXPECT_EQ(a.count(), 6u);
  EXPECT_NEAR(a.Mean(), (3.0 + b.sum()) / 6, 1e-12);
  // Clamped: a certain, wrong prediction costs -log(1e-7), not infinity.
  LoglossAccumulator c;
  ASSERT_TRUE(c.AddProbabilities(std::vector<float>{0.0f, 1.0f}, std::vector<float>{1, 0}).ok());
  EXPECT_NEAR(c.Mean(), -std::log(LoglossAccumulator::kMinProbability), 1e-6);
  EXPECT_EQ(c.AddProbabilities(std::vector<float>{0.5f}, std::vector<float>{}).code(),
            Code::kInvalidArgument);
  c.Clear();
  EXPECT_EQ(c.count(), 0u);
}

}  // namespace
}  // namespace ferry::models
