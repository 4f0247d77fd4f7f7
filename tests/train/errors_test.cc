// ferry-train's failure modes: a bad flag is exit code 2 with a message naming it; a missing or
// unreadable file is a non-zero exit naming the file, well before the deadline (no hang); a
// malformed line is reported with file:line, skipped and counted, and fatal under --strict;
// training files of no sample fail the job (exit 1) saying what they held; one gzip file on two
// workers is warned about; the --metrics-json file is JSON lines ending in the "final" record.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Errors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    test_ = *dir_ / "test.svm";
    Generate(train_, test_,
             {"--fields", "6", "--vocab", "50", "--samples", "4000", "--test-samples", "1000",
              "--seed", "2"});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static Proc TrainProc(const std::vector<std::string>& args, double timeout_s = 60) {
    return Exec(Cat({TrainBin()}, Cat(args, {"--progress", "never", "-q"})), timeout_s);
  }
  static TempDir* dir_;
  static std::string train_, test_;
};
TempDir* Errors::dir_ = nullptr;
std::string Errors::train_, Errors::test_;

TEST_F(Errors, BadFlagsExitWithTwoAndSayWhich) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--train", train_, "--bogus"}, "--bogus"},
      {{"--train", train_, "--model", "svm"}, "svm"},
      {{"--train", train_, "--format", "csv"}, "csv"},
      {{"--train", train_, "--epochs", "0"}, "--epochs"},
      {{"--train", train_, "--epochs", "often"}, "--epochs"},
      {{"--train", train_, "--batch-size", "-3"}, "--batch-size"},
      {{"--train", train_, "--validation-fraction", "0.95"}, "--validation-fraction"},
      {{"--train", train_, "--validation-fraction", "0"}, "held-out"},
      {{"--train", train_, "--patience", "0"}, "--patience"},
      {{"--train", train_, "--field-map", train_, "--format", "libffm"}, "--field-map"},
      {{"--train", train_, "--refit", "sometimes"}, "--refit"},
      {{"--train", train_, "--consistency", "sometimes"}, "sometimes"},
      {{"--train", train_, "--consistency", "ssp:0"}, "consistency"},
      {{"--train", train_, "--model", "mlp", "--hidden", "64,x"}, "--hidden"},
      {{"--train", train_, "--transport", "carrier-pigeon"}, "carrier-pigeon"},
      {{"--model", "lr"}, "--train"},  // required
  };
  for (const Case& c : cases) {
    Proc p = TrainProc(c.args, 20);
    EXPECT_EQ(p.exit_code, 2) << p.Describe();
    EXPECT_THAT(p.err, HasSubstr(c.says)) << p.Describe();
    EXPECT_LT(p.seconds, 10) << "a flag error must not start the cluster";
  }
  Proc help = TrainProc({"--help"}, 20);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--consistency"));
}

TEST_F(Errors, MissingTrainFileNamesItAndDoesNotHang) {
  const std::string missing = *dir_ / "no-such-file.svm";
  Proc p = TrainProc({"--train", missing, "--test", test_}, 60);
  EXPECT_FALSE(p.timed_out) << p.Describe();
  EXPECT_NE(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr(missing));
  EXPECT_THAT(p.err, HasSubstr("No such file"));
  EXPECT_LT(p.seconds, 30) << p.Describe();
}

// Settings that only the data can refuse: a non-zero exit naming the reason, before training.
TEST_F(Errors, RefusedSettingsSayWhy) {
  const std::string missing_map = *dir_ / "no-such.map";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--train", train_, "--model", "ffm", "--field-map", missing_map}, missing_map},
      {{"--train", train_, "--refit", "on", "--consistency", "bsp", "--checkpoint-dir",
        *dir_ / "ck"},
       "--refit on needs"},
      {{"--train", train_, "--validation", *dir_ / "no-such-validation.svm"},
       "no-such-validation.svm"},
  };
  for (const Case& c : cases) {
    Proc p = TrainProc(c.args, 60);
    EXPECT_FALSE(p.timed_out) << p.Describe();
    EXPECT_NE(p.exit_code, 0) << p.Describe();
    EXPECT_THAT(p.err, HasSubstr(c.says)) << p.Describe();
  }
}

TEST_F(Errors, MissingTestFileNamesIt) {
  const std::string missing = *dir_ / "no-such-test.svm";
  Proc p = TrainProc({"--train", train_, "--test", missing}, 60);
  EXPECT_FALSE(p.timed_out) << p.Describe();
  EXPECT_NE(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr(missing));
}

// Root reads any file whatever its mode, so "unreadable" is a path that is not a regular file.
TEST_F(Errors, UnreadableTrainFileNamesIt) {
  Proc p = TrainProc({"--train", dir_->path()}, 60);
  EXPECT_FALSE(p.timed_out) << p.Describe();
  EXPECT_NE(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr(dir_->path() + " is not a regular file"));
}

TEST_F(Errors, MalformedLinesAreReportedCountedAndFatalWhenStrict) {
  // 300 good lines, a bad value at line 151 and a multi-class label at line 152.
  const std::vector<std::string> good = Lines(Slurp(train_));
  const std::string bad = *dir_ / "bad.svm";
  {
    std::FILE* f = std::fopen(bad.c_str(), "w");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 150; ++i) std::fprintf(f, "%s\n", good[i].c_str());
    std::fprintf(f, "1 3:x 5:1\n2 3:1\n");
    for (int i = 150; i < 300; ++i) std::fprintf(f, "%s\n", good[i].c_str());
    std::fclose(f);
  }
  TrainRun r = Train(*dir_, "bad", {"--train", bad, "--test", test_}, 60);
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_THAT(r.proc.err, HasSubstr(bad + ":151: feature 1 '3:x'"));
  EXPECT_THAT(r.proc.err, HasSubstr(bad + ":152: label '2'"));
  EXPECT_THAT(r.proc.out, HasSubstr("2 malformed lines skipped"));
  // The two bad lines are on either side of the held-out split or on the same one: each is
  // reported by the reader that keeps its side, and counted once.
  ExpectTrainedPasses(r.final_line, 300);

  Proc strict = TrainProc({"--train", bad, "--test", test_, "--strict"}, 60);
  EXPECT_FALSE(strict.timed_out) << strict.Describe();
  EXPECT_NE(strict.exit_code, 0) << strict.Describe();
  EXPECT_THAT(strict.err, HasSubstr(bad + ":15"));  // 151 or 152: whichever worker reads it
  EXPECT_THAT(strict.err, HasSubstr("InvalidArgument"));
}

// Training files without a single sample fail the job before it starts, exit 1, saying what the
// files held instead; the check is on all the files together, so a worker whose shard is empty
// (more workers than lines) does not fail a job the others train.
TEST_F(Errors, NoTrainingSampleFailsTheJobSayingWhatTheFilesHeld) {
  const std::string bad = *dir_ / "all-bad.svm";
  const std::string empty = *dir_ / "empty.svm";
  const std::string one = *dir_ / "one.svm";
  std::string all_bad;
  for (int i = 0; i < 50; ++i) all_bad += "1 3:x 5:1\n";
  WriteText(bad, all_bad);
  WriteText(empty, "");
  WriteText(one, Lines(Slurp(train_)).front() + "\n");
  struct Case {
    std::string file, says;
  };
  const std::vector<Case> cases = {
      {bad, "no training sample in " + bad + ": 50 lines, all malformed (the first: " + bad +
                ":1: feature 1 '3:x'"},
      {empty, "no training sample in " + empty + ": the file is empty"},
  };
  for (const Case& c : cases) {
    Proc p = TrainProc({"--train", c.file, "--test", test_}, 30);
    EXPECT_FALSE(p.timed_out) << p.Describe();
    EXPECT_EQ(p.exit_code, 1) << p.Describe();
    EXPECT_THAT(p.err, HasSubstr(c.says)) << p.Describe();
  }
  for (const char* consistency : {"asp", "bsp"}) {
    TrainRun r = Train(
        *dir_, std::string("one-") + consistency,
        {"--train", one, "--workers", "2", "--epochs", "1", "--consistency", consistency}, 60);
    ASSERT_TRUE(r.ok()) << r.proc.Describe();
    EXPECT_EQ(r.final_line["samples"], 1) << consistency;
  }
}

// One gzip file is read whole by one worker: with two workers, worker 0 says at the start
// (also under -q) that worker 1 gets no data, and the job trains on worker 0 alone.
TEST_F(Errors, OneGzipFileOnTwoWorkersWarnsOfTheIdleWorker) {
  const std::string gz = *dir_ / "train.svm.gz";
  Generate(gz, *dir_ / "unused-test.svm",
           {"--fields", "6", "--vocab", "50", "--samples", "1000", "--test-samples", "10", "--seed",
            "3", "--gzip"});
  TrainRun r = Train(*dir_, "gz", {"--train", gz, "--workers", "2", "--epochs", "1"}, 60);
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_THAT(r.proc.err,
              HasSubstr("ferry-train: warning: --train " + gz + ": a gzip stream cannot be split"))
      << r.proc.Describe();
  EXPECT_THAT(r.proc.err, HasSubstr("worker 1 of 2 gets no training data: decompress it or "
                                    "split it into 2 files or more"));
  EXPECT_EQ(r.final_line["samples"], 1000);
  // Two gzip files for two workers: nobody idles, nothing to say.
  const std::string gz2 = *dir_ / "train2.svm.gz";
  std::filesystem::copy_file(gz, gz2, std::filesystem::copy_options::overwrite_existing);
  TrainRun two = Train(*dir_, "gz2", {"--train", gz, gz2, "--workers", "2", "--epochs", "1"}, 60);
  ASSERT_TRUE(two.ok()) << two.proc.Describe();
  EXPECT_THAT(two.proc.err, Not(HasSubstr("warning"))) << two.proc.Describe();
}

TEST_F(Errors, MetricsJsonEndsWithFinalRecord) {
  TrainRun r =
      Train(*dir_, "metrics",
            {"--train", train_, "--test", test_, "--eval-every", "1", "--epochs", "2"}, 60);
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  const std::vector<nlohmann::json> lines = JsonLines(*dir_ / "metrics.jsonl");  // all valid
  ASSERT_GE(lines.size(), 2u);
  for (size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_EQ(lines[i]["event"], "eval");
  const nlohmann::json& last = lines.back();
  EXPECT_EQ(last["event"], "final");
  ASSERT_TRUE(last["logloss"].is_number());
  ASSERT_TRUE(last["auc"].is_number());
  EXPECT_GT(last["logloss"].get<double>(), 0.0);
  EXPECT_GT(last["auc"].get<double>(), 0.6);
  EXPECT_LT(last["auc"].get<double>(), 1.0);
  EXPECT_EQ(last["test_samples"], 1000);
  EXPECT_EQ(last["samples"], 8000);  // two epochs of 4000
  EXPECT_EQ(last["epoch"], 2);
  EXPECT_EQ(last["model"], "ftrl");
  EXPECT_EQ(last["workers"], 2);
  EXPECT_EQ(last["servers"], 2);
}

// Without --test there is no evaluation, and the final record says so with nulls rather than
// numbers that look real.
TEST_F(Errors, MetricsJsonWithoutTestFile) {
  TrainRun r = Train(*dir_, "notest", {"--train", train_}, 60);
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.Describe();
  ASSERT_TRUE(r.final_line.is_object());
  EXPECT_EQ(r.final_line["event"], "final");
  EXPECT_TRUE(r.final_line["logloss"].is_null()) << r.final_line.dump();
  EXPECT_EQ(r.final_line.value("test_samples", -1), 0);
}

}  // namespace
}  // namespace ferry::train_test
