// CoarseNow: the data path's clock. CLOCK_MONOTONIC_COARSE is a vDSO read of the last timer tick
// (no TSC read, no fence): a few nanoseconds, behind the real time by at most one jiffy (1-4 ms).
//
// Why: the backends stamp liveness ("last heard from the peer") and gate their periodic checks
// on every operation and on every idle progress turn of a busy-polling caller; reading
// steady_clock there was 7-16 % of a ping-pong process's samples (perf, ucx shm,
// docs/perf/transport-analysis.md). Everything these stamps feed is measured in peer_timeout
// units (hundreds of ms and up), where a jiffy of lag does not matter; a deadline the caller
// passed in (Wait, Accept, Connect) still uses steady_clock.
//
// Contract: same time line and epoch as std::chrono::steady_clock on Linux (both are
// CLOCK_MONOTONIC based), so stamps from either compare; thread-safe, never blocks.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace ferry::common {

inline std::chrono::steady_clock::time_point CoarseNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

// Milliseconds of the same clock.
inline int64_t CoarseMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace ferry::common
