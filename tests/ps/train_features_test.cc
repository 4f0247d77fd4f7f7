// ferry-train's feature flags end to end (--admit-min-count, --evict-unseen, --evict-tick): a
// short local run on a small generated file exports a model with fewer rows than the same run
// without them, and flag combinations that mean nothing are refused before anything starts.
// Runs the binaries (FERRY_TRAIN, FERRY_GEN) with tests/train's helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/io/model_reader.h"
#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

// Rows of every table of the model file at `path` (-1 when it cannot be read).
int64_t ModelRows(const std::string& path) {
  auto m = models::ReadModelFile(path);
  if (!m.ok()) return -1;
  int64_t rows = 0;
  for (const auto& t : m->tables) rows += static_cast<int64_t>(t.size());
  return rows;
}

class TrainFeatures : public ::testing::Test {
 protected:
  void SetUp() override {
    // 4 fields of 2000 values each: most values are seen a few times in 3000 lines.
    Generate(tr_, te_,
             {"--fields", "4", "--vocab", "2000", "--samples", "3000", "--test-samples", "10",
              "--seed", "8"});
  }
  int64_t TrainRows(const std::string& tag, const std::vector<std::string>& extra) {
    const std::string out = dir_ / (tag + ".bin");
    TrainRun r = Train(dir_, tag,
                       Cat({"--model", "lr", "--train", tr_, "--epochs", "1", "--servers", "1",
                            "--workers", "1", "--model-out", out},
                           extra));
    EXPECT_TRUE(r.ok()) << r.proc.Describe();
    return ModelRows(out);
  }
  TempDir dir_;
  const std::string tr_ = dir_ / "tr.svm", te_ = dir_ / "te.svm";
};

TEST_F(TrainFeatures, AdmissionShrinksTheModel) {
  const int64_t plain = TrainRows("plain", {});
  const int64_t admitted = TrainRows("admit", {"--admit-min-count", "3"});
  ASSERT_GT(plain, 100);
  EXPECT_GT(admitted, 0);
  EXPECT_LT(admitted, plain) << "features seen once or twice get no row";
}

// A file whose first half uses features 1..500 and second half 100001..100500: the first
// half's rows are unseen for the whole second half (~100 ms at 3 M lines/s), far over
// --evict-unseen.
TEST_F(TrainFeatures, EvictionDropsRowsUnseenSinceTheFirstHalf) {
  std::string text;
  for (int i = 0; i < 600000; ++i) {
    const int base = i < 300000 ? 1 : 100001;
    const int a = base + (i * 7) % 500, b = base + (i * 13 + 1) % 500;
    text += std::to_string(i % 3 == 0 ? 1 : 0) + " " + std::to_string(std::min(a, b)) + ":1 " +
            std::to_string(std::max(a, b) + (a == b ? 1 : 0)) + ":1\n";
  }
  WriteText(tr_, text);
  const int64_t plain = TrainRows("plain", {});
  const int64_t evicted = TrainRows("evict", {"--evict-unseen", "0.01", "--evict-tick", "0.01"});
  ASSERT_GT(plain, 900);
  EXPECT_GE(evicted, 0) << "model file unreadable";  // 0 is possible: an export long after
  EXPECT_LT(evicted, plain * 3 / 4) << "rows unseen for two ticks are evicted";
}

TEST_F(TrainFeatures, MeaninglessCombinationsAreRefused) {
  const std::vector<std::string> base = {"--model", "lr", "--train", tr_, "--epochs", "1"};
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--admit-min-count", "1"}, "--admit-min-count 1"},
           {{"--admit-min-count", "3", "--admit-prob", "0.5"}, "give one"},
       }) {
    Proc p = Exec(Cat(Cat({TrainBin()}, base), c.flags), 60);
    EXPECT_NE(p.exit_code, 0) << p.Describe();
    EXPECT_NE(p.err.find(c.says), std::string::npos) << p.Describe();
  }
}

}  // namespace
}  // namespace ferry::train_test
