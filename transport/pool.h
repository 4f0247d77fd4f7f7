// RegisteredPool: message buffers carved from memory registered once with a Transport, so the data
// path never registers (registration costs a syscall and page pinning on verbs: tens of µs).
//
// Usage:
//   FERRY_ASSIGN_OR_RETURN(auto pool, ferry::RegisteredPool::Create(*transport, {}));
//   FERRY_ASSIGN_OR_RETURN(ferry::Buffer buf, pool->Allocate(4096));
//   std::memcpy(buf.data(), payload, n);
//   ferry::Op op;  op.type = ferry::OpType::kSend;  op.ep = ep;
//   op.local = buf.region();  op.local_offset = buf.offset();  op.length = n;
//   // keep `buf` alive until the Op's completion has been polled; destroying it frees the block.
//
// Layout: the pool maps big chunks (PoolOptions::chunk_bytes, optionally on huge pages) and
// registers each as ONE MemoryRegion, at creation (initial_bytes) and on growth. Blocks are
// powers of two from min_class to max_class bytes, naturally aligned inside their chunk (up to the
// page size), and each size class keeps its own free list; a block never changes class. Growth
// stops at max_bytes of registered memory: Allocate then fails with kResourceExhausted.
//
// Thread-safety: every method may be called from any thread; a Buffer may be destroyed on a thread
// other than the one that allocated it. Each size class has its own mutex (threads allocating
// different sizes never contend) and growth has another; no lock is held across a registration
// except the growth lock. Free lists live outside the registered memory, so a peer writing into a
// freed block (remote access) cannot corrupt the pool.
//
// Lifetimes: every Buffer must be destroyed before its pool, and the pool before its Transport
// (the pool's MemoryRegions belong to the Transport).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry {

struct PoolOptions {
  size_t chunk_bytes = 4u << 20;    // mapped and registered per growth step
  size_t initial_bytes = 4u << 20;  // registered by Create() (rounded up to whole chunks)
  size_t max_bytes = 256u << 20;    // registered bytes never exceed this
  size_t min_class = 64;            // smallest block (power of two, >= 8)
  size_t max_class = 1u << 20;      // largest block (power of two, <= chunk_bytes)
  uint32_t access = kAccessLocal;   // access bits of every chunk's registration
  // Map chunks with MAP_HUGETLB (2 MiB pages) when the system has reserved huge pages; otherwise
  // align them to 2 MiB and ask for transparent huge pages (madvise). chunk_bytes is then rounded
  // up to 2 MiB.
  bool huge_pages = false;
};

struct PoolStats {
  size_t registered_bytes = 0;  // sum of chunk sizes
  size_t chunks = 0;
  size_t hugetlb_chunks = 0;  // chunks actually backed by MAP_HUGETLB pages
  size_t buffers_in_use = 0;
  size_t bytes_in_use = 0;  // sum of capacities of live Buffers
};

class RegisteredPool;

// A block of registered memory. Move-only; destruction (or Reset) returns it to its pool.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  explicit operator bool() const { return data_ != nullptr; }
  // For ferry::Op: op.local = region(); op.local_offset = offset().
  const MemoryRegion* region() const { return region_; }
  uint64_t offset() const { return offset_; }
  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }  // >= the requested size
  std::span<uint8_t> span() const { return {data_, capacity_}; }

  // Returns the block to the pool now; the Buffer becomes empty.
  void Reset();

 private:
  friend class RegisteredPool;
  RegisteredPool* pool_ = nullptr;
  const MemoryRegion* region_ = nullptr;
  uint64_t offset_ = 0;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  uint32_t size_class_ = 0;
};

class RegisteredPool {
 public:
  // Validates `options`, maps and registers initial_bytes. `transport` must outlive the pool.
  static Result<std::unique_ptr<RegisteredPool>> Create(Transport& transport,
                                                        const PoolOptions& options);
  ~RegisteredPool();
  RegisteredPool(const RegisteredPool&) = delete;
  RegisteredPool& operator=(const RegisteredPool&) = delete;

  // A block of at least `size` bytes (1 <= size <= max_class). Grows the pool (map + register one
  // chunk, under the growth lock) when the size class is empty and the current chunk is used up.
  // kInvalidArgument for a size of 0 or above max_class; kResourceExhausted at max_bytes.
  Result<Buffer> Allocate(size_t size);

  // The registrations backing the pool (to advertise them, e.g. for remote writes into buffers).
  std::vector<const MemoryRegion*> regions() const;
  PoolStats stats() const;
  const PoolOptions& options() const { return options_; }

 private:
  struct Block {
    const MemoryRegion* region;
    uint64_t offset;
    uint8_t* data;
  };
  struct SizeClass {
    std::mutex mu;
    std::vector<Block> free;  // guarded by mu
    size_t carved = 0;        // blocks ever carved for this class; guarded by mu
    size_t in_use = 0;        // blocks handed out and not yet released; guarded by mu
  };
  struct Chunk;

  RegisteredPool(Transport& transport, const PoolOptions& options);
  Status GrowLocked();                           // requires grow_mu_
  size_t BuffersInUse() const;                   // takes each class lock in turn
  Result<Block> CarveSlab(uint32_t size_class);  // takes grow_mu_, then the class lock
  void Release(uint32_t size_class, const Block& block);
  friend class Buffer;

  Transport* transport_;
  PoolOptions options_;
  uint32_t min_shift_ = 0;
  // Index i holds blocks of min_class << i. The vector itself is fixed after Create().
  std::vector<std::unique_ptr<SizeClass>> classes_;

  mutable std::mutex grow_mu_;
  std::vector<std::unique_ptr<Chunk>> chunks_;  // guarded by grow_mu_
  size_t bump_ = 0;                             // next free byte in chunks_.back(); grow_mu_
  size_t registered_bytes_ = 0;                 // grow_mu_
  size_t hugetlb_chunks_ = 0;                   // grow_mu_
};

}  // namespace ferry
