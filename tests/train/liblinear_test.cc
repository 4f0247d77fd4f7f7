// ferry-train against LIBLINEAR on the same LIBSVM files: L2-regularised logistic regression
// (liblinear-train -s 0) is the reference; ferry-train --model lr and --model ftrl must reach a
// test logloss within 1% of it, or better.
//
// LIBLINEAR's side: -s 0 (L2-regularised LR, primal trust-region Newton), -B 1 (a bias feature,
// as ferry-train has), -c 0.1: the best C of {0.03, 0.1, 0.3, 1} on this data (test logloss
// 0.4524, 0.4476, 0.4514, 0.4570; LIBLINEAR's default C = 1 overfits the rare features), so the
// reference is LIBLINEAR at its best, not at its default. Its logloss is computed here from
// liblinear-predict -b 1's probabilities.
//
// ferry-train's side: default hyper-parameters and --epochs 3 (one pass of an online learner is
// 2-3% behind the batch optimum on 100k samples; measured: lr 2.3%, 0.6%, 0.4% and ftrl 2.8%,
// 0.7%, 0.2% behind after 1, 2, 3 epochs). Explicit L2 does not help: an online L2 step is taken
// per touch of a feature, and --l2 1 (lr) or --l2 100 (ftrl) already cost 4% and 1.7%.
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

bool OnPath(const std::string& name) {
  std::stringstream path(EnvOr("PATH", "/usr/bin:/bin"));
  std::string dir;
  while (std::getline(path, dir, ':')) {
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Mean logloss of liblinear-predict -b 1 output ("labels 0 1" then "<pred> <p0> <p1>") against
// the labels of the LIBSVM file.
double LiblinearLogloss(const std::string& predictions, const std::string& data) {
  const std::vector<std::string> p = Lines(Slurp(predictions));
  const std::vector<std::string> d = Lines(Slurp(data));
  if (p.size() != d.size() + 1) return std::nan("");
  std::stringstream header(p[0]);
  std::string word;
  header >> word;  // "labels"
  int column_of_1 = -1;
  for (int c = 0; header >> word; ++c) {
    if (word == "1") column_of_1 = c;
  }
  if (column_of_1 < 0) return std::nan("");
  double sum = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    std::stringstream row(p[i + 1]);
    double pred = 0, prob = 0;
    row >> pred;
    for (int c = 0; c <= column_of_1; ++c) row >> prob;
    const bool positive = std::atof(d[i].c_str()) > 0;
    const double q = std::clamp(positive ? prob : 1 - prob, 1e-15, 1.0);
    sum -= std::log(q);
  }
  return sum / static_cast<double>(d.size());
}

TEST(Liblinear, LrAndFtrlWithinOnePercentOfLiblinearLogloss) {
  if (!OnPath("liblinear-train") || !OnPath("liblinear-predict")) {
    GTEST_SKIP() << "liblinear-train / liblinear-predict not on PATH "
                    "(apt-get install liblinear-tools)";
  }
  TempDir dir;
  const std::string tr = dir / "train.svm", te = dir / "test.svm";
  Bayes b = Generate(tr, te,
                     {"--fields", "26", "--vocab", "200", "--samples", "100000", "--test-samples",
                      "20000", "--seed", "9"});
  ASSERT_GT(b.auc, 0.7);

  Proc fit =
      Exec({"liblinear-train", "-s", "0", "-c", "0.1", "-B", "1", "-q", tr, dir / "ll.model"}, 300);
  ASSERT_EQ(fit.exit_code, 0) << fit.Describe();
  Proc pred = Exec({"liblinear-predict", "-b", "1", te, dir / "ll.model", dir / "ll.out"}, 120);
  ASSERT_EQ(pred.exit_code, 0) << pred.Describe();
  const double reference = LiblinearLogloss(dir / "ll.out", te);
  ASSERT_TRUE(std::isfinite(reference)) << Slurp(dir / "ll.out").substr(0, 200);
  std::printf("liblinear -s 0 -c 0.1 -B 1: test logloss %.5f (train %.1f s); bayes %.5f\n",
              reference, fit.seconds, b.logloss);

  for (const std::string model : {"lr", "ftrl"}) {
    TrainRun r =
        Train(dir, model, {"--model", model, "--train", tr, "--test", te, "--epochs", "3"});
    ASSERT_TRUE(r.ok()) << r.proc.Describe();
    std::printf("ferry-train --model %s --epochs 3: test logloss %.5f (%+.2f%%), %.1f s\n",
                model.c_str(), r.logloss(), 100 * (r.logloss() / reference - 1), r.proc.seconds);
    EXPECT_LE(r.logloss(), reference * 1.01) << model;
  }
}

}  // namespace
}  // namespace ferry::train_test
