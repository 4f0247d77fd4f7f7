// The shared-memory region table (see region_table.h for the contract).
#include "transport/samehost/region_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "transport/common/segment_check.h"
#include "transport/samehost/identity.h"

namespace ferry::samehost {
namespace {

constexpr uint64_t kMagic = 0x3162745279726566ull;  // "ferryTb1"

// Both layouts are made of lock-free 64-bit atomics only, so processes can share them.
struct SharedHeader {
  std::atomic<uint64_t> magic;
  std::atomic<uint64_t> token;
  std::atomic<uint64_t> capacity;
  std::atomic<uint64_t> high;  // slots at or above this were never used (bounds Find's scan)
  std::atomic<uint64_t> reserved[4];
};
struct SharedEntry {
  std::atomic<uint64_t> seq;  // odd while the owner rewrites the entry
  std::atomic<uint64_t> epoch;
  std::atomic<uint64_t> addr;
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> access_fd;  // access in the low 32 bits, shm fd (+1, 0: none) above
  std::atomic<uint64_t> shm_offset;
  std::atomic<uint64_t> shm_inode;
};
static_assert(sizeof(SharedHeader) == 64 && sizeof(SharedEntry) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr size_t kHeaderBytes = sizeof(SharedHeader);

size_t TableBytes(uint64_t capacity) {
  return kHeaderBytes + capacity * sizeof(SharedEntry);
}

SharedHeader* Header(uint8_t* base) {
  return reinterpret_cast<SharedHeader*>(base);
}
const SharedHeader* Header(const uint8_t* base) {
  return reinterpret_cast<const SharedHeader*>(base);
}
SharedEntry* Entry(uint8_t* base, uint32_t slot) {
  return reinterpret_cast<SharedEntry*>(base + kHeaderBytes) + slot;
}
const SharedEntry* Entry(const uint8_t* base, uint32_t slot) {
  return reinterpret_cast<const SharedEntry*>(base + kHeaderBytes) + slot;
}

// Seqlock without fences (ThreadSanitizer does not model atomic_thread_fence, and gcc refuses
// it under -Werror=tsan): every field store is a release store, so a reader whose acquire load
// sees a new field value also sees the odd sequence number stored before it, and its re-check
// of seq fails. On x86 release stores and acquire loads are plain moves: no cost.
void Store(SharedEntry* s, const RegionEntry& e) {
  constexpr auto kRel = std::memory_order_release;
  const uint64_t seq = s->seq.load(std::memory_order_relaxed);
  s->seq.store(seq + 1, std::memory_order_relaxed);
  s->epoch.store(e.epoch, kRel);
  s->addr.store(e.addr, kRel);
  s->length.store(e.length, kRel);
  s->key.store(e.key, kRel);
  const uint64_t fd_field = e.shm_fd >= 0 ? uint64_t(uint32_t(e.shm_fd)) + 1 : 0;
  s->access_fd.store(uint64_t{e.access} | (fd_field << 32), kRel);
  s->shm_offset.store(e.shm_offset, kRel);
  s->shm_inode.store(e.shm_inode, kRel);
  s->seq.store(seq + 2, kRel);
}

}  // namespace

uint64_t KeyDigest(std::span<const uint8_t> rkey) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : rkey) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- owner ----

RegionTable::~RegionTable() {
  Reset();
}

RegionTable::RegionTable(RegionTable&& o) noexcept {
  *this = std::move(o);
}

RegionTable& RegionTable::operator=(RegionTable&& o) noexcept {
  if (this != &o) {
    Reset();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    fd_ = std::exchange(o.fd_, -1);
    token_ = std::exchange(o.token_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    free_ = std::move(o.free_);
  }
  return *this;
}

void RegionTable::Reset() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  free_.clear();
}

Result<RegionTable> RegionTable::Create(uint32_t capacity) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    return InvalidArgument("region table: region_table_entries must be in [1, " +
                           std::to_string(kMaxCapacity) + "], got " + std::to_string(capacity));
  }
  RegionTable t;
  t.fd_ = memfd_create("ferry-ucx-regions", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (t.fd_ < 0) return IoError("memfd_create(region table)", errno);
  t.bytes_ = TableBytes(capacity);
  if (ftruncate(t.fd_, static_cast<off_t>(t.bytes_)) != 0) {
    return IoError("ftruncate(region table)", errno);
  }
  // Sealed: a reader's mapping can never lose its pages (no SIGBUS), whatever the owner does.
  if (fcntl(t.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return IoError("fcntl(F_ADD_SEALS, region table)", errno);
  }
  void* p = mmap(nullptr, t.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, t.fd_, 0);
  if (p == MAP_FAILED) return IoError("mmap(region table)", errno);
  t.base_ = static_cast<uint8_t*>(p);
  if (getrandom(&t.token_, sizeof(t.token_), 0) != sizeof(t.token_)) {
    return IoError("getrandom(region table token)", errno);
  }
  t.capacity_ = capacity;
  SharedHeader* h = Header(t.base_);
  h->token.store(t.token_, std::memory_order_relaxed);
  h->capacity.store(capacity, std::memory_order_relaxed);
  h->high.store(0, std::memory_order_relaxed);
  h->magic.store(kMagic, std::memory_order_release);
  t.free_.reserve(capacity);
  for (uint32_t i = 0; i < capacity; ++i) t.free_.push_back(i);  // ascending: a min-heap
  return t;
}

Result<uint32_t> RegionTable::Add(const RegionEntry& e) {
  if (free_.empty()) {
    return Status(Code::kResourceExhausted,
                  "the region table is full (" + std::to_string(capacity_) +
                      " live registrations; raise the parameter region_table_entries)");
  }
  // free_ is a min-heap: the lowest free slot is reused first, so readers' scans stay short.
  std::pop_heap(free_.begin(), free_.end(), std::greater<uint32_t>());
  const uint32_t slot = free_.back();
  free_.pop_back();
  Store(Entry(base_, slot), e);
  SharedHeader* h = Header(base_);
  if (slot >= h->high.load(std::memory_order_relaxed)) {
    h->high.store(slot + 1, std::memory_order_release);
  }
  return slot;
}

void RegionTable::Remove(uint32_t slot) {
  if (slot >= capacity_) return;
  Store(Entry(base_, slot), RegionEntry{});
  free_.push_back(slot);
  std::push_heap(free_.begin(), free_.end(), std::greater<uint32_t>());
}

// ---- reader ----

PeerRegionTable::~PeerRegionTable() {
  Reset();
}

PeerRegionTable::PeerRegionTable(PeerRegionTable&& o) noexcept {
  *this = std::move(o);
}

PeerRegionTable& PeerRegionTable::operator=(PeerRegionTable&& o) noexcept {
  if (this != &o) {
    Reset();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

void PeerRegionTable::Reset() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), bytes_);
  base_ = nullptr;
}

Result<PeerRegionTable> PeerRegionTable::Open(pid_t pid, int remote_fd, uint64_t token) {
  const std::string who = "region table of pid " + std::to_string(pid);
  if (remote_fd < 0) return InvalidArgument(who + ": the peer published none");
  FERRY_ASSIGN_OR_RETURN(common::UniqueFd fd, TakePeerFd(pid, remote_fd, who));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return IoError(who + ": fstat", errno);
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return ProtocolError(who + ": fd " + std::to_string(remote_fd) +
                         " is not a sealed region table");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes || (size - kHeaderBytes) % sizeof(SharedEntry) != 0 ||
      (size - kHeaderBytes) / sizeof(SharedEntry) > RegionTable::kMaxCapacity) {
    return ProtocolError(who + ": bad size " + std::to_string(size));
  }
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return IoError(who + ": mmap", errno);
  // The mapping keeps the memfd alive; fd closes here.
  PeerRegionTable t;
  t.base_ = static_cast<const uint8_t*>(p);
  t.bytes_ = size;
  t.capacity_ = static_cast<uint32_t>((size - kHeaderBytes) / sizeof(SharedEntry));
  const SharedHeader* h = Header(t.base_);
  if (h->magic.load(std::memory_order_acquire) != kMagic ||
      h->token.load(std::memory_order_relaxed) != token ||
      h->capacity.load(std::memory_order_relaxed) != t.capacity_) {
    return ProtocolError(who + ": fd " + std::to_string(remote_fd) +
                         " is not the table the peer announced (token mismatch)");
  }
  return t;
}

bool PeerRegionTable::Read(uint32_t slot, RegionEntry* out) const {
  if (base_ == nullptr || slot >= capacity_) return false;
  const SharedEntry* s = Entry(base_, slot);
  // The owner holds an entry odd only for a few stores; a reader that keeps losing the race is
  // racing a deregistration loop and may treat the slot as gone.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t seq = s->seq.load(std::memory_order_acquire);
    if (seq & 1) continue;
    constexpr auto kAcq = std::memory_order_acquire;  // pairs with Store()'s release stores
    RegionEntry e;
    e.epoch = s->epoch.load(kAcq);
    e.addr = s->addr.load(kAcq);
    e.length = s->length.load(kAcq);
    e.key = s->key.load(kAcq);
    const uint64_t af = s->access_fd.load(kAcq);
    e.shm_offset = s->shm_offset.load(kAcq);
    e.shm_inode = s->shm_inode.load(kAcq);
    if (s->seq.load(std::memory_order_relaxed) != seq) continue;
    e.access = static_cast<uint32_t>(af);
    const uint64_t fd_field = af >> 32;
    e.shm_fd = fd_field == 0 || fd_field > uint64_t{INT32_MAX} + 1
                   ? -1
                   : static_cast<int32_t>(fd_field - 1);
    *out = e;
    return true;
  }
  return false;
}

uint32_t PeerRegionTable::Find(uint64_t epoch) const {
  if (base_ == nullptr || epoch == 0) return kNoSlot;
  const uint64_t high =
      std::min<uint64_t>(Header(base_)->high.load(std::memory_order_acquire), capacity_);
  RegionEntry e;
  for (uint32_t i = 0; i < high; ++i) {
    if (Entry(base_, i)->epoch.load(std::memory_order_relaxed) != epoch) continue;
    if (Read(i, &e) && e.epoch == epoch) return i;
  }
  return kNoSlot;
}

Status PeerRegionTable::Check(uint32_t slot, const RemoteRegion& desc, uint64_t key,
                              uint32_t needed, const Op& op, RegionEntry* entry) const {
  RegionEntry e;
  if (!Read(slot, &e) || e.epoch == 0 || e.epoch != desc.epoch || e.addr != desc.addr) {
    return Stale(
        "the target has no current registration for this descriptor "
        "(deregistered or forged key)");
  }
  if (e.key != key) {
    return PermissionDenied("the target refuses the descriptor's key (wrong rkey)");
  }
  // When the registration is at least desc.length long at the same address, ValidateOp's
  // bounds (every segment inside desc.length) hold for it too: only the right is checked, and a
  // long sparse list is not walked again (the common case). Otherwise every segment is.
  const bool sparse = op.type == OpType::kSparseWrite || op.type == OpType::kSparseRead;
  const size_t count = desc.length <= e.length ? 0 : sparse ? op.num_segments : 1;
  FERRY_RETURN_IF_ERROR(common::CheckSegmentTable(
      count,
      [&](size_t i) {
        return sparse ? common::TargetSegment{op.segments[i].remote_offset, op.segments[i].length}
                      : common::TargetSegment{op.remote_offset, op.length};
      },
      e.length, e.access, needed));
  *entry = e;
  return Status::Ok();
}

}  // namespace ferry::samehost
