// ferry-gen end to end: --help, bad flags (exit 2), a small run and its summary.
// argv[1] is the ferry-gen binary (meson passes it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

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
