// Barriers, clocks and gathers at the coordinator (coordinator_state.h): workers enter barriers
// and end clocks; the coordinator releases a barrier once every running worker entered it,
// advances the job's minimum clock (SSP/ASP) or has the servers apply a clock first (BSP), and
// relays gather parts (Worker::GatherFromWorkers).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::OnBarrier(const Member& m, const ControlMessage& msg) {
  // msg.value: the barrier's id.
  if (m.info.role != Role::kWorker) return;
  ++barriers[msg.value];
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
  ControlMessage u;
  u.kind = ControlKind::kClockUpdate;
  u.value = min_clock;
  SendToRole(Role::kWorker, u);
  // Replicas: the servers free the forward-ring space of this clock's pushes (every server
  // applied them now).
  if (job.replicas > 1) SendToRole(Role::kServer, u);
  AdvanceClocks();
}

void Coordinator::Impl::ReleaseBarriers() {
  const size_t running = workers.size() - finished;
  for (auto it = barriers.begin(); it != barriers.end();) {
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
  // The slowest worker still running: one that finished never clocks again, and waiting for it
  // would block the others forever (workers may run different numbers of iterations).
  uint64_t lo = UINT64_MAX;
  for (int i : workers) {
    if (!conns[i].finished) lo = std::min(lo, conns[i].clock);
  }
  if (lo == UINT64_MAX || lo <= min_clock) return;
  if (job.consistency.kind == Consistency::kBsp) {
    if (applying != 0) return;  // one clock at a time; the next is checked once this is applied
    applying = min_clock + 1;   // workers wait for each update, so lo == min_clock + 1
    ControlMessage a;
    a.kind = ControlKind::kApplyClock;
    a.value = applying;
    SendToRole(Role::kServer, a);
    return;
  }
  min_clock = lo;
  ControlMessage u;
  u.kind = ControlKind::kClockUpdate;
  u.value = min_clock;
  SendToRole(Role::kWorker, u);
}

}  // namespace ferry::ps
