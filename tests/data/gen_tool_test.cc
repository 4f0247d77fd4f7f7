// ferry-gen end to end: --help, bad flags (exit 2), small runs (ctr, ffm, text) and their
// summaries; --stream to stdout (exact counts, a reader that leaves, --rate, its bad flags).
// argv[1] is the ferry-gen binary (meson passes it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

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

// A --stream run: stdout apart, stderr and the tool's own exit status from files (the shell
// pipeline's status is head's), and the wall time.
struct StreamRun {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

StreamRun ExecStream(const std::string& args, const std::string& pipe = "") {
  ferry::models::testing::TempDir dir;
  const std::string cmd = "{ " + g_tool + " " + args + " 2>" + dir.File("err") + "; echo $? >" +
                          dir.File("rc") + "; }" + pipe;
  StreamRun r;
  const auto start = std::chrono::steady_clock::now();
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.err = ferry::models::testing::ReadFile(dir.File("err"));
  const std::string rc = ferry::models::testing::ReadFile(dir.File("rc"));
  if (!rc.empty()) r.code = std::stoi(rc);
  return r;
}

// Each case (base + args) exits with 2, names what is wrong on stderr and writes nothing to
// stdout.
struct UsageCase {
  std::string args, message;
};
void ExpectUsageErrors(const std::string& base, const std::vector<UsageCase>& cases) {
  for (const UsageCase& c : cases) {
    const StreamRun r = ExecStream(base + c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
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
  ExpectUsageErrors(base,
                    {
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
                    });
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

TEST(FerryGen, StreamWritesExactlyTheSamplesAskedForAsWellFormedLines) {
  const StreamRun r = ExecStream(
      "--stream --samples 1000 --format libsvm --drift 0.3 "
      "--drift-every 100 --numeric 2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1000);
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  // "<0|1> index:value ..." with 26 ascending 1-based indices (one per field) and up to 2
  // numeric ones, all within 32 bits.
  size_t at = 0, lines = 0;
  while (at < r.out.size()) {
    const size_t end = r.out.find('\n', at);
    std::istringstream line(r.out.substr(at, end - at));
    at = end + 1;
    ++lines;
    std::string label, item;
    line >> label;
    ASSERT_TRUE(label == "0" || label == "1") << lines;
    uint64_t last = 0;
    int items = 0;
    while (line >> item) {
      const size_t colon = item.find(':');
      ASSERT_NE(colon, std::string::npos) << item;
      const uint64_t index = std::stoull(item.substr(0, colon));
      EXPECT_GT(index, last) << lines << ": " << item;
      EXPECT_LT(index, uint64_t{1} << 32) << item;
      EXPECT_GT(std::stod(item.substr(colon + 1)), 0) << item;
      last = index;
      ++items;
    }
    EXPECT_GE(items, 26) << lines;
    EXPECT_LE(items, 28) << lines;
  }
  EXPECT_EQ(lines, 1000u);
  // The same flags, the same bytes.
  EXPECT_EQ(ExecStream("--stream --samples 1000 --format libsvm --drift 0.3 --drift-every 100 "
                       "--numeric 2")
                .out,
            r.out);
}

TEST(FerryGen, StreamIntoHeadEndsQuietlyWithZero) {
  const StreamRun r = ExecStream("--stream", " | head -n 10");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 10);
  const StreamRun slow = ExecStream("--stream --rate 100 --drift 0.1", " | head -n 3");
  EXPECT_EQ(slow.code, 0) << slow.err;
  EXPECT_EQ(slow.err, "");
  EXPECT_EQ(std::count(slow.out.begin(), slow.out.end(), '\n'), 3);
}

TEST(FerryGen, StreamRateLimitsTheSamplesPerSecond) {
  // 1000 samples at 2000/s: 0.5 s (the first is due at once). A lower bound only.
  const StreamRun r = ExecStream("--stream --rate 2000 --samples 1000");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1000);
  EXPECT_GE(r.seconds, 0.35);
}

TEST(FerryGen, BadStreamFlagsExitWithTwo) {
  ExpectUsageErrors(
      "",
      {
          {"--stream --rate -1", "ferry-gen: error: --rate must be a positive number"},
          {"--stream --rate 0", "ferry-gen: error: --rate must be a positive number"},
          {"--stream --drift 2", "ferry-gen: error: --drift must be in [0, 1]"},
          {"--stream --drift -0.1", "ferry-gen: error: --drift must be in [0, 1]"},
          {"--stream --drift 0.1 --drift-every 0",
           "ferry-gen: error: --drift-every must be at least 1"},
          {"--stream --drift 0.1 --layout text --vocab 100",
           "ferry-gen: error: --drift applies to --layout ctr only"},
          {"--stream --drift 0.1 --truth-out /dev/null",
           "ferry-gen: error: --drift has no --truth-out"},
          {"--stream --out x", "ferry-gen: error: --stream writes to stdout: drop --out"},
          {"--stream --test-samples 10 --test-out x",
           "ferry-gen: error: --stream has no --test-samples"},
          {"--stream --gzip", "ferry-gen: error: --stream writes plain text: pipe it through gzip"},
          {"--stream --samples 0", "ferry-gen: error: --samples must be at least 1"},
          {"--samples 10 --out /dev/null --rate 5",
           "ferry-gen: error: --rate applies to --stream only"},
          {"--out /dev/null", "ferry-gen: error: --samples is required (or --stream"},
      });
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
