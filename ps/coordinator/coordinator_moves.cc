// Moves on the coordinator (elastic jobs; move_plan.h has the protocol, coordinator_state.h the
// state): a worker asks for a list of shard moves (Worker::MoveShards), MovePlan sequences them,
// and each action goes to every member in the order it was decided, as repairs do, so that every
// process's ChainMap goes through the same states. The servers' reports (kMoveCopied from a
// move's target, kMoveDrained from a draining head) advance the plan; a removed server hands it
// MovePlan::Failed. The requester is answered once every move finished or was skipped.
//
// Not yet: a standby coordinator that takes over does not know of a plan in progress (the
// journal records repairs, not moves), so elastic jobs with replicas and a standby lose the
// plan's requester then (it times out), the leaves queued behind it, and a shard mid-move stays
// copying.
#include <algorithm>
#include <cstdio>
#include <string>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::OnMoveShards(size_t ci, const ControlMessage& msg) {
  ControlMessage answer;
  answer.kind = ControlKind::kMoveShards;
  answer.value = msg.value;
  const auto refuse = [&](const std::string& why) {
    answer.text = why;
    Send(conns[ci].ep, answer);
  };
  // A worker's request, or a server asking for its own leave (SIGTERM on its rank).
  const MemberInfo& who = conns[ci].info;
  // A server's own leave or join (the coordinator asks for a join itself: OnJoinReady).
  const bool own = (msg.rank == kMoveLeave || msg.rank == kMoveJoin) && msg.index == who.index;
  if (who.role != Role::kWorker && !own) return;
  if (!job.elastic) return refuse("moves need an elastic job (JobSpec::elastic)");
  if (phase != Phase::kRunning) return refuse("moves only while the job runs");
  if (MovesBusy()) {
    if (msg.rank != kMoveLeave) return refuse("another move plan is in progress");
    // Several servers told to leave at once (a job scaled down by more than one): each leave
    // is planned over the chains the ones before it left.
    std::fprintf(stderr,
                 "ferry coordinator: server %u's leave waits for the move plan in progress\n",
                 msg.index);
    queued_leaves.emplace_back(ci, msg);
    return;
  }
  Result<std::vector<ShardMove>> decoded = std::vector<ShardMove>{};
  if (msg.rank == kMoveLeave) {
    decoded = PlanLeaveOf(msg.index);
  } else if (msg.rank == kMoveJoin) {
    decoded = PlanJoinOf(msg.index);
  } else {
    decoded = DecodeMoves(msg.data, job.num_shards(), chain.members());
  }
  if (!decoded.ok()) return refuse(decoded.status().ToString());
  std::vector<bool> seen(job.num_shards(), false);
  for (const ShardMove& mv : *decoded) {
    if (seen[mv.shard]) return refuse("shard " + std::to_string(mv.shard) + " moves twice");
    seen[mv.shard] = true;
  }
  for (const ShardMove& mv : *decoded) {
    if (mv.from == mv.to || chain.Position(mv.shard, mv.from) < 0 ||
        chain.Position(mv.shard, mv.to) >= 0 || chain.dead(mv.to)) {
      return refuse("shard " + std::to_string(mv.shard) + " cannot move from server " +
                    std::to_string(mv.from) + " to server " + std::to_string(mv.to) +
                    ": the first must hold it and the second, a live server, must not");
    }
  }
  std::fprintf(stderr, "ferry coordinator: %zu shard moves begin after %.1f s\n", decoded->size(),
               ElapsedMs() / 1000.0);
  moves.emplace(std::move(decoded).value(), chain.members());
  leaving = msg.rank == kMoveLeave ? static_cast<int>(msg.index) : -1;
  moves_requester = ci;
  moves_id = msg.value;
  moves_started = Clock::now();
  SendMoveActions(moves->Next(chain));
}

std::vector<std::vector<uint32_t>> Coordinator::Impl::ServingChains() const {
  std::vector<std::vector<uint32_t>> chains(job.num_shards());
  for (uint32_t q = 0; q < job.num_shards(); ++q) {
    for (uint32_t m : chain.Chain(q)) {
      if (!chain.dead(m) && !chain.copying(q, m)) chains[q].push_back(m);
    }
  }
  return chains;
}

std::vector<uint32_t> Coordinator::Impl::LiveServers() const {
  std::vector<uint32_t> live;
  for (uint32_t s = 0; s < servers.size(); ++s) {
    if (!chain.dead(s)) live.push_back(s);
  }
  return live;
}

Result<std::vector<ShardMove>> Coordinator::Impl::PlanLeaveOf(uint32_t server) const {
  if (server >= servers.size() || chain.dead(server)) {
    return InvalidArgument("server " + std::to_string(server) + " is not a live server");
  }
  auto plan = PlanLeave(ServingChains(), LiveServers(), server);
  if (!plan) {
    return InvalidArgument("server " + std::to_string(server) +
                           " cannot leave: a shard it holds is on every other live server already");
  }
  return std::move(*plan);
}

Result<std::vector<ShardMove>> Coordinator::Impl::PlanJoinOf(uint32_t server) const {
  std::vector<uint32_t> live = LiveServers();
  if (server >= servers.size() || chain.dead(server) || !chain.Hosted(server).empty()) {
    return InvalidArgument("server " + std::to_string(server) + " is not a live empty server");
  }
  live.erase(std::find(live.begin(), live.end(), server));
  return PlanJoin(ServingChains(), live, server);
}

void Coordinator::Impl::FinishLeave() {
  const auto server = static_cast<uint32_t>(leaving);
  leaving = -1;
  for (uint32_t q = 0; q < job.num_shards(); ++q) {
    if (chain.Position(q, server) >= 0) {
      std::fprintf(stderr,
                   "ferry coordinator: server %u still holds shard %u after its leave's moves "
                   "(one was skipped): it stays\n",
                   server, q);
      return;
    }
  }
  Member& m = conns[servers[server]];
  chain.MarkDead(server);
  m.removed = true;  // nothing it says or loses counts any more (OnGone, OnSuspect)
  ForgetAccusations(server);
  ControlMessage l;
  l.kind = ControlKind::kServerLeave;
  l.index = server;
  std::fprintf(stderr, "ferry coordinator: server %u left the job after %.1f s (%u servers left)\n",
               server, ElapsedMs() / 1000.0, chain.live_servers());
  SendToRole(Role::kServer, l);
  SendToRole(Role::kWorker, l);
  if (!m.gone) Send(m.ep, l);
  CheckApplied();
  CheckCheckpoints();
}

void Coordinator::Impl::OnMoveReport(const Member& m, const ControlMessage& msg) {
  if (!moves || m.info.role != Role::kServer) return;
  const Status s = msg.kind == ControlKind::kMoveCopied ? moves->Copied(msg.index, m.info.index)
                                                        : moves->Drained(msg.index);
  if (!s.ok()) {
    // A report out of turn is a bug somewhere: the plan stays as it was.
    std::fprintf(stderr, "ferry coordinator: %s from server %u ignored: %s\n",
                 std::string(ControlKindName(msg.kind)).c_str(), m.info.index,
                 s.ToString().c_str());
    return;
  }
  SendMoveActions(moves->Next(chain));
}

void Coordinator::Impl::MovesFailed(uint32_t server) {
  if (!moves) return;
  SendMoveActions(moves->Failed(server, chain));
  SendMoveActions(moves->Next(chain));
}

void Coordinator::Impl::SendMoveActions(const std::vector<MovePlan::Action>& actions) {
  for (const MovePlan::Action& a : actions) {
    ControlMessage c;
    c.index = a.move.shard;
    c.value = a.move.from;
    c.value2 = a.move.to;
    switch (a.step) {
      case MovePlan::Step::kBegin:
        c.kind = ControlKind::kMoveBegin;
        c.rank = a.server;  // the copy's source
        SendToAll(c);
        break;
      case MovePlan::Step::kDrain:
        c.kind = ControlKind::kMoveDrain;
        c.value = a.server;  // the head
        SendToRole(Role::kServer, c);
        break;
      case MovePlan::Step::kFinish:
        c.kind = ControlKind::kMoveFinish;
        SendToAll(c);
        break;
      case MovePlan::Step::kSkip:
        std::fprintf(stderr,
                     "ferry coordinator: the move of shard %u from server %u to %u no "
                     "longer applies: skipped\n",
                     a.move.shard, a.move.from, a.move.to);
        break;
    }
  }
  if (!moves || !moves->done()) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - moves_started).count();
  std::fprintf(stderr, "ferry coordinator: %zu shard moves finished, %zu skipped, in %.1f ms\n",
               moves->finished(), moves->skipped(), ms);
  if (leaving >= 0) FinishLeave();
  ControlMessage done;
  done.kind = ControlKind::kMoveShards;
  done.value = moves_id;
  done.value2 = moves->finished();
  done.index = static_cast<uint32_t>(moves->skipped());
  if (moves_requester < conns.size() && !conns[moves_requester].gone) {
    Send(conns[moves_requester].ep, done);
  }
  moves.reset();
  StartQueuedLeaves();
  StartQueuedJoins();  // coordinator_joins.cc
}

void Coordinator::Impl::StartQueuedLeaves() {
  // A queued leave that no longer applies (its server left or died meanwhile, the job ended) is
  // refused to its requester as a fresh request would be; the next one is tried then.
  while (!MovesBusy() && !queued_leaves.empty()) {
    auto [ci, msg] = std::move(queued_leaves.front());
    queued_leaves.pop_front();
    if (ci >= conns.size() || conns[ci].gone) continue;
    OnMoveShards(ci, msg);
  }
}

}  // namespace ferry::ps
