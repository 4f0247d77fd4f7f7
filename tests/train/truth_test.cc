// Learned model against the ground truth: ferry-gen writes an lr truth (--truth-out), ferry-train
// exports an lr / ftrl model (--model-out, text and binary), and the learned weight of every
// frequently seen feature is compared with its truth weight.
//
// Mapping: value v of field f is LIBSVM index offset(f) + v + 1 in the data file
// (docs/data-formats.md), and the reader hashes it to HashIndex(0, index, hash_seed); the model's
// "weights" table is keyed by that id.
//
// Identifiability: every sample holds exactly one value per field, so adding c to all of a
// field's weights and subtracting c from the bias gives the same model. Both sides are therefore
// centred per field (frequency-weighted mean removed) before they are correlated.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "models/data/gen.h"
#include "models/data/hashing.h"
#include "models/io/model_reader.h"
#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

// Occurrences of each LIBSVM index in a file.
std::map<uint64_t, uint64_t> CountIndices(const std::string& path) {
  std::map<uint64_t, uint64_t> counts;
  for (const std::string& line : Lines(Slurp(path))) {
    size_t p = line.find(' ');
    while (p != std::string::npos) {
      const size_t colon = line.find(':', p);
      if (colon == std::string::npos) break;
      ++counts[std::stoull(line.substr(p + 1, colon - p - 1))];
      p = line.find(' ', colon);
    }
  }
  return counts;
}

struct Comparison {
  double correlation = 0;
  size_t features = 0;
  size_t missing = 0;  // frequent features the model has no row for
};

// Per-field centred correlation of learned and truth weights over features seen >= min_count
// times in the training file.
Comparison Compare(const models::TruthTable& truth, const models::ModelTable& weights,
                   const std::map<uint64_t, uint64_t>& counts, uint64_t min_count) {
  Comparison c;
  std::vector<double> learned, real;
  for (uint32_t f = 0; f < truth.fields; ++f) {
    std::vector<double> lf, rf, wf;
    for (uint64_t v = 0; v < truth.vocab[f]; ++v) {
      const uint64_t index = truth.offsets[f] + v + 1;
      auto it = counts.find(index);
      if (it == counts.end() || it->second < min_count) continue;
      const float* row = weights.Find(models::HashIndex(0, index, /*seed=*/0));
      if (row == nullptr) {
        ++c.missing;
        continue;
      }
      lf.push_back(row[0]);
      rf.push_back(truth.weight[truth.offsets[f] + v]);
      wf.push_back(static_cast<double>(it->second));
    }
    double sw = 0, ml = 0, mr = 0;
    for (size_t i = 0; i < lf.size(); ++i) sw += wf[i], ml += wf[i] * lf[i], mr += wf[i] * rf[i];
    if (sw == 0) continue;
    for (size_t i = 0; i < lf.size(); ++i) {
      learned.push_back(lf[i] - ml / sw);
      real.push_back(rf[i] - mr / sw);
    }
  }
  c.features = learned.size();
  c.correlation = Correlation(learned, real);
  return c;
}

class LearnedVsTruth : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    test_ = *dir_ / "test.svm";
    truth_path_ = *dir_ / "truth.txt";
    bayes_ = Generate(train_, test_,
                      {"--truth", "lr", "--fields", "10", "--vocab", "100", "--samples", "100000",
                       "--test-samples", "10000", "--seed", "8", "--truth-out", truth_path_});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static std::string train_, test_, truth_path_;
  static Bayes bayes_;
};
TempDir* LearnedVsTruth::dir_ = nullptr;
std::string LearnedVsTruth::train_, LearnedVsTruth::test_, LearnedVsTruth::truth_path_;
Bayes LearnedVsTruth::bayes_;

TEST_P(LearnedVsTruth, FrequentFeatureWeightsCorrelateWithTruth) {
  const auto& [model, format] = GetParam();
  ASSERT_GT(bayes_.auc, 0.7) << "ferry-gen failed";
  auto truth = models::LoadTruth(truth_path_);
  ASSERT_TRUE(truth.ok()) << truth.status().ToString();
  ASSERT_EQ(truth->kind, models::Truth::kLr);
  const std::string out = *dir_ / (model + "." + format);
  // Two epochs: the weights of the features asserted on are converged, not just moving.
  TrainRun r = Train(*dir_, model + "_" + format,
                     {"--model", model, "--train", train_, "--test", test_, "--epochs", "2",
                      "--model-out", out, "--model-format", format});
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  auto m = models::ReadModelFile(out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const models::ModelTable* weights = m->FindTable("weights");
  ASSERT_NE(weights, nullptr);
  ASSERT_EQ(weights->dim(), 1u);
  EXPECT_NE(weights->Find(1), nullptr) << "no bias row (id 1)";
  const auto counts = CountIndices(train_);
  // >= 300 occurrences: the head of each field's Zipf distribution (the noise of a weight
  // estimated from n samples is about 1/sqrt(n p (1-p)), ~0.1 at n = 300).
  Comparison c = Compare(*truth, *weights, counts, 300);
  std::printf("%s (%s): %zu frequent features, correlation %.4f, %zu missing; test auc %.4f\n",
              model.c_str(), format.c_str(), c.features, c.correlation, c.missing, r.auc());
  EXPECT_GE(c.features, 100u);
  EXPECT_EQ(c.missing, 0u);
  EXPECT_GT(c.correlation, 0.93);  // measured 0.970-0.972 (lr, ftrl; 3 runs)
  // Rare features are learned too, only less precisely.
  Comparison all = Compare(*truth, *weights, counts, 20);
  std::printf("  seen >= 20 times: %zu features, correlation %.4f\n", all.features,
              all.correlation);
  EXPECT_GT(all.correlation, 0.85);  // measured 0.942-0.946
}

INSTANTIATE_TEST_SUITE_P(LrAndFtrl, LearnedVsTruth,
                         ::testing::Values(std::make_tuple("ftrl", "text"),
                                           std::make_tuple("lr", "binary")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ferry::train_test
