// Shareable memory: memory that a same-host peer may map directly, so that one-sided transfers
// between processes on one host become plain memory copies (the same-host engine,
// transport/samehost/, used by ucx; other backends ignore it). Part of the public interface:
// transport.h includes this header.
//
// It is a MAP_SHARED mapping of a memfd sealed against shrinking (F_SEAL_SHRINK, so a peer's
// mapping can never lose its pages). ferry::ShareableMemory allocates such
// memory (below; transport/pool.h includes this header); callers' own mappings can be made
// shareable the same way and published below.
//
// Owners publish each such mapping in a process-wide index while it exists; RegisterMemory of a
// backend that can use it looks the registered range up there (nothing else to pass). Rules for
// owners: publish after mapping, withdraw BEFORE unmapping, moving (mremap) or replacing pages of
// the mapping (hole punching; publish again afterwards), keep `fd` open while published.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "transport/status.h"

namespace ferry {

struct MemoryBacking {
  int fd = -1;          // -1: not shareable
  uint64_t offset = 0;  // offset of the queried address inside the memfd
};
// [addr, addr+length) is mapped MAP_SHARED from `fd` starting at `offset`.
void PublishShareableMapping(const void* addr, size_t length, int fd, uint64_t offset);
// Removes the mapping published at `addr` (no-op if none).
void WithdrawShareableMapping(const void* addr);
// The backing of [addr, addr+length) when one published mapping covers all of it.
MemoryBacking FindShareableBacking(const void* addr, size_t length);

// Listeners told when a published mapping is withdrawn, i.e. before its pages are unmapped or
// moved (a backend that keeps registrations of published memory alive drops them there).
// `fn(addr, length)` runs synchronously inside WithdrawShareableMapping, on the withdrawing thread,
// after the index's lock is released; calls are serialised. A listener must not publish, withdraw
// or add/remove listeners. After RemoveMappingWithdrawnListener returns, its listener is not
// running and is never called again. Thread-safe.
using MappingWithdrawnListener = std::function<void(const void* addr, size_t length)>;
uint64_t AddMappingWithdrawnListener(MappingWithdrawnListener fn);  // returns an id > 0
void RemoveMappingWithdrawnListener(uint64_t id);

// Shareable registrable memory (see above): a memfd of `length`
// bytes (rounded up to pages), sealed against shrinking, mapped MAP_SHARED read/write and
// published in the shareable-mapping index for its lifetime. Register it like any memory
// (Transport::RegisterMemory(data(), size(), ...)); destroy the registrations first.
// Move-only; the destructor withdraws, unmaps and closes. New bytes are zero.
class ShareableMemory {
 public:
  ShareableMemory() = default;
  ~ShareableMemory() { Reset(); }
  ShareableMemory(ShareableMemory&& other) noexcept { *this = std::move(other); }
  ShareableMemory& operator=(ShareableMemory&& other) noexcept;
  ShareableMemory(const ShareableMemory&) = delete;
  ShareableMemory& operator=(const ShareableMemory&) = delete;

  static Result<ShareableMemory> Allocate(size_t length);
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  void Reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace ferry
