// Training that knows when it is done (docs/training.md, "When training stops"):
//  - automatic passes (the default) end when the held-out logloss stops improving, and the log
//    and the metrics say why, with one "epoch" record per pass;
//  - the model kept and exported is the best pass's, not the last one's: a deliberately
//    overfitting setting (a large factor step on small data, a fixed number of passes well past
//    the best) keeps an early pass, reports that pass's test figures, and exports exactly that
//    model (ferry-predict scores the file to the same logloss).
// bsp runs, so the passes are the same every run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::HasSubstr;

class Stopping : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    test_ = *dir_ / "test.svm";
    Generate(train_, test_,
             {"--truth", "fm", "--fields", "8", "--vocab", "100", "--samples", "3000",
              "--test-samples", "2000", "--seed", "31"});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // The "epoch" records of a metrics file, in order.
  static std::vector<nlohmann::json> EpochLines(const std::string& metrics) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& line : JsonLines(metrics)) {
      if (line["event"] == "epoch") out.push_back(line);
    }
    return out;
  }
  static TempDir* dir_;
  static std::string train_, test_;
};
TempDir* Stopping::dir_ = nullptr;
std::string Stopping::train_, Stopping::test_;

TEST_F(Stopping, AutomaticPassesStopWhenTheHeldOutLossStopsImprovingAndSayWhy) {
  // Not quiet (Train() passes -q): the log lines are part of what is checked.
  const std::string metrics = *dir_ / "auto.jsonl";
  Proc p = Exec({TrainBin(), "--model", "ftrl", "--train", train_, "--test", test_, "--consistency",
                 "bsp", "--patience", "2", "--progress", "never", "--metrics-json", metrics},
                120);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  TrainRun r{p, JsonLines(metrics).back()};
  const nlohmann::json& f = r.final_line;
  const int epochs = f.value("epoch", 0);
  const std::vector<nlohmann::json> passes = EpochLines(*dir_ / "auto.jsonl");
  ASSERT_EQ(passes.size(), static_cast<size_t>(epochs)) << f.dump();
  EXPECT_GE(epochs, 3);  // patience 2: at least one improving pass and two more
  EXPECT_LT(epochs, 100) << "stopped by the cap, not by the held-out loss";
  EXPECT_THAT(f.value("stop_reason", ""), HasSubstr("has not improved by 0.1% for 2 epochs"));
  // The summary line on stderr says the same, and which pass was kept.
  EXPECT_THAT(r.proc.err, HasSubstr("stopped after epoch " + std::to_string(epochs) + ": "));
  EXPECT_THAT(r.proc.err,
              HasSubstr("the best was epoch " + std::to_string(f.value("kept_epoch", 0))));
  // Every pass is scored on the same held-out lines; calibration is reported beside the loss.
  for (const nlohmann::json& p : passes) {
    EXPECT_EQ(p["validation_samples"], f["validation_samples"]);
    EXPECT_TRUE(p["validation_logloss"].is_number());
    EXPECT_TRUE(p["validation_calibration"].is_number());
  }
  EXPECT_NEAR(f.value("calibration", 0.0), 1.0, 0.2) << f.dump();
  EXPECT_GT(f.value("auc", 0.0), 0.65);  // a linear model of an fm truth: 0.68-0.69 here
}

TEST_F(Stopping, KeepsAndExportsTheBestPassNotTheLast) {
  const std::string model = *dir_ / "overfit.model";
  // A factor step 20 times the default and six fixed passes: the held-out loss is best early
  // and worsens after (measured: best at pass 1 of 6, 0.52 against 0.75 at pass 6).
  TrainRun r =
      Train(*dir_, "overfit",
            {"--model", "fm", "--train", train_, "--test", test_, "--consistency", "bsp", "--lr",
             "0.2", "--epochs", "6", "--validation-fraction", "0.2", "--model-out", model});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  const nlohmann::json& f = r.final_line;
  const std::vector<nlohmann::json> passes = EpochLines(*dir_ / "overfit.jsonl");
  ASSERT_EQ(passes.size(), 6u) << "a fixed --epochs runs every pass";
  EXPECT_EQ(f.value("epoch", 0), 6);
  const int kept = f.value("kept_epoch", 0);
  ASSERT_GE(kept, 1);
  ASSERT_LT(kept, 6) << "the setting no longer overfits; pick a larger --lr";
  // The kept pass is the one with the lowest held-out loss, and it is the one reported.
  double best = 1e9;
  int best_epoch = 0;
  for (const nlohmann::json& p : passes) {
    const bool better = p["validation_logloss"].get<double>() < best;
    EXPECT_EQ(p["best"].get<bool>(), better) << p.dump();
    if (better) {
      best = p["validation_logloss"].get<double>();
      best_epoch = p["epoch"].get<int>();
    }
  }
  EXPECT_EQ(best_epoch, kept);
  EXPECT_DOUBLE_EQ(f.value("validation_logloss", 0.0), best);
  EXPECT_GT(passes.back()["validation_logloss"].get<double>(), best * 1.05)
      << "the last pass should be clearly worse";
  // The exported file is the kept model: ferry-predict scores it to the reported test loss.
  Proc p = Exec({PredictBin(), model, test_, "--summary", "-o", *dir_ / "overfit.probs"}, 60);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  char want[64];
  std::snprintf(want, sizeof want, "logloss %.5f", r.logloss());
  EXPECT_THAT(p.err, HasSubstr(want)) << "kept epoch " << kept;
}

}  // namespace
}  // namespace ferry::train_test
