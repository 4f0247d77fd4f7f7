// A server's eviction tick and table counters (server.h, docs/ps.md "Admission and eviction").
//
// The tick runs on the serving thread, between two rounds of the serve loop (ServeLoop calls
// RunEvictionTick once per round and sleeps no longer than it says), never inside a request:
// tables have a single writer, and a request sees a table either before or after a tick.
//
// Eviction of table t, when its TableSpec asks for it (evict_unseen_ticks, evict_score):
//   1. DrainTable(t)            no reply write is still reading rows about to be erased
//   2. BumpReuseGeneration(t)   one-sided readers holding slots learned before it fall back to
//                               requests (server_onesided.cc): an erased slot goes on the free
//                               list, whose link overwrites the key word with a slot number, and
//                               a later key may take the slot; a reader that checks only the key
//                               word could take the link (a small key) or a torn row for its own
//   3. EvictUnseen / EvictBelowScore, counted in TableStats::evicted
// Steps 1-2 run only when a scan finds victims (a tick that erases nothing leaves one-sided
// readers alone), so the table is scanned twice on such ticks: O(rows) without allocation for
// the first, the store's own pass for the second.
//
// Ticks are whole intervals of JobSpec::evict_tick since the server started serving. A loop that
// fell behind (a long request, a checkpoint copy) runs the ticks it missed as one AdvanceTick of
// that many, so ages and decays stay in wall-clock units.
#include <algorithm>

#include "ps/server/server.h"

namespace ferry::ps {

using Clock = std::chrono::steady_clock;  // as in server.cc (unity builds see both)

namespace {

bool TableTicks(const TableSpec& t) {
  return t.evict_unseen_ticks != 0 || t.evict_score > 0.0f || t.score_half_life > 0.0;
}

// Whether EvictTable would erase anything now (const scan, no allocation).
bool HasVictims(const ArrayHashMap& m, const TableSpec& spec) {
  bool found = false;
  m.ForEach([&](uint32_t, const uint8_t* row) {
    if (found) return;
    const RowMeta* meta = ArrayHashMap::Meta(row);
    found =
        (spec.evict_unseen_ticks != 0 && m.tick() - meta->last_seen > spec.evict_unseen_ticks) ||
        (spec.evict_score > 0.0f && m.DecayedScore(row) < spec.evict_score);
  });
  return found;
}

}  // namespace

Status Server::EvictTable(Table& t) {
  ArrayHashMap& m = *t.map;
  if (!HasVictims(m, t.spec)) return Status::Ok();
  FERRY_RETURN_IF_ERROR(DrainTable(t));
  BumpReuseGeneration(static_cast<size_t>(&t - tables_.data()));
  if (t.spec.evict_unseen_ticks != 0) {
    FERRY_ASSIGN_OR_RETURN(size_t n, m.EvictUnseen(t.spec.evict_unseen_ticks));
    t.counters.evicted += n;
  }
  if (t.spec.evict_score > 0.0f) {
    FERRY_ASSIGN_OR_RETURN(size_t n, m.EvictBelowScore(t.spec.evict_score));
    t.counters.evicted += n;
  }
  return Status::Ok();
}

Result<Millis> Server::RunEvictionTick() {
  const auto now = Clock::now();
  if (next_tick_ == Clock::time_point{}) {  // first call: start the clock
    ticking_ = std::any_of(tables_.begin(), tables_.end(),
                           [](const Table& t) { return TableTicks(t.spec); });
    next_tick_ = now + job_.evict_tick;
  }
  if (!ticking_) return Millis(1000);
  if (now >= next_tick_) {
    const auto behind = std::chrono::duration_cast<Millis>(now - next_tick_);
    const uint32_t ticks = 1 + static_cast<uint32_t>(behind / job_.evict_tick);
    next_tick_ += job_.evict_tick * ticks;
    for (Table& t : tables_) {
      if (!TableTicks(t.spec)) continue;
      t.map->AdvanceTick(ticks);
      // A chain replica evicts only what its head's records say (server_records.cc); its own
      // ticks keep its rows' ages for the day it heads the shard.
      if (FollowsRows(t)) continue;
      const bool leads = LeadsRows(t);
      if (leads) BeginRowLog(t);
      Status s = EvictTable(t);
      if (leads) EndRowLog(t, 0, 0, 0, 0);
      FERRY_RETURN_IF_ERROR(s.Annotate("evict table '" + t.spec.name + "'"));
    }
  }
  const auto left = std::chrono::ceil<Millis>(next_tick_ - Clock::now());
  return std::max(left, Millis(1));
}

void Server::SendTableStats(const ControlMessage& command, ControlClient* control) {
  ControlMessage done;
  done.kind = ControlKind::kCheckpointDone;
  done.value = command.value;
  done.value2 = kCheckpointStats;
  const size_t tables = job_.tables.size();
  done.table_stats.resize(tables);
  // The shards this server heads (its own; with replicas those it took over): every shard once,
  // primary copies only, as a checkpoint counts them.
  for (size_t i = 0; i < tables_.size(); ++i) {
    const Table& t = tables_[i];
    if (chain_.Head(t.shard) != static_cast<int>(index_)) continue;
    TableStats s = t.counters;
    s.live_rows = t.map->size();
    s.bytes_resident = t.map->rows_bytes() + t.map->index_bytes();
    done.table_stats[i % tables] += s;
  }
  (void)control->Send(done);
}

}  // namespace ferry::ps
