// ferry-predict scores an exported model exactly as ferry-train's final evaluation did: one
// probability per input line, and --summary's logloss and AUC equal to the "final" metrics line
// of the run that exported the model (to the 5 decimals ferry-predict prints), for both model
// formats and every model kind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "models/io/model_reader.h"
#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

class Predict : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    test_ = *dir_ / "test.svm";
    Generate(train_, test_,
             {"--fields", "8", "--vocab", "100", "--numeric", "2", "--samples", "20000",
              "--test-samples", "5003", "--seed", "4"});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static std::string train_, test_;
};
TempDir* Predict::dir_ = nullptr;
std::string Predict::train_, Predict::test_;

TEST_P(Predict, SummaryEqualsTrainFinalEvaluation) {
  const auto& [model, format] = GetParam();
  const std::string out = *dir_ / (model + "." + format);
  TrainRun r = Train(*dir_, model + "_" + format,
                     {"--model", model, "--train", train_, "--test", test_, "--model-out", out,
                      "--model-format", format, "--patience", "2"});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  ASSERT_EQ(r.final_line.value("test_samples", 0), 5003);

  const std::string probs = *dir_ / (model + "." + format + ".probs");
  Proc p = Exec({PredictBin(), out, test_, "--summary", "-o", probs}, 60);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  // "ferry-predict: 5003 samples, logloss 0.47123, AUC 0.79012"
  // (No std::regex: gcc 12's <regex> trips -Wmaybe-uninitialized at -O1 under ASan.)
  const size_t at = p.err.find("ferry-predict: ");
  ASSERT_NE(at, std::string::npos) << p.Describe();
  unsigned long long samples = 0;
  char got_ll[32] = {}, got_auc[32] = {};
  ASSERT_EQ(std::sscanf(p.err.c_str() + at,
                        "ferry-predict: %llu samples, logloss %31[0-9.], AUC %31[0-9.]", &samples,
                        got_ll, got_auc),
            3)
      << p.Describe();
  EXPECT_EQ(samples, 5003u);
  // The printed values are ferry-train's, rounded to 5 decimals (and so within half a unit of
  // the last printed digit). Same kernels, same float rows, same test samples.
  char want_ll[32], want_auc[32];
  std::snprintf(want_ll, sizeof want_ll, "%.5f", r.logloss());
  std::snprintf(want_auc, sizeof want_auc, "%.5f", r.auc());
  EXPECT_EQ(std::string(got_ll), want_ll) << "train final logloss " << r.logloss();
  EXPECT_EQ(std::string(got_auc), want_auc) << "train final auc " << r.auc();

  // One probability per sample, in (0, 1); their logloss is the summary's (up to the 6
  // significant digits of the output).
  const std::vector<std::string> lines = Lines(Slurp(probs));
  const std::vector<std::string> labels = Lines(Slurp(test_));
  ASSERT_EQ(lines.size(), 5003u);
  ASSERT_EQ(labels.size(), 5003u);
  double loss = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const double q = std::stod(lines[i]);
    ASSERT_TRUE(q > 0 && q < 1) << "line " << i + 1 << ": " << lines[i];
    loss -= std::log(labels[i][0] == '1' ? q : 1 - q);
  }
  EXPECT_NEAR(loss / 5003.0, r.logloss(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndFormats, Predict,
    ::testing::Values(std::make_tuple("ftrl", "binary"), std::make_tuple("ftrl", "text"),
                      std::make_tuple("lr", "text"), std::make_tuple("fm", "binary"),
                      std::make_tuple("fm", "text"), std::make_tuple("ffm", "binary"),
                      std::make_tuple("mlp", "binary"), std::make_tuple("mlp", "text"),
                      std::make_tuple("deepfm", "text")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// Scoring the training file's format from the model's parameters: a libffm model reads libffm
// without --format, and the probabilities follow the input order (the first file's samples,
// then the second's).
// Several files are scored in order, in the model's format; files that hold no sample are an
// error (exit 1, saying what they held), not an empty output.
TEST(PredictFiles, SeveralFilesInOrderAndFormatFromModelAndNoSampleIsAnError) {
  TempDir dir;
  const std::string tr = dir / "tr.ffm", te = dir / "te.ffm";
  Generate(tr, te,
           {"--format", "libffm", "--fields", "5", "--vocab", "30", "--samples", "5000",
            "--test-samples", "700", "--seed", "6"});
  TrainRun r = Train(dir, "ffm",
                     {"--model", "fm", "--format", "libffm", "--train", tr, "--test", te,
                      "--model-out", dir / "m.bin"});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  Proc one = Exec({PredictBin(), dir / "m.bin", te, "-o", dir / "one.txt"}, 60);
  Proc two = Exec({PredictBin(), dir / "m.bin", te, te}, 60);
  ASSERT_EQ(one.exit_code, 0) << one.Describe();
  ASSERT_EQ(two.exit_code, 0) << two.Describe();
  const std::string a = Slurp(dir / "one.txt");
  EXPECT_EQ(Lines(a).size(), 700u);
  EXPECT_EQ(two.out, a + a);

  const std::string bad = dir / "bad.ffm", empty = dir / "empty.ffm";
  std::string bad_lines;
  for (int i = 0; i < 20; ++i) bad_lines += "1 0:5\n";
  WriteText(bad, bad_lines);
  WriteText(empty, "");
  Proc all_bad = Exec({PredictBin(), dir / "m.bin", bad}, 60);
  EXPECT_EQ(all_bad.exit_code, 1) << all_bad.Describe();
  EXPECT_EQ(all_bad.out, "");
  EXPECT_NE(all_bad.err.find("no sample in " + bad +
                             ": 20 lines, all malformed (the first: " + bad + ":1: "),
            std::string::npos)
      << all_bad.Describe();
  Proc none = Exec({PredictBin(), dir / "m.bin", empty}, 60);
  EXPECT_EQ(none.exit_code, 1) << none.Describe();
  EXPECT_NE(none.err.find("no sample in " + empty + ": the file is empty"), std::string::npos)
      << none.Describe();
}

// Scoring reads, never creates: a test set whose features are mostly unseen in training (10x the
// vocabulary) leaves the exported model the rows of the training features only, the same rows as
// a run without --test; ferry-predict then scores the unseen features as ferry-train's final
// evaluation did (as zeros).
TEST(PredictFiles, EvaluationAddsNoRowToTheModel) {
  TempDir dir;
  const std::string tr = dir / "tr.svm", unused = dir / "unused.svm";
  const std::string wide_tr = dir / "wide_tr.svm", te = dir / "te.svm";
  const std::vector<std::string> common = {"--fields", "4", "--samples", "3000", "--seed", "8"};
  Generate(tr, unused, Cat(common, {"--vocab", "20", "--test-samples", "10"}));
  Generate(wide_tr, te, Cat(common, {"--vocab", "200", "--test-samples", "2000"}));
  const std::vector<std::string> args = {"--model", "fm", "--train", tr, "--epochs", "1"};
  TrainRun alone = Train(dir, "alone", Cat(args, {"--model-out", dir / "alone.bin"}));
  TrainRun scored =
      Train(dir, "scored", Cat(args, {"--test", te, "--model-out", dir / "scored.bin"}));
  ASSERT_TRUE(alone.ok()) << alone.proc.Describe();
  ASSERT_TRUE(scored.ok()) << scored.proc.Describe();
  auto a = models::ReadModelFile(dir / "alone.bin");
  auto b = models::ReadModelFile(dir / "scored.bin");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(a->tables.size(), b->tables.size());
  for (size_t t = 0; t < a->tables.size(); ++t) {
    EXPECT_EQ(b->tables[t].size(), a->tables[t].size()) << "table " << a->tables[t].name();
  }
  Proc p = Exec({PredictBin(), dir / "scored.bin", te, "--summary", "-o", dir / "p.txt"}, 60);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  char want[96];
  std::snprintf(want, sizeof want, "logloss %.5f, AUC %.5f", scored.logloss(), scored.auc());
  EXPECT_NE(p.err.find(want), std::string::npos) << p.err << " want " << want;
}

// A libsvm file with a field map (--field-map): the fields reach the field-aware models, and the
// model file carries the map, so ferry-predict scores the same file without being given it.
TEST(PredictFiles, FieldMapTravelsWithTheModel) {
  TempDir dir;
  const std::string tr = dir / "tr.svm", te = dir / "te.svm", map = dir / "fields.map";
  // 5 fields x 30 values: field f holds the libsvm indices 30 f + 1 .. 30 (f + 1).
  Generate(tr, te,
           {"--truth", "ffm", "--fields", "5", "--vocab", "30", "--samples", "8000",
            "--test-samples", "1000", "--seed", "6"});
  {
    std::FILE* f = std::fopen(map.c_str(), "w");
    ASSERT_NE(f, nullptr);
    for (int field = 0; field < 5; ++field) {
      std::fprintf(f, "%d-%d %d\n", 30 * field + 1, 30 * (field + 1), field);
    }
    std::fclose(f);
  }
  TrainRun r = Train(dir, "ffm",
                     {"--model", "ffm", "--train", tr, "--test", te, "--field-map", map,
                      "--model-out", dir / "m.bin"});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  Proc p = Exec({PredictBin(), dir / "m.bin", te, "--summary", "-o", dir / "p.txt"}, 60);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  char want[64];
  std::snprintf(want, sizeof want, "logloss %.5f", r.logloss());
  EXPECT_NE(p.err.find(want), std::string::npos) << p.Describe();
  // Without the map the same file trains a one-field ffm: a different model.
  TrainRun one = Train(dir, "ffm1", {"--model", "ffm", "--train", tr, "--test", te});
  ASSERT_TRUE(one.ok()) << one.proc.Describe();
  EXPECT_LT(r.logloss(), one.logloss()) << "the fields help an ffm on an ffm truth";
  // A feature index the map does not cover is a malformed line, reported with its place.
  const std::string partial = dir / "partial.map";
  {
    std::FILE* f = std::fopen(partial.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "1-120 0\n");  // field 4 (121..150) missing
    std::fclose(f);
  }
  Proc strict = Exec({TrainBin(), "--model", "ffm", "--train", tr, "--field-map", partial,
                      "--strict", "--progress", "never", "-q"},
                     60);
  EXPECT_NE(strict.exit_code, 0) << strict.Describe();
  EXPECT_NE(strict.err.find("is not in the field map"), std::string::npos) << strict.Describe();
}

}  // namespace
}  // namespace ferry::train_test
