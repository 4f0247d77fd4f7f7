// The op driver every phase of a worker uses (internal to tools/ps): keeps up to `depth` tickets
// in flight, completes them oldest first (Wait, then Release) and reports each op's latency from
// its call to the return of its Wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

#include "ps/worker/worker.h"
#include "transport/status.h"

namespace ferry::psbench {

using SteadyClock = std::chrono::steady_clock;

inline double MicrosBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// issue(i) -> Result<ps::Ticket> posts op i (0 <= i < total); done(i, usec) runs after op i
// completed. *last_done (if given) is the completion time of the last op. Stops at the first
// error; tickets still in flight are released (the worker drops their replies).
template <typename Issue, typename Done>
Status RunPipelined(ps::Worker& w, uint64_t total, uint32_t depth, ps::Millis wait_limit,
                    Issue&& issue, Done&& done, SteadyClock::time_point* last_done = nullptr) {
  struct InFlight {
    ps::Ticket ticket;
    uint64_t index;
    SteadyClock::time_point start;
  };
  std::deque<InFlight> inflight;
  Status status;
  uint64_t next = 0;
  while (status.ok() && (next < total || !inflight.empty())) {
    if (next < total && inflight.size() < depth) {
      const SteadyClock::time_point start = SteadyClock::now();
      Result<ps::Ticket> t = issue(next);
      if (!t.ok()) {
        status = t.status().Annotate("op " + std::to_string(next));
        break;
      }
      inflight.push_back({*t, next, start});
      ++next;
      continue;
    }
    const InFlight f = inflight.front();
    inflight.pop_front();
    status = w.Wait(f.ticket, wait_limit);
    const SteadyClock::time_point end = SteadyClock::now();
    w.Release(f.ticket);
    if (!status.ok()) {
      status = status.Annotate("op " + std::to_string(f.index));
      break;
    }
    if (last_done != nullptr) *last_done = end;
    done(f.index, MicrosBetween(f.start, end));
  }
  for (const InFlight& f : inflight) w.Release(f.ticket);
  return status;
}

}  // namespace ferry::psbench
