// Barriers, clocks and gathers at the coordinator (coordinator_state.h): workers enter barriers
// and end clocks; the coordinator releases a barrier once every running worker entered it,
// advances the job's minimum clock (SSP/ASP) or has the servers apply a clock first (BSP), and
// relays gather parts (Worker::GatherFromWorkers).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ps/coordinator/clock_plan.h"
#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::OnBarrier(const Member& m, const ControlMessage& msg) {
  // msg.value: the barrier's id.
  if (m.info.role != Role::kWorker) return;
  ++barriers[msg.value];
  barrier_high = std::max(barrier_high, msg.value);
  ReleaseBarriers();
}

void Coordinator::Impl::OnClock(Member& m, const ControlMessage& msg) {
  // msg.value: the clocks the worker completed; msg.value2: its data position there; msg.rank:
  // kClockCheckpoint when it asks for a checkpoint at that clock.
  if (m.info.role != Role::kWorker) return;
  if (msg.value > m.clock) {
    m.clock = msg.value;
    m.position = msg.value2;
    if (msg.rank == kClockCheckpoint) m.checkpoint_at = msg.value;
  }
  AdvanceClocks();
}

void Coordinator::Impl::OnClockApplied(const Member& m, const ControlMessage& msg) {
  // msg.value: the clock the server applied.
  if (m.info.role != Role::kServer || msg.value != applying) return;
  server_applied[m.info.index] = applying;
  CheckApplied();
}

void Coordinator::Impl::OnGather(const Member& m, ControlMessage msg) {
  // msg.rank: kGatherToAll to relay the part to every worker, else to worker 0 only.
  if (m.info.role != Role::kWorker || workers.empty()) return;
  const bool to_all = msg.rank == kGatherToAll;
  gather_high = std::max(gather_high, msg.value);
  msg.kind = ControlKind::kGatherPart;
  msg.rank = m.info.index;
  if (to_all) {
    SendToRole(Role::kWorker, msg);
  } else {
    Send(conns[workers[0]].ep, std::move(msg));
  }
}

void Coordinator::Impl::CheckApplied() {
  if (applying == 0) return;
  for (size_t s = 0; s < servers.size(); ++s) {
    if (!chain.dead(static_cast<uint32_t>(s)) && server_applied[s] < applying) return;
  }
  min_clock = applying;
  applying = 0;
  // The servers get the checkpoint command before any worker can push for the next clock: their
  // copies hold exactly the clocks < min_clock.
  MaybeStartPeriodicCheckpoint();
  AnnounceMinClock();
  AdvanceClocks();
}

void Coordinator::Impl::AnnounceMinClock() {
  ControlMessage u;
  u.kind = ControlKind::kClockUpdate;
  u.value = min_clock;
  SendToRole(Role::kWorker, u);
  // Replicas: the servers free the forward-ring space of the pushes of the clocks up to it
  // (every server applied them).
  if (job.forwards()) SendToRole(Role::kServer, u);
}

void Coordinator::Impl::ReportBackupWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu);
    result_without = completed_without;
  }
  if (job.backup_workers == 0) return;
  std::string who;
  for (size_t w = 0; w < completed_without.size(); ++w) {
    if (completed_without[w] == 0) continue;
    who += (who.empty() ? "" : ", ") + std::string("worker ") + std::to_string(w) + ": " +
           std::to_string(completed_without[w]);
  }
  std::fprintf(stderr,
               "ferry coordinator: backup workers: by clock %llu, clocks completed without a "
               "worker: %s (its pushes for them were dropped)\n",
               static_cast<unsigned long long>(min_clock), who.empty() ? "none" : who.c_str());
}

void Coordinator::Impl::ReleaseBarriers() {
  for (auto it = barriers.begin(); it != barriers.end();) {
    // The running workers this barrier waits for: not those that joined after it began.
    size_t running = 0;
    for (size_t w = 0; w < workers.size(); ++w) {
      const int i = Participant(w);
      running += i >= 0 && !conns[i].finished && conns[i].barrier_base < it->first ? 1 : 0;
    }
    if (it->second < running) {
      ++it;
      continue;
    }
    ControlMessage r;
    r.kind = ControlKind::kBarrierRelease;
    r.value = it->first;
    SendToRole(Role::kWorker, r);
    it = barriers.erase(it);
  }
}

void Coordinator::Impl::AdvanceClocks() {
  // Only the workers still running count: one that finished never clocks again, and waiting for
  // it would block the others forever (workers may run different numbers of iterations).
  if (job.consistency.kind == Consistency::kBsp) {
    if (applying != 0) return;  // one clock at a time; the next is checked once this is applied
    std::vector<std::optional<uint64_t>> clocks(workers.size());
    for (size_t w = 0; w < workers.size(); ++w) {
      const int i = Participant(w);
      if (i >= 0 && !conns[i].finished && !conns[i].clocks_done) clocks[w] = conns[i].clock;
    }
    // A periodic checkpoint's boundary waits for every worker even with backup workers: the
    // checkpoint needs each worker's data position there, and a worker left behind has none.
    const bool checkpoint_next =
        job.checkpoint_every != 0 && (min_clock + 1) % job.checkpoint_every == 0;
    const ClockCompletion plan =
        PlanClockCompletion(clocks, min_clock, checkpoint_next ? 0 : job.backup_workers);
    if (!plan.complete) return;
    applying = min_clock + 1;  // workers wait for each update: none is past min_clock + 1
    for (uint32_t w : plan.without) ++completed_without[w];
    ControlMessage a;
    a.kind = ControlKind::kApplyClock;
    a.value = applying;
    a.data = EncodeWorkerSet(plan.without);
    SendToRole(Role::kServer, a);
    return;
  }
  uint64_t lo = UINT64_MAX;  // the slowest worker still running
  for (size_t w = 0; w < workers.size(); ++w) {
    const int i = Participant(w);
    if (i >= 0 && !conns[i].finished && !conns[i].clocks_done) lo = std::min(lo, conns[i].clock);
  }
  if (lo == UINT64_MAX || lo <= min_clock) return;
  min_clock = lo;
  ControlMessage u;
  u.kind = ControlKind::kClockUpdate;
  u.value = min_clock;
  SendToRole(Role::kWorker, u);
}

}  // namespace ferry::ps
