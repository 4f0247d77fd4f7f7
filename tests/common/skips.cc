#include "tests/common/skips.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace ferry::testing {
namespace {

// The first line of the first skip message of a case, at most 160 characters.
std::string SkipReason(const ::testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string reason = part.message();
    reason = reason.substr(0, reason.find('\n'));
    if (reason.size() > 160) reason = reason.substr(0, 157) + "...";
    return reason;
  }
  return "";
}

}  // namespace

int RunAllTestsVisibly() {
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int skipped = unit.skipped_test_count();
  if (skipped == 0) return rc;
  std::string names;
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(j);
      if (!info.result()->Skipped()) continue;
      const std::string reason = SkipReason(*info.result());
      names += names.empty() ? "" : ", ";
      names += std::string(info.test_suite_name()) + "." + info.name();
      if (!reason.empty()) names += " (" + reason + ")";
    }
  }
  std::printf("SKIPPED %d of %d cases: %s\n", skipped, unit.test_to_run_count(), names.c_str());
  if (rc == 0 && unit.successful_test_count() == 0 && unit.failed_test_count() == 0) {
    std::printf("every case that ran skipped: exit %d (meson: SKIP)\n", kMesonSkip);
    std::fflush(stdout);
    return kMesonSkip;
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace ferry::testing
