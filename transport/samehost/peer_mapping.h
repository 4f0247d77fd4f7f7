// PeerMapping: a peer's shareable region (transport/shareable.h) mapped into this process, so
// that the same-host engine moves rows with memcpy instead of process_vm_writev.
//
// Contract: move-only; unmaps on destruction. The mapping keeps the memfd's pages alive (the
// memfd is sealed against shrinking), so a copy through it never faults, whatever the owner does
// with its memory afterwards. Thread-safety: none (the owning key is guarded by its transport).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "transport/samehost/region_table.h"
#include "transport/status.h"

namespace ferry::samehost {

class PeerMapping {
 public:
  PeerMapping() = default;
  ~PeerMapping();
  PeerMapping(PeerMapping&& o) noexcept;
  PeerMapping& operator=(PeerMapping&& o) noexcept;
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;

  // Duplicates the memfd `e.shm_fd` of process `pid` (pidfd_getfd), checks that it is the inode
  // the entry names, sealed against shrinking and large enough, and maps the entry's range
  // (writable only if the entry grants remote writes).
  static Result<PeerMapping> Map(pid_t pid, const RegionEntry& e);
  // The byte at the region's offset 0.
  uint8_t* data() const { return data_; }
  uint64_t epoch() const { return epoch_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t epoch_ = 0;
};

}  // namespace ferry::samehost
