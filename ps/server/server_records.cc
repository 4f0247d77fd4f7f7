// Row records: chain replication of tables with admission, a max_rows bound or tick eviction
// (server.h, protocol.h "Row records", docs/ps.md "Replicas").
//
// Which keys have rows is decided from sightings (pulls reach the head only), scores (which
// count those pulls) and each server's own timer: replicas deciding for themselves would keep
// different rows. So only a chain's head decides. It logs every row it creates and every row it
// evicts (ArrayHashMap::set_eviction_log), in order, while it serves one request or runs one
// tick, and sends the log down the chain as a record, through the same forward ring as the
// pushes and so in its order with them:
//
//   head, ASP   push P:  resolve P's keys (admit, evict at the bound)  -> record R(P), then P
//   head, BSP   apply clock c, push P:  resolve + apply   -> record R(P) | kForwardApplyStaged
//               end of clock c for the shard              -> record      | kForwardClockDone
//   head        pull, or a tick that evicted              -> record
//   replica     R: erase and create exactly those keys (the initializer is a function of the
//               key: the head's bytes); a push (ASP on arrival, BSP when R(P) says so) updates
//               the rows it has and creates none; no admission filter, no bound, no eviction.
//
// A replica answers kApplyClock only once the head of every shard it follows sent that clock's
// kForwardClockDone: its staged pushes' bytes in the forward ring stay valid until then.
//
// Exactly once: the head numbers its records per shard (op_id 1, 2, ...); a member applies an
// op_id once (the numbers arrive in order along the chain; after a failover a predecessor
// re-sends what its dead successor had not acknowledged, and what was applied already is
// skipped), forwards it on and acknowledges it as it does a push. A member that becomes a head
// continues the numbering after the last record it applied, with its own scores: eviction order
// may drift from what the dead head would have chosen, but stays the same on every survivor.
#include <algorithm>
#include <cstdio>

#include "ps/server/server.h"

namespace ferry::ps {

const ArrayHashMap* Server::HostedTable(uint32_t shard, uint32_t t) const {
  if (t >= job_.tables.size()) return nullptr;
  for (size_t i = t; i < tables_.size(); i += job_.tables.size()) {
    if (tables_[i].shard == shard) return tables_[i].map.get();
  }
  return nullptr;
}

bool Server::LeadsRows(const Table& t) const {
  return records_ && TableTracksSightings(t.spec) &&
         chain_.Head(t.shard) == static_cast<int>(index_);
}

bool Server::FollowsRows(const Table& t) const {
  return records_ && TableTracksSightings(t.spec) &&
         chain_.Head(t.shard) != static_cast<int>(index_);
}

bool Server::SlotHasRowRecords(uint32_t k) const {
  const size_t tables = job_.tables.size();
  for (size_t i = 0; i < tables; ++i) {
    if (TableTracksSightings(tables_[size_t{k} * tables + i].spec)) return true;
  }
  return false;
}

void Server::BeginRowLog(Table& t) {
  log_keys_.clear();
  log_ops_.clear();
  logging_ = true;
  t.map->set_eviction_log(&log_keys_);
}

void Server::EndRowLog(Table& t, uint8_t flags, uint32_t worker, uint64_t push_id, uint32_t clock) {
  t.map->set_eviction_log(nullptr);
  logging_ = false;
  log_ops_.resize(log_keys_.size(), static_cast<uint8_t>(RowOp::kEvict));  // trailing evictions
  if (log_keys_.empty() && flags == 0) return;
  const int succ = chain_.Successor(t.shard, index_);
  if (succ < 0) return;  // the chain is this server alone now
  const uint32_t k = HostedSlot(t);
  // Records of at most RecordKeys() entries (a tick may evict many more rows); the flags go
  // with the last one.
  const size_t n = log_keys_.size();
  const size_t chunk = RecordKeys();
  size_t at = 0;
  do {
    const uint32_t m = static_cast<uint32_t>(std::min(chunk, n - at));
    const bool last = at + m == n;
    Forward f;
    f.shard = t.shard;
    f.table = static_cast<uint16_t>(static_cast<size_t>(&t - tables_.data()) % job_.tables.size());
    f.flags = kForwardRecord | (last ? flags : 0);
    f.worker = worker;
    f.push_id = push_id;
    f.clock = clock;
    f.num_keys = m;
    f.payload_bytes = RecordPayloadBytes(m);
    f.record.resize(f.payload_bytes);
    std::copy_n(reinterpret_cast<const uint8_t*>(log_keys_.data() + at), size_t{m} * 8,
                f.record.data());
    std::copy_n(log_ops_.data() + at, m, f.record.data() + size_t{m} * 8);
    f.op_id = ++last_op_[k];
    f.from_worker = false;
    f.from_self = true;
    ++stats_.records_sent;
    QueueForward(std::move(f), static_cast<uint32_t>(succ));
    at += m;
  } while (at < n);
  PostForwards(static_cast<uint32_t>(succ));
}

Status Server::ApplyRecord(uint32_t k, const ForwardView& fv) {
  const ForwardHeader& h = fv.header;
  if (h.op_id <= last_op_[k]) {
    ++stats_.duplicates;
    return Status::Ok();
  }
  last_op_[k] = h.op_id;
  ++stats_.records_applied;
  const size_t tables = job_.tables.size();
  Table& t = tables_[size_t{k} * tables + h.table];
  ArrayHashMap& m = *t.map;
  const uint32_t n = h.num_keys;
  bool evicts = false;
  size_t creates = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (fv.ops[i] == static_cast<uint8_t>(RowOp::kEvict)) {
      evicts = true;
    } else {
      ++creates;
    }
  }
  const size_t room = (m.capacity() - m.high_water()) + m.free_slots();
  // As ResolveSlots: no reply write may read rows that are erased or moved by growth, and
  // one-sided readers learn of the erasure first.
  if (evicts || room < creates) FERRY_RETURN_IF_ERROR(DrainTable(t));
  if (evicts) BumpReuseGeneration(static_cast<size_t>(&t - tables_.data()));
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t key = fv.push.keys[i];
    if (fv.ops[i] == static_cast<uint8_t>(RowOp::kEvict)) {
      if (m.Erase(key)) ++t.counters.evicted;
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(ArrayHashMap::Insertion ins, m.Insert(key));
    if (ins.inserted) InitRow(t, key, ins.row);
    m.Touch(ins.row);
  }
  const uint32_t workers = job_.worker_members();
  if ((h.flags & kForwardApplyStaged) != 0) {
    std::vector<Staged>& list = staged_[size_t{k} * workers + h.worker];
    auto it = std::find_if(list.begin(), list.end(),
                           [&](const Staged& s) { return s.push_id == h.push_id; });
    if (it == list.end()) {
      return Internal("the head applied push " + std::to_string(h.push_id) + " of worker " +
                      std::to_string(h.worker) + " to shard " + std::to_string(h.shard) +
                      ", which is not staged here");
    }
    const Staged staged = *it;
    list.erase(it);
    FERRY_RETURN_IF_ERROR(ApplyStaged(k, h.worker, staged));
  }
  if ((h.flags & kForwardClockDone) != 0) {
    clock_done_[k] = std::max<uint64_t>(clock_done_[k], h.clock);
    // What the head did not apply (a push of a worker it closed) is not applied here either.
    for (uint32_t w = 0; w < workers; ++w) {
      std::vector<Staged>& list = staged_[size_t{k} * workers + w];
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](const Staged& s) {
                                  return s.clock < h.clock &&
                                         TableTracksSightings(tables_[k * tables + s.table].spec);
                                }),
                 list.end());
    }
  }
  return Status::Ok();
}

Status Server::MaybeAnswerClock() {
  if (pending_clock_ == 0 || control_ == nullptr) return Status::Ok();
  const uint32_t slots = slot_count_;
  for (uint32_t k = 0; k < slots; ++k) {
    const uint32_t shard = tables_[size_t{k} * job_.tables.size()].shard;
    // A spare's slot it has not adopted follows no head (kNoShard).
    if (shard == kNoShard || chain_.Head(shard) == static_cast<int>(index_) ||
        !SlotHasRowRecords(k)) {
      continue;
    }
    if (clock_done_[k] < pending_clock_) return Status::Ok();
  }
  ControlMessage done;
  done.kind = ControlKind::kClockApplied;
  done.value = pending_clock_;
  pending_clock_ = 0;
  return control_->Send(done);
}

std::optional<ControlMessage> Server::NextControl(ControlClient* control) {
  if (early_control_.empty()) return control->TryReceive();
  ControlMessage m = std::move(early_control_.front());
  early_control_.pop_front();
  return m;
}

bool Server::ChainsQuiet() const {
  for (const auto& [j, d] : downstream_) {
    if (chain_.dead(j) || d.suspected) continue;  // nobody acknowledges there any more
    if (!d.queue.empty() || !d.inflight.empty()) return false;
  }
  // A predecessor that got kShutdown a little later may still send its last tick's records
  // (docs/ps.md "Shutdown").
  return std::chrono::steady_clock::now() - last_forward_at_ > std::chrono::milliseconds(100);
}

Status Server::AwaitControl(const std::function<bool()>& done,
                            const std::function<std::string()>& what) {
  const auto deadline = std::chrono::steady_clock::now() + job_.peer_timeout * 2;
  while (!done()) {
    if (control_ == nullptr || std::chrono::steady_clock::now() > deadline) return Timeout(what());
    auto m = control_->Receive(Millis(10));
    if (!m.ok()) {
      if (m.status().code() == Code::kTimeout) continue;
      return m.status();
    }
    Status s;
    if (m->kind == ControlKind::kServerDown) {
      s = HandleServerDown(m->index, m->text);
    } else if (m->kind == ControlKind::kChainRepair) {
      s = HandleChainRepair(m->index, static_cast<uint32_t>(m->value));
    } else if (m->kind == ControlKind::kMoveBegin || m->kind == ControlKind::kMoveFinish) {
      s = OnMoveControl(*m);
    } else {
      early_control_.push_back(std::move(m).value());
    }
    if (!s.ok()) {
      if (fatal_.ok()) fatal_ = s;  // e.g. this server was removed: the serve loop ends
      return s;
    }
  }
  return Status::Ok();
}

Status Server::TakeOverRows(uint32_t k) {
  if (!SlotHasRowRecords(k)) return Status::Ok();
  const size_t tables = job_.tables.size();
  std::fprintf(stderr, "ferry server %u: heads shard %u now; its rows are decided here\n", index_,
               tables_[size_t{k} * tables].shard);
  if (pending_clock_ == 0 || clock_done_[k] >= pending_clock_) return Status::Ok();
  // The dead head was applying a clock this server waits for: finish it as the head (pushes
  // it applied came as records and are no longer staged here).
  const uint32_t workers = job_.worker_members();
  for (uint32_t w = 0; w < workers; ++w) {
    std::vector<Staged>& list = staged_[size_t{k} * workers + w];
    std::stable_sort(list.begin(), list.end(),
                     [](const Staged& a, const Staged& b) { return a.push_id < b.push_id; });
    std::vector<Staged> rest;
    for (const Staged& s : list) {
      if (s.clock < pending_clock_ && TableTracksSightings(tables_[k * tables + s.table].spec)) {
        FERRY_RETURN_IF_ERROR(ApplyStaged(k, w, s));
      } else {
        rest.push_back(s);
      }
    }
    list.swap(rest);
  }
  for (size_t i = 0; i < tables; ++i) {
    Table& t = tables_[size_t{k} * tables + i];
    if (!LeadsRows(t)) continue;
    BeginRowLog(t);
    EndRowLog(t, kForwardClockDone, 0, 0, static_cast<uint32_t>(pending_clock_));
    break;
  }
  clock_done_[k] = pending_clock_;
  return Status::Ok();
}

}  // namespace ferry::ps
