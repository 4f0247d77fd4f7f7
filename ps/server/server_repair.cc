// Repairs on the server (JobSpec::spares; chain.h "Repairs", protocol.h "Repairs"): a spare
// adopts a removed server's slots at the tail of their chains, and each chain's live tail (the
// source) copies it the shard.
//
// Exactly the source's rows, then exactly the pushes after them: on kChainRepair the source
// snapshots the shard's rows (whole rows: values and optimizer state) and queues them to the
// spare at once, in the same forward queue as every push it accepts later. Under BSP its staged
// pushes of the open clock follow as ordinary forwards (staged again on the spare), then the
// watermark: the push ids the rows and those pushes hold, per worker, which the spare merges
// into what it has seen, so a push re-sent after a failover is applied there once like anywhere
// else; with row records (server_records.cc) also the last record op_id applied and the last
// clock the head finished, so the head's records after the copy apply once and its clock-done
// words are not waited for twice. Then (below) the end marker. Pushes the source accepts after the
// snapshot are forwarded behind the copy (FIFO): the spare applies them on top of the rows they
// were accepted after. Until the spare acknowledged the watermark (it holds every row) the source
// stays the tail for acknowledgements (ForwardToJoining: the shard has had one copy fewer since
// the failover, and waiting for the copy would stall every push behind it); then acks wait for
// the spare again and the end marker follows the pushes answered early (EndCopy), so the spare
// joins holding every acknowledged push and applies a deferred BSP clock with all of its
// pushes. The spare heads nothing and keeps no shard alive before it joins. It defers
// kApplyClock until the last end marker, so a BSP clock completes only once the spare holds every
// shard it adopted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "ps/server/server.h"

namespace ferry::ps {
namespace {

// A copy forward of `shard` (its payload, if any, goes in `record`).
forwarding::Forward CopyForward(uint32_t shard, CopyKind kind) {
  forwarding::Forward f;
  f.shard = shard;
  f.flags = kForwardCopy;
  f.copy = static_cast<uint8_t>(kind);
  f.from_worker = false;
  f.from_self = true;  // nobody to answer: the spare's ack only frees the ring space
  return f;
}

}  // namespace

Status Server::HandleChainRepair(uint32_t dead, uint32_t spare) {
  if (!chain_.Join(dead, spare)) {
    return ProtocolError("the coordinator's repair of server " + std::to_string(dead) +
                         " by spare " + std::to_string(spare) + " does not apply here");
  }
  const size_t tables = job_.tables.size();
  if (spare == index_) {
    // The dead server's slots, laid out as ours: the same shards in the same slots.
    const auto hosted = chain_.Hosted(index_);
    for (uint32_t k = 0; k < hosted.size(); ++k) {
      for (size_t t = 0; t < tables; ++t) tables_[k * tables + t].shard = hosted[k];
    }
    copies_pending_ = static_cast<uint32_t>(hosted.size());
    repair_began_ = std::chrono::steady_clock::now();
    std::fprintf(stderr, "ferry server %u (spare): adopts server %u's %zu shards\n", index_, dead,
                 hosted.size());
    return Status::Ok();
  }
  for (uint32_t shard : chain_.Hosted(spare)) {
    if (chain_.Tail(shard) == static_cast<int>(index_))
      FERRY_RETURN_IF_ERROR(QueueCopy(shard, spare));
  }
  PostForwards(spare);
  return Status::Ok();
}

Status Server::ImportSpareLane(Downstream& d, uint32_t lane) {
  if (lane >= d.lanes.size() || lane >= d.spare_rings.size()) {
    return Internal("no forward ring " + std::to_string(lane) + " at the spare");
  }
  Lane& l = d.lanes[lane];
  if (l.ring != nullptr) return Status::Ok();
  const RemoteRegion& ring = d.spare_rings[lane];
  FERRY_ASSIGN_OR_RETURN(l.ring, d.ep->Import(ring));
  l.space = RangeAllocator(0, ring.length, kRequestAlign);
  return Status::Ok();
}

Status Server::QueueCopy(uint32_t shard, uint32_t spare) {
  const int k = chain_.Slot(index_, shard);
  const int lane = chain_.Slot(spare, shard);
  auto dit = downstream_.find(spare);
  if (k < 0 || lane < 0 || dit == downstream_.end()) {
    return Internal("server " + std::to_string(index_) + " cannot copy shard " +
                    std::to_string(shard) + " to server " + std::to_string(spare));
  }
  // A move's target (elastic jobs) takes the copy in the forward ring it keeps for this server.
  if (RepairSpare(spare)) {
    FERRY_RETURN_IF_ERROR(ImportSpareLane(dit->second, static_cast<uint32_t>(lane)));
  }
  const size_t tables = job_.tables.size();
  const auto began = std::chrono::steady_clock::now();
  const auto copy = [shard](CopyKind kind) { return CopyForward(shard, kind); };
  const auto queue = [&](Forward f) {
    f.payload_bytes = f.record.size();
    stats_.copy_bytes_sent += f.payload_bytes;
    QueueForward(std::move(f), spare);
  };
  // 1. The rows, whole, in chunks.
  uint64_t rows = 0;
  for (size_t t = 0; t < tables; ++t) {
    const ArrayHashMap& map = *tables_[static_cast<size_t>(k) * tables + t].map;
    const uint32_t stride = map.layout().stride;
    const uint32_t per = static_cast<uint32_t>(std::max<uint64_t>(1, CopyChunkBytes() / stride));
    Forward f = copy(CopyKind::kRows);
    f.table = static_cast<uint16_t>(t);
    f.dim = stride / 4;
    f.record.reserve(size_t{per} * stride);
    map.ForEach([&](uint32_t, const uint8_t* row) {
      f.record.insert(f.record.end(), row, row + stride);
      if (++f.num_keys == per) {
        Forward next = copy(CopyKind::kRows);
        next.table = f.table;
        next.dim = f.dim;
        queue(std::move(f));
        f = std::move(next);
      }
    });
    if (f.num_keys > 0) queue(std::move(f));
    rows += map.size();
  }
  // 2. BSP: the pushes staged here for the open clock, as they came (staged again there).
  const uint32_t workers = job_.worker_members();
  for (uint32_t w = 0; w < workers; ++w) {
    for (const Staged& st : staged_[static_cast<size_t>(k) * workers + w]) {
      FERRY_ASSIGN_OR_RETURN(RequestView req, StagedPush(w, st));
      Forward f;
      f.shard = shard;
      f.worker = w;
      f.TakePushFields(req.header);
      f.payload_at = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(req.keys) - rings_);
      f.from_worker = false;
      f.from_self = true;
      QueueForward(std::move(f), spare);
    }
  }
  // 3. The watermark: per worker, every push id seen here (upto, then the ids above it).
  Forward mark = copy(CopyKind::kWatermark);
  std::vector<uint64_t> words;
  for (uint32_t w = 0; w < workers; ++w) {
    const Seen& seen = seen_[static_cast<size_t>(k) * workers + w];
    words.push_back(seen.upto);
    words.push_back(seen.above.size());
    words.insert(words.end(), seen.above.begin(), seen.above.end());
  }
  if (words.size() * 8 > CopyChunkBytes()) {
    return ResourceExhausted("the watermark of shard " + std::to_string(shard) + " (" +
                             std::to_string(words.size()) + " push ids) exceeds a copy chunk");
  }
  // Row records (tables with admission or eviction): the last record applied here and the last
  // clock its head finished, so the spare skips what the rows hold and waits for no clock-done
  // that came before the copy.
  mark.op_id = last_op_[static_cast<size_t>(k)];
  mark.clock = static_cast<uint32_t>(clock_done_[static_cast<size_t>(k)]);
  mark.num_keys = static_cast<uint32_t>(words.size());
  mark.record.resize(words.size() * 8);
  std::memcpy(mark.record.data(), words.data(), mark.record.size());
  queue(std::move(mark));
  // 4. Until the spare acknowledges the watermark, pushes are answered here (ForwardToJoining);
  // then the end marker follows them (EndCopy).
  catching_up_.insert({spare, shard});
  stats_.copy_rows_sent += rows;
  const uint64_t ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began)
          .count());
  stats_.copy_snapshot_ns = std::max(stats_.copy_snapshot_ns, ns);
  std::fprintf(stderr, "ferry server %u: copies shard %u (%llu rows) to server %u\n", index_, shard,
               static_cast<unsigned long long>(rows), spare);
  return Status::Ok();
}

void Server::EndCopy(uint32_t spare, uint32_t shard) {
  if (catching_up_.erase({spare, shard}) == 0) return;
  QueueForward(CopyForward(shard, CopyKind::kEnd), spare);
  PostForwards(spare);
}

Status Server::ApplyCopy(const ForwardView& fv) {
  const ForwardHeader& h = fv.header;
  const int k = chain_.Slot(index_, h.shard);
  const bool moving = chain_.copying(h.shard, index_);  // a move's target
  if (k < 0 || (copies_pending_ == 0 && !moving)) {
    return ProtocolError("a copy of shard " + std::to_string(h.shard) +
                         " for a server that is not joining its chain");
  }
  const uint32_t workers = job_.worker_members();
  switch (static_cast<CopyKind>(h.reserved0)) {
    case CopyKind::kRows: {
      Table& t = tables_[static_cast<size_t>(k) * job_.tables.size() + h.table];
      const uint32_t stride = t.map->layout().stride;
      if (uint64_t{h.dim} * 4 != stride) {
        return ProtocolError("copied rows of " + std::to_string(h.dim * 4) +
                             " bytes for a table whose rows have " + std::to_string(stride));
      }
      for (uint32_t i = 0; i < h.num_keys; ++i) {
        const uint8_t* row = fv.payload + size_t{i} * stride;
        FERRY_ASSIGN_OR_RETURN(ArrayHashMap::Insertion ins,
                               t.map->Insert(ArrayHashMap::RowKey(row)));
        std::memcpy(ins.row, row, stride);  // key, meta, values and optimizer state
      }
      stats_.copy_rows_received += h.num_keys;
      return Status::Ok();
    }
    case CopyKind::kWatermark: {
      size_t at = 0;
      const auto word = [&](uint64_t* v) {
        if (at >= h.num_keys) return false;
        std::memcpy(v, fv.payload + at++ * 8, 8);
        return true;
      };
      for (uint32_t w = 0; w < workers; ++w) {
        uint64_t upto = 0, count = 0;
        if (!word(&upto) || !word(&count) || count > h.num_keys - at) {
          return ProtocolError("a watermark that ends inside worker " + std::to_string(w));
        }
        // Merged with what arrived since (the staged pushes, later forwards): the union.
        Seen& seen = seen_[static_cast<size_t>(k) * workers + w];
        if (upto > seen.upto) {
          seen.upto = upto;
          seen.above.erase(seen.above.begin(), seen.above.upper_bound(upto));
        }
        for (uint64_t i = 0; i < count; ++i) {
          uint64_t id = 0;
          (void)word(&id);
          if (id > seen.upto) seen.above.insert(id);
        }
        while (!seen.above.empty() && *seen.above.begin() == seen.upto + 1) {
          seen.upto = *seen.above.begin();
          seen.above.erase(seen.above.begin());
        }
      }
      if (at != h.num_keys) return ProtocolError("a watermark with words left over");
      last_op_[static_cast<size_t>(k)] = std::max(last_op_[static_cast<size_t>(k)], h.op_id);
      clock_done_[static_cast<size_t>(k)] =
          std::max<uint64_t>(clock_done_[static_cast<size_t>(k)], h.clock);
      return Status::Ok();
    }
    case CopyKind::kEnd:
      if (moving) return MoveCopied(h.shard);  // server_moves.cc
      if (--copies_pending_ > 0) return Status::Ok();
      return FinishJoin();
  }
  return ProtocolError("unknown copy kind");
}

Status Server::FinishJoin() {
  const auto now = std::chrono::steady_clock::now();
  stats_.join_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - repair_began_).count());
  stats_.joined_at_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  std::fprintf(stderr,
               "ferry server %u (spare): every adopted shard is copied (%llu rows, %.1f ms after "
               "the repair began)\n",
               index_, static_cast<unsigned long long>(stats_.copy_rows_received),
               static_cast<double>(stats_.join_ns) / 1e6);
  ControlMessage joined;
  joined.kind = ControlKind::kChainJoined;
  joined.index = index_;
  FERRY_RETURN_IF_ERROR(control_->Send(joined));
  if (!deferred_apply_) return Status::Ok();
  const ControlMessage apply = std::move(*deferred_apply_);
  deferred_apply_.reset();
  return OnApplyClock(apply, control_);
}

}  // namespace ferry::ps
