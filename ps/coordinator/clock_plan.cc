// The BSP clock decision (clock_plan.h).
#include "ps/coordinator/clock_plan.h"

namespace ferry::ps {

ClockCompletion PlanClockCompletion(std::span<const std::optional<uint64_t>> clocks,
                                    uint64_t min_clock, uint32_t backup) {
  size_t running = 0, reached = 0;
  for (const std::optional<uint64_t>& c : clocks) {
    if (!c) continue;
    ++running;
    if (*c > min_clock) ++reached;
  }
  ClockCompletion out;
  if (running == 0) return out;
  const size_t need = running > backup ? running - backup : 1;
  if (reached < need) return out;
  out.complete = true;
  for (size_t w = 0; w < clocks.size(); ++w) {
    if (clocks[w] && *clocks[w] <= min_clock) out.without.push_back(static_cast<uint32_t>(w));
  }
  return out;
}

}  // namespace ferry::ps
