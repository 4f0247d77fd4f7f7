// The pure parts of the training job, alone: the early-stopping verdicts, the data-size rule,
// the record of passes a resumed job replays, and the evaluation parts workers exchange.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "models/train/auto_settings.h"
#include "models/train/early_stop.h"
#include "models/train/epoch_log.h"
#include "models/train/evaluate.h"

namespace ferry::models {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Feeds losses for epochs 1.. and returns the verdicts.
std::vector<EpochVerdict> Feed(EarlyStopping& s, const std::vector<double>& losses) {
  std::vector<EpochVerdict> out;
  for (size_t i = 0; i < losses.size(); ++i) {
    out.push_back(s.Observe(static_cast<uint32_t>(i + 1), losses[i]));
    if (out.back().stop) break;
  }
  return out;
}

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovementAndKeepsTheBest) {
  EarlyStopping s({.max_epochs = 100, .patience = 2, .min_improvement = 1e-3});
  const auto v = Feed(s, {0.50, 0.45, 0.44, 0.46, 0.47, 0.40});
  ASSERT_EQ(v.size(), 5u);  // epoch 6 is never reached
  EXPECT_TRUE(v[0].best && v[1].best && v[2].best);
  EXPECT_FALSE(v[3].best || v[4].best);
  EXPECT_FALSE(v[3].stop);
  EXPECT_TRUE(v[4].stop);
  EXPECT_NE(v[4].reason.find("not improved by 0.1% for 2 epochs"), std::string::npos)
      << v[4].reason;
  EXPECT_EQ(s.best_epoch(), 3u);
  EXPECT_DOUBLE_EQ(s.best_loss(), 0.44);
}

// A gain below min_improvement still makes the model the best one, but does not reset the
// patience; gains are counted from the last improvement, so small ones add up.
TEST(EarlyStopping, SmallGainsKeepTheModelAndAddUpTowardsAnImprovement) {
  EarlyStopping s({.max_epochs = 100, .patience = 2, .min_improvement = 0.01});
  const auto v = Feed(s, {1.0, 0.995, 0.989, 0.985});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_TRUE(v[1].best);
  EXPECT_FALSE(v[1].improved);  // 0.5 % below 1.0
  EXPECT_TRUE(v[2].improved);   // 1.1 % below 1.0, the last improvement
  EXPECT_FALSE(v[3].improved);
  EXPECT_FALSE(v[3].stop);  // one epoch without an improvement since 0.989
  EXPECT_EQ(s.best_epoch(), 4u);
}

TEST(EarlyStopping, CapAndDivergence) {
  EarlyStopping capped({.max_epochs = 3, .patience = 5, .min_improvement = 0});
  const auto v = Feed(capped, {0.5, 0.4, 0.3, 0.2});
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(v[2].stop && v[2].best);
  EXPECT_NE(v[2].reason.find("cap of 3 epochs"), std::string::npos);

  EarlyStopping diverged({.max_epochs = 100, .patience = 5, .min_improvement = 0});
  const auto d = Feed(diverged, {0.5, std::nan(""), 0.1});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[1].stop);
  EXPECT_FALSE(d[1].best);
  EXPECT_EQ(diverged.best_epoch(), 1u);
  EXPECT_NE(d[1].reason.find("diverged"), std::string::npos);

  EarlyStopping fixed({.max_epochs = 2});
  EXPECT_FALSE(fixed.ObserveWithoutLoss(1).stop);
  EXPECT_TRUE(fixed.ObserveWithoutLoss(2).stop);
  EXPECT_EQ(fixed.ObserveWithoutLoss(2).reason, "2 epochs done");
}

// Ties keep the earlier model: a later pass must be strictly better to replace it.
TEST(EarlyStopping, TiesKeepTheEarlierEpoch) {
  EarlyStopping s({.max_epochs = 10, .patience = 3, .min_improvement = 0});
  Feed(s, {0.5, 0.4, 0.4, 0.4});
  EXPECT_EQ(s.best_epoch(), 2u);
}

TEST(AutoRule, BatchGrowsWithTheDataAndEpochsShrink) {
  const AutoRule tiny = AutoRuleFor(ModelKind::kFtrl, 1350, 1.0);
  EXPECT_EQ(tiny.batch_size, kMinBatch);
  EXPECT_EQ(tiny.max_epochs, kMaxEpochs);
  EXPECT_EQ(tiny.patience, kMaxPatience);  // small data: passes are cheap, the held-out noisy
  EXPECT_EQ(AutoRuleFor(ModelKind::kFtrl, 40000, 1.0).patience, 5u);  // ceil(2e5 / 40000)
  EXPECT_EQ(AutoRuleFor(ModelKind::kFtrl, 1000000, 1.0).patience, kMinPatience);
  // N / kUpdatesPerEpoch rounded to the nearest power of two (in log scale).
  const uint64_t u = kUpdatesPerEpoch;
  EXPECT_EQ(AutoRuleFor(ModelKind::kFtrl, 64 * u, 1.0).batch_size, 64u);
  EXPECT_EQ(AutoRuleFor(ModelKind::kFtrl, 90 * u, 1.0).batch_size, 64u);   // log2 6.49 -> 6
  EXPECT_EQ(AutoRuleFor(ModelKind::kFtrl, 91 * u, 1.0).batch_size, 128u);  // log2 6.51 -> 7
  const AutoRule big = AutoRuleFor(ModelKind::kFtrl, 1000000000, 1.0);
  EXPECT_EQ(big.batch_size, kMaxBatch);
  EXPECT_EQ(big.max_epochs, 1u);  // the sample budget: one pass over 10^9 samples
  EXPECT_EQ(AutoRuleFor(ModelKind::kFtrl, 200000000, 1.0).max_epochs, 5u);
  for (uint64_t n = 1; n < (uint64_t{1} << 40); n *= 3) {
    const AutoRule r = AutoRuleFor(ModelKind::kFm, n, 1.0);
    EXPECT_GE(r.batch_size, kMinBatch);
    EXPECT_LE(r.batch_size, kMaxBatch);
    EXPECT_GE(r.max_epochs, 1u);
    EXPECT_LE(r.max_epochs, kMaxEpochs);
    EXPECT_GE(r.patience, kMinPatience);
    EXPECT_LE(r.patience, kMaxPatience);
  }
}

TEST(AutoRule, StepScaleIsTheInverseValueScale) {
  EXPECT_DOUBLE_EQ(AutoRuleFor(ModelKind::kLr, 1000, 1.0).step_scale, 1.0);
  EXPECT_DOUBLE_EQ(AutoRuleFor(ModelKind::kLr, 1000, 0.1).step_scale, 10.0);
  EXPECT_DOUBLE_EQ(AutoRuleFor(ModelKind::kLr, 1000, 1e-9).step_scale, 1e3);  // clamped
  EXPECT_DOUBLE_EQ(AutoRuleFor(ModelKind::kLr, 1000, 1e9).step_scale, 1e-3);
}

class TempFile {
 public:
  explicit TempFile(const std::string& text)
      : path_(::testing::TempDir() + "/policy_test." + std::to_string(::getpid()) + "." +
              std::to_string(counter_++)) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(EstimateTrainingSamples, SmallFilesAreCountedExactlyLargeOnesScaledByBytes) {
  std::string small;
  for (int i = 0; i < 100; ++i) small += "1 1:0.5 2:0.5\n\n";  // blank lines are no samples
  TempFile a(small);
  TrainOptions o;
  o.train_files = {a.path(), a.path()};
  auto e = EstimateTrainingSamples(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->exact);
  EXPECT_EQ(e->samples, 200u);
  EXPECT_DOUBLE_EQ(e->value_rms, 0.5);

  std::string big;
  for (uint64_t i = 0; i < 3 * kProbeSamples; ++i) big += "0 7:1 9:1\n";
  TempFile b(big);
  o.train_files = {b.path()};
  e = EstimateTrainingSamples(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->exact);
  EXPECT_NEAR(static_cast<double>(e->samples), 3.0 * kProbeSamples, 0.01 * kProbeSamples);

  TempFile empty("\n# nothing\n");
  o.train_files = {empty.path()};
  EXPECT_EQ(EstimateTrainingSamples(o).status().code(), Code::kInvalidArgument);
  o.train_files = {empty.path() + ".missing"};
  EXPECT_FALSE(EstimateTrainingSamples(o).ok());
}

TEST(ResolveAutoSettings, FillsOnlyWhatIsLeftAutomatic) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "1 1:0.25 2:0.25\n";
  TempFile f(text);
  TrainOptions o;
  o.train_files = {f.path()};
  auto r = ResolveAutoSettings(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Automatic passes on small data: a refit follows, so a fifth is held out.
  EXPECT_EQ(r->refit, TrainOptions::Refit::kOn);
  EXPECT_DOUBLE_EQ(r->validation_fraction, kRefitValidationFraction);
  EXPECT_EQ(r->data_samples, 4000u);
  EXPECT_EQ(r->batch_size, AutoRuleFor(o.model, 4000, 0.25).batch_size);
  EXPECT_EQ(r->max_epochs, kMaxEpochs);
  EXPECT_EQ(r->patience, AutoRuleFor(o.model, 4000, 0.25).patience);
  EXPECT_DOUBLE_EQ(r->step_scale, 4.0);

  // Without a refit (checkpoints), a tenth.
  TrainOptions ck = o;
  ck.checkpoint_dir = "ck";
  r = ResolveAutoSettings(ck);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->refit, TrainOptions::Refit::kOff);
  EXPECT_DOUBLE_EQ(r->validation_fraction, kValidationFraction);
  EXPECT_EQ(r->data_samples, 4500u);

  o.epochs = 3;
  o.batch_size = 7;
  r = ResolveAutoSettings(o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->validation_fraction, 0.0);  // a fixed count holds nothing out
  EXPECT_EQ(r->refit, TrainOptions::Refit::kOff);
  EXPECT_EQ(r->batch_size, 7u);
  EXPECT_EQ(r->max_epochs, 3u);

  o.validation_files = {f.path()};
  o.epochs = 0;
  r = ResolveAutoSettings(o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->validation_fraction, 0.0);  // the validation file is the held-out data
}

EpochEntry Entry(uint32_t epoch, bool kept, double loss, double test_loss) {
  EpochEntry e;
  e.epoch = epoch;
  e.kept = kept;
  e.validation = {.count = 100, .logloss = loss, .auc = 0.75, .calibration = 1.01};
  if (kept) {
    e.test = {.count = 50, .logloss = test_loss, .auc = kNaN, .calibration = 0.99};
    e.offset = -0.125 / 3;
  }
  return e;
}

TEST(EpochLog, RoundTripsExactlyIncludingNaN) {
  const std::vector<EpochEntry> log = {Entry(1, true, 0.5, 0.51), Entry(2, true, 1.0 / 3, 0.4),
                                       Entry(3, false, 0.35, 0)};
  auto back = ParseEpochLog(EncodeEpochLog(log));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, log);
  EXPECT_TRUE(ParseEpochLog(EncodeEpochLog({})).ok());

  const std::string dir = ::testing::TempDir() + "/epoch_log." + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto none = ReadEpochLog(dir);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(WriteEpochLog(dir, log).ok());
  auto read = ReadEpochLog(dir);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ(**read, log);
  EXPECT_EQ(KeptModelDir(dir, 7), dir + "/kept-7");
  std::filesystem::remove_all(dir);
}

TEST(EpochLog, MalformedTextIsRefusedNamingTheLine) {
  const std::string good = EncodeEpochLog({Entry(1, true, 0.5, 0.5), Entry(2, false, 0.6, 0)});
  const std::vector<std::string> bad = {
      "",
      "ferry-train-epochs 2\nend\n",
      good.substr(0, good.size() - 4),  // no end line
      "ferry-train-epochs 1\nepoch 1 kept 2 validation 1 0.5 0.5 1 test 0 nan nan nan offset "
      "0\nend\n",
      "ferry-train-epochs 1\nepoch 2 kept 1 validation 1 0.5 0.5 1 test 0 nan nan nan offset 0\n"
      "epoch 1 kept 1 validation 1 0.5 0.5 1 test 0 nan nan nan offset 0\nend\n",  // out of order
      "ferry-train-epochs 1\nepoch 1 kept 1 validation 1 0.5x 0.5 1 test 0 nan nan nan offset "
      "0\nend\n",
      "ferry-train-epochs 1\nepoch 1 kept 1 validation 1 0.5 0.5 1 test 0 nan nan nan offset 0 "
      "7\nend\n",
      "ferry-train-epochs 1\nepoch 0 kept 1 validation 1 0.5 0.5 1 test 0 nan nan nan offset "
      "0\nend\n",
      "ferry-train-epochs 1\nepoch 1 kept 1 validation 1 0.5 0.5 1 test 0 nan nan nan\nend\n",
      "ferry-train-epochs 1\nepoch 1 kept 1 validation 1 0.5 0.5 1 test 0 nan nan nan offset "
      "nan\nend\n",
  };
  for (const std::string& text : bad) {
    auto r = ParseEpochLog(text);
    EXPECT_EQ(r.status().code(), Code::kProtocol) << text;
  }
}

TEST(EvalPart, EncodesDecodesAndMergesInOrder) {
  EvalPart a;
  a.count = 3;
  a.loss_sum = 1.5;
  a.prob_sum = 0.9;
  a.label_sum = 1;
  a.scores = {0.1f, 0.7f, 0.1f};
  a.labels = {0, 1, 0};
  EvalPart b;
  b.count = 1;
  b.loss_sum = 0.5;
  b.prob_sum = 0.6;
  b.label_sum = 1;
  b.scores = {0.6f};
  b.labels = {1};
  auto back = EvalPart::Decode(a.Encode());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->scores, a.scores);
  EXPECT_EQ(back->labels, a.labels);
  EXPECT_EQ(back->count, 3u);

  auto m = MergeParts({a.Encode(), b.Encode()});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->count, 4u);
  EXPECT_DOUBLE_EQ(m->logloss, 0.5);
  EXPECT_DOUBLE_EQ(m->positive_rate, 0.5);
  EXPECT_DOUBLE_EQ(m->calibration, 1.5 / 2);
  EXPECT_DOUBLE_EQ(m->auc, 1.0);

  // A part without scores leaves the AUC undefined; an empty part changes nothing.
  EvalPart sums = b;
  sums.scores.clear();
  sums.labels.clear();
  m = MergeParts({a.Encode(), sums.Encode(), EvalPart().Encode()});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->count, 4u);
  EXPECT_TRUE(std::isnan(m->auc));

  std::vector<uint8_t> bytes = a.Encode();
  bytes.pop_back();
  EXPECT_EQ(EvalPart::Decode(bytes).status().code(), Code::kProtocol);
  EXPECT_EQ(EvalPart::Decode(std::vector<uint8_t>(10)).status().code(), Code::kProtocol);
  EvalPart wrong = a;
  wrong.count = 2;  // three scores for two samples
  EXPECT_EQ(EvalPart::Decode(wrong.Encode()).status().code(), Code::kProtocol);
}

}  // namespace
}  // namespace ferry::models
