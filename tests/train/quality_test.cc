// Every model learns from every input format with default hyper-parameters, and the models rank
// as the truths that generated the data say they should:
//   - lr, ftrl, fm, mlp x libsvm, libffm, criteo on an lr truth: test AUC and logloss close to
//     the generator's Bayes-optimal yardstick;
//   - an fm truth: fm beats lr;
//   - an mlp truth: mlp beats fm.
// All runs use fixed generator seeds and the default asp consistency. The data sizes are small
// (a run takes 1-3 s) but the margins asserted are several times the run-to-run spread measured
// on this host (asp runs differ in the 3rd decimal; see the comments at each threshold).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

// An lr truth in each format: 10 fields x 100 values (+2 numeric) for libsvm/libffm; criteo has
// its fixed 26 categorical + 13 integer columns.
struct FormatData {
  std::string train, test;
  Bayes bayes;
};

class ModelFormat : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const std::string format : {"libsvm", "libffm", "criteo"}) {
      FormatData& d = data_[format];
      d.train = *dir_ / (format + ".train");
      d.test = *dir_ / (format + ".test");
      std::vector<std::string> args = {"--format",       format,  "--samples", "60000",
                                       "--test-samples", "10000", "--vocab",   "100",
                                       "--seed",         "21"};
      if (format != "criteo") args = Cat(args, {"--fields", "10", "--numeric", "2"});
      d.bayes = Generate(d.train, d.test, args);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
    data_.clear();
  }
  static TempDir* dir_;
  static std::map<std::string, FormatData> data_;
};
TempDir* ModelFormat::dir_ = nullptr;
std::map<std::string, FormatData> ModelFormat::data_;

TEST_P(ModelFormat, ReachesNearBayesQualityWithDefaults) {
  const auto& [model, format] = GetParam();
  const FormatData& d = data_.at(format);
  ASSERT_GT(d.bayes.auc, 0.7) << "ferry-gen failed";
  TrainRun r = Train(*dir_, model + "_" + format,
                     {"--model", model, "--format", format, "--train", d.train, "--test", d.test});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_EQ(r.final_line.value("test_samples", 0), 10000);
  ExpectTrainedPasses(r.final_line, 60000);
  // Measured over 6 suite runs (60k samples, one epoch, asp): libsvm/libffm AUC 0.798-0.803
  // against a Bayes AUC of 0.812, logloss 0.450-0.466 against 0.439; criteo (39 fields, more to
  // learn from the same samples) AUC 0.769-0.791 against 0.822, logloss 0.464-0.500 against
  // 0.425, the widest spread being fm's (asp staleness; bsp runs are stable).
  const bool criteo = format == "criteo";
  const double auc_gap = criteo ? 0.07 : 0.03, logloss_gap = criteo ? 0.10 : 0.05;
  EXPECT_GT(r.auc(), d.bayes.auc - auc_gap)
      << model << " on " << format << ": bayes auc " << d.bayes.auc;
  EXPECT_LT(r.logloss(), d.bayes.logloss + logloss_gap)
      << model << " on " << format << ": bayes logloss " << d.bayes.logloss;
  RecordProperty("auc", std::to_string(r.auc()));
  RecordProperty("logloss", std::to_string(r.logloss()));
  std::printf("%-5s %-7s auc %.4f (bayes %.4f)  logloss %.4f (bayes %.4f)  %.1f s\n", model.c_str(),
              format.c_str(), r.auc(), d.bayes.auc, r.logloss(), d.bayes.logloss, r.proc.seconds);
}

INSTANTIATE_TEST_SUITE_P(
    AllModelsAllFormats, ModelFormat,
    ::testing::Combine(::testing::Values("lr", "ftrl", "fm", "ffm", "mlp", "deepfm"),
                       ::testing::Values("libsvm", "libffm", "criteo")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// fm truth, 6 fields x 100 values, 100k samples; three epochs for both models (fm needs the
// steps to grow its factors from the 0.01 initialisation; lr is converged after one).
// Measured over 4 runs: fm AUC 0.755-0.767, logloss 0.471-0.479; lr AUC 0.727, logloss 0.497
// (Bayes 0.819, 0.425).
TEST(ModelRanking, FmBeatsLrOnFmTruth) {
  TempDir dir;
  const std::string tr = dir / "fm.train", te = dir / "fm.test";
  Bayes b = Generate(tr, te,
                     {"--truth", "fm", "--fields", "6", "--vocab", "100", "--samples", "100000",
                      "--test-samples", "20000", "--seed", "5"});
  ASSERT_GT(b.auc, 0.7);
  const std::vector<std::string> common = {"--train", tr, "--test", te, "--epochs", "3"};
  TrainRun lr = Train(dir, "lr", Cat({"--model", "lr"}, common));
  TrainRun fm = Train(dir, "fm", Cat({"--model", "fm"}, common));
  ASSERT_TRUE(lr.ok()) << lr.proc.Describe();
  ASSERT_TRUE(fm.ok()) << fm.proc.Describe();
  std::printf("fm truth: fm auc %.4f logloss %.4f | lr auc %.4f logloss %.4f | bayes %.4f %.4f\n",
              fm.auc(), fm.logloss(), lr.auc(), lr.logloss(), b.auc, b.logloss);
  EXPECT_GT(fm.auc(), lr.auc() + 0.01);
  EXPECT_LT(fm.logloss(), lr.logloss() - 0.005);
}

// mlp truth, 6 fields x 50 values, 4 hidden units (each tanh unit saturates: far from additive),
// 100k samples, three epochs. Measured over 4 runs on this seed: mlp AUC 0.803-0.804, logloss
// 0.445-0.446; fm AUC 0.785-0.786, logloss 0.466-0.468 (Bayes 0.821, 0.430). Generator seeds 1
// and 2 gave smaller but clear margins too (0.008 AUC with fm's old factor step of 0.05).
TEST(ModelRanking, MlpBeatsFmOnMlpTruth) {
  TempDir dir;
  const std::string tr = dir / "mlp.train", te = dir / "mlp.test";
  Bayes b =
      Generate(tr, te,
               {"--truth", "mlp", "--fields", "6", "--vocab", "50", "--hidden", "4", "--format",
                "libffm", "--samples", "100000", "--test-samples", "20000", "--seed", "3"});
  ASSERT_GT(b.auc, 0.7);
  const std::vector<std::string> common = {"--format", "libffm", "--train",  tr,
                                           "--test",   te,       "--epochs", "3"};
  TrainRun fm = Train(dir, "fm", Cat({"--model", "fm"}, common));
  TrainRun mlp = Train(dir, "mlp", Cat({"--model", "mlp"}, common));
  ASSERT_TRUE(fm.ok()) << fm.proc.Describe();
  ASSERT_TRUE(mlp.ok()) << mlp.proc.Describe();
  std::printf("mlp truth: mlp auc %.4f logloss %.4f | fm auc %.4f logloss %.4f | bayes %.4f %.4f\n",
              mlp.auc(), mlp.logloss(), fm.auc(), fm.logloss(), b.auc, b.logloss);
  EXPECT_GT(mlp.auc(), fm.auc() + 0.008);
  EXPECT_LT(mlp.logloss(), fm.logloss() - 0.008);
}

// The field-aware models against their truths, in the order public Criteo benchmarks give them:
// on an ffm truth (one vector per value and other field) FFM beats FM, which beats LR; on a
// nonlinear (mlp) truth DeepFM beats FFM, which beats FM. Defaults, automatic passes, libffm input.
// Measured (ffm truth, 8 fields x 50 values, 100k samples): lr 0.4943, fm 0.4782, ffm 0.4610
// (Bayes 0.4244); mlp truth (the set above): fm 0.4620, ffm 0.4559, deepfm 0.4432 (Bayes 0.4296).
class FieldAwareRanking : public ::testing::Test {
 protected:
  // Generates TRUTH data (libffm) and trains each of `models` on it with its defaults.
  std::map<std::string, TrainRun> TrainEach(const std::vector<std::string>& gen,
                                            const std::vector<std::string>& models) {
    const std::string tr = dir_ / "train", te = dir_ / "test";
    bayes_ = Generate(
        tr, te, Cat(gen, {"--format", "libffm", "--samples", "100000", "--test-samples", "20000"}));
    EXPECT_GT(bayes_.auc, 0.7);
    std::map<std::string, TrainRun> runs;
    std::string line = gen[1] + " truth:";
    for (const std::string& m : models) {
      TrainRun r =
          Train(dir_, m, {"--model", m, "--format", "libffm", "--train", tr, "--test", te});
      EXPECT_TRUE(r.ok()) << m << ": " << r.proc.Describe();
      char figures[96];
      std::snprintf(figures, sizeof figures, " %s %.4f / %.4f", m.c_str(), r.logloss(), r.auc());
      line += figures;
      runs.emplace(m, std::move(r));
    }
    std::printf("%s | bayes %.4f %.4f\n", line.c_str(), bayes_.logloss, bayes_.auc);
    return runs;
  }
  TempDir dir_;
  Bayes bayes_;
};

TEST_F(FieldAwareRanking, FfmBeatsFmBeatsLrOnFfmTruth) {
  auto r = TrainEach({"--truth", "ffm", "--fields", "8", "--vocab", "50", "--seed", "7"},
                     {"lr", "fm", "ffm"});
  if (HasFailure()) return;
  EXPECT_LT(r["ffm"].logloss(), r["fm"].logloss() - 0.008);
  EXPECT_LT(r["fm"].logloss(), r["lr"].logloss() - 0.004);
  EXPECT_GT(r["ffm"].auc(), r["fm"].auc() + 0.01);
  EXPECT_LT(r["ffm"].logloss(), bayes_.logloss + 0.06) << "ffm learns its truth";
}

TEST_F(FieldAwareRanking, DeepFmBeatsFfmBeatsFmOnMlpTruth) {
  auto r = TrainEach(
      {"--truth", "mlp", "--fields", "6", "--vocab", "50", "--hidden", "4", "--seed", "3"},
      {"fm", "ffm", "deepfm"});
  if (HasFailure()) return;
  EXPECT_LT(r["deepfm"].logloss(), r["ffm"].logloss() - 0.006);
  EXPECT_LT(r["ffm"].logloss(), r["fm"].logloss() - 0.004);
  EXPECT_LT(r["deepfm"].logloss(), bayes_.logloss + 0.03) << "deepfm learns the nonlinear truth";
  // Calibrated on the held-out data (the logit offset), whatever the MLP's bias did.
  EXPECT_NEAR(r["deepfm"].final_line.value("calibration", 0.0), 1.0, 0.05);
}

}  // namespace
}  // namespace ferry::train_test
