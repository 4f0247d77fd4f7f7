// ferry-gen end to end: --help, bad flags (exit 2), small runs (ctr, ffm, text) and their
// summaries.
// argv[1] is the ferry-gen binary (meson passes it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "models/data/gen.h"
#include "tests/data/data_test_util.h"

namespace {

std::string g_tool;

struct ToolRun {
  int code = -1;
  std::string out;
};

ToolRun Exec(const std::string& args) {
  ToolRun r;
  const std::string cmd = g_tool + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(FerryGen, Help) {
  const ToolRun r = Exec("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--truth-out"), std::string::npos);
  EXPECT_NE(r.out.find("EXAMPLES"), std::string::npos);
  for (const char* flag : {"--layout", "--words", "--logit-sd", "--positive-rate", "ffm"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(FerryGen, BadFlagsExitWithTwo) {
  ferry::models::testing::TempDir dir;
  const std::string out = " --out " + dir.File("x");
  EXPECT_EQ(Exec("--samples 10").code, 2);  // no --out
  EXPECT_EQ(Exec("--samples 10" + out + " --bogus").code, 2);
  EXPECT_EQ(Exec("--samples ten" + out).code, 2);
  EXPECT_EQ(Exec("--samples 10" + out + " --format csv").code, 2);
  EXPECT_EQ(Exec("--samples 10" + out + " --truth svm").code, 2);
  const ToolRun r = Exec("--samples 10" + out + " --format criteo --fields 5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("ferry-gen: error: criteo output"), std::string::npos) << r.out;
  EXPECT_EQ(Exec("--samples 10 --out /nonexistent-dir/x").code, 1);
}

// Each bad flag exits with 2 and says what is wrong.
TEST(FerryGen, BadTextAndCalibrationFlagsExitWithTwo) {
  ferry::models::testing::TempDir dir;
  const std::string base = "--samples 10 --out " + dir.File("x");
  const struct {
    std::string args, message;
  } cases[] = {
      {" --layout poem", "--layout"},
      {" --layout text --format criteo", "--format criteo has no text layout"},
      {" --layout text --truth fm", "--layout text supports --truth lr"},
      {" --layout text --truth ffm", "--layout text supports --truth lr"},
      {" --layout text --numeric 3", "--layout text has no --numeric"},
      {" --layout text --fields 3", "--fields does not apply to --layout text"},
      {" --layout text --words 0", "--words"},
      {" --words 50", "--words applies to --layout text only"},
      {" --logit-sd 0", "--logit-sd must be in (0, 10]"},
      {" --logit-sd 11", "--logit-sd must be in (0, 10]"},
      {" --logit-sd x", "--logit-sd"},
      {" --positive-rate 1", "--positive-rate must be strictly between 0 and 1"},
      {" --positive-rate 0", "--positive-rate must be strictly between 0 and 1"},
      {" --truth ffm --factors 0", "--factors"},
  };
  for (const auto& c : cases) {
    const ToolRun r = Exec(base + c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << ": " << r.out;
  }
}

TEST(FerryGen, TextRunWritesUnitNormDocumentsAndTheirTruth) {
  ferry::models::testing::TempDir dir;
  const ToolRun r = Exec(
      "--layout text --vocab 5000 --words 40 --logit-sd 4 --samples 500 "
      "--test-samples 2K --out " +
      dir.File("tr") + " --test-out " + dir.File("te") + " --truth-out " + dir.File("truth"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("truth lr on text: 5000 words;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bayes (truth model on the test set): logloss"), std::string::npos);
  const std::string tr = ferry::models::testing::ReadFile(dir.File("tr"));
  EXPECT_EQ(std::count(tr.begin(), tr.end(), '\n'), 500);
  EXPECT_EQ(tr.find(" 0:"), std::string::npos);  // 1-based
  const std::string truth = ferry::models::testing::ReadFile(dir.File("truth"));
  EXPECT_NE(truth.find("\nkind lr\nlayout text\nfields 1\n"), std::string::npos);
  auto table = ferry::models::LoadTruth(dir.File("truth"));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->vocab.at(0), 5000u);
  // --logit-sd 4: a nearly separable corpus.
  const size_t at = r.out.find("auc ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(r.out.substr(at + 4)), 0.9) << r.out;
}

TEST(FerryGen, FfmRunPrintsItsTruth) {
  ferry::models::testing::TempDir dir;
  const ToolRun r = Exec("--truth ffm --fields 6 --vocab 20 --format libffm --samples 300 --out " +
                         dir.File("tr") + " --truth-out " + dir.File("truth"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("truth ffm: 120 categorical values in 6 fields"), std::string::npos)
      << r.out;
  auto table = ferry::models::LoadTruth(dir.File("truth"));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->kind, ferry::models::Truth::kFfm);
  EXPECT_EQ(table->vectors.size(), 120u * 6 * 4);
}

TEST(FerryGen, SmallRunPrintsTheBayesSummary) {
  ferry::models::testing::TempDir dir;
  const ToolRun r =
      Exec("--samples 2K --test-samples 1e3 --out " + dir.File("tr") + " --test-out " +
           dir.File("te") + " --format criteo --gzip --truth mlp --truth-out " + dir.File("truth"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote 2000 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bayes (truth model on the test set): logloss"), std::string::npos);
  const std::string gz = ferry::models::testing::ReadFile(dir.File("tr"));
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
  EXPECT_EQ(ferry::models::testing::ReadFile(dir.File("truth")).rfind("# ferry-gen truth", 0), 0u);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FERRY_GEN_BINARY\n", argv[0]);
    return 2;
  }
  g_tool = argv[1];
  return RUN_ALL_TESTS();
}
