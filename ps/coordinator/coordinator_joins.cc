// Join slots at the coordinator (JobSpec::join_slots; coordinator_state.h has the sequence): a
// server rank started while the job runs registers in a join slot, is connected to by everyone,
// and then takes its share of the shards through a move plan (PlanJoin), like a leave in reverse.
//
// Why one join at a time, and none beside a move plan: the joining server learns the chains as
// they are when it registers (kMembership carries them), and until it is ready it hears nothing
// else (SendToRole skips it: it is still connecting), so no step may change them meanwhile.
#include <algorithm>
#include <cstdio>
#include <string>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::TakeJoinSlot(size_t ci, const ControlMessage& msg) {
  Member& m = conns[ci];
  (msg.role == Role::kServer ? servers : workers)[msg.index] = static_cast<int>(ci);
  m.registered = true;
  m.joining = true;
  m.info = msg.members[0];
  m.info.rank = msg.rank;
  m.info.role = msg.role;
  m.info.index = msg.index;
  joiner = static_cast<int>(ci);
}

void Coordinator::Impl::OnJoinRegister(size_t ci, const ControlMessage& msg) {
  Member& m = conns[ci];
  const bool worker = msg.role == Role::kWorker;
  if (phase == Phase::kRegistering || phase == Phase::kConnecting || MovesBusy()) {
    std::fprintf(stderr, "ferry coordinator: %s %u (join slot) waits to join: the job %s\n",
                 worker ? "worker" : "server", msg.index,
                 phase == Phase::kRunning ? "is moving shards or another server joins"
                                          : "has not started yet");
    queued_joins.emplace_back(ci, msg);
    return;
  }
  if (phase != Phase::kRunning) {
    return Reject(m, msg,
                  std::string("the job is over: ") + (worker ? "worker " : "server ") +
                      std::to_string(msg.index) + " cannot join");
  }
  if (worker) return OnWorkerJoinRegister(ci, msg);
  if (servers[msg.index] >= 0) {
    return Reject(m, msg,
                  "server " + std::to_string(msg.index) +
                      " joined this job before (join slots "
                      "are used once: give the new server another slot)");
  }
  if (!chain.dead(msg.index) || !chain.Hosted(msg.index).empty()) {
    return Reject(m, msg, "server " + std::to_string(msg.index) + " is not a free join slot");
  }
  TakeJoinSlot(ci, msg);
  // Its membership: the live servers and the workers still running (those connect to it), and
  // the chains as everyone holds them, with it alive (as everyone's will be on kServerJoin).
  ControlMessage mem;
  mem.kind = ControlKind::kMembership;
  mem.text = standby_address;
  mem.members.push_back(m.info);
  for (uint32_t s = 0; s < servers.size(); ++s) {
    const int i = servers[s];
    if (i >= 0 && s != msg.index && !chain.dead(s) && !conns[i].gone) {
      mem.members.push_back(conns[i].info);
    }
  }
  for (size_t w = 0; w < workers.size(); ++w) {
    const int i = Participant(w);
    if (i >= 0 && !conns[i].gone && !conns[i].finished) mem.members.push_back(conns[i].info);
  }
  ChainMap chains = chain;
  (void)chains.Revive(msg.index);
  mem.data = chains.Encode();
  Send(m.ep, mem);
  ControlMessage join;
  join.kind = ControlKind::kServerJoin;
  join.index = msg.index;
  join.members.push_back(m.info);
  SendToAll(join);
  std::fprintf(stderr,
               "ferry coordinator: %s joins the job after %.1f s (%u servers hold shards)\n",
               Describe(m).c_str(), ElapsedMs() / 1000.0, chain.live_servers());
}

void Coordinator::Impl::OnJoinReady(Member& m) {
  if (m.info.role == Role::kWorker) {
    m.ready = true;  // connected to every server; it starts once they all accepted it
    return MaybeStartJoiningWorker();
  }
  const uint32_t server = m.info.index;
  m.joining = false;
  m.ready = true;
  joiner = -1;
  (void)chain.Revive(server);
  // It holds nothing: a clock being applied and a checkpoint being written do not wait for it.
  server_applied[server] = std::max(applying, min_clock);
  for (auto& [key, p] : checkpoints) p.answered.insert(server);
  ControlMessage start;
  start.kind = ControlKind::kStart;
  Send(m.ep, start);
  ControlMessage plan;
  plan.kind = ControlKind::kMoveShards;
  plan.rank = kMoveJoin;
  plan.index = server;
  plan.value = 0;
  OnMoveShards(static_cast<size_t>(servers[server]), plan);  // coordinator_moves.cc
}

void Coordinator::Impl::JoinFailed(uint32_t server, const std::string& why) {
  Member& m = conns[servers[server]];
  std::fprintf(stderr, "ferry coordinator: server %u did not join: %s\n", server, why.c_str());
  m.joining = false;
  m.removed = true;
  joiner = -1;
  chain.MarkDead(server);
  // Everyone else revived it on kServerJoin and may have connected: it is out of the job.
  ControlMessage l;
  l.kind = ControlKind::kServerLeave;
  l.index = server;
  SendToAll(l);
  if (!m.gone) Send(m.ep, l);
  StartQueuedLeaves();  // coordinator_moves.cc
  StartQueuedJoins();
}

void Coordinator::Impl::StartQueuedJoins() {
  while (!MovesBusy() && !queued_joins.empty() && phase == Phase::kRunning) {
    auto [ci, msg] = std::move(queued_joins.front());
    queued_joins.pop_front();
    if (ci >= conns.size() || conns[ci].gone) continue;
    OnJoinRegister(ci, msg);
  }
}

std::string Coordinator::Impl::WorkerJoinRefusal() {
  std::lock_guard<std::mutex> lock(gate_mu);
  return worker_join_gate ? worker_join_gate() : std::string();
}

void Coordinator::Impl::TurnAwayWorker(Member& m, uint32_t worker, const std::string& why) {
  ControlMessage s;
  s.kind = ControlKind::kShutdown;
  s.text = "turned away: " + why;
  Send(m.ep, s);
  std::fprintf(stderr, "ferry coordinator: worker %u does not join: %s\n", worker, why.c_str());
}

void Coordinator::Impl::OnWorkerJoinRegister(size_t ci, const ControlMessage& msg) {
  Member& m = conns[ci];
  if (std::string why = WorkerJoinRefusal(); !why.empty()) {
    return TurnAwayWorker(m, msg.index, why);
  }
  if (workers[msg.index] >= 0) {
    return Reject(m, msg,
                  "worker " + std::to_string(msg.index) +
                      " joined this job before (worker join slots are used once: give the new "
                      "worker another slot)");
  }
  TakeJoinSlot(ci, msg);
  joiner_accepted.clear();
  // Its membership: the live servers (it connects to each) and the chains as everyone holds
  // them (no move runs meanwhile: MovesBusy).
  ControlMessage mem;
  mem.kind = ControlKind::kMembership;
  mem.text = standby_address;
  for (uint32_t s = 0; s < servers.size(); ++s) {
    if (ServingServer(s)) mem.members.push_back(conns[servers[s]].info);
  }
  mem.data = chain.Encode();
  Send(m.ep, mem);
  // The servers accept its connection; the workers hear of it once it takes part (ready).
  ControlMessage join;
  join.kind = ControlKind::kWorkerJoin;
  join.index = msg.index;
  join.members.push_back(m.info);
  SendToRole(Role::kServer, join);
  std::fprintf(stderr, "ferry coordinator: %s joins the job after %.1f s (%zu workers running)\n",
               Describe(m).c_str(), ElapsedMs() / 1000.0, RunningWorkers());
}

void Coordinator::Impl::OnWorkerAccepted(const Member& server, const ControlMessage& msg) {
  if (server.info.role != Role::kServer || joiner < 0 || conns[joiner].info.role != Role::kWorker ||
      conns[joiner].info.index != msg.index) {
    return;
  }
  joiner_accepted.insert(server.info.index);
  MaybeStartJoiningWorker();
}

void Coordinator::Impl::MaybeStartJoiningWorker() {
  if (joiner < 0 || conns[joiner].info.role != Role::kWorker || !conns[joiner].ready) return;
  for (uint32_t s = 0; s < servers.size(); ++s) {
    if (ServingServer(s) && joiner_accepted.count(s) == 0) return;
  }
  OnWorkerJoinReady(conns[joiner]);
}

void Coordinator::Impl::OnWorkerJoinReady(Member& m) {
  // Asked again here: its first barrier and gather are fixed now (the gate's program relies on
  // a "" meaning the worker takes part in every collective that ends the input's use).
  if (std::string why = WorkerJoinRefusal(); !why.empty()) {
    WorkerJoinFailed(m.info.index, why);
    return TurnAwayWorker(m, m.info.index, why);
  }
  m.joining = false;
  joiner = -1;
  // It takes part from the next clock boundary: the clock being applied (BSP) or the job's
  // clock, whichever is later, counts as done for it; its first push belongs to the next one.
  m.clock = std::max(applying, min_clock);
  // Its barriers and gathers go on from the job's: those the workers are in now do not wait for
  // it, and its next one is theirs.
  m.barrier_base = barrier_high;
  const std::vector<uint32_t> running = RunningWorkerIndices();
  ControlMessage start;
  start.kind = ControlKind::kStart;
  start.value = m.clock;
  start.value2 = m.barrier_base;
  start.index = static_cast<uint32_t>(gather_high);
  start.data = EncodeWorkerSet(running);
  Send(m.ep, start);
  ControlMessage join;
  join.kind = ControlKind::kWorkerJoin;
  join.index = m.info.index;
  join.value2 = gather_high;
  SendToRole(Role::kWorker, join);
  std::fprintf(stderr, "ferry coordinator: worker %u takes part from clock %llu on\n", m.info.index,
               static_cast<unsigned long long>(m.clock + 1));
  StartQueuedLeaves();  // coordinator_moves.cc
  StartQueuedJoins();
}

void Coordinator::Impl::WorkerJoinFailed(uint32_t worker, const std::string& why) {
  Member& m = conns[workers[worker]];
  std::fprintf(stderr, "ferry coordinator: worker %u did not join: %s\n", worker, why.c_str());
  m.joining = false;
  m.finished = true;  // never counted as running; the slot stays taken
  ++finished;
  joiner = -1;
  ControlMessage l;
  l.kind = ControlKind::kWorkerLeave;
  l.index = worker;
  SendToAll(l);
  StartQueuedLeaves();
  StartQueuedJoins();
}

void Coordinator::Impl::OnWorkerLeave(Member& m, const ControlMessage& msg) {
  // Its requests are done (Worker::Leave waited for them) and, under BSP, its last pushes
  // clocked: the servers apply them with that clock, and no clock after waits for it.
  ControlMessage l;
  l.kind = ControlKind::kWorkerLeave;
  l.index = m.info.index;
  if (msg.data.size() <= kMaxFarewell) l.data = msg.data;
  SendToAll(l);
  ControlMessage s;
  s.kind = ControlKind::kShutdown;
  s.text = "worker " + std::to_string(m.info.index) + " left the job";
  Send(m.ep, s);
  std::fprintf(stderr, "ferry coordinator: %s leaves the job after %.1f s at clock %llu\n",
               Describe(m).c_str(), ElapsedMs() / 1000.0, static_cast<unsigned long long>(m.clock));
}

}  // namespace ferry::ps
