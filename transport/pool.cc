// RegisteredPool implementation.
//
// Memory layout (one chunk = one mmap = one MemoryRegion):
//
//   struct Chunk {                       // chunk_bytes, page- or 2 MiB-aligned
//     uint8_t slab[k][slab_bytes];       // carved front to back by a bump pointer, on demand;
//   };                                   // each slab serves ONE size class
//   slab_bytes = min(max(class_bytes, 64 KiB), chunk_bytes)   (shrunk to what is left at a
//                                                              chunk's tail, if >= one block)
//
// A slab is split into blocks at once; the blocks go to the class's free list. Free lists are
// vectors of {region, offset, data} held outside registered memory, reserved to the number of
// blocks ever carved for the class, so Release() never allocates and cannot fail. Blocks are
// LIFO: a freed block is the next one handed out (its cache lines are warm).
//
// Lock order: a class mutex may be taken while grow_mu_ is held (GrowLocked counts buffers for
// its error message), never the reverse.
#include "transport/common/page.h"
#include "transport/pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cassert>
#include <cerrno>
#include <mutex>
#include <new>
#include <string>

namespace ferry {

namespace {

constexpr size_t kSlabBytes = 64u << 10;
constexpr size_t kHugePage = 2u << 20;

size_t RoundUp(size_t v, size_t align) {
  return (v + align - 1) / align * align;
}

using common::PageSize;

}  // namespace

// Destruction order: the registration is dropped before the mapping it covers is unmapped.
struct RegisteredPool::Chunk {
  uint8_t* base = nullptr;
  size_t mapped_bytes = 0;
  std::unique_ptr<MemoryRegion> region;

  Chunk() = default;
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
  ~Chunk() {
    region.reset();
    if (base != nullptr) munmap(base, mapped_bytes);
  }
};

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    region_ = other.region_;
    offset_ = other.offset_;
    data_ = other.data_;
    capacity_ = other.capacity_;
    size_class_ = other.size_class_;
    other.pool_ = nullptr;
    other.region_ = nullptr;
    other.offset_ = 0;
    other.data_ = nullptr;
    other.capacity_ = 0;
    other.size_class_ = 0;
  }
  return *this;
}

void Buffer::Reset() {
  if (pool_ == nullptr) return;
  pool_->Release(size_class_, {region_, offset_, data_});
  pool_ = nullptr;
  region_ = nullptr;
  offset_ = 0;
  data_ = nullptr;
  capacity_ = 0;
  size_class_ = 0;
}

RegisteredPool::RegisteredPool(Transport& transport, const PoolOptions& options)
    : transport_(&transport), options_(options) {}

RegisteredPool::~RegisteredPool() {
  // Contract (header): every Buffer dies before its pool. A live Buffer here would later write
  // into unmapped memory.
  assert(BuffersInUse() == 0 && "RegisteredPool destroyed with live Buffers");
}

Result<std::unique_ptr<RegisteredPool>> RegisteredPool::Create(Transport& transport,
                                                               const PoolOptions& options) {
  PoolOptions o = options;
  if (o.min_class < 8 || !std::has_single_bit(o.min_class)) {
    return InvalidArgument("PoolOptions::min_class must be a power of two >= 8, got " +
                           std::to_string(o.min_class));
  }
  if (o.max_class < o.min_class || !std::has_single_bit(o.max_class)) {
    return InvalidArgument("PoolOptions::max_class must be a power of two >= min_class, got " +
                           std::to_string(o.max_class));
  }
  if ((o.access & ~static_cast<uint32_t>(kAccessRemote)) != 0) {
    return InvalidArgument("PoolOptions::access has unknown bits");
  }
  o.chunk_bytes = RoundUp(o.chunk_bytes, o.huge_pages ? kHugePage : PageSize());
  if (o.chunk_bytes < o.max_class) {
    return InvalidArgument("PoolOptions::chunk_bytes (" + std::to_string(o.chunk_bytes) +
                           ") must be >= max_class (" + std::to_string(o.max_class) + ")");
  }
  if (o.max_bytes < o.chunk_bytes) {
    return InvalidArgument("PoolOptions::max_bytes (" + std::to_string(o.max_bytes) +
                           ") is smaller than one chunk (" + std::to_string(o.chunk_bytes) + ")");
  }
  if (o.initial_bytes > o.max_bytes) {
    return InvalidArgument("PoolOptions::initial_bytes exceeds max_bytes");
  }

  std::unique_ptr<RegisteredPool> pool(new RegisteredPool(transport, o));
  pool->min_shift_ = static_cast<uint32_t>(std::countr_zero(o.min_class));
  uint32_t classes = static_cast<uint32_t>(std::countr_zero(o.max_class)) - pool->min_shift_ + 1;
  for (uint32_t i = 0; i < classes; ++i) pool->classes_.push_back(std::make_unique<SizeClass>());

  std::lock_guard lock(pool->grow_mu_);
  while (pool->registered_bytes_ < o.initial_bytes) FERRY_RETURN_IF_ERROR(pool->GrowLocked());
  return pool;
}

Status RegisteredPool::GrowLocked() {
  const size_t len = options_.chunk_bytes;
  if (registered_bytes_ + len > options_.max_bytes) {
    return ResourceExhausted(
        "registered pool exhausted: growing by " + std::to_string(len) + " bytes would pass " +
        "PoolOptions::max_bytes=" + std::to_string(options_.max_bytes) + " (" +
        std::to_string(registered_bytes_) + " bytes registered in " +
        std::to_string(chunks_.size()) + " chunks, " + std::to_string(BuffersInUse()) +
        " buffers in use); free buffers or raise max_bytes");
  }
  auto chunk = std::make_unique<Chunk>();
  bool hugetlb = false;
  void* p = MAP_FAILED;
  if (options_.huge_pages) {
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1,
             0);
    hugetlb = p != MAP_FAILED;
  }
  if (p == MAP_FAILED) {
    // Without reserved huge pages: over-map by 2 MiB, trim to a 2 MiB-aligned window, and ask
    // for transparent huge pages there.
    const size_t extra = options_.huge_pages ? kHugePage : 0;
    p = mmap(nullptr, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return IoError("registered pool: mmap of " + std::to_string(len), errno);
    if (extra != 0) {
      auto raw = reinterpret_cast<uintptr_t>(p);
      uintptr_t aligned = RoundUp(raw, kHugePage);
      if (aligned > raw) munmap(p, aligned - raw);
      size_t tail = raw + len + extra - (aligned + len);
      if (tail > 0) munmap(reinterpret_cast<void*>(aligned + len), tail);
      p = reinterpret_cast<void*>(aligned);
      madvise(p, len, MADV_HUGEPAGE);  // advisory; THP may be disabled
    }
  }
  chunk->base = static_cast<uint8_t*>(p);
  chunk->mapped_bytes = len;
  auto region = transport_->RegisterMemory(chunk->base, len, options_.access);
  if (!region.ok()) return region.status().Annotate("registered pool: registering a chunk");
  chunk->region = std::move(region).value();
  try {
    chunks_.push_back(std::move(chunk));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("registered pool: out of memory for chunk bookkeeping");
  }
  registered_bytes_ += len;
  if (hugetlb) ++hugetlb_chunks_;
  bump_ = 0;
  return Status::Ok();
}

Result<RegisteredPool::Block> RegisteredPool::CarveSlab(uint32_t size_class) {
  const size_t block = options_.min_class << size_class;
  const size_t align = std::min(block, PageSize());
  size_t slab = std::min(std::max(block, kSlabBytes), options_.chunk_bytes);
  const MemoryRegion* region = nullptr;
  uint8_t* base = nullptr;
  size_t offset = 0;
  {
    std::lock_guard lock(grow_mu_);
    offset = RoundUp(bump_, align);
    if (chunks_.empty() || offset + block > options_.chunk_bytes) {
      FERRY_RETURN_IF_ERROR(GrowLocked());
      offset = 0;
    }
    // Use the chunk's tail for a smaller slab rather than wasting it.
    slab = std::min(slab, (options_.chunk_bytes - offset) / block * block);
    bump_ = offset + slab;
    region = chunks_.back()->region.get();
    base = chunks_.back()->base;
  }
  const size_t n = slab / block;
  SizeClass& sc = *classes_[size_class];
  std::lock_guard lock(sc.mu);
  try {
    // Capacity for every block ever carved: Release() then never reallocates.
    sc.free.reserve(sc.carved + n);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("registered pool: out of memory for a free list");
  }
  sc.carved += n;
  ++sc.in_use;  // block 0 goes to the caller
  // Highest address first, so pops hand blocks out in ascending order.
  for (size_t i = n; i-- > 1;) {
    size_t off = offset + i * block;
    sc.free.push_back({region, off, base + off});
  }
  return Block{region, offset, base + offset};
}

Result<Buffer> RegisteredPool::Allocate(size_t size) {
  if (size == 0 || size > options_.max_class) {
    return InvalidArgument("registered pool: cannot allocate " + std::to_string(size) +
                           " bytes (blocks are 1.." + std::to_string(options_.max_class) +
                           " bytes; raise PoolOptions::max_class for larger messages)");
  }
  uint32_t shift = static_cast<uint32_t>(std::bit_width(size - 1));
  uint32_t size_class = shift > min_shift_ ? shift - min_shift_ : 0;
  Block b{};
  bool found = false;
  {
    SizeClass& sc = *classes_[size_class];
    std::lock_guard lock(sc.mu);
    if (!sc.free.empty()) {
      b = sc.free.back();
      sc.free.pop_back();
      ++sc.in_use;
      found = true;
    }
  }
  if (!found) {
    FERRY_ASSIGN_OR_RETURN(b, CarveSlab(size_class));
  }
  Buffer buf;
  buf.pool_ = this;
  buf.region_ = b.region;
  buf.offset_ = b.offset;
  buf.data_ = b.data;
  buf.capacity_ = options_.min_class << size_class;
  buf.size_class_ = size_class;
  return buf;
}

void RegisteredPool::Release(uint32_t size_class, const Block& block) {
  SizeClass& sc = *classes_[size_class];
  std::lock_guard lock(sc.mu);
  sc.free.push_back(block);  // capacity reserved in CarveSlab: no allocation here
  --sc.in_use;
}

size_t RegisteredPool::BuffersInUse() const {
  size_t n = 0;
  for (const auto& sc : classes_) {
    std::lock_guard lock(sc->mu);
    n += sc->in_use;
  }
  return n;
}

std::vector<const MemoryRegion*> RegisteredPool::regions() const {
  std::lock_guard lock(grow_mu_);
  std::vector<const MemoryRegion*> out;
  out.reserve(chunks_.size());
  for (const auto& c : chunks_) out.push_back(c->region.get());
  return out;
}

PoolStats RegisteredPool::stats() const {
  PoolStats s;
  {
    std::lock_guard lock(grow_mu_);
    s.registered_bytes = registered_bytes_;
    s.chunks = chunks_.size();
    s.hugetlb_chunks = hugetlb_chunks_;
  }
  // Each class is read under its own lock: a consistent total only when no other thread is
  // allocating or freeing at the same time.
  for (size_t i = 0; i < classes_.size(); ++i) {
    std::lock_guard lock(classes_[i]->mu);
    s.buffers_in_use += classes_[i]->in_use;
    s.bytes_in_use += classes_[i]->in_use * (options_.min_class << i);
  }
  return s;
}

}  // namespace ferry
