// Failures seen by the coordinator (coordinator_state.h): the failure notice every survivor gets,
// and, with replicas (ps/job/chain.h), taking a server out of the job instead: at once when its
// control connection fails, or when members report it unreachable, after weighing what they all
// said within a short window (a server that lost every link accuses all its peers while they all
// accuse it).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::OnSuspect(size_t ci, const ControlMessage& msg) {
  // msg.index: the server the member lost its data connection to; msg.text: what it saw.
  // The server leaves the job (the chains close over it), or, when a shard would be left
  // without a live replica, the job fails; Judge() decides which server once the accusations of
  // a short window are in.
  const Status why = PeerFailure(Describe(conns[ci]) + " lost its connection to server " +
                                 std::to_string(msg.index) + ": " + msg.text);
  // Only members of a job with replicas send it, and only while it runs (connections end
  // anyway while it finishes).
  if (msg.index >= servers.size() || servers[msg.index] < 0 || phase != Phase::kRunning) return;
  Accuse(ci, msg.index, why);
}

void Coordinator::Impl::FailJob(const Member* who, const Status& why) {
  if (phase == Phase::kFailed || phase == Phase::kDone) return;
  phase = Phase::kFailed;
  ControlMessage f;
  f.kind = ControlKind::kFailure;
  if (who != nullptr && who->registered) {
    f.rank = who->info.rank;
    f.role = who->info.role;
    f.index = who->info.index;
  } else {
    f.rank = UINT32_MAX;
  }
  f.value = ElapsedMs();
  // Every survivor's error says who and when (the notice also carries the time in `value`).
  char when[48];
  std::snprintf(when, sizeof when, " [%.1f s into the job]", f.value / 1000.0);
  f.text = (who != nullptr ? Describe(*who) + ": " : std::string()) + why.ToString() + when;
  std::fprintf(stderr, "ferry coordinator: job failed after %.1f s: %s\n", f.value / 1000.0,
               f.text.c_str());
  SendToAll(f);
  failure_notice = f;
  failed_at = Clock::now();
  std::lock_guard<std::mutex> lock(mu);
  result = Status(why.code() == Code::kOk ? Code::kPeerFailure : why.code(), f.text);
}

void Coordinator::Impl::OnGone(size_t ci, const Status& why) {
  Member& m = conns[ci];
  if (m.gone) return;
  m.gone = true;
  const bool expected = phase == Phase::kFinishing || phase == Phase::kDone || m.removed ||
                        (m.registered && m.info.role == Role::kWorker && m.finished);
  if (expected || !m.registered) return;
  if (m.joining) {  // coordinator_joins.cc
    return m.info.role == Role::kServer ? JoinFailed(m.info.index, why.ToString())
                                        : WorkerJoinFailed(m.info.index, why.ToString());
  }
  if (m.info.role == Role::kServer && job.replicas > 1 && phase == Phase::kRunning) {
    (void)RemoveServer(m.info.index, why);
    return;
  }
  FailJob(&m, why);
  // An unregistered connection that goes away (a probe, a rejected member) is not a failure.
}

bool Coordinator::Impl::RemoveServer(uint32_t index, const Status& why) {
  if (index >= servers.size() || servers[index] < 0) return true;
  Member& m = conns[servers[index]];
  if (m.removed || phase == Phase::kFailed || phase == Phase::kDone) return true;
  if (!chain.AllShardsLive(static_cast<int>(index))) {
    FailJob(&m, Status(why.code() == Code::kOk ? Code::kPeerFailure : why.code(),
                       why.message() + " (and a shard it holds has no live replica left)"));
    return false;
  }
  // The joining spares this server was copying rows to (it is the live tail before them) lose
  // their source mid-copy: they leave with it, and their slots go to a repair of their own.
  std::vector<uint32_t> orphans;
  for (const auto& [spare, at] : repairs_started) {
    for (uint32_t shard : chain.Hosted(spare)) {
      if (chain.Tail(shard) == static_cast<int>(index)) {
        orphans.push_back(spare);
        break;
      }
    }
  }
  chain.MarkDead(index);
  m.removed = true;
  ForgetAccusations(index);
  ControlMessage d;
  d.kind = ControlKind::kServerDown;
  d.index = index;
  d.rank = m.info.rank;
  d.value = ElapsedMs();
  d.text = Describe(m) + ": " + why.ToString();
  std::fprintf(stderr,
               "ferry coordinator: server %u removed after %.1f s, its shards fail over to their "
               "replicas (%u of %zu servers left): %s\n",
               index, d.value / 1000.0, chain.live_servers(), servers.size(), d.text.c_str());
  SendToRole(Role::kServer, d);
  SendToRole(Role::kWorker, d);
  if (!m.gone) Send(m.ep, d);  // a server that is alive but unreachable stops serving
  for (auto& [id, p] : checkpoints) {
    if (p.answered.count(index) == 0) p.lost_server = true;
  }
  // A spare that dies while joining ends its repair; the slots it adopted go to the next idle
  // spare like any dead server's (StartRepair below adopts from it).
  repairs_started.erase(index);
  StartRepair(index);
  MovesFailed(index);  // coordinator_moves.cc
  for (uint32_t spare : orphans) {
    if (!RemoveServer(spare, PeerFailure("server " + std::to_string(index) +
                                         ", the source of its copy, was removed"))) {
      return false;
    }
  }
  CheckApplied();
  CheckCheckpoints();
  MaybeStartJoiningWorker();  // coordinator_joins.cc: it waits for no removed server
  return true;
}

void Coordinator::Impl::StartRepair(uint32_t dead) {
  const int spare = chain.IdleSpare();
  if (spare < 0 || !chain.Join(dead, static_cast<uint32_t>(spare))) return;
  ControlMessage r;
  r.kind = ControlKind::kChainRepair;
  r.index = dead;
  r.value = static_cast<uint64_t>(spare);
  std::fprintf(stderr,
               "ferry coordinator: spare server %d adopts server %u's shards after %.1f s; it "
               "joins their chains once their tails copied it every row\n",
               spare, dead, ElapsedMs() / 1000.0);
  SendToAll(r);
  repairs_started[static_cast<uint32_t>(spare)] = Clock::now();
}

void Coordinator::Impl::OnChainJoined(const Member& m) {
  const uint32_t spare = m.info.index;
  // Only the joining spare itself says so, once.
  if (m.info.role != Role::kServer || spare >= chain.members() || !chain.joining(spare)) return;
  chain.Joined(spare);
  const auto started = repairs_started.find(spare);
  const double ms =
      started == repairs_started.end()
          ? 0.0
          : std::chrono::duration<double, std::milli>(Clock::now() - started->second).count();
  if (started != repairs_started.end()) repairs_started.erase(started);
  std::fprintf(stderr,
               "ferry coordinator: spare server %u joined its chains %.1f ms after its repair "
               "began (%u servers hold shards)\n",
               spare, ms, chain.live_servers());
  ControlMessage j;
  j.kind = ControlKind::kChainJoined;
  j.index = spare;
  j.value = ElapsedMs();
  SendToAll(j);
}

void Coordinator::Impl::Accuse(size_t accuser, uint32_t server, const Status& why) {
  if (chain.dead(server)) return;  // removed already
  accused[server].insert(accuser);
  accused_why.emplace(server, why);
  if (judge_at == Clock::time_point()) judge_at = Clock::now() + kJudgeWindow;
}

void Coordinator::Impl::ForgetAccusations(uint32_t server) {
  accused.erase(server);
  accused_why.erase(server);
  if (server >= servers.size() || servers[server] < 0) return;
  const size_t ci = static_cast<size_t>(servers[server]);
  for (auto it = accused.begin(); it != accused.end();) {
    it->second.erase(ci);  // what a removed server said counts no more
    if (it->second.empty()) {
      accused_why.erase(it->first);
      it = accused.erase(it);
    } else {
      ++it;
    }
  }
}

size_t Coordinator::Impl::AccuserRanks(const std::set<size_t>& accusers) const {
  std::set<uint32_t> ranks;
  for (size_t ci : accusers) ranks.insert(conns[ci].info.rank);
  return ranks.size();
}

void Coordinator::Impl::Judge() {
  judge_at = Clock::time_point();
  while (!accused.empty() && phase == Phase::kRunning) {
    // Measured with two shard servers per rank: both of a severed rank's servers accused
    // server 0 within the window, outvoting the one survivor that had reported the severed
    // rank yet, and a healthy server was removed. Accusations count per rank.
    auto most = accused.begin();
    size_t most_ranks = AccuserRanks(most->second);
    for (auto it = accused.begin(); it != accused.end(); ++it) {
      const size_t n = AccuserRanks(it->second);
      if (n > most_ranks) {
        most = it;
        most_ranks = n;
      }
    }
    const uint32_t server = most->first;
    Status why = accused_why[server];
    if (most->second.size() > 1) {
      why = Status(why.code(), why.message() + " (and " + std::to_string(most->second.size() - 1) +
                                   " more members lost it)");
    }
    if (!RemoveServer(server, why)) return;  // the job failed
  }
}

}  // namespace ferry::ps
