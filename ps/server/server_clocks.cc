// BSP on a server (see server.h, docs/ps.md "Consistency"): pushes are staged as they arrive and
// applied at the clock boundary the coordinator names (kApplyClock), in worker order and then in
// each worker's push order; with backup workers the pushes of the workers a clock completed
// without are dropped, before the apply (here) or on arrival (AcceptPush).
#include <algorithm>
#include <cstdio>

#include "ps/server/server.h"

namespace ferry::ps {

bool Server::DroppedClock(uint32_t w, uint64_t clock) const {
  return dropped_clocks_[w].count(clock) != 0;
}

void Server::ForgetDroppedClocks(uint32_t w, uint64_t before) {
  std::set<uint64_t>& d = dropped_clocks_[w];
  d.erase(d.begin(), d.lower_bound(before));
}

Status Server::ApplyClock(uint64_t clock, std::span<const uint32_t> without) {
  // Every worker's staged pushes of clocks < `clock`, shard by shard, in worker order, then in
  // each worker's push order: the same order in every run, on every replica, and after a
  // failover (a push may have reached a new head twice; it was staged once). The coordinator
  // sends every server the same `without`, so every copy drops the same pushes, whether they
  // arrived before this (here) or after it (AcceptPush).
  const uint32_t workers = job_.worker_members();
  for (uint32_t w : without) dropped_clocks_[w].insert(clock - 1);
  for (uint32_t k = 0; k < slot_count_; ++k) {
    for (uint32_t w = 0; w < workers; ++w) {
      std::vector<Staged>& list = staged_[size_t{k} * workers + w];
      // Arrivals from the worker and from a predecessor interleave after a failover.
      if (!std::is_sorted(list.begin(), list.end(),
                          [](const Staged& a, const Staged& b) { return a.push_id < b.push_id; })) {
        std::stable_sort(list.begin(), list.end(),
                         [](const Staged& a, const Staged& b) { return a.push_id < b.push_id; });
      }
      size_t done = 0;
      std::vector<Staged> kept;  // a replica's pushes to tables whose head decides their rows
      while (done < list.size() && list[done].clock < clock) {
        const Staged staged = list[done++];
        if (DroppedClock(w, staged.clock)) {
          ++stats_.late_pushes_dropped;
          continue;
        }
        if (FollowsRows(tables_[size_t{k} * job_.tables.size() + staged.table])) {
          kept.push_back(staged);  // applied when the head's record says (server_records.cc)
          continue;
        }
        if (staged.pred < 0 && links_[w].failed) continue;  // a worker closed for a violation
        Status s = ApplyStaged(k, w, staged);
        if (s.code() == Code::kProtocol && staged.pred < 0) {
          // The ring is the worker's to write: a staged push may have been rewritten since it
          // was checked on arrival. That worker's protocol violation (close it, as HandleNotify
          // would), not a reason to stop serving everyone else.
          std::fprintf(stderr, "ferry server %u: closing worker %u: %s\n", index_, w,
                       s.ToString().c_str());
          links_[w].ep->Close();
          FailWorker(w, s);
          list.erase(std::remove_if(list.begin() + done, list.end(),
                                    [](const Staged& x) { return x.pred < 0; }),
                     list.end());
          continue;
        }
        FERRY_RETURN_IF_ERROR(s);
      }
      list.erase(list.begin(), list.begin() + done);
      list.insert(list.begin(), kept.begin(), kept.end());  // still in push_id order
    }
    // The replicas of this shard apply what they kept once they know the head applied it all.
    if (records_ && SlotHasRowRecords(k)) {
      for (size_t i = 0; i < job_.tables.size(); ++i) {
        Table& t = tables_[size_t{k} * job_.tables.size() + i];
        if (!LeadsRows(t)) continue;
        BeginRowLog(t);
        EndRowLog(t, kForwardClockDone, 0, 0, static_cast<uint32_t>(clock));
        break;
      }
    }
  }
  return Status::Ok();
}

Status Server::OnApplyClock(const ControlMessage& m, ControlClient* control) {
  Result<std::vector<uint32_t>> without = DecodeWorkerSet(m.data, job_.worker_members());
  if (!without.ok()) return without.status().Annotate("the coordinator's apply-clock");
  const bool again = m.value <= applied_clock_;
  if (!again) {
    applied_clock_ = m.value;
    FERRY_RETURN_IF_ERROR(ApplyClock(m.value, *without));
  }
  if (records_) {  // answered once the heads of the shards followed here applied it
    if (!again || pending_clock_ == m.value) {
      pending_clock_ = m.value;
      return MaybeAnswerClock();
    }
  }
  ControlMessage done;
  done.kind = ControlKind::kClockApplied;
  done.value = m.value;
  return control->Send(done);
}

Result<RequestView> Server::StagedPush(uint32_t w, const Staged& staged) const {
  RequestView req;
  if (staged.pred < 0) {
    const Link& l = links_[w];
    std::span<const uint8_t> ring(rings_ + w * job_.staging_bytes, job_.staging_bytes);
    RequestLimits limits{job_.staging_bytes, l.arena_bytes,
                         ReplySlotsBytes(job_.server_members(), job_.max_outstanding),
                         job_.max_keys_per_request};
    Status s = ParseRequest(ring, staged.offset, shapes_, limits, &req);
    if (s.ok() && req.type() != RequestType::kPush) {
      s = ProtocolError("it now reads as a " + std::string(RequestTypeName(req.type())) +
                        " request");
    }
    if (!s.ok()) {
      return ProtocolError("staged push at ring offset " + std::to_string(staged.offset) +
                           " was overwritten before its clock was applied: " + s.message());
    }
  } else {
    ForwardView fv;
    std::span<const uint8_t> ring(pred_rings_ + size_t(staged.pred - 1) * forward_ring_bytes_,
                                  forward_ring_bytes_);
    const ForwardLimits limits{forward_ring_bytes_, job_.max_keys_per_request,
                               job_.worker_members(), job_.num_shards(), MaxCopyRows()};
    FERRY_RETURN_IF_ERROR(ParseForward(ring, staged.offset, shapes_, limits, &fv));
    req = fv.push;
  }
  return req;
}

Status Server::ApplyStaged(uint32_t k, uint32_t w, const Staged& staged) {
  FERRY_ASSIGN_OR_RETURN(RequestView req, StagedPush(w, staged));
  return ApplyPush(tables_[size_t{k} * job_.tables.size() + req.header.table], req, w);
}

}  // namespace ferry::ps
