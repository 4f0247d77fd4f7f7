// ferry-train against LIBLINEAR on the same LIBSVM files, with ferry-train's DEFAULTS (no
// hyper-parameter flag, automatic passes): L2-regularised logistic regression
// (liblinear-train -s 0 -B 1, a bias feature as ferry-train has) is the reference.
//
//  - CTR-like data (100k samples, 26 fields x 200 values): lr and ftrl within 1% of LIBLINEAR's
//    test logloss at C = 0.1, its best C on this data (of {0.03, 0.1, 0.3, 1}: 0.4524, 0.4476,
//    0.4514, 0.4570; the default C = 1 overfits the rare features).
//  - Small text-like data (1,500 documents over 20,000 words, unit-norm tf-idf rows): lr and ftrl
//    within 2% of LIBLINEAR's test logloss at the best C its own cross-validation finds
//    (liblinear-train -C), and an AUC within 2% of its.
// LIBLINEAR is a dependency (scripts/deps.sh installs liblinear-tools): without it these fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

TEST(Liblinear, DefaultsWithinOnePercentOnCtrData) {
  TempDir dir;
  const std::string tr = dir / "train.svm", te = dir / "test.svm";
  Bayes b = Generate(tr, te,
                     {"--fields", "26", "--vocab", "200", "--samples", "100000", "--test-samples",
                      "20000", "--seed", "9"});
  ASSERT_GT(b.auc, 0.7);
  const LiblinearRun ref = RunLiblinear(dir, tr, te, 0.1);
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  std::printf("liblinear -s 0 -c 0.1 -B 1: test logloss %.5f auc %.5f (train %.1f s); bayes %.5f\n",
              ref.logloss, ref.auc, ref.seconds, b.logloss);
  for (const std::string model : {"lr", "ftrl"}) {
    TrainRun r = Train(dir, model, {"--model", model, "--train", tr, "--test", te});
    ASSERT_TRUE(r.ok()) << r.proc.Describe();
    std::printf(
        "ferry-train --model %s: test logloss %.5f (%+.2f%%), auc %.5f, %d epochs, %.1f s\n",
        model.c_str(), r.logloss(), 100 * (r.logloss() / ref.logloss - 1), r.auc(),
        r.final_line.value("epoch", 0), r.proc.seconds);
    EXPECT_LE(r.logloss(), ref.logloss * 1.01) << model;
  }
}

TEST(Liblinear, SmallTextDefaultsWithinTwoPercent) {
  TempDir dir;
  const std::string tr = dir / "train.svm", te = dir / "test.svm";
  Bayes b = Generate(tr, te,
                     {"--layout", "text", "--vocab", "20000", "--words", "150", "--logit-sd", "4",
                      "--samples", "1500", "--test-samples", "1500", "--seed", "11"});
  ASSERT_GT(b.auc, 0.9);
  const LiblinearRun ref = RunLiblinear(dir, tr, te, 0);  // the best C of -C
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  std::printf("liblinear -s 0 -C -> c %g: test logloss %.5f auc %.5f; bayes %.5f %.5f\n", ref.c,
              ref.logloss, ref.auc, b.logloss, b.auc);
  for (const std::string model : {"lr", "ftrl"}) {
    TrainRun r = Train(dir, model, {"--model", model, "--train", tr, "--test", te});
    ASSERT_TRUE(r.ok()) << r.proc.Describe();
    std::printf(
        "ferry-train --model %s: test logloss %.5f (%+.2f%%), auc %.5f (%.3fx), %d epochs\n",
        model.c_str(), r.logloss(), 100 * (r.logloss() / ref.logloss - 1), r.auc(),
        r.auc() / ref.auc, r.final_line.value("epoch", 0));
    EXPECT_LE(r.logloss(), ref.logloss * 1.02) << model;
    EXPECT_GE(r.auc(), ref.auc * 0.98) << model;
  }
}

}  // namespace
}  // namespace ferry::train_test
