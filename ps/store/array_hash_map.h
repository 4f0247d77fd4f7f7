// ArrayHashMap: the parameter server's embedding store. Raw 64-bit feature ids map to
// fixed-width rows that live in ONE contiguous buffer, so a training kernel and a sparse
// transfer reach a row with one pointer and one length, and the rows buffer can be registered
// with the transport once and shipped without packing.
//
// Row layout (one table = one layout; stride is a multiple of 8; slot s is at rows + s*stride):
//
//   struct Row {                         // TableOptions::metadata == true
//     uint64_t key;                      //  0: the raw feature id
//     uint32_t update_count;             //  8: MarkUpdated() calls since insertion
//     uint32_t last_seen;                // 12: tick of the last Access()
//     float    score;                    // 16: decayed access count as of last_seen
//     uint32_t version;                  // 20: bumped by MarkUpdated(); travels with a pull
//     float    embedding[dim];           // 24: RowField::kEmbedding
//     float    state[state_floats];      //     optimizer state (FTRL z,n: 2*dim; Adagrad: dim)
//     uint8_t  pad[];                    //     up to the stride
//   };
//   // RowField::kVersionedEmbedding = {version, embedding} is contiguous (offset 20), so a
//   // pull can ship the version an asynchronous update needs with the weights in one segment.
//   // Without metadata: { uint64_t key; float embedding[dim]; float state[]; } (embedding at 8).
//
// Buffers (each its own mmap; see mapped_buffer.h and hash_index.h):
//   rows   [capacity_slots * stride]  grown x2 with mremap (kRemap) or mprotect (kReserve)
//   live   [capacity_slots / 8]       1 bit per slot; iteration walks it in slot order
//   index  [buckets * 5]              key -> slot: SSE2 tag groups + slot array, rebuilt in
//                                     place from the rows' keys when it grows
// Erased slots go on an intrusive free list (the next free slot is stored in the dead row's key
// word) and are reused before the table grows; Compact() fills the holes and shrinks.
//
// Zero-copy with the transport: AttachTransport() registers the rows buffer. Every operation that
// moves or resizes the rows (growth, Compact, restore) first destroys the old MemoryRegion
// (which drains target-side accesses), then remaps, then registers again and increments
// epoch(). descriptor() carries that epoch; a request naming an older epoch is refused by
// CheckEpoch() with Code::kStale, and a peer still using the old RemoteKey is refused by the
// transport (deregistered key): stale descriptors never read or write wrong bytes.
//
// Threading model: single writer per table. All mutating calls (Insert, Access, Erase,
// Reserve, Compact, Evict*, AttachTransport) must be serialised by the caller. Const calls
// (Find, RowSegments, ForEach, SaveSnapshot) may run concurrently with each other, but not with a
// mutation. Scale out with one table per shard and one thread per shard: ShardOf(key, n)
// spreads keys with hash bits independent of the ones the index uses.
//
// Errors: Status/Result; no exceptions; malformed snapshots are refused with Code::kProtocol.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ps/store/admission.h"
#include "ps/store/hash_index.h"
#include "ps/store/mapped_buffer.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::ps {

enum class Optimizer : uint8_t { kNone, kSgd, kAdagrad, kFtrl, kAdam };
// Optimizer state floats per row for an embedding of `dim` floats.
uint32_t OptimizerStateFloats(Optimizer optimizer, uint32_t dim);

struct TableOptions {
  uint32_t dim = 8;           // embedding floats
  uint32_t state_floats = 0;  // optimizer state floats (OptimizerStateFloats)
  bool metadata = true;       // version, update count, last-seen tick, score
  GrowthMode growth = GrowthMode::kRemap;
  size_t initial_rows = 1024;
  size_t reserve_rows = 1u << 20;  // kReserve: address space held for this many rows
  size_t max_rows = 0;             // capacity bound; 0 = unbounded
  double score_half_life = 0;      // ticks for the score to halve; 0 = no decay
  bool huge_pages = true;          // MADV_HUGEPAGE on rows and index (see mapped_buffer.h)
  // Rows in a memfd (MappedBuffer shareable, kRemap only): a same-host peer over the ucx
  // backend then maps them and moves sparse rows with memcpy instead of cross-memory attach
  // (docs/memory.md). Off by default: shared memory gets transparent huge pages only where
  // /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it ("never" on Debian), and
  // lookups pay TLB misses without them.
  bool shareable_rows = false;
  AdmissionOptions admission;
};

enum class RowField : uint8_t {
  kRow,                 // the whole row, key included
  kValue,               // everything after the key
  kEmbedding,           // float embedding[dim]
  kVersionedEmbedding,  // uint32 version + embedding (needs metadata)
  kState,               // optimizer state
};

struct FieldSpan {
  uint32_t offset = 0;
  uint32_t length = 0;
};

struct RowLayout {
  uint32_t dim = 0;
  uint32_t state_floats = 0;
  bool metadata = false;
  uint32_t stride = 0;
  uint32_t embedding_offset = 0;
  uint32_t state_offset = 0;

  static RowLayout For(uint32_t dim, uint32_t state_floats, bool metadata);
  // kVersionedEmbedding without metadata is an error.
  Result<FieldSpan> Field(RowField field) const;
};

struct RowMeta {  // at row + 8 when metadata is on
  uint32_t update_count;
  uint32_t last_seen;
  float score;
  uint32_t version;
};
static_assert(sizeof(RowMeta) == 16);

// A table's buffers copied at one instant (ArrayHashMap::CaptureSnapshot), written to a file
// later, from any thread, while the table goes on changing: asynchronous checkpoints. Move-only;
// owns the copy's memory, which the next capture into the same image reuses (a fresh buffer
// costs a page fault per 4 KiB: on the 2-core VM 0.5 s for 154 MiB, longer than the copy).
class SnapshotImage {
 public:
  // The file ArrayHashMap::SaveSnapshot would have written at the capture (same format,
  // checksums and atomic rename).
  Status WriteTo(const std::string& path) const;
  size_t bytes() const { return rows_ + live_ + index_; }

 private:
  friend class SnapshotIo;
  std::array<uint8_t, 160> header_{};
  MappedBuffer buffer_;  // rows, live bitmap, index, back to back
  size_t rows_ = 0, live_ = 0, index_ = 0;
};

class ArrayHashMap {
 public:
  static constexpr uint32_t kNoSlot = HashIndex::kNoSlot;

  static Result<std::unique_ptr<ArrayHashMap>> Create(const TableOptions& options);
  ~ArrayHashMap();
  ArrayHashMap(const ArrayHashMap&) = delete;
  ArrayHashMap& operator=(const ArrayHashMap&) = delete;

  const TableOptions& options() const { return options_; }
  const RowLayout& layout() const { return layout_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_slots_; }  // rows that fit without growth
  uint32_t high_water() const { return high_water_; }  // slots ever handed out
  size_t free_slots() const { return free_count_; }
  size_t index_bytes() const { return index_.bytes(); }
  const HashIndex& index() const { return index_; }  // for validation and profiling
  size_t rows_bytes() const { return rows_.size(); }
  uint64_t growths() const { return growths_; }

  // ---- Lookup (const; concurrent with other const calls) ----
  uint32_t FindSlot(uint64_t key) const {
    const uint8_t* rows = rows_.data();
    const size_t stride = layout_.stride;
    return index_.Find(key, [rows, stride](uint32_t slot) {
      uint64_t k;
      std::memcpy(&k, rows + static_cast<size_t>(slot) * stride, sizeof k);
      return k;
    });
  }
  // The row of `key` (stride bytes), or nullptr. Valid until the next mutation.
  uint8_t* Find(uint64_t key) {
    const uint32_t slot = FindSlot(key);
    return slot == kNoSlot ? nullptr : Row(slot);
  }
  const uint8_t* Find(uint64_t key) const {
    const uint32_t slot = FindSlot(key);
    return slot == kNoSlot ? nullptr : Row(slot);
  }
  // Batched lookup for training kernels (a pull or push resolves a batch of keys at once):
  // slots[i] = FindSlot(keys[i]), kNoSlot if absent. Software-pipelined: the home groups (tags
  // and slots) of keys 16 ahead are prefetched, then the rows their first tag matches name,
  // before the keys are resolved, so the cache misses of many keys overlap.
  // kInvalidArgument if the spans differ in length.
  Status FindBatch(std::span<const uint64_t> keys, std::span<uint32_t> slots) const;
  uint8_t* Row(uint32_t slot) { return rows_.data() + static_cast<size_t>(slot) * layout_.stride; }
  const uint8_t* Row(uint32_t slot) const {
    return rows_.data() + static_cast<size_t>(slot) * layout_.stride;
  }
  static uint64_t RowKey(const uint8_t* row) {
    uint64_t k;
    std::memcpy(&k, row, sizeof k);
    return k;
  }
  float* Embedding(uint8_t* row) const {
    return reinterpret_cast<float*>(row + layout_.embedding_offset);
  }
  float* State(uint8_t* row) const { return reinterpret_cast<float*>(row + layout_.state_offset); }
  static RowMeta* Meta(uint8_t* row) { return reinterpret_cast<RowMeta*>(row + 8); }
  static const RowMeta* Meta(const uint8_t* row) {
    return reinterpret_cast<const RowMeta*>(row + 8);
  }

  // ---- Mutation (single writer) ----
  struct Insertion {
    uint8_t* row = nullptr;  // nullptr: Access() did not admit the key
    uint32_t slot = kNoSlot;
    bool inserted = false;
  };
  // The row of `key`, created zeroed (but for the key) if absent. kResourceExhausted at the
  // max_rows bound. Never consults admission. One index probe serves both the lookup and the
  // insertion (HashIndex::FindForInsert).
  Result<Insertion> Insert(uint64_t key);
  // The training path: finds or (if admitted) inserts the row, records the sighting (last_seen
  // = tick, score += 1 after decay) and, at the max_rows bound, first evicts the lowest-scored
  // 1/16 of the rows. A key that is not admitted yields row == nullptr.
  Result<Insertion> Access(uint64_t key) { return AccessWithFp(key, HashIndex::Fingerprint(key)); }
  // Access() in a loop over many keys: PrefetchKey(key) a few keys ahead pulls the key's home
  // index group into the cache and returns the fingerprint AccessWithFp then takes, so the
  // lookups' cache misses overlap (as InsertBatch does).
  uint32_t PrefetchKey(uint64_t key) const { return index_.Prefetch(key); }
  // Then, once the group is in cache, the row of the first tag match (likely the key's).
  void PrefetchRow(uint32_t fp) const {
    const uint32_t slot = index_.PeekFp(fp);
    if (slot != kNoSlot) __builtin_prefetch(Row(slot), 1);
  }
  Result<Insertion> AccessWithFp(uint64_t key, uint32_t fp);
  // Every cache line of `slot`'s row, for writing: a push's update prefetches the rows a few
  // keys ahead of the one it applies, so their misses overlap the arithmetic (a lookup brings in
  // only the row's first line, where the key is).
  void PrefetchRowForUpdate(uint32_t slot) const {
    const uintptr_t row = reinterpret_cast<uintptr_t>(Row(slot));
    for (uintptr_t line = row & ~uintptr_t{63}; line < row + layout_.stride; line += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 1);
    }
  }
  // Bumps version and update_count (call after writing a row's weights). Needs metadata.
  static void MarkUpdated(uint8_t* row) {
    RowMeta* m = Meta(row);
    ++m->version;
    ++m->update_count;
  }
  // Insert() for a batch (a push of new keys): slots[i] = the slot of keys[i], inserted if
  // absent; if `inserted` is not empty, inserted[i] = 1 where keys[i] created its row (the first
  // of repeated keys only), else 0. The home groups of keys a block ahead are prefetched, so
  // their cache misses overlap instead of being paid one after another. Stops at the first error
  // (slots and flags of later keys are left unchanged); keys before it are inserted.
  // kInvalidArgument if the spans differ in length.
  Status InsertBatch(std::span<const uint64_t> keys, std::span<uint32_t> slots,
                     std::span<uint8_t> inserted = {});
  bool Erase(uint64_t key);
  // Room for `rows` rows without growth (rows buffer and index).
  Status Reserve(size_t rows);
  // Moves live rows from the top into holes, shrinks the rows buffer, re-registers (epoch+1).
  Status Compact();
  // Removes every key and discards the rows' pages, and starts admission afresh (no sightings,
  // tick 0): the table is as new. With a transport attached the rows are re-registered
  // (epoch+1; the old registration pinned the discarded pages). Fails only if that
  // registration fails (the table is empty and unregistered then).
  Status Clear();

  // Calls fn(slot, row) for every live row in slot order. fn must not mutate the table.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    const uint64_t* live = reinterpret_cast<const uint64_t*>(live_.data());
    const size_t words = (static_cast<size_t>(high_water_) + 63) / 64;
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t bits = live[w]; bits != 0; bits &= bits - 1) {
        const uint32_t slot =
            static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        fn(slot, Row(slot));
      }
    }
  }

  // ---- Ticks, scores, eviction (need metadata) ----
  uint32_t tick() const { return tick_; }
  void AdvanceTick(uint32_t ticks = 1) { tick_ += ticks; }
  float DecayedScore(const uint8_t* row) const;
  // Erases rows not seen for more than max_age ticks. Returns how many.
  Result<size_t> EvictUnseen(uint32_t max_age);
  // Erases rows whose decayed score is below threshold.
  Result<size_t> EvictBelowScore(float threshold);
  // Erases the lowest-scored rows until size() <= target.
  Result<size_t> EvictToCapacity(size_t target);
  // Records a sighting of a present row without admission (last_seen = tick, score += 1 after
  // decay): a chain replica's push, which follows its head's decisions instead of taking its
  // own. Needs metadata (a no-op without).
  void Touch(uint8_t* row);
  // When set, every key an eviction erases (EvictUnseen, EvictBelowScore, EvictToCapacity, and
  // so Access() at the max_rows bound) is appended to *log in erase order; nullptr (the
  // default) records nothing. A chain's head sends these down the chain (server_replication.cc).
  void set_eviction_log(std::vector<uint64_t>* log) { eviction_log_ = log; }
  const CountMinFilter& filter() const { return filter_; }

  // ---- Transport ----
  // Registers the rows buffer (and every later incarnation of it) with `transport`, which must
  // outlive the table or be detached first.
  Status AttachTransport(Transport* transport, uint32_t access);
  void DetachTransport();
  const MemoryRegion* region() const { return region_.get(); }
  // The registration's descriptor with the table's epoch filled in.
  const RemoteRegion& descriptor() const { return descriptor_; }
  uint64_t epoch() const { return epoch_; }
  // Ok if `epoch` names the current registration; kStale otherwise.
  Status CheckEpoch(uint64_t epoch) const;
  // RowSegments: the transfer segments that move `field` of keys' rows to row i of a remote
  // array: for keys[i] present, appends a Segment {local_offset = slot*stride + field offset,
  // remote_offset = remote_base + i*remote_stride, length = field length}; adjacent segments
  // contiguous on both sides are merged. Indices of absent keys go to *missing (may be null).
  // Lookups only (Find): a server's replies resolve slots with admission first
  // (server_requests.cc ReplyRows) and merge their segments the same way.
  Status RowSegments(std::span<const uint64_t> keys, RowField field, uint64_t remote_base,
                     uint64_t remote_stride, std::vector<Segment>* segments,
                     std::vector<size_t>* missing) const;

  // ---- Snapshots (snapshot.cc) ----
  // Writes header + rows + live bitmap + index to `path`.tmp with xxh3 checksums, fsyncs, and
  // renames it over `path` atomically.
  Status SaveSnapshot(const std::string& path) const;
  // Restores a snapshot written with the same layout (dim, state_floats, metadata); the other
  // options (growth, admission, bounds) come from `options`. Corrupt or truncated files are
  // refused with Code::kProtocol naming the damaged section.
  static Result<std::unique_ptr<ArrayHashMap>> LoadSnapshot(const std::string& path,
                                                            const TableOptions& options);
  // Copies the buffers as they are now into `image` (one memcpy of rows, bitmap and index: the
  // only pause an asynchronous checkpoint takes; its memory is reused when large enough, else
  // mapped anew with its pages populated up front), to be written later by
  // SnapshotImage::WriteTo on any thread while this table goes on changing.
  // kResourceExhausted when the copy's memory cannot be had.
  Status CaptureSnapshot(SnapshotImage* image) const;

  static uint32_t ShardOf(uint64_t key, uint32_t shards) {
    const uint64_t low = HashIndex::Hash(key) & 0xffffffffu;  // independent of the index's fp
    return static_cast<uint32_t>((low * shards) >> 32);
  }

 private:
  explicit ArrayHashMap(const TableOptions& options);
  Status Init();
  // key_at for HashIndex probes: the key word of a row.
  auto KeyAt() const {
    return [rows = rows_.data(), stride = static_cast<size_t>(layout_.stride)](uint32_t slot) {
      uint64_t k;
      std::memcpy(&k, rows + static_cast<size_t>(slot) * stride, sizeof k);
      return k;
    };
  }
  // Calls found(i, FindSlot(keys[i])) for every i in order, software-pipelined (FindBatch,
  // RowSegments). Three stages, each key hashed once: key i+2D's home group (tags and slot line) is
  // prefetched, key i+D's first tag match names a row that is prefetched, and key i is resolved,
  // usually by one compare against that row, now in cache, else by a full probe (a false tag
  // match, an absent key, a key past its home group). One key's dependent misses (group, then
  // row) thus overlap with ~2D other keys' instead of stalling the loop.
  template <typename Found>
  void ResolveBatch(std::span<const uint64_t> keys, const Found& found) const {
    constexpr size_t kDist = 8;
    constexpr size_t kRing = 4 * kDist;  // a power of two > 2 * kDist
    uint32_t fp[kRing];
    uint32_t cand[kRing];
    const size_t n = keys.size();
    const auto key_at = KeyAt();
    for (size_t i = 0; i < n + 2 * kDist; ++i) {
      if (i < n) fp[i % kRing] = index_.Prefetch(keys[i]);
      if (i >= kDist && i - kDist < n) {
        const size_t j = i - kDist;
        cand[j % kRing] = index_.PeekFp(fp[j % kRing]);
        if (cand[j % kRing] != kNoSlot) __builtin_prefetch(Row(cand[j % kRing]));
      }
      if (i >= 2 * kDist) {
        const size_t j = i - 2 * kDist;
        const uint32_t c = cand[j % kRing];
        found(j, c != kNoSlot && key_at(c) == keys[j]
                     ? c
                     : index_.FindWithFp(keys[j], fp[j % kRing], key_at));
      }
    }
  }
  // Insert() with fp = HashIndex::Fingerprint(key) already computed (InsertBatch).
  Result<Insertion> InsertWithFp(uint64_t key, uint32_t fp);
  // Doubles the rows buffer (within the reservation for kReserve).
  Status GrowRows();
  // Inserts absent `key` at `at` (HashIndex::FindForInsert, no index mutation since).
  Result<Insertion> InsertAt(uint64_t key, const HashIndex::InsertPoint& at);
  // The rows as the index rebuilds from them (key words of live slots).
  RowKeys Keys() const {
    return RowKeys{rows_.data(), layout_.stride, reinterpret_cast<const uint64_t*>(live_.data()),
                   high_water_};
  }
  void FreeSlot(uint32_t slot);
  // Resizes rows + live bitmap to `slots`, re-registering around the move.
  Status ResizeRows(size_t slots);
  Status Register();
  void SetLive(uint32_t slot, bool live) {
    uint64_t* words = reinterpret_cast<uint64_t*>(live_.data());
    const uint64_t bit = uint64_t{1} << (slot % 64);
    words[slot / 64] = live ? (words[slot / 64] | bit) : (words[slot / 64] & ~bit);
  }
  bool IsLive(uint32_t slot) const {
    return (reinterpret_cast<const uint64_t*>(live_.data())[slot / 64] >> (slot % 64)) & 1;
  }
  Result<size_t> EraseWhere(bool (*pred)(const ArrayHashMap&, const uint8_t*, double), double arg);

  TableOptions options_;
  RowLayout layout_;
  MappedBuffer rows_;
  MappedBuffer live_;
  HashIndex index_;
  size_t capacity_slots_ = 0;
  uint32_t high_water_ = 0;
  uint32_t free_head_ = kNoSlot;
  size_t free_count_ = 0;
  size_t size_ = 0;
  uint32_t tick_ = 0;
  uint64_t growths_ = 0;
  CountMinFilter filter_;
  uint64_t rng_;
  std::vector<uint64_t>* eviction_log_ = nullptr;
  // Transport state. region_ must be destroyed before the rows buffer is remapped or unmapped
  // (the destructor resets it first).
  Transport* transport_ = nullptr;
  uint32_t access_ = 0;
  uint64_t epoch_ = 0;
  std::unique_ptr<MemoryRegion> region_;
  RemoteRegion descriptor_;
  friend class SnapshotIo;
};

}  // namespace ferry::ps
