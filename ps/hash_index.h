// HashIndex: key -> row slot, in its own contiguous buffer, 8 bytes per bucket.
//
// Open addressing with linear probing, kept SORTED by fingerprint (a robin-hood table whose
// tie-break is the fingerprint itself). A bucket is one uint64_t:
//
//   struct Bucket {            // 8 bytes; the all-zero bucket is empty
//     uint32_t slot_plus_one;  // row slot + 1 (so 0 means empty)
//     uint32_t fp;             // high 32 bits of Hash(key): fingerprint AND home bucket
//   };                         // stored as (uint64_t(fp) << 32) | slot_plus_one
//
//   home(fp) = (fp * capacity) >> 32            // "fastrange": monotone in fp
//   buckets: [0, capacity) home range, then a tail where probes may run past the end
//            (no wrap-around); the last bucket is always empty and stops every probe.
//
// Invariants: occupied buckets are sorted by fp (ties in any order); every entry sits at or
// after its home; no empty bucket lies between an entry's home and its position.
// Consequences:
//   - a lookup stops at the first empty bucket or the first fp greater than its own, so a miss
//     inspects about as many buckets as a hit (~1 cache line at the 0.85 maximum load);
//   - the key itself is not stored: a fingerprint match is confirmed against the key in the row,
//     which a hit reads anyway (index overhead = 8 B / load factor, 9.4-14.1 B per key);
//   - growth to capacity C' is done IN PLACE (mremap the bucket buffer, then move entries
//     backwards): every entry's new position is >= its old one, because home'(fp) >= home(fp)
//     and positions are a running max. No second table, so no 2x peak during a rehash.
//
// Thread-safety: none; the owning ArrayHashMap serialises. Find is const and may run
// concurrently with other Finds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ps/mapped_buffer.h"
#include "transport/status.h"

namespace ferry::ps {

class HashIndex {
 public:
  static constexpr uint32_t kNoSlot = 0xffffffffu;
  static constexpr double kMaxLoad = 0.85;
  static constexpr double kGrowthFactor = 1.5;

  __extension__ using U128 = unsigned __int128;

  // A strong 64-bit mix (multiply-fold); raw feature ids are often sequential or low-entropy.
  static uint64_t Hash(uint64_t key) {
    U128 m = static_cast<U128>(key ^ 0x2d358dccaa6c78a5ull) * 0x8bb84b93962eacc9ull;
    uint64_t h = static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
    m = static_cast<U128>(h) * 0x9e3779b97f4a7c15ull;
    return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
  }

  static Result<HashIndex> Create(size_t capacity, bool huge_pages = false);

  size_t size() const { return size_; }                // entries
  size_t capacity() const { return capacity_; }        // home range
  size_t num_buckets() const { return num_buckets_; }  // capacity + tail
  size_t bytes() const { return num_buckets_ * sizeof(uint64_t); }
  size_t MaxEntries() const {
    return static_cast<size_t>(static_cast<double>(capacity_) * kMaxLoad);
  }

  // The slot holding `key`, or kNoSlot. key_at(slot) returns the key stored in that row.
  template <typename KeyAt>
  uint32_t Find(uint64_t key, const KeyAt& key_at) const {
    const uint32_t fp = static_cast<uint32_t>(Hash(key) >> 32);
    const uint64_t* b = buckets() + Home(fp, capacity_);
    for (;; ++b) {
      const uint64_t v = *b;
      const uint32_t bfp = static_cast<uint32_t>(v >> 32);
      if (static_cast<uint32_t>(v) == 0 || bfp > fp) return kNoSlot;
      if (bfp == fp) {
        const uint32_t slot = static_cast<uint32_t>(v) - 1;
        if (key_at(slot) == key) return slot;
      }
    }
  }

  // Batch helpers (software pipelining in Gather): Prefetch pulls the home bucket of `key`
  // toward the cache; Peek returns the slot of the first bucket whose fingerprint matches (no
  // key check, so possibly a different key), to prefetch that row before the real Find.
  void Prefetch(uint64_t key) const {
    __builtin_prefetch(buckets() + Home(static_cast<uint32_t>(Hash(key) >> 32), capacity_));
  }
  uint32_t Peek(uint64_t key) const {
    const uint32_t fp = static_cast<uint32_t>(Hash(key) >> 32);
    for (const uint64_t* b = buckets() + Home(fp, capacity_);; ++b) {
      const uint64_t v = *b;
      const uint32_t bfp = static_cast<uint32_t>(v >> 32);
      if (static_cast<uint32_t>(v) == 0 || bfp > fp) return kNoSlot;
      if (bfp == fp) return static_cast<uint32_t>(v) - 1;
    }
  }

  // Fused find-or-insert (one probe instead of Find + Insert). Call EnsureRoomForOne() first:
  // growth moves buckets, so it must happen before the probe, not between probe and InsertAt.
  // FindForInsert returns the slot of `key`, or kNoSlot and fills *at with where it belongs;
  // `at` stays valid until the next mutation of the index.
  struct InsertPoint {
    size_t pos = 0;
    uint32_t fp = 0;
  };
  Status EnsureRoomForOne() {
    if (size_ + 1 <= MaxEntries()) return Status::Ok();
    return GrowTo(GrownCapacity());
  }
  template <typename KeyAt>
  uint32_t FindForInsert(uint64_t key, const KeyAt& key_at, InsertPoint* at) const {
    const uint32_t fp = static_cast<uint32_t>(Hash(key) >> 32);
    const uint64_t* const base = buckets();
    const uint64_t* b = base + Home(fp, capacity_);
    for (;; ++b) {
      const uint64_t v = *b;
      const uint32_t bfp = static_cast<uint32_t>(v >> 32);
      if (static_cast<uint32_t>(v) == 0 || bfp > fp) break;
      if (bfp == fp) {
        const uint32_t slot = static_cast<uint32_t>(v) - 1;
        if (key_at(slot) == key) return slot;
      }
    }
    at->pos = static_cast<size_t>(b - base);
    at->fp = fp;
    return kNoSlot;
  }
  // Inserts slot at `at` (from FindForInsert with no mutation since). Needs room: the caller ran
  // EnsureRoomForOne() before the probe. May lengthen the tail (an mremap that can fail).
  Status InsertAt(const InsertPoint& at, uint32_t slot);

  // Inserts key -> slot; the key must be absent (Find first). May grow the bucket buffer.
  Status Insert(uint64_t key, uint32_t slot);
  // Removes key (present, stored at `slot`). Returns false if no such entry.
  bool Erase(uint64_t key, uint32_t slot);
  // Rewrites the slot of an entry (compaction moved its row). Returns false if not found.
  bool Relocate(uint64_t key, uint32_t old_slot, uint32_t new_slot);
  // Ensures MaxEntries() >= entries (in-place growth).
  Status Reserve(size_t entries);
  void Clear();

  // For snapshots and validation.
  const uint64_t* buckets() const { return reinterpret_cast<const uint64_t*>(buf_.data()); }
  // Adopts `buf` holding `num_buckets` raw buckets for `capacity` (a restored snapshot; bytes
  // past the buckets must be zero), checking every invariant above and that each slot is
  // < slot_limit. On error the index is unchanged.
  Status Adopt(size_t capacity, size_t num_buckets, MappedBuffer buf, uint32_t slot_limit);

 private:
  static size_t Home(uint32_t fp, size_t capacity) {
    return static_cast<size_t>((static_cast<uint64_t>(fp) * capacity) >> 32);
  }
  uint64_t* mutable_buckets() { return reinterpret_cast<uint64_t*>(buf_.data()); }
  Status SetBuckets(size_t num_buckets);
  size_t GrownCapacity() const {
    return static_cast<size_t>(static_cast<double>(capacity_) * kGrowthFactor) + 1;
  }
  Status GrowTo(size_t new_capacity);
  // Position of the bucket holding exactly `entry`, or num_buckets_.
  size_t Locate(uint64_t entry) const;

  MappedBuffer buf_;
  size_t capacity_ = 0;
  size_t num_buckets_ = 0;
  size_t size_ = 0;
};

}  // namespace ferry::ps
