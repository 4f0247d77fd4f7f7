// Registration cache: entries, leases, LRU of idle entries, invalidation on withdrawal.
// Contract and reasoning: reg_cache.h.
#include "transport/verbs/reg_cache.h"

#include <unistd.h>

#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "transport/transport.h"
#include "transport/verbs/memory.h"
#include "transport/verbs/objects.h"

namespace ferry::verbs {

struct RegCacheEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  MemoryRegistration mr;
  uint64_t refs = 0;
  bool retainable = false;
  bool doomed = false;                      // out of by_start: no lookup finds it
  std::list<RegCacheEntry*>::iterator lru;  // valid while idle (refs == 0, kept)
  uint64_t bytes() const { return end - start; }
};

// Everything below is guarded by `mu`.
//   by_start: lookup index of the entries that may still be leased (not doomed), by start
//             address. Entries may overlap ([0,8K) and [4K,12K) both exist if registered so).
//   max_len:  the longest entry ever indexed, bounding the backward scan of a lookup.
//   lru:      idle entries, most recently released first.
struct RegCache::State {
  std::mutex mu;
  ibv_pd* pd = nullptr;
  MemlockBudget* budget = nullptr;
  uint64_t max_idle_bytes = 0;
  bool closed = false;
  std::unordered_map<RegCacheEntry*, std::unique_ptr<RegCacheEntry>> owned;
  std::multimap<uint64_t, RegCacheEntry*> by_start;
  uint64_t max_len = 0;
  std::list<RegCacheEntry*> lru;
  RegCacheStats stats;

  void Unindex(RegCacheEntry* e) {
    auto [lo, hi] = by_start.equal_range(e->start);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == e) {
        by_start.erase(it);
        return;
      }
    }
  }
  void MakeBusy(RegCacheEntry* e) {  // idle -> leased
    lru.erase(e->lru);
    stats.idle_bytes -= e->bytes();
    --stats.idle_entries;
  }
  // Deregisters and frees an entry that is neither leased, idle-listed nor indexed.
  void Drop(RegCacheEntry* e) {
    const uint64_t bytes = e->bytes();
    e->mr.reset();
    budget->Release(bytes);
    owned.erase(e);
  }
  // Evicts idle entries, least recently used first, until idle bytes <= limit.
  void EvictTo(uint64_t limit) {
    while (stats.idle_bytes > limit && !lru.empty()) {
      RegCacheEntry* e = lru.back();
      MakeBusy(e);
      Unindex(e);
      ++stats.evictions;
      Drop(e);
    }
  }
  RegCacheEntry* Find(uint64_t start, uint64_t end) {
    // Candidates start at or before `start` and no earlier than end - max_len.
    auto it = by_start.upper_bound(start);
    while (it != by_start.begin()) {
      --it;
      RegCacheEntry* e = it->second;
      if (end - e->start > max_len) break;
      if (e->end >= end) return e;
    }
    return nullptr;
  }
};

RegCacheLease::RegCacheLease(std::shared_ptr<RegCache> cache, RegCacheEntry* entry)
    : cache_(std::move(cache)), entry_(entry) {}

RegCacheLease& RegCacheLease::operator=(RegCacheLease&& o) noexcept {
  if (this != &o) {
    reset();
    cache_ = std::move(o.cache_);
    entry_ = std::exchange(o.entry_, nullptr);
  }
  return *this;
}

void RegCacheLease::reset() {
  if (entry_ != nullptr) cache_->Release(std::exchange(entry_, nullptr));
  cache_.reset();
}

// The MR is immutable while leased: reading it needs no lock.
ibv_mr* RegCacheLease::mr() const {
  return entry_ == nullptr ? nullptr : entry_->mr.get();
}

RegCache::RegCache(ibv_pd* pd, MemlockBudget* budget, uint64_t max_idle_bytes)
    : state_(std::make_unique<State>()) {
  state_->pd = pd;
  state_->budget = budget;
  state_->max_idle_bytes = max_idle_bytes;
  state_->stats.enabled = true;
}

std::shared_ptr<RegCache> RegCache::Create(ibv_pd* pd, MemlockBudget* budget,
                                           uint64_t max_idle_bytes) {
  std::shared_ptr<RegCache> cache(new RegCache(pd, budget, max_idle_bytes));
  // Raw `this`: Close() (also run by the destructor) removes the listener before the cache
  // goes, and removal waits for a running call.
  RegCache* self = cache.get();
  cache->listener_id_ = AddMappingWithdrawnListener(
      [self](const void* addr, size_t length) { self->OnWithdrawn(addr, length); });
  return cache;
}

RegCache::~RegCache() {
  Close();
  // Every lease holds a reference, so none is left: `owned` holds idle entries only, and
  // Close() dropped those.
}

void RegCache::Close() {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    id = std::exchange(listener_id_, 0);
    state_->closed = true;
    state_->EvictTo(0);
  }
  // Outside our mutex: a running listener call holds the listener mutex and waits for ours.
  if (id != 0) RemoveMappingWithdrawnListener(id);
}

Result<RegCacheLease> RegCache::Acquire(void* addr, size_t length) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t a = reinterpret_cast<uintptr_t>(addr);
  const uint64_t start = a / page * page;
  const uint64_t end = (a + length + page - 1) / page * page;
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return Internal("RegisterMemory after the transport was destroyed");
  if (RegCacheEntry* e = s.Find(start, end)) {
    if (e->refs == 0) s.MakeBusy(e);
    ++e->refs;
    ++s.stats.hits;
    if (e->refs == 1) ++s.stats.live_entries;
    return RegCacheLease(shared_from_this(), e);
  }
  const uint64_t bytes = end - start;
  void* base = reinterpret_cast<void*>(start);
  auto pin = [&] {
    return PinAndRegister(s.pd, s.budget, base, bytes, bytes, IBV_ACCESS_LOCAL_WRITE, length);
  };
  Result<MemoryRegistration> mr = pin();
  if (!mr.ok() && !s.lru.empty()) {
    // Idle entries pin memory (memlock budget) and fill the HCA's MR/page tables while nobody
    // uses them: give them back before failing.
    s.EvictTo(0);
    mr = pin();
  }
  if (!mr.ok()) return mr.status();
  auto entry = std::make_unique<RegCacheEntry>();
  entry->start = start;
  entry->end = end;
  entry->mr = std::move(mr).value();
  // The page-rounded range, not the request: a later sub-range of the same mapping should hit.
  entry->retainable = FindShareableBacking(base, bytes).fd >= 0;
  entry->refs = 1;
  RegCacheEntry* e = entry.get();
  s.owned.emplace(e, std::move(entry));
  s.by_start.emplace(start, e);
  s.max_len = std::max(s.max_len, bytes);
  ++s.stats.misses;
  ++s.stats.live_entries;
  return RegCacheLease(shared_from_this(), e);
}

void RegCache::Release(RegCacheEntry* e) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (--e->refs > 0) return;
  --s.stats.live_entries;
  if (e->doomed || !e->retainable || s.closed || e->bytes() > s.max_idle_bytes) {
    if (!e->doomed) s.Unindex(e);
    s.Drop(e);
    return;
  }
  s.lru.push_front(e);
  e->lru = s.lru.begin();
  s.stats.idle_bytes += e->bytes();
  ++s.stats.idle_entries;
  s.EvictTo(s.max_idle_bytes);
}

void RegCache::OnWithdrawn(const void* addr, size_t length) {
  const uint64_t begin = reinterpret_cast<uintptr_t>(addr);
  const uint64_t end = begin + length;
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  // Overlapping entries start before `end` and no earlier than begin - max_len.
  auto it = s.by_start.lower_bound(begin > s.max_len ? begin - s.max_len : 0);
  while (it != s.by_start.end() && it->first < end) {
    RegCacheEntry* e = it->second;
    if (e->end <= begin) {
      ++it;
      continue;
    }
    it = s.by_start.erase(it);
    ++s.stats.invalidations;
    if (e->refs == 0) {
      s.MakeBusy(e);
      s.Drop(e);
    } else {
      e->doomed = true;  // a region still uses it; the last release deregisters it
    }
  }
}

RegCacheStats RegCache::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  RegCacheStats out = state_->stats;
  out.memlock_bytes = state_->budget->used();
  return out;
}

}  // namespace ferry::verbs
