// Registration cache for local-access user ranges.
//
// Why it keeps the Transport promise ("destroying a MemoryRegion revokes its key"):
//   Only kAccessLocal registrations (send sources, receive targets, the local side of WRITE /
//   READ) are cached. Their MRs carry IBV_ACCESS_LOCAL_WRITE only, so an MR that outlives its
//   MemoryRegion grants a peer nothing. Remote-access regions keep their own MR, deregistered when
//   the region dies, so the HCA still refuses the old rkey (memory.cc, RegisterRegion).
//
// What is cached:
//   struct Entry {                  // one per ibv_mr
//     uint64_t start, end;          // page-aligned [start, end): the pages of the request
//     ibv_mr*  mr;                  // IBV_ACCESS_LOCAL_WRITE, registered over [start, end)
//     uint64_t refs;                // live VerbsMemoryRegions leasing it
//     bool     retainable;          // inside a published mapping (transport.h) when registered
//     bool     doomed;              // its mapping was withdrawn: never leased again
//   };
//   A request whose pages lie inside a non-doomed entry is a hit (no ibv_reg_mr, same lkey);
//   otherwise a miss registers its page-rounded range, charging the MemlockBudget.
//
// When an entry with refs == 0 (idle) may stay registered:
//   Only when Ferry will be told before its pages go away: the range lay inside a mapping
//   published with PublishShareableMapping (ShareableMemory, or a caller's own shareable mapping), whose
//   owners withdraw it before munmap/mremap. Withdrawal calls this cache (a MappingWithdrawn
//   listener): idle entries overlapping the mapping are deregistered, live ones are doomed and
//   deregistered on their last release. Memory outside published mappings (malloc, stacks, plain
//   mmap) is deregistered as soon as its last region dies, so free/munmap can never leave a
//   stale MR behind; it is still a hit while another region over the same pages is alive.
//   Idle entries are bounded by `max_idle_bytes` (params reg_cache_max_bytes, LRU eviction) and
//   evicted first when a registration would exceed the memlock limit or ibv_reg_mr fails.
//   Owners of published memory must not replace its pages in place (e.g. fallocate PUNCH_HOLE)
//   while it stays published: an idle entry would keep the old pages.
//
// Lifetime: created by VerbsTransport, shared with every region leasing an entry (so a region
// that outlives its transport — a contract violation — touches a live object, as the old
// MemoryRegion did with its own MR). Close() (transport destructor, before the PD is freed)
// deregisters idle entries and stops caching; later releases deregister at once.
//
// Thread-safety: every method may be called from any thread; one mutex guards the cache
// (registration is not on the data path). Lock order: listener mutex (transport.h) -> cache
// mutex -> published-mapping index mutex. Acquire blocks while ibv_reg_mr runs.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "transport/status.h"

namespace ferry::verbs {

class MemlockBudget;
class RegCache;
struct RegCacheEntry;

struct RegCacheStats {
  bool enabled = false;
  uint64_t hits = 0;           // requests served by an existing entry
  uint64_t misses = 0;         // requests that registered a new entry
  uint64_t evictions = 0;      // idle entries dropped for max_idle_bytes or the memlock limit
  uint64_t invalidations = 0;  // entries dropped or doomed because their mapping was withdrawn
  uint64_t idle_bytes = 0;
  uint64_t idle_entries = 0;
  uint64_t live_entries = 0;   // entries leased by at least one region
  uint64_t memlock_bytes = 0;  // everything the transport has pinned (MemlockBudget::used)
};

// One region's share of an entry. Move-only; destruction releases the entry.
class RegCacheLease {
 public:
  RegCacheLease() = default;
  RegCacheLease(std::shared_ptr<RegCache> cache, RegCacheEntry* entry);
  RegCacheLease(RegCacheLease&& o) noexcept
      : cache_(std::move(o.cache_)), entry_(std::exchange(o.entry_, nullptr)) {}
  RegCacheLease& operator=(RegCacheLease&& o) noexcept;
  RegCacheLease(const RegCacheLease&) = delete;
  RegCacheLease& operator=(const RegCacheLease&) = delete;
  ~RegCacheLease() { reset(); }

  void reset();
  ibv_mr* mr() const;
  explicit operator bool() const { return entry_ != nullptr; }

 private:
  std::shared_ptr<RegCache> cache_;
  RegCacheEntry* entry_ = nullptr;
};

class RegCache : public std::enable_shared_from_this<RegCache> {
 public:
  // `pd` and `budget` must outlive every registration made here (the transport's members).
  static std::shared_ptr<RegCache> Create(ibv_pd* pd, MemlockBudget* budget,
                                          uint64_t max_idle_bytes);
  ~RegCache();
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // A local-access registration covering [addr, addr+length) (checked non-empty by the caller).
  Result<RegCacheLease> Acquire(void* addr, size_t length);
  // Deregisters idle entries and stops caching. Idempotent.
  void Close();
  RegCacheStats stats() const;

 private:
  friend class RegCacheLease;
  struct State;
  RegCache(ibv_pd* pd, MemlockBudget* budget, uint64_t max_idle_bytes);
  void Release(RegCacheEntry* entry);
  void OnWithdrawn(const void* addr, size_t length);

  std::unique_ptr<State> state_;
  uint64_t listener_id_ = 0;
};

}  // namespace ferry::verbs
