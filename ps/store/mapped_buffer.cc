#include "ps/store/mapped_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "transport/transport.h"

namespace {

// mremap as a raw system call. A process that links UCX gets UCM's memory hooks, which patch
// libc's mremap; UCX 1.13's hook drops the fifth argument of MREMAP_FIXED, so the kernel sees a
// garbage destination and the move fails. This buffer deregisters and re-registers itself
// explicitly around every move, so UCM's notification is not needed here.
void* RawMremap(void* old_address, size_t old_size, size_t new_size, int flags,
                void* new_address = nullptr) {
  long r = syscall(SYS_mremap, old_address, old_size, new_size, flags, new_address);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}

}  // namespace

namespace ferry::ps {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;  // x86-64 PMD size
}  // namespace

size_t MappedBuffer::PageSize() {
  static const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return kPage;
}

size_t MappedBuffer::RoundUpToPage(size_t bytes) {
  const size_t page = PageSize();
  if (bytes == 0) return page;
  return (bytes + page - 1) / page * page;
}

MappedBuffer::~MappedBuffer() {
  Release();
}

MappedBuffer::MappedBuffer(MappedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      reserved_(std::exchange(other.reserved_, 0)),
      mode_(other.mode_),
      huge_pages_(other.huge_pages_),
      fd_(std::exchange(other.fd_, -1)),
      file_bytes_(std::exchange(other.file_bytes_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    reserved_ = std::exchange(other.reserved_, 0);
    mode_ = other.mode_;
    huge_pages_ = other.huge_pages_;
    fd_ = std::exchange(other.fd_, -1);
    file_bytes_ = std::exchange(other.file_bytes_, 0);
  }
  return *this;
}

void MappedBuffer::Release() {
  if (data_ != nullptr) {
    if (fd_ >= 0) ferry::WithdrawShareableMapping(data_);
    munmap(data_, reserved_);
  }
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = reserved_ = file_bytes_ = 0;
}

void MappedBuffer::AdviseHuge() {
  // Advisory only: without THP support the call fails and the buffer keeps 4 KiB pages.
  if (huge_pages_ && data_ != nullptr) madvise(data_, reserved_, MADV_HUGEPAGE);
}

Result<MappedBuffer> MappedBuffer::Create(GrowthMode mode, size_t bytes, size_t reserve_bytes,
                                          bool huge_pages, bool shareable) {
  MappedBuffer buf;
  buf.mode_ = mode;
  buf.huge_pages_ = huge_pages && !shareable;
  const size_t size = RoundUpToPage(bytes);
  if (shareable) {
    if (mode != GrowthMode::kRemap) {
      return InvalidArgument("MappedBuffer: shareable buffers grow with kRemap only");
    }
    buf.fd_ = memfd_create("ferry-rows", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (buf.fd_ < 0) return IoError("memfd_create", errno);
    if (ftruncate(buf.fd_, static_cast<off_t>(size)) != 0) {
      return IoError("ftruncate " + std::to_string(size) + " bytes", errno);
    }
    if (fcntl(buf.fd_, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return IoError("F_SEAL_SHRINK", errno);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, buf.fd_, 0);
    if (p == MAP_FAILED) return IoError("mmap " + std::to_string(size) + " bytes", errno);
    buf.data_ = static_cast<uint8_t*>(p);
    buf.size_ = buf.reserved_ = buf.file_bytes_ = size;
    ferry::PublishShareableMapping(buf.data_, buf.size_, buf.fd_, 0);
    return buf;
  }
  if (mode == GrowthMode::kRemap) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return IoError("mmap " + std::to_string(size) + " bytes", errno);
    buf.data_ = static_cast<uint8_t*>(p);
    buf.size_ = buf.reserved_ = size;
    buf.AdviseHuge();
    return buf;
  }
  const size_t reserve = RoundUpToPage(reserve_bytes > size ? reserve_bytes : size);
  // MAP_NORESERVE: address space only; commit charge comes with mprotect.
  void* p = mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return IoError("mmap PROT_NONE reservation of " + std::to_string(reserve) + " bytes", errno);
  }
  buf.data_ = static_cast<uint8_t*>(p);
  buf.reserved_ = reserve;
  if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0) {
    return IoError("mprotect " + std::to_string(size) + " bytes read/write", errno);
  }
  buf.size_ = size;
  buf.AdviseHuge();
  return buf;
}

Status MappedBuffer::Resize(size_t bytes) {
  if (data_ == nullptr) return Internal("MappedBuffer::Resize on an empty buffer");
  const size_t size = RoundUpToPage(bytes);
  if (size == size_) return Status::Ok();
#if defined(__SANITIZE_THREAD__)
  if (size > size_ && (fd_ >= 0 || mode_ == GrowthMode::kRemap)) return GrowVisibly(size);
#endif
  if (fd_ >= 0) return ResizeShareable(size);
  if (mode_ == GrowthMode::kRemap) {
    if (huge_pages_ && size > size_ && size >= kHugePage) {
      // Move to a 2 MiB-aligned destination: the kernel then moves whole PMDs (huge pages stay
      // huge) instead of splitting them into 4 KiB pages to fit an unaligned address.
      const size_t span = size + kHugePage;
      void* r = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (r != MAP_FAILED) {
        const uintptr_t base = reinterpret_cast<uintptr_t>(r);
        const uintptr_t aligned = (base + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
        // MREMAP_FIXED replaces our placeholder at [aligned, aligned+size); trim the rest.
        void* p = RawMremap(data_, size_, size, MREMAP_MAYMOVE | MREMAP_FIXED,
                            reinterpret_cast<void*>(aligned));
        if (p != MAP_FAILED) {
          if (aligned > base) munmap(r, aligned - base);
          const uintptr_t end = aligned + size;
          if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
          data_ = static_cast<uint8_t*>(p);
          size_ = reserved_ = size;
          AdviseHuge();
          return Status::Ok();
        }
        munmap(r, span);  // fall back to a plain move below
      }
    }
    // Shrinking never moves; growing moves page-table entries only (no byte is copied).
    void* p = RawMremap(data_, size_, size, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) {
      return IoError("mremap " + std::to_string(size_) + " -> " + std::to_string(size) + " bytes",
                     errno);
    }
    data_ = static_cast<uint8_t*>(p);
    size_ = reserved_ = size;
    AdviseHuge();  // a moved or extended mapping is a new VMA range
    return Status::Ok();
  }
  if (size > reserved_) {
    return ResourceExhausted("address-space reservation of " + std::to_string(reserved_) +
                             " bytes is exhausted (need " + std::to_string(size) +
                             "); raise the table's reserve");
  }
  if (size > size_) {
    if (mprotect(data_ + size_, size - size_, PROT_READ | PROT_WRITE) != 0) {
      return IoError("mprotect grow to " + std::to_string(size) + " bytes", errno);
    }
  } else {
    // Drop the pages so that a later growth reads zeros, then take the access away.
    madvise(data_ + size, size_ - size, MADV_DONTNEED);
    if (mprotect(data_ + size, size_ - size, PROT_NONE) != 0) {
      return IoError("mprotect shrink to " + std::to_string(size) + " bytes", errno);
    }
  }
  size_ = size;
  return Status::Ok();
}

Status MappedBuffer::ResizeShareable(size_t size) {
  if (size > file_bytes_) {
    // Extend the file first: the grown mapping must have pages behind it.
    if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return IoError("ftruncate grow to " + std::to_string(size) + " bytes", errno);
    }
    file_bytes_ = size;
  }
  ferry::WithdrawShareableMapping(data_);
  void* p = RawMremap(data_, size_, size, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) {
    const int err = errno;
    ferry::PublishShareableMapping(data_, size_, fd_, 0);
    return IoError("mremap " + std::to_string(size_) + " -> " + std::to_string(size) + " bytes",
                   err);
  }
  if (size < size_) {
    // The file keeps its size (sealed); the dropped tail's pages are freed and read as zero if
    // the buffer grows again.
    (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(size),
                    static_cast<off_t>(size_ - size));
  }
  data_ = static_cast<uint8_t*>(p);
  size_ = reserved_ = size;
  ferry::PublishShareableMapping(data_, size_, fd_, 0);
  return Status::Ok();
}

// ThreadSanitizer cannot see a raw mremap: the range a mapping moves to keeps the shadow state
// of whatever was mapped there before (often another thread's table, itself moved away by a raw
// mremap), so TSan reports races on memory no two threads ever shared. Under TSan, growth moves
// through intercepted calls instead: a new mapping (TSan resets its shadow), a copy or a second
// view of the same file, then munmap of the old range. The contract is the same (the address may
// change, the bytes stay); only the cost differs, which TSan runs do not measure.
Status MappedBuffer::GrowVisibly(size_t size) {
  void* p = MAP_FAILED;
  if (fd_ >= 0) {
    if (size > file_bytes_) {
      if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
        return IoError("ftruncate grow to " + std::to_string(size) + " bytes", errno);
      }
      file_bytes_ = size;
    }
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  } else {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (p == MAP_FAILED) {
    return IoError("mmap " + std::to_string(size) + " bytes (growth under TSan)", errno);
  }
  if (fd_ >= 0) {
    ferry::WithdrawShareableMapping(data_);
  } else {
    std::memcpy(p, data_, size_);
  }
  munmap(data_, size_);
  data_ = static_cast<uint8_t*>(p);
  size_ = reserved_ = size;
  if (fd_ >= 0) ferry::PublishShareableMapping(data_, size_, fd_, 0);
  return Status::Ok();
}

void MappedBuffer::Discard(size_t offset, size_t length) {
  const size_t page = PageSize();
  size_t begin = (offset + page - 1) / page * page;
  size_t end = (offset + length) / page * page;
  if (end > size_) end = size_;
  if (begin >= end) return;
  if (fd_ >= 0) {
    // MADV_DONTNEED would only drop our page-table entries of a shared mapping; the file's pages
    // must go (they read as zero afterwards, as anonymous memory does). Withdrawn around the
    // punch: the pages behind the published range change, and whoever cached something about
    // them (the verbs registration cache pins pages) must drop it.
    ferry::WithdrawShareableMapping(data_);
    (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(begin),
                    static_cast<off_t>(end - begin));
    ferry::PublishShareableMapping(data_, size_, fd_, 0);
    return;
  }
  madvise(data_ + begin, end - begin, MADV_DONTNEED);
}

}  // namespace ferry::ps
