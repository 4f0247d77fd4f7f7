// The target-published region table: how the same-host engine (samehost.h) gets the
// target-side checks an HCA would apply.
//
// Every transport that may serve same-host peers keeps its live registrations in a small
// shared-memory table (memfd_create + mmap, sealed against shrinking and growing). A peer on the
// same host learns the table's fd number and a random token in the handshake, takes a duplicate
// of the fd with pidfd_open + pidfd_getfd (the same ptrace permission process_vm_writev needs)
// and maps it read-only. Before every CMA access (each segment of a sparse list) the initiator
// reads the target's entry for the descriptor's epoch and checks key digest, bounds and rights
// there, so a forged or stale descriptor is refused and no byte moves.
//
// Layout: a 64-byte header {magic, token, capacity} followed by `capacity` 64-byte entries.
// Capacity is fixed at creation (the ucx parameter "region_table_entries", default 16384):
// registering more live regions than that fails with kResourceExhausted, naming the parameter.
// Pages of the memfd are only allocated once touched, so a large capacity costs address space, not
// memory.
//
// Consistency: each entry has a sequence counter (a seqlock): the owner makes it odd, rewrites
// the fields, makes it even again. A reader copies the fields between two reads of the counter
// and retries when they differ or are odd, so it never acts on a torn entry. All fields are
// std::atomic<uint64_t> (lock-free, so valid in shared memory between processes).
//
// Deregistration (Remove) has finished rewriting the entry before it returns: any check that
// starts afterwards refuses the old epoch. A check that passed just before is the same hazard as
// an RDMA write already on the wire when an HCA deregisters: it may still land (CMA) until the
// memory is unmapped (then the kernel fails it with EFAULT).
//
// Threading: RegionTable is guarded by the owning transport's mutex; PeerRegionTable is
// read-only and may be used from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::samehost {

// FNV-1a over the packed rkey bytes: the "key" a descriptor must present (a registration's
// digest is published in the table and checked by the AM target; any edit of one byte changes
// it, and a random key matches with probability 2^-64).
uint64_t KeyDigest(std::span<const uint8_t> rkey);

// One live registration as a reader sees it.
struct RegionEntry {
  uint64_t epoch = 0;  // 0: free slot
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t key = 0;  // KeyDigest of the descriptor's rkey
  uint32_t access = 0;
  int32_t shm_fd = -1;      // the owner's fd of a memfd backing the region, or -1
  uint64_t shm_offset = 0;  // offset of addr inside that memfd
  uint64_t shm_inode = 0;   // its inode (the fd number alone could be reused meanwhile)
};

// The owner's side. Move-only; unmaps and closes on destruction.
class RegionTable {
 public:
  static constexpr uint32_t kDefaultCapacity = 16384;
  static constexpr uint32_t kMaxCapacity = 1u << 20;

  RegionTable() = default;
  ~RegionTable();
  RegionTable(RegionTable&& o) noexcept;
  RegionTable& operator=(RegionTable&& o) noexcept;
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  static Result<RegionTable> Create(uint32_t capacity);
  bool valid() const { return base_ != nullptr; }
  int fd() const { return fd_; }
  uint64_t token() const { return token_; }
  uint32_t capacity() const { return capacity_; }

  // Publishes `e` (e.epoch != 0) in a free slot; kResourceExhausted when all are live.
  Result<uint32_t> Add(const RegionEntry& e);
  // Clears a slot returned by Add; readers refuse its epoch once this returns.
  void Remove(uint32_t slot);

 private:
  void Reset();
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  int fd_ = -1;
  uint64_t token_ = 0;
  uint32_t capacity_ = 0;
  std::vector<uint32_t> free_;  // free slots, a min-heap
};

// A peer's table mapped read-only into this process. Move-only.
class PeerRegionTable {
 public:
  static constexpr uint32_t kNoSlot = ~0u;

  PeerRegionTable() = default;
  ~PeerRegionTable();
  PeerRegionTable(PeerRegionTable&& o) noexcept;
  PeerRegionTable& operator=(PeerRegionTable&& o) noexcept;
  PeerRegionTable(const PeerRegionTable&) = delete;
  PeerRegionTable& operator=(const PeerRegionTable&) = delete;

  // Duplicates fd `remote_fd` of process `pid` (pidfd_getfd), checks that it is a sealed table
  // carrying `token`, and maps it read-only.
  static Result<PeerRegionTable> Open(pid_t pid, int remote_fd, uint64_t token);
  bool valid() const { return base_ != nullptr; }

  // The slot currently holding `epoch`, or kNoSlot. O(capacity); done once per Import.
  uint32_t Find(uint64_t epoch) const;
  // A consistent copy of slot `slot`; false if out of range (or the owner keeps rewriting it).
  bool Read(uint32_t slot, RegionEntry* out) const;
  // The target's rule for one access through descriptor `desc` (its key digest `key`), found
  // at `slot`: the entry must still hold desc.epoch with the same key and address, and every
  // (remote_offset, length) must lie inside the registered range with the `needed` right.
  // Requires that `op` passed ValidateOp against `desc` (Post does that first): when the
  // registration is at least desc.length long, the segments are not visited again; otherwise
  // they go through common::CheckSegmentTable, the rule every software target applies.
  // Returns the entry on success. Errors: kStale (no such live registration), kPermissionDenied
  // (wrong key or right), kOutOfRange (bounds).
  Status Check(uint32_t slot, const RemoteRegion& desc, uint64_t key, uint32_t needed, const Op& op,
               RegionEntry* entry) const;

 private:
  void Reset();
  const uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t capacity_ = 0;
};

}  // namespace ferry::samehost
