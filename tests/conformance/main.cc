// The conformance suite's main: instantiates every case for each available backend
// configuration (tests/common/backends.h), fails loudly when FERRY_TEST_BACKENDS asks for a
// configuration that cannot run here, and prints a per-configuration tally at the end.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/common/skips.h"
#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(SelectedConfigs().run),
                         [](const auto& info) { return info.param.TestName(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);

// Not parameterised: fails when FERRY_TEST_BACKENDS names a configuration that is unknown or
// unavailable here, or when nothing at all can run.
TEST(ConformanceSetup, RequestedConfigurationsAreAvailable) {
  const ConfigSelection& sel = SelectedConfigs();
  for (const std::string& e : sel.errors) ADD_FAILURE() << e;
  EXPECT_FALSE(sel.run.empty()) << "no backend configuration can run here";
  std::string names;
  for (const BackendConfig& c : sel.run) names += " " + c.name;
  std::printf("[ info     ] configurations:%s\n", names.c_str());
  for (const std::string& n : sel.not_run) std::printf("[ info     ] not run: %s\n", n.c_str());
}

}  // namespace
}  // namespace ferry::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const ferry::testing::ConfigSelection& sel = ferry::testing::SelectedConfigs();
  for (const std::string& e : sel.errors)
    std::fprintf(stderr, "conformance: ERROR: %s\n", e.c_str());
  std::vector<std::string> order;
  for (const auto& c : sel.run) order.push_back(c.name);
  std::vector<std::string> not_run = sel.not_run;
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new ferry::testing::ConfigTallyListener("conformance", order, not_run));
  int rc = ferry::testing::RunAllTestsVisibly();  // 77 when every case skipped
  // Also fail when a requested configuration is missing and the setup test was filtered out.
  return sel.errors.empty() ? rc : 1;
}
