// A gtest listener that prints, after the run, how many cases ran per backend configuration and
// how many were skipped and why:
//
//   conformance: tcp ran 23 (passed 23, failed 0), skipped 1 (forged descriptors: ...)
//
// Fixtures call SetCurrentConfig() in SetUp(); cases that never do (plain TESTs) are counted
// under "(setup)". Configurations that were not instantiated are listed with the reason.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::testing {

void SetCurrentConfig(const std::string& name);

class ConfigTallyListener : public ::testing::EmptyTestEventListener {
 public:
  // `label` starts each line ("conformance"); `not_run` lines are printed as they are.
  ConfigTallyListener(std::string label, std::vector<std::string> order,
                      std::vector<std::string> not_run);

  void OnTestStart(const ::testing::TestInfo& info) override;
  void OnTestEnd(const ::testing::TestInfo& info) override;
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override;

 private:
  struct Tally {
    int passed = 0;
    int failed = 0;
    int skipped = 0;
    std::map<std::string, int> skip_reasons;
  };
  std::string label_;
  std::vector<std::string> order_;
  std::vector<std::string> not_run_;
  std::map<std::string, Tally> tallies_;
};

}  // namespace ferry::testing
