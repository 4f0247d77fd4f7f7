// The request path of a server: parse in place, resolve slots, apply (see server.h and
// protocol.h); the replies are server_replies.cc.
#include <algorithm>
#include <cstdio>

#include "ps/server/server.h"
#include "ps/store/optimizer.h"

namespace ferry::ps {

void Server::HandleNotify(uint32_t w, uint32_t imm) {
  Link& l = links_[w];
  if (l.failed) return;
  const uint64_t offset = uint64_t{imm} * kRequestAlign;
  std::span<const uint8_t> ring(rings_ + w * job_.staging_bytes, job_.staging_bytes);
  const RequestLimits limits{job_.staging_bytes, l.arena_bytes,
                             ReplySlotsBytes(job_.server_members(), job_.max_outstanding),
                             job_.max_keys_per_request};
  RequestView req;
  Status status = ParseRequest(ring, offset, shapes_, limits, &req);
  // Any framed request, well-formed or not, must carry the next seq: a bad request with a wrong
  // seq is a lost or repeated request all the same (its error reply would answer another seq).
  if (status.code() == Code::kProtocol || req.header.seq != l.next_seq) {
    if (status.code() != Code::kProtocol) {
      status = ProtocolError("request seq " + std::to_string(req.header.seq) + " arrived, " +
                             std::to_string(l.next_seq) + " expected (lost or repeated request)");
    }
    std::fprintf(stderr, "ferry server %u: closing worker %u: %s\n", index_, w,
                 status.ToString().c_str());
    l.ep->Close();
    FailWorker(w, status);
    return;
  }
  ++l.next_seq;
  if (status.ok()) status = HandleRequest(w, req);
  if (!status.ok()) {
    ++stats_.errors;
    Status r = SendRecord(w, req.header.seq, status);
    if (!r.ok()) FailWorker(w, r);
  }
}

Status Server::HandleRequest(uint32_t w, const RequestView& req) {
  const uint32_t shard = req.header.shard;
  const bool push = req.type() != RequestType::kPull;
  if (job_.elastic) {
    // Moves (server_moves.cc): the worker heard of a finish before this server did (wait for
    // it), or this server heads the shard no more, or drains it (answer kMoved: the worker
    // sends the request again once its chains are newer than the version named).
    if (shard < job_.num_shards() && chain_.Head(shard) != static_cast<int>(index_) &&
        chain_.Slot(index_, shard) >= 0) {
      FERRY_RETURN_IF_ERROR(AwaitControl(
          [&] {
            return chain_.Head(shard) == static_cast<int>(index_) || chain_.Slot(index_, shard) < 0;
          },
          [&] {
            return "a request for shard " + std::to_string(shard) + " reached server " +
                   std::to_string(index_) +
                   ", which does not head it, and no word from the coordinator made it the head";
          }));
    }
    std::optional<uint32_t> after;
    if (shard < job_.num_shards() && chain_.Slot(index_, shard) < 0 && chain_.version() > 0) {
      after = chain_.version() - 1;  // the worker must know of what this server knows
    } else if (push && draining_.count(shard) != 0) {
      after = chain_.version();  // the finish is still to come
    }
    if (after) {
      ++stats_.moved_replies;
      return SendRecord(w, req.header.seq, Status::Ok(), after);
    }
  }
  Table* t = TableFor(shard, req.header.table);
  if (t == nullptr) {
    return NotFound("shard " + std::to_string(shard) + " is not held by server " +
                    std::to_string(index_));
  }
  if (FollowsRows(*t)) {
    // The worker heard of a failover before this server did: wait for the word making it head.
    FERRY_RETURN_IF_ERROR(AwaitControl(
        [&] { return chain_.Head(shard) == static_cast<int>(index_); },
        [&] {
          return "a request for shard " + std::to_string(shard) + " reached server " +
                 std::to_string(index_) +
                 ", which does not head it, and no word from the coordinator made it the head";
        }));
  }
  const bool bsp = job_.consistency.kind == Consistency::kBsp;
  switch (req.type()) {
    case RequestType::kPull:
      ++stats_.pulls;
      stats_.keys_pulled += req.header.num_keys;
      return ReplyRows(w, req, *t);
    case RequestType::kPushPull:
      if (bsp) {
        return Unsupported(
            "push-pull under BSP: a push is applied only at the clock boundary; "
            "push, call Clock(), then pull");
      }
      ++stats_.push_pulls;
      stats_.keys_pulled += req.header.num_keys;
      [[fallthrough]];
    case RequestType::kPush: {
      if (req.type() == RequestType::kPush) ++stats_.pushes;
      stats_.keys_pushed += req.header.num_keys;
      // Applied (or, under BSP, staged: applied with every other worker's pushes of this clock
      // at the boundary; the ring bytes stay valid, the worker reuses them only after that
      // clock's update), forwarded down the chain with replicas, and answered once the chain's
      // tail has it (AcceptPush).
      Forward f;
      f.shard = t->shard;
      f.worker = w;
      f.TakePushFields(req.header);
      f.payload_at = w * job_.staging_bytes + req.offset + sizeof(RequestHeader);
      f.from_worker = true;
      f.type = req.type();
      f.from = w;
      f.from_seq = req.header.seq;
      f.from_offset = req.offset;
      return AcceptPush(std::move(f), req, -1);
    }
  }
  return Internal("unreachable request type");
}

namespace {

void WriteMirror(const ArrayHashMap& m, uint32_t mirror_offset, uint8_t* row) {
  const float* w = reinterpret_cast<const float*>(row + m.layout().embedding_offset);
  uint16_t* h = reinterpret_cast<uint16_t*>(row + mirror_offset);
  for (uint32_t i = 0; i < m.layout().dim; ++i) h[i] = FloatToHalf(w[i]);
}

}  // namespace

Status Server::ResolveSlots(Table& t, const uint64_t* keys, uint32_t n,
                            std::vector<uint32_t>* slots) {
  ArrayHashMap& m = *t.map;
  slots->resize(n);
  // Growth moves the rows buffer (mremap) and re-registers it: never with a reply in flight.
  // And only for keys the table lacks: growing for a request whose keys are all present (a
  // pull or push of known rows near capacity) would send every one-sided reader back to
  // requests for nothing (measured: with 6 servers, reads refused as stale after a pull that
  // created no row).
  const size_t room = (m.capacity() - m.high_water()) + m.free_slots();
  const bool bounded = t.spec.max_rows != 0;
  auto init = [&](uint64_t key, uint8_t* row) { InitRow(t, key, row); };
  const bool plain = !TableTracksSightings(t.spec);
  if (plain) {
    FERRY_RETURN_IF_ERROR(m.FindBatch(std::span<const uint64_t>(keys, n), *slots));
    // The absent keys (a push of new features) go in as one InsertBatch, whose prefetching
    // overlaps their index misses; a key repeated in the request is created once.
    absent_at_.clear();
    absent_keys_.clear();
    for (uint32_t i = 0; i < n; ++i) {
      if ((*slots)[i] != ArrayHashMap::kNoSlot) continue;
      absent_at_.push_back(i);
      absent_keys_.push_back(keys[i]);
    }
    if (absent_keys_.empty()) return Status::Ok();
    if (room < absent_keys_.size()) {  // growth moves no row: the slots found stay valid
      FERRY_RETURN_IF_ERROR(DrainTable(t));
      FERRY_RETURN_IF_ERROR(m.Reserve(std::max(2 * m.capacity(), m.size() + absent_keys_.size())));
    }
    absent_slots_.assign(absent_keys_.size(), ArrayHashMap::kNoSlot);
    absent_created_.assign(absent_keys_.size(), 0);
    const Status inserted = m.InsertBatch(absent_keys_, absent_slots_, absent_created_);
    // On an error the keys before it are in the table: their rows are initialised all the same.
    for (size_t j = 0; j < absent_keys_.size(); ++j) {
      if (absent_created_[j] != 0) init(absent_keys_[j], m.Row(absent_slots_[j]));
      (*slots)[absent_at_[j]] = absent_slots_[j];
    }
    return inserted;
  }
  // At the bound Access() may erase rows and hand their slots to other keys, but only to make
  // room for keys the table lacks: a request whose keys are all present (a push after a pull)
  // evicts nothing, and bumping for it would send every one-sided reader back to requests.
  size_t absent = 0;  // a repeated absent key counts twice: an over-estimate, never under
  if (room < n || (bounded && m.size() + n > t.spec.max_rows)) {
    for (uint32_t i = 0; i < n; ++i) absent += m.FindSlot(keys[i]) == ArrayHashMap::kNoSlot;
  }
  const bool may_evict = bounded && m.size() + absent > t.spec.max_rows;
  if (room < absent || may_evict) {
    FERRY_RETURN_IF_ERROR(DrainTable(t));
    // One-sided readers must see the bump before any slot changes hands (server_onesided.cc).
    if (may_evict) BumpReuseGeneration(static_cast<size_t>(&t - tables_.data()));
    if (room < absent && !bounded) {
      FERRY_RETURN_IF_ERROR(m.Reserve(std::max(2 * m.capacity(), m.size() + absent)));
    }
  }
  // Admission, a row bound or eviction: every sighting is recorded (last seen, scores,
  // count-min filter) and at the bound the table may evict; keys it refuses read as zeros (the
  // worker pre-zeroes their rows).
  // A software pipeline, as ArrayHashMap::FindBatch runs one: key i's home index group is
  // prefetched, key i - kDist's likely row (a tag match) too, and key i - 2 kDist is accessed
  // (its sighting written into the row's metadata), so the misses of 2 kDist keys overlap.
  constexpr uint32_t kDist = 8, kRing = 32;  // kRing: a power of two > 2 kDist
  uint32_t fp[kRing];
  for (uint32_t i = 0; i < n + 2 * kDist; ++i) {
    if (i < n) fp[i % kRing] = m.PrefetchKey(keys[i]);
    if (i >= kDist && i - kDist < n) m.PrefetchRow(fp[(i - kDist) % kRing]);
    if (i < 2 * kDist) continue;
    const uint32_t j = i - 2 * kDist;
    const size_t before = m.size();
    FERRY_ASSIGN_OR_RETURN(ArrayHashMap::Insertion ins, m.AccessWithFp(keys[j], fp[j % kRing]));
    if (ins.row != nullptr && ins.inserted) init(keys[j], ins.row);
    if (ins.row == nullptr) ++t.counters.refused;
    // Rows the bound evicted to make room for this one.
    t.counters.evicted += before + (ins.inserted ? 1 : 0) - m.size();
    (*slots)[j] = ins.row != nullptr ? ins.slot : ArrayHashMap::kNoSlot;
  }
  if (bounded) {
    // At the bound, Access() evicts to make room, possibly rows that earlier keys of this very
    // request just resolved, and hands their slots to later keys: keys[i] would then read or
    // update another key's row. A key whose row did not survive the batch reads as refused.
    for (uint32_t i = 0; i < n; ++i) {
      if ((*slots)[i] != ArrayHashMap::kNoSlot && m.FindSlot(keys[i]) != (*slots)[i]) {
        (*slots)[i] = ArrayHashMap::kNoSlot;
      }
    }
  }
  return Status::Ok();
}

void Server::InitRow(Table& t, uint64_t key, uint8_t* row) {
  ArrayHashMap& m = *t.map;
  InitWeights(t.spec.init, key, t.spec.dim, m.Embedding(row));
  InitState(t.spec.optimizer, t.spec.dim, m.State(row));
  if (t.mirror_offset != 0) WriteMirror(m, t.mirror_offset, row);
  ++stats_.rows_created;
  ++t.counters.admitted;
  if (logging_) {  // a chain head's decision (server_records.cc): evictions logged before it
    log_ops_.resize(log_keys_.size(), static_cast<uint8_t>(RowOp::kEvict));
    log_keys_.push_back(key);
    log_ops_.push_back(static_cast<uint8_t>(RowOp::kCreate));
  }
}

// The row kApplyAhead keys on, prefetched whole while key i is applied, when its slot is known
// already: the head's resolved push, or the current block of slots (a replica finds its rows
// one by one and prefetches nothing).
void Server::PrefetchAhead(const ArrayHashMap& m, bool leads, bool follows, uint32_t i,
                           uint32_t n) const {
  const uint32_t ahead = i + kApplyAhead;
  if (ahead >= n || follows) return;
  uint32_t slot;
  if (leads) {
    slot = push_slots_[ahead];
  } else if (ahead / kApplyBlock == i / kApplyBlock) {
    slot = slots_[ahead % kApplyBlock];
  } else {
    return;
  }
  if (slot != ArrayHashMap::kNoSlot) m.PrefetchRowForUpdate(slot);
}

Status Server::ApplyPush(Table& t, const RequestView& req, uint32_t worker) {
  ArrayHashMap& m = *t.map;
  const uint32_t n = req.header.num_keys;
  const uint32_t dim = t.spec.dim;
  const bool fp16 = (req.header.flags & kFlagFp16Grads) != 0;
  if (fp16) grad_scratch_.resize(dim);
  // With replicas, a table that tracks sightings: the head resolves the whole push first (its
  // creations and evictions go down the chain as one record, ahead of the push itself under
  // ASP, or as the order to apply it under BSP); a replica only updates the rows it has, which
  // are the head's.
  const bool leads = LeadsRows(t);
  const bool follows = !leads && FollowsRows(t);
  if (leads) {
    BeginRowLog(t);
    const Status resolved = ResolveSlots(t, req.keys, n, &push_slots_);
    const bool bsp = job_.consistency.kind == Consistency::kBsp;
    EndRowLog(t, bsp ? kForwardApplyStaged : 0, worker, req.header.push_id, req.header.clock);
    FERRY_RETURN_IF_ERROR(resolved);
  }
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t slot;
    if (leads) {
      slot = push_slots_[i];
    } else if (follows) {
      slot = m.FindSlot(req.keys[i]);
      if (slot != ArrayHashMap::kNoSlot) m.Touch(m.Row(slot));
    } else {
      if (i % kApplyBlock == 0) {
        FERRY_RETURN_IF_ERROR(ResolveSlots(t, req.keys + i, std::min(kApplyBlock, n - i), &slots_));
      }
      slot = slots_[i % kApplyBlock];
    }
    PrefetchAhead(m, leads, follows, i, n);
    if (slot == ArrayHashMap::kNoSlot) continue;
    uint8_t* row = m.Row(slot);
    const float* g;
    if (fp16) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(req.grads) + size_t{i} * dim;
      for (uint32_t d = 0; d < dim; ++d) grad_scratch_[d] = HalfToFloat(h[d]);
      g = grad_scratch_.data();
    } else {
      g = reinterpret_cast<const float*>(req.grads) + size_t{i} * dim;
    }
    ArrayHashMap::MarkUpdated(row);
    ApplyUpdate(t.spec.optimizer, dim, m.Embedding(row), m.State(row), g,
                ArrayHashMap::Meta(row)->update_count);
    if (t.mirror_offset != 0) WriteMirror(m, t.mirror_offset, row);
  }
  return Status::Ok();
}

}  // namespace ferry::ps
