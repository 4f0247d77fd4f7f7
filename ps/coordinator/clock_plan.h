// Whether a BSP clock completes, and without whom: the coordinator's decision, pure so that it is
// tested alone (tests/ps/clock_plan_test.cc); coordinator_clocks.cc acts on it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ferry::ps {

struct ClockCompletion {
  bool complete = false;  // clock min_clock + 1 is applied now
  // The running workers it completes without (ascending worker indices): their pushes for it are
  // dropped. Empty unless backup workers let the clock complete before everyone.
  std::vector<uint32_t> without;
};

// `clocks[w]`: the clocks worker w completed, nullopt when it is not running (finished, or not
// registered). Clock min_clock + 1 completes once all running workers but `backup` of them
// completed it (at least one: a clock is never applied with nobody's pushes); with backup = 0,
// once every running worker did. Nothing completes when no worker runs.
ClockCompletion PlanClockCompletion(std::span<const std::optional<uint64_t>> clocks,
                                    uint64_t min_clock, uint32_t backup);

}  // namespace ferry::ps
