// ferry-train under the real launchers, through the drivers of tests/launch (docs/launchers.md):
//   run-mpirun.sh 4 -- ferry-train --servers 2 ...   (mpirun --allow-run-as-root --oversubscribe)
//   run-srun.sh 4 --mpi pmix -- ferry-train ...      (a single-node Slurm brought up for the run)
// Each rank joins the launcher's job (2 servers, 2 workers from the job size); worker 0 prints the
// summary and writes the metrics. A driver's exit code 77 (launcher missing, not root, Slurm not
// starting) skips the case with the driver's reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::HasSubstr;

class Launchers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    test_ = *dir_ / "test.svm";
    bayes_ = Generate(train_, test_,
                      {"--fields", "10", "--vocab", "100", "--samples", "40000", "--test-samples",
                       "10000", "--seed", "13"});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // driver NP [driver options] --expect SUMMARY --timeout 90 -- ferry-train --servers 2 ...
  static void RunUnder(const std::string& driver, const std::vector<std::string>& options,
                       const std::string& model) {
    if (driver.empty()) GTEST_SKIP() << "driver path not set (run through meson test)";
    const std::string metrics = *dir_ / (model + ".jsonl");
    std::vector<std::string> argv = {driver, "4"};
    argv = Cat(argv, options);
    argv = Cat(argv,
               {"--expect",
                "ferry-train: " + model +
                    " on 2 servers \\+ 2 workers .* test "
                    "logloss [0-9.]+, AUC [0-9.]+ \\(10000 samples\\)",
                "--timeout", "90", "--", TrainBin(), "--servers", "2", "--model", model, "--train",
                train_, "--test", test_, "--metrics-json", metrics, "--progress", "never", "-q"});
    Proc p = Exec(argv, 150);
    if (p.exit_code == 77) GTEST_SKIP() << p.out << p.err;
    ASSERT_EQ(p.exit_code, 0) << p.Describe();
    const std::vector<std::string> lines = Lines(Slurp(metrics));
    ASSERT_FALSE(lines.empty()) << p.Describe();
    const nlohmann::json last = nlohmann::json::parse(lines.back());
    EXPECT_EQ(last["event"], "final");
    EXPECT_EQ(last["workers"], 2);
    EXPECT_EQ(last["servers"], 2);
    ExpectTrainedPasses(last, 40000);
    EXPECT_GT(last["auc"].get<double>(), bayes_.auc - 0.05) << "bayes " << bayes_.auc;
    // One summary line: only worker 0 prints it.
    size_t summaries = 0;
    for (const std::string& line : Lines(p.out)) summaries += line.rfind("ferry-train: ", 0) == 0;
    EXPECT_EQ(summaries, 1u) << p.out;
    std::printf("%s: %.1f s, auc %.4f\n", driver.c_str(), p.seconds, last["auc"].get<double>());
  }
  static TempDir* dir_;
  static std::string train_, test_;
  static Bayes bayes_;
};
TempDir* Launchers::dir_ = nullptr;
std::string Launchers::train_, Launchers::test_;
Bayes Launchers::bayes_;

TEST_F(Launchers, Mpirun) {
  RunUnder(EnvOr("FERRY_RUN_MPIRUN", ""), {}, "ftrl");
}

TEST_F(Launchers, Srun) {
  RunUnder(EnvOr("FERRY_RUN_SRUN", ""), {"--mpi", "pmix"}, "fm");
}

}  // namespace
}  // namespace ferry::train_test
