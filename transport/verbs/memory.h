// Memory registration: user regions, the RLIMIT_MEMLOCK check, and the registered receive pool.
//
// Registration cache (reg_cache.h): local-access user regions lease a cached MR (refcounted,
// kept idle only inside published mappings, dropped when the mapping is withdrawn). Remote-access
// regions always get their own MR, deregistered when the region dies: the interface promises
// that destroying a MemoryRegion revokes its key ("later remote accesses with its key fail"),
// and the HCA enforces that only if the MR is gone. A local-only MR grants peers nothing, so
// keeping one alive past its region breaks no promise. Ferry's own buffers (receive pool,
// heartbeat word) are registered once per transport.
//
// Memlock: the kernel pins registered pages against RLIMIT_MEMLOCK (unless CAP_IPC_LOCK). Ferry
// checks the limit itself before every registration, counting everything this transport has
// pinned (idle cache entries included), so a low limit is a clear error naming `ulimit -l` /
// LimitMEMLOCK instead of an ENOMEM from deep inside ibv_reg_mr. (The check does not consult
// capabilities: it is conservative.)
//
// Thread-safety: MemlockBudget is atomic; regions are immutable after creation.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "transport/transport.h"
#include "transport/verbs/objects.h"
#include "transport/verbs/reg_cache.h"

namespace ferry::verbs {

class MemlockBudget {
 public:
  // Charges `bytes` (page-rounded) if the limit allows; otherwise an error naming `what`.
  Status Reserve(uint64_t bytes, std::string_view what);
  void Release(uint64_t bytes);
  uint64_t used() const { return used_.load(); }

 private:
  std::atomic<uint64_t> used_{0};
};

uint64_t PageRound(uint64_t bytes);

int IbvAccess(uint32_t access);

// A user region: either its own MR (remote access, or the cache off) or a lease on a cached
// local-access MR. Exactly one of mr_ / lease_ is set.
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  VerbsMemoryRegion(uint8_t* data, size_t size, uint32_t access, MemoryRegistration mr,
                    MemlockBudget* budget, uint64_t charged);
  VerbsMemoryRegion(uint8_t* data, size_t size, RegCacheLease lease);
  ~VerbsMemoryRegion() override;
  uint32_t lkey() const { return mr()->lkey; }
  ibv_pd* pd() const { return mr()->pd; }
  bool cached() const { return static_cast<bool>(lease_); }

 private:
  ibv_mr* mr() const { return mr_ ? mr_.get() : lease_.mr(); }
  void FillDescriptor();

  MemoryRegistration mr_;
  MemlockBudget* budget_ = nullptr;
  uint64_t charged_ = 0;
  RegCacheLease lease_;
};

// Charges `charged` bytes to `budget` and registers [addr, addr+length) with ibv `flags`; the
// charge is returned if the registration fails. Errors name `requested` (the caller's length).
Result<MemoryRegistration> PinAndRegister(ibv_pd* pd, MemlockBudget* budget, void* addr,
                                          size_t length, uint64_t charged, int flags,
                                          size_t requested);

// `cache` may be null (params reg_cache=off); only kAccessLocal registrations use it.
Result<std::unique_ptr<MemoryRegion>> RegisterRegion(ibv_pd* pd, MemlockBudget* budget,
                                                     RegCache* cache, void* addr, size_t length,
                                                     uint32_t access);

// Registered message buffers: `count` buffers of `size` bytes in one allocation and one MR.
// Layout: [buffer 0][buffer 1]...[buffer count-1], each `size` bytes, page-aligned base.
class RecvPool {
 public:
  RecvPool() = default;
  static Result<RecvPool> Create(ibv_pd* pd, MemlockBudget* budget, uint32_t count, uint32_t size);
  RecvPool(RecvPool&& o) noexcept { *this = std::move(o); }
  RecvPool& operator=(RecvPool&& o) noexcept;
  RecvPool(const RecvPool&) = delete;
  RecvPool& operator=(const RecvPool&) = delete;
  ~RecvPool();

  uint8_t* buffer(uint32_t i) const { return memory_.get() + static_cast<uint64_t>(i) * size_; }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t count() const { return count_; }
  uint32_t size() const { return size_; }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  // Memory before its registration: the MR is deregistered first on destruction.
  std::unique_ptr<uint8_t, FreeDeleter> memory_;
  MemoryRegistration mr_;
  MemlockBudget* budget_ = nullptr;
  uint64_t charged_ = 0;
  uint32_t count_ = 0;
  uint32_t size_ = 0;
};

}  // namespace ferry::verbs
