// The coordinator's BSP clock decision (ps/coordinator/clock_plan.h): with backup workers a clock
// completes once all running workers but b ended it, without the others; with b = 0 only once
// every running worker did, as before backup workers existed.
#include "ps/coordinator/clock_plan.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace ferry::ps {
namespace {

using Clocks = std::vector<std::optional<uint64_t>>;

TEST(ClockPlan, WithoutBackupWorkersEveryRunningWorkerIsNeeded) {
  EXPECT_FALSE(PlanClockCompletion(Clocks{3, 4, 4}, 3, 0).complete);
  const ClockCompletion all = PlanClockCompletion(Clocks{4, 4, 4}, 3, 0);
  EXPECT_TRUE(all.complete);
  EXPECT_TRUE(all.without.empty());
  // A finished worker (nullopt) is not waited for.
  EXPECT_TRUE(PlanClockCompletion(Clocks{4, std::nullopt, 4}, 3, 0).complete);
}

TEST(ClockPlan, BackupWorkersCompleteAClockWithoutTheLastOnes) {
  EXPECT_FALSE(PlanClockCompletion(Clocks{3, 4, 3, 3}, 3, 2).complete);
  const ClockCompletion c = PlanClockCompletion(Clocks{3, 4, 3, 4}, 3, 2);
  EXPECT_TRUE(c.complete);
  EXPECT_EQ(c.without, (std::vector<uint32_t>{0, 2}));
  // A worker left behind earlier (clock 1) is still without.
  const ClockCompletion behind = PlanClockCompletion(Clocks{1, 4, 4}, 3, 1);
  EXPECT_TRUE(behind.complete);
  EXPECT_EQ(behind.without, (std::vector<uint32_t>{0}));
  // Finished workers neither count nor are left out.
  const ClockCompletion f = PlanClockCompletion(Clocks{std::nullopt, 3, 4}, 3, 1);
  EXPECT_TRUE(f.complete);
  EXPECT_EQ(f.without, (std::vector<uint32_t>{1}));
}

TEST(ClockPlan, AClockNeverCompletesWithNobodysPushes) {
  // Two running workers, b = 2: still one must have ended the clock.
  EXPECT_FALSE(PlanClockCompletion(Clocks{3, 3}, 3, 2).complete);
  EXPECT_TRUE(PlanClockCompletion(Clocks{3, 4}, 3, 2).complete);
  EXPECT_FALSE(PlanClockCompletion(Clocks{std::nullopt, std::nullopt}, 3, 1).complete);
  EXPECT_FALSE(PlanClockCompletion(Clocks{}, 0, 0).complete);
}

}  // namespace
}  // namespace ferry::ps
