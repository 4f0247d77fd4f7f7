#include "transport/verbs/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transport/verbs/errors.h"

namespace ferry::verbs {
namespace {

std::string KiB(uint64_t bytes) {
  return std::to_string(bytes / 1024) + " KiB";
}

}  // namespace

uint64_t PageRound(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

Status MemlockBudget::Reserve(uint64_t bytes, std::string_view what) {
  bytes = PageRound(bytes);
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return IoError("getrlimit(RLIMIT_MEMLOCK)", errno);
  uint64_t before = used_.fetch_add(bytes);
  if (lim.rlim_cur != RLIM_INFINITY && before + bytes > lim.rlim_cur) {
    used_.fetch_sub(bytes);
    return ResourceExhausted(
        "memlock limit is " + KiB(lim.rlim_cur) + " but " + std::string(what) + " needs " +
        KiB(bytes) + " more (" + KiB(before) + " already registered by this transport); " +
        "RDMA registration pins memory: raise the limit with `ulimit -l unlimited` "
        "(systemd: LimitMEMLOCK=infinity; containers: --ulimit memlock=-1)");
  }
  return Status::Ok();
}

void MemlockBudget::Release(uint64_t bytes) {
  used_.fetch_sub(PageRound(bytes));
}

int IbvAccess(uint32_t access) {
  // LOCAL_WRITE always: receive targets and READ destinations need it, and the HCA requires it
  // whenever REMOTE_WRITE is set.
  int flags = IBV_ACCESS_LOCAL_WRITE;
  if (access & kAccessRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
  if (access & kAccessRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE;
  return flags;
}

VerbsMemoryRegion::VerbsMemoryRegion(uint8_t* data, size_t size, uint32_t access,
                                     MemoryRegistration mr, MemlockBudget* budget, uint64_t charged)
    : MemoryRegion(data, size, access), mr_(std::move(mr)), budget_(budget), charged_(charged) {
  FillDescriptor();
}

VerbsMemoryRegion::VerbsMemoryRegion(uint8_t* data, size_t size, RegCacheLease lease)
    : MemoryRegion(data, size, kAccessLocal), lease_(std::move(lease)) {
  FillDescriptor();
}

void VerbsMemoryRegion::FillDescriptor() {
  descriptor_.addr = reinterpret_cast<uintptr_t>(data_);
  descriptor_.length = size_;
  descriptor_.access = access_;
  descriptor_.epoch = 0;
  const uint32_t rkey = mr()->rkey;
  descriptor_.rkey = {static_cast<uint8_t>(rkey), static_cast<uint8_t>(rkey >> 8),
                      static_cast<uint8_t>(rkey >> 16), static_cast<uint8_t>(rkey >> 24)};
}

VerbsMemoryRegion::~VerbsMemoryRegion() {
  if (mr_) {
    mr_.reset();
    budget_->Release(charged_);
  }
  // lease_ releases its entry on destruction; the cache decides whether the MR stays.
}

Result<MemoryRegistration> PinAndRegister(ibv_pd* pd, MemlockBudget* budget, void* addr,
                                          size_t length, uint64_t charged, int flags,
                                          size_t requested) {
  FERRY_RETURN_IF_ERROR(
      budget->Reserve(charged, "registering " + std::to_string(requested) + " bytes"));
  MemoryRegistration mr(ibv_reg_mr(pd, addr, length, flags));
  if (!mr) {
    const int err = errno;
    budget->Release(charged);
    return VerbsError("ibv_reg_mr(" + std::to_string(requested) + " bytes)", err);
  }
  return mr;
}

Result<std::unique_ptr<MemoryRegion>> RegisterRegion(ibv_pd* pd, MemlockBudget* budget,
                                                     RegCache* cache, void* addr, size_t length,
                                                     uint32_t access) {
  if (addr == nullptr || length == 0) {
    return InvalidArgument("RegisterMemory: empty range (address " +
                           std::to_string(reinterpret_cast<uintptr_t>(addr)) + ", length " +
                           std::to_string(length) + ")");
  }
  if ((access & ~static_cast<uint32_t>(kAccessRemote)) != 0) {
    return InvalidArgument("RegisterMemory: unknown access bits " + std::to_string(access));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t a = reinterpret_cast<uintptr_t>(addr);
  if (length > UINT64_MAX - page || a > UINT64_MAX - page - length) {
    return InvalidArgument("RegisterMemory: range at " +
                           std::to_string(reinterpret_cast<uintptr_t>(addr)) + " of " +
                           std::to_string(length) + " bytes wraps around the address space");
  }
  if (cache != nullptr && access == kAccessLocal) {
    FERRY_ASSIGN_OR_RETURN(RegCacheLease lease, cache->Acquire(addr, length));
    return std::unique_ptr<MemoryRegion>(
        new VerbsMemoryRegion(static_cast<uint8_t*>(addr), length, std::move(lease)));
  }
  // Pages touched: from the page containing addr to the one containing addr+length-1.
  const uint64_t start = reinterpret_cast<uintptr_t>(addr) / page * page;
  const uint64_t charged = PageRound(reinterpret_cast<uintptr_t>(addr) + length - start);
  FERRY_ASSIGN_OR_RETURN(MemoryRegistration mr, PinAndRegister(pd, budget, addr, length, charged,
                                                               IbvAccess(access), length));
  return std::unique_ptr<MemoryRegion>(new VerbsMemoryRegion(
      static_cast<uint8_t*>(addr), length, access, std::move(mr), budget, charged));
}

void RecvPool::FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

Result<RecvPool> RecvPool::Create(ibv_pd* pd, MemlockBudget* budget, uint32_t count,
                                  uint32_t size) {
  RecvPool pool;
  const uint64_t bytes = PageRound(static_cast<uint64_t>(count) * size);
  FERRY_RETURN_IF_ERROR(budget->Reserve(
      bytes, "the receive pool (" + std::to_string(count) + " x " + std::to_string(size) +
                 " bytes; params recv_buffers / recv_buffer_size)"));
  void* mem = nullptr;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (posix_memalign(&mem, page, bytes) != 0) {
    budget->Release(bytes);
    return ResourceExhausted("receive pool: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::memset(mem, 0, bytes);
  pool.memory_.reset(static_cast<uint8_t*>(mem));
  pool.budget_ = budget;
  pool.charged_ = bytes;
  pool.count_ = count;
  pool.size_ = size;
  pool.mr_ = MemoryRegistration(ibv_reg_mr(pd, mem, bytes, IBV_ACCESS_LOCAL_WRITE));
  if (!pool.mr_) return VerbsError("ibv_reg_mr(receive pool)", errno);
  return pool;
}

RecvPool& RecvPool::operator=(RecvPool&& o) noexcept {
  if (this != &o) {
    mr_.reset();
    if (budget_ != nullptr) budget_->Release(charged_);
    memory_ = std::move(o.memory_);
    mr_ = std::move(o.mr_);
    budget_ = std::exchange(o.budget_, nullptr);
    charged_ = std::exchange(o.charged_, 0);
    count_ = std::exchange(o.count_, 0);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

RecvPool::~RecvPool() {
  mr_.reset();
  if (budget_ != nullptr) budget_->Release(charged_);
}

}  // namespace ferry::verbs
