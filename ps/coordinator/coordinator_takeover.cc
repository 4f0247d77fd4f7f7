// A standby coordinator taking over (coordinator.h, "Standby"): the members rejoin with their
// journals (ps/wire/control_journal.h), and the job's state is rebuilt from what they sent and
// heard instead of being mirrored while the job ran. What each piece of state comes from:
//   members, their infos       the membership every member heard; the absent are lost
//   servers removed before     the kServerDown each member heard
//   repairs, joined spares     the longest kChainRepair sequence any member heard (each heard a
//                              prefix of it: told the rest), every kChainJoined heard
//   the job's clock            the newest kClockUpdate any member heard (every server had
//                              applied it before the primary told anyone)
//   a clock being applied      the newest kApplyClock any server heard: told again, with the
//                              same worker set; a server that applied it answers again
//   workers' clocks, barriers  the newest kClock and kBarrier each sent, the release each heard
//   gathers, checkpoints       sent again by the members (the journal's replay) after the rejoin
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::OnRejoin(size_t ci, const ControlMessage& msg) {
  Member& m = conns[ci];
  if (phase != Phase::kStandby) {
    return Reject(m, msg,
                  is_standby ? "the standby coordinator took over without this member"
                             : "this coordinator is no standby: it runs the job");
  }
  if (msg.value != fingerprint) return Reject(m, msg, "a rejoin with another job's fingerprint");
  auto j = DecodeRejoin(msg, static_cast<uint32_t>(servers.size()),
                        static_cast<uint32_t>(workers.size()));
  if (!j.ok()) return Reject(m, msg, j.status().ToString());
  if (!j->started) return Reject(m, msg, "a rejoin before the job started");
  for (const auto& [other, oj] : rejoined) {
    if (other == ci || (oj.role == j->role && oj.index == j->index)) {
      return Reject(
          m, msg,
          std::string(RoleName(j->role)) + " " + std::to_string(j->index) + " rejoined twice");
    }
  }
  rejoined.emplace(ci, *std::move(j));
  const auto now = Clock::now();
  if (first_rejoin == Clock::time_point()) first_rejoin = now;
  if (msg.rank == own_rank && takeover_by == Clock::time_point()) {
    // This rank lost the primary too: it is gone (or cut off from everyone rejoining here).
    takeover_by = now + job.peer_timeout;
    std::fprintf(stderr,
                 "ferry coordinator (standby, rank %u): the coordinator on rank %u is lost; "
                 "taking over once the members rejoined\n",
                 own_rank, kPrimaryRank);
  }
}

void Coordinator::Impl::StandbyTick(Clock::time_point now) {
  if (rejoined.empty()) return;
  if (takeover_by == Clock::time_point()) {
    if (now < first_rejoin + job.peer_timeout * 2) return;
    // This rank still hears the primary: the members that rejoined lost only their own link.
    for (const auto& [ci, j] : rejoined) {
      ControlMessage who = j.Rejoin();
      Reject(conns[ci], who,
             "rank " + std::to_string(own_rank) + " still reaches the coordinator on rank " +
                 std::to_string(kPrimaryRank) + ": no takeover");
    }
    rejoined.clear();
    held.clear();
    first_rejoin = Clock::time_point();
    return;
  }
  // Every member that may have survived (not on the primary's rank) rejoined, or it is time.
  size_t expected = 0;
  for (const MemberInfo& i : rejoined.begin()->second.membership)
    expected += i.rank != kPrimaryRank;
  if (rejoined.size() >= expected || now >= takeover_by) TakeOver();
}

void Coordinator::Impl::TakeOver() {
  took_over = true;
  phase = Phase::kRunning;
  const std::vector<MemberInfo> membership = rejoined.begin()->second.membership;
  bool all_finished = true;  // every worker that rejoined had finished
  std::set<uint32_t> down, joined;
  std::vector<std::pair<uint32_t, uint32_t>> repairs;  // (dead, spare), in the order sent
  for (const auto& [ci, j] : rejoined) {
    Member& m = conns[ci];
    auto& slots = j.role == Role::kServer ? servers : workers;
    slots[j.index] = static_cast<int>(ci);
    m.registered = m.ready = true;
    // DecodeRejoin made sure the member's own membership lists it. (Named copies: clang 14
    // cannot capture a structured binding.)
    const Role role = j.role;
    const uint32_t index = j.index;
    m.info = *std::find_if(j.membership.begin(), j.membership.end(),
                           [&](const MemberInfo& i) { return i.role == role && i.index == index; });
    m.finished = j.finished;
    m.clock = j.clock;
    m.position = j.position;
    m.checkpoint_at = j.clock_checkpoint ? j.clock : 0;
    finished += j.role == Role::kWorker && j.finished;
    min_clock = std::max(min_clock, j.min_clock);
    if (j.role == Role::kWorker) all_finished = all_finished && j.finished;
    down.insert(j.servers_down.begin(), j.servers_down.end());
    // The coordinator sent every repair to everyone in one order: each member heard a prefix.
    if (j.repairs.size() > repairs.size()) repairs = j.repairs;
    joined.insert(j.joined.begin(), j.joined.end());
  }
  // The members that did not rejoin: lost with the primary's rank, or too late. (Every slot gets
  // one, even if the membership the members sent lacks it.)
  for (Role role : {Role::kServer, Role::kWorker}) {
    auto& slots = role == Role::kServer ? servers : workers;
    for (uint32_t index = 0; index < slots.size(); ++index) {
      if (slots[index] >= 0) continue;
      // A join slot no member names never joined (one that did and is missing is lost).
      const bool named = std::any_of(membership.begin(), membership.end(), [&](const auto& i) {
        return i.role == role && i.index == index;
      });
      const bool join_slot = role == Role::kServer ? IsJoinSlot(index) : IsWorkerJoinSlot(index);
      if (join_slot && !named) continue;
      Member lost;
      lost.registered = lost.ready = lost.gone = true;
      lost.info = {kPrimaryRank, role, index, "", "?", 0};
      for (const MemberInfo& i : membership) {
        if (i.role == role && i.index == index) lost.info = i;
      }
      slots[index] = static_cast<int>(conns.size());
      conns.push_back(lost);
    }
  }
  registered = ready = StartMembers();
  // kShutdown goes out once every worker finished, and a member that heard it leaves instead of
  // rejoining (ControlClient): when every worker that rejoined had finished, a member missing
  // from a rank other than the primary's heard it and left (the standby survives one failure,
  // rank 0's). The job is over: the rest hear kShutdown too.
  bool shutdown = false;
  for (const Member& m : conns) {
    shutdown =
        shutdown || (all_finished && m.gone && m.ep == nullptr && m.info.rank != kPrimaryRank);
  }
  const uint64_t ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - first_rejoin).count());
  std::fprintf(stderr,
               "ferry coordinator (rank %u) took over from rank %u: %zu of %zu members rejoined "
               "within %llu ms; the job's clock is %llu\n",
               own_rank, kPrimaryRank, rejoined.size(), membership.size(),
               static_cast<unsigned long long>(ms), static_cast<unsigned long long>(min_clock));
  const std::vector<uint32_t> down_list(down.begin(), down.end());
  const std::vector<uint32_t> joined_list(joined.begin(), joined.end());
  (void)chain.Replay(down_list, repairs, joined_list);
  for (uint32_t s : down) {
    if (s < servers.size() && servers[s] >= 0) conns[servers[s]].removed = true;
  }
  for (const auto& [dead, spare] : repairs) {
    if (!chain.dead(spare) && chain.joining(spare)) repairs_started[spare] = Clock::now();
  }
  // What a member missed of the repairs, in their order, then the joins.
  for (const auto& [ci, j] : rejoined) {
    for (size_t i = j.repairs.size(); i < repairs.size(); ++i) {
      ControlMessage r;
      r.kind = ControlKind::kChainRepair;
      r.index = repairs[i].first;
      r.value = repairs[i].second;
      Send(conns[ci].ep, r);
    }
    for (uint32_t spare : joined) {
      if (j.joined.count(spare) != 0) continue;
      ControlMessage r;
      r.kind = ControlKind::kChainJoined;
      r.index = spare;
      Send(conns[ci].ep, r);
    }
  }
  for (size_t w = 0; w < workers.size(); ++w) {
    if (workers[w] < 0) continue;  // a worker join slot that never joined
    Member& m = conns[workers[w]];
    if (!m.gone || m.finished) continue;
    if (shutdown) {  // it heard kShutdown and left before the primary died
      m.finished = true;
      ++finished;
      continue;
    }
    FailJob(&m, PeerFailure("did not rejoin the standby coordinator within " + std::to_string(ms) +
                            " ms of the primary's loss"));
    return;
  }
  for (size_t s = 0; s < servers.size(); ++s) {
    if (servers[s] < 0) continue;  // a join slot that never joined
    Member& m = conns[servers[s]];
    if (!m.gone || m.removed || shutdown) continue;
    const Status why =
        PeerFailure(m.info.rank == kPrimaryRank ? "lost with the coordinator's rank"
                                                : "did not rejoin the standby coordinator within " +
                                                      std::to_string(ms) + " ms");
    if (!RemoveServer(static_cast<uint32_t>(s), why)) return;  // the job failed
  }
  if (job.consistency.kind == Consistency::kBsp && !shutdown) {
    // The primary may have told some servers to apply the next clock: tell every one again.
    const ControlJournal* newest = nullptr;
    for (const auto& [ci, j] : rejoined) {
      if (j.role == Role::kServer && (newest == nullptr || j.apply_clock > newest->apply_clock)) {
        newest = &j;
      }
    }
    if (newest != nullptr && newest->apply_clock > min_clock) {
      applying = newest->apply_clock;
      ControlMessage a;
      a.kind = ControlKind::kApplyClock;
      a.value = applying;
      a.data = newest->apply_without;
      if (auto without = DecodeWorkerSet(a.data, static_cast<uint32_t>(workers.size()));
          without.ok()) {
        for (uint32_t w : *without) ++completed_without[w];
      }
      SendToRole(Role::kServer, a);
    }
  }
  AnnounceMinClock();  // some members may not have heard it
  RestoreBarriers();
  AdvanceClocks();
  ReleaseBarriers();
  MaybeShutdown();
  rejoined.clear();
  std::vector<std::pair<size_t, ControlMessage>> later = std::move(held);
  held.clear();
  for (auto& [ci, msg] : later) {
    if (phase != Phase::kRunning) break;
    OnMessage(ci, std::move(msg));
  }
}

void Coordinator::Impl::RestoreBarriers() {
  // Barrier ids count up per worker and every worker enters each: one released is behind a
  // release some worker heard, or behind a barrier some worker entered after it.
  uint64_t released = 0, entered = 0;
  for (const auto& [ci, j] : rejoined) {
    if (j.role != Role::kWorker) continue;
    released = std::max(released, j.barrier_released);
    entered = std::max(entered, j.barrier_sent);
  }
  for (const auto& [ci, j] : rejoined) {
    if (j.role != Role::kWorker || j.finished || j.barrier_sent <= j.barrier_released) continue;
    const uint64_t id = j.barrier_sent;
    if (id <= released || id < entered) {
      ControlMessage r;
      r.kind = ControlKind::kBarrierRelease;
      r.value = id;
      Send(conns[ci].ep, r);
    } else {
      ++barriers[id];
    }
  }
}

}  // namespace ferry::ps
