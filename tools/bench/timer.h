// Timestamps for the timed latency loop, the way ucx_perftest and perftest take them: the CPU's
// time-stamp counter where the CPU declares it constant-rate and running in every state
// (/proc/cpuinfo flags constant_tsc and nonstop_tsc), calibrated once against steady_clock;
// steady_clock (a vDSO clock_gettime) everywhere else. A clock_gettime per timestamp was 9-15 %
// of an ucx-shm ping-pong's samples (docs/perf/transport-analysis.md).
//
// Threading: Get() is safe from any thread (the first call calibrates, ~20 ms); Now() and
// ToNs() are const and lock-free. Ticks are only comparable within one process.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace ferry::bench {

class TickClock {
 public:
  static const TickClock& Get();

  uint64_t Now() const {
#if defined(__x86_64__)
    if (tsc_) return __rdtsc();
#endif
    return SteadyNs();
  }
  double ToNs(uint64_t ticks) const { return static_cast<double>(ticks) * ns_per_tick_; }
  // "tsc (2.45 GHz, calibrated against steady_clock)" or "steady_clock (...why...)".
  const std::string& description() const { return description_; }

  static uint64_t SteadyNs() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }

 private:
  TickClock();
  bool tsc_ = false;
  double ns_per_tick_ = 1.0;
  std::string description_;
};

}  // namespace ferry::bench
