#include "tools/bench/timer.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ferry::bench {
namespace {

// Both flags on the first "flags" line of /proc/cpuinfo: the TSC ticks at one rate whatever the
// core's frequency (constant_tsc) and does not stop in deep idle states (nonstop_tsc).
bool InvariantTsc(std::string* why) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    bool constant = false, nonstop = false;
    for (std::string w; words >> w;) {
      constant |= w == "constant_tsc";
      nonstop |= w == "nonstop_tsc";
    }
    if (constant && nonstop) return true;
    *why = "no constant_tsc + nonstop_tsc in /proc/cpuinfo";
    return false;
  }
  *why = "no flags in /proc/cpuinfo";
  return false;
}

}  // namespace

TickClock::TickClock() {
  std::string why = "not an x86-64 build";
#if defined(__x86_64__)
  if (InvariantTsc(&why)) {
    // 20 ms against steady_clock: an error of a few ns in each end read is < 1e-6 of the span.
    const uint64_t n0 = SteadyNs();
    const uint64_t c0 = __rdtsc();
    uint64_t n1 = n0;
    while (n1 - n0 < 20'000'000) n1 = SteadyNs();
    const uint64_t c1 = __rdtsc();
    if (c1 > c0) {
      tsc_ = true;
      ns_per_tick_ = static_cast<double>(n1 - n0) / static_cast<double>(c1 - c0);
      char buf[96];
      std::snprintf(buf, sizeof(buf), "tsc (%.3f GHz, calibrated against steady_clock)",
                    1.0 / ns_per_tick_);
      description_ = buf;
      return;
    }
    why = "the TSC did not advance during calibration";
  }
#endif
  description_ = "steady_clock (" + why + ")";
}

const TickClock& TickClock::Get() {
  static const TickClock clock;
  return clock;
}

}  // namespace ferry::bench
