// MappedBuffer: one contiguous, page-granular anonymous mapping that grows without copying.
//
// Two growth strategies (ArrayHashMap picks one per table, see docs/arrayhashmap.md):
//   kRemap   - mmap(PROT_READ|PROT_WRITE) and grow with mremap(MREMAP_MAYMOVE). The kernel moves
//              page-table entries, never bytes, so growth costs O(pages) and no row is copied;
//              the base address MAY change on every growth.
//   kReserve - mmap(PROT_NONE, reserve_bytes) up front and grow in place with mprotect. The base
//              address never changes (pointers into the buffer stay valid across growth); growth
//              past the reservation fails with kResourceExhausted.
// New bytes are always zero (fresh anonymous pages). Pages never written stay non-resident.
// With `huge_pages`, the mapping is advised MADV_HUGEPAGE (transparent huge pages in "madvise"
// mode): a random access into a multi-GiB rows buffer or index then costs one TLB entry per
// 2 MiB instead of per 4 KiB, which is most of a lookup's latency once the table outgrows the
// STLB. Resident memory then grows in 2 MiB steps.
//
// Shareable (kRemap only, `shareable` = true): the pages are a MAP_SHARED mapping of a memfd
// sealed against shrinking, published as shareable memory (transport.h) while mapped, so a
// backend that can (ucx over shared memory) lets same-host peers map the rows and copy directly.
// Growth extends the file (ftruncate) before the mremap; shrinking and Discard punch holes
// instead of truncating (the file never shrinks, so a peer's mapping never loses pages). The
// mapping is withdrawn from the index before every move and published again after it; as for
// any registered memory, the owner deregisters before a move and registers again after it.
// Huge pages are not used for shareable buffers (shmem THP is a system setting).
//
// Ownership: move-only; the destructor unmaps. Thread-safety: none (the owner serialises).
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/status.h"

namespace ferry::ps {

enum class GrowthMode : uint8_t { kRemap, kReserve };

class MappedBuffer {
 public:
  MappedBuffer() = default;
  ~MappedBuffer();
  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;

  // `bytes` accessible now (rounded up to pages, at least one page); kReserve also reserves
  // max(bytes, reserve_bytes) of address space.
  static Result<MappedBuffer> Create(GrowthMode mode, size_t bytes, size_t reserve_bytes = 0,
                                     bool huge_pages = false, bool shareable = false);

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }          // accessible bytes (page multiple)
  size_t reserved() const { return reserved_; }  // kReserve: address space held
  GrowthMode mode() const { return mode_; }
  int fd() const { return fd_; }  // shareable: the memfd; otherwise -1

  // Grows or shrinks the accessible part to RoundUpToPage(bytes). Content up to
  // min(old, new) is preserved; grown bytes are zero. kRemap may move data().
  Status Resize(size_t bytes);

  // Returns the pages fully inside [offset, offset+length) to the kernel (they read as zero).
  void Discard(size_t offset, size_t length);

  static size_t PageSize();
  static size_t RoundUpToPage(size_t bytes);

 private:
  void Release();
  void AdviseHuge();
  Status ResizeShareable(size_t size);
  // ThreadSanitizer builds only: growth through calls TSan intercepts (see Resize).
  Status GrowVisibly(size_t size);

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t reserved_ = 0;  // kRemap: equal to size_
  GrowthMode mode_ = GrowthMode::kRemap;
  bool huge_pages_ = false;
  int fd_ = -1;            // shareable: the memfd
  size_t file_bytes_ = 0;  // shareable: the memfd's size (never shrinks)
};

}  // namespace ferry::ps
