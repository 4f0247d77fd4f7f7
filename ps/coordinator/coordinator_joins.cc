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

void Coordinator::Impl::OnJoinRegister(size_t ci, const ControlMessage& msg) {
  Member& m = conns[ci];
  if (phase == Phase::kRegistering || phase == Phase::kConnecting || MovesBusy()) {
    std::fprintf(stderr, "ferry coordinator: server %u (join slot) waits to join: the job %s\n",
                 msg.index,
                 phase == Phase::kRunning ? "is moving shards or another server joins"
                                          : "has not started yet");
    queued_joins.emplace_back(ci, msg);
    return;
  }
  if (phase != Phase::kRunning) {
    return Reject(m, msg, "the job is over: server " + std::to_string(msg.index) + " cannot join");
  }
  if (servers[msg.index] >= 0) {
    return Reject(m, msg,
                  "server " + std::to_string(msg.index) +
                      " joined this job before (join slots "
                      "are used once: give the new server another slot)");
  }
  if (!chain.dead(msg.index) || !chain.Hosted(msg.index).empty()) {
    return Reject(m, msg, "server " + std::to_string(msg.index) + " is not a free join slot");
  }
  servers[msg.index] = static_cast<int>(ci);
  m.registered = true;
  m.joining = true;
  m.info = msg.members[0];
  m.info.rank = msg.rank;
  m.info.role = Role::kServer;
  m.info.index = msg.index;
  joiner = static_cast<int>(ci);
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
  for (int i : workers) {
    if (!conns[i].gone && !conns[i].finished) mem.members.push_back(conns[i].info);
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

}  // namespace ferry::ps
