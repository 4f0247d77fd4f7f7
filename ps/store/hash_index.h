// HashIndex: key -> row slot, in its own contiguous buffer: 16-bucket groups of one-byte tags,
// matched 16 at a time with SSE2, in front of an array of 32-bit row slots.
//
//   struct Index {                 // one MappedBuffer; buckets = 16 * groups, groups = 2^k
//     int8_t   ctrl[buckets];      // per bucket: kEmpty (0x80), kDeleted (0xfe, a tombstone),
//                                  // or full: the 7-bit tag, 0x00..0x7f
//     uint32_t slot[buckets];      // row slot of a full bucket (meaningless otherwise);
//   };                             // group g's 16 slots are one 64-byte line (buckets >= 64)
//
//   fp   = high 32 bits of Hash(key)
//   tag  = fp & 0x7f                          group bits and tag bits are disjoint below 2^25
//   home = (fp * groups) >> 32                groups ("fastrange")
//   probe: groups home, home+1, home+3, home+6, ... mod groups (triangular numbers: every group
//          exactly once in `groups` steps when groups is a power of two)
//
// A lookup loads one group's 16 tags, compares them with the key's tag in one instruction and
// walks the (rarely more than one) matching buckets: slot -> row -> key compare. It stops at the
// first group that has an empty bucket. The key is not stored: a hit reads the row anyway, and
// the index holds 5 bytes per bucket (max load 7/8, x2 growth: 5.7-11.4 B per key).
//
// The index is a function of the rows: growth and tombstone clean-up REBUILD it from the rows'
// keys (RowKeys: every live slot's key word), in place. The buffer is mremap-ed to the new size,
// the tags reset, and every live row re-inserted in slot order (a sequential scan of the rows).
// There is never a second table, so peak memory during growth equals the steady state, and no
// hash bits beyond the tag need to be kept.
//
// Erase leaves a tombstone only in a group with no empty bucket: a group with an empty bucket
// has never been full since the last rebuild, so no probe ever continued past it and its bucket
// can become empty again. Tombstones count against the load; a rebuild drops them.
//
// Thread-safety: none; the owning ArrayHashMap serialises mutations. Find and the other const
// calls may run concurrently with each other.
#pragma once

#include <emmintrin.h>  // SSE2: part of the x86-64 baseline, no -m flag needed

#include <cstddef>
#include <cstdint>

#include "ps/store/mapped_buffer.h"
#include "transport/status.h"

namespace ferry::ps {

// The rows an index is built over. Rebuilds read the key (8 bytes at offset 0) of every slot
// whose live bit is set.
struct RowKeys {
  const uint8_t* rows = nullptr;  // slot s at rows + s * stride
  size_t stride = 8;
  const uint64_t* live = nullptr;  // bit s of word s / 64: slot s holds a live row
  size_t slots = 0;                // slots [0, slots) are examined
};

class HashIndex {
 public:
  static constexpr uint32_t kNoSlot = 0xffffffffu;
  static constexpr size_t kGroup = 16;
  static constexpr size_t kBytesPerBucket = 5;  // one tag byte + one 32-bit slot
  static constexpr int8_t kEmpty = static_cast<int8_t>(0x80);
  static constexpr int8_t kDeleted = static_cast<int8_t>(0xfe);

  __extension__ using U128 = unsigned __int128;

  // A strong 64-bit mix (multiply-fold); raw feature ids are often sequential or low-entropy.
  static uint64_t Hash(uint64_t key) {
    U128 m = static_cast<U128>(key ^ 0x2d358dccaa6c78a5ull) * 0x8bb84b93962eacc9ull;
    uint64_t h = static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
    m = static_cast<U128>(h) * 0x9e3779b97f4a7c15ull;
    return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
  }
  static uint32_t Fingerprint(uint64_t key) { return static_cast<uint32_t>(Hash(key) >> 32); }
  // Buckets (a multiple of kGroup, power of two) that hold `entries` within the maximum load.
  static size_t BucketsFor(size_t entries);

  // An empty index with room for `entries` without growth. kInvalidArgument past 2^32 buckets.
  static Result<HashIndex> Create(size_t entries, bool huge_pages = false);

  size_t size() const { return size_; }  // entries
  size_t num_buckets() const { return num_buckets_; }
  size_t capacity() const { return num_buckets_; }
  size_t tombstones() const { return deleted_; }
  // Empty buckets the next insertions may take before EnsureRoomForOne rebuilds.
  size_t growth_left() const { return growth_left_; }
  size_t bytes() const { return num_buckets_ * kBytesPerBucket; }
  // Entries (live + tombstones) the index holds before the next rebuild: 7/8 of the buckets.
  size_t MaxEntries() const { return num_buckets_ - num_buckets_ / 8; }

  // The slot holding `key`, or kNoSlot. key_at(slot) returns the key stored in that row.
  template <typename KeyAt>
  uint32_t Find(uint64_t key, const KeyAt& key_at) const {
    return FindWithFp(key, Fingerprint(key), key_at);
  }
  // Find with fp = Fingerprint(key) already computed (batches hash each key once).
  template <typename KeyAt>
  uint32_t FindWithFp(uint64_t key, uint32_t fp, const KeyAt& key_at) const {
    const __m128i tag = _mm_set1_epi8(static_cast<char>(fp & 0x7f));
    size_t g = Home(fp);
    // The home group's slot line does not depend on the tags: fetch it while they load, so a hit
    // waits for two dependent misses (tags+slot, row) rather than three.
    __builtin_prefetch(slots() + g * kGroup);
    for (size_t step = 1;; g = (g + step++) & group_mask_) {
      const __m128i ctrl = Group(g);
      for (uint32_t m = Match(ctrl, tag); m != 0; m &= m - 1) {
        const uint32_t slot = slots()[g * kGroup + static_cast<size_t>(__builtin_ctz(m))];
        if (key_at(slot) == key) return slot;
      }
      if (MatchEmpty(ctrl) != 0) return kNoSlot;
    }
  }

  // Batch helpers (software pipelining in FindBatch/RowSegments/InsertBatch). Prefetch pulls the
  // home group's tags and slots toward the cache and returns the key's fingerprint; Peek returns
  // the slot of the first bucket in the home group whose tag matches (no key check, so possibly
  // another key's row; kNoSlot if none), to prefetch that row before the real Find.
  uint32_t Prefetch(uint64_t key) const {
    const uint32_t fp = Fingerprint(key);
    const size_t g = Home(fp);
    __builtin_prefetch(ctrl() + g * kGroup);
    __builtin_prefetch(slots() + g * kGroup);
    return fp;
  }
  uint32_t Peek(uint64_t key) const { return PeekFp(Fingerprint(key)); }
  uint32_t PeekFp(uint32_t fp) const {
    const size_t g = Home(fp);
    const uint32_t m = Match(Group(g), _mm_set1_epi8(static_cast<char>(fp & 0x7f)));
    return m == 0 ? kNoSlot : slots()[g * kGroup + static_cast<size_t>(__builtin_ctz(m))];
  }

  // Fused find-or-insert (one probe instead of Find + Insert). Call EnsureRoomForOne() first: it
  // may rebuild the index, which moves every entry, so it must happen before the probe.
  // FindForInsert returns the slot of `key`, or kNoSlot and fills *at with where it belongs (the
  // first free bucket on its probe path); `at` stays valid until the next mutation of the index.
  struct InsertPoint {
    size_t pos = 0;
    uint32_t fp = 0;
  };
  Status EnsureRoomForOne(const RowKeys& rows) {
    if (growth_left_ > 0) return Status::Ok();
    // Tombstones are at least 3/32 of the buckets (live entries <= 25/32): dropping them at the
    // same size frees enough room to pay for the rebuild; otherwise double.
    const size_t buckets = size_ + 1 <= num_buckets_ / 32 * 25 ? num_buckets_ : num_buckets_ * 2;
    return Rebuild(buckets, rows);
  }
  template <typename KeyAt>
  uint32_t FindForInsert(uint64_t key, const KeyAt& key_at, InsertPoint* at) const {
    return FindForInsertWithFp(key, Fingerprint(key), key_at, at);
  }
  template <typename KeyAt>
  uint32_t FindForInsertWithFp(uint64_t key, uint32_t fp, const KeyAt& key_at,
                               InsertPoint* at) const {
    const __m128i tag = _mm_set1_epi8(static_cast<char>(fp & 0x7f));
    size_t g = Home(fp);
    __builtin_prefetch(slots() + g * kGroup);
    size_t free_pos = SIZE_MAX;
    for (size_t step = 1;; g = (g + step++) & group_mask_) {
      const __m128i ctrl = Group(g);
      for (uint32_t m = Match(ctrl, tag); m != 0; m &= m - 1) {
        const uint32_t slot = slots()[g * kGroup + static_cast<size_t>(__builtin_ctz(m))];
        if (key_at(slot) == key) return slot;
      }
      const uint32_t free = MatchFree(ctrl);
      if (free_pos == SIZE_MAX && free != 0) {
        free_pos = g * kGroup + static_cast<size_t>(__builtin_ctz(free));
      }
      if (MatchEmpty(ctrl) != 0) break;
    }
    at->pos = free_pos;
    at->fp = fp;
    return kNoSlot;
  }
  // Stores slot at `at` (from FindForInsert with no mutation since). kInternal, index unchanged,
  // if it would take an empty bucket without room (EnsureRoomForOne was not called) or `at` is
  // not a free bucket. TryInsertAt is the same returning false instead (the insert hot path).
  Status InsertAt(const InsertPoint& at, uint32_t slot);
  bool TryInsertAt(const InsertPoint& at, uint32_t slot) {
    if (at.pos >= num_buckets_) return false;
    const int8_t c = ctrl()[at.pos];
    if (c == kEmpty) {
      if (growth_left_ == 0) return false;
      --growth_left_;
    } else if (c == kDeleted) {
      --deleted_;
    } else {
      return false;
    }
    mutable_ctrl()[at.pos] = static_cast<int8_t>(at.fp & 0x7f);
    mutable_slots()[at.pos] = slot;
    ++size_;
    return true;
  }

  // Inserts key -> slot; the key must be absent. May rebuild from `rows` first (which must then
  // already hold every entry's key but this one's).
  Status Insert(uint64_t key, uint32_t slot, const RowKeys& rows);
  // Removes the entry of key stored at `slot`. Returns false if no such entry.
  bool Erase(uint64_t key, uint32_t slot);
  // Rewrites the slot of an entry (compaction moved its row). Returns false if not found.
  bool Relocate(uint64_t key, uint32_t old_slot, uint32_t new_slot);
  // Ensures room for `entries` entries without a rebuild (rebuilding from `rows` if needed).
  Status Reserve(size_t entries, const RowKeys& rows);
  // Rebuilds with `buckets` buckets (a power of two >= 16 holding every row) from `rows`: the
  // buffer is resized in place, then every live row's key is inserted. On error (the resize
  // failed) the index is unchanged.
  Status Rebuild(size_t buckets, const RowKeys& rows);
  void Clear();

  // For snapshots and validation: the raw buffer (bytes() long: tags, then slots).
  const uint8_t* data() const { return buf_.data(); }
  const int8_t* ctrl() const { return reinterpret_cast<const int8_t*>(buf_.data()); }
  const uint32_t* slots() const {
    return reinterpret_cast<const uint32_t*>(buf_.data() + num_buckets_);
  }
  // Adopts `buf` holding `num_buckets` buckets' raw bytes (a restored snapshot), checking the
  // geometry, every tag byte, that each full bucket's slot is < slot_limit and that at least one
  // bucket is empty (so every probe ends). Whether each entry is reachable under its key's tag is
  // for the caller to check against the rows. On error the index is unchanged.
  Status Adopt(size_t num_buckets, MappedBuffer buf, uint32_t slot_limit);

 private:
  size_t Home(uint32_t fp) const {
    return static_cast<size_t>((static_cast<uint64_t>(fp) * (group_mask_ + 1)) >> 32);
  }
  __m128i Group(size_t g) const {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(ctrl() + g * kGroup));
  }
  static uint32_t Match(__m128i ctrl, __m128i tag) {
    return static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(ctrl, tag)));
  }
  static uint32_t MatchEmpty(__m128i ctrl) { return Match(ctrl, _mm_set1_epi8(kEmpty)); }
  // Empty or deleted: the only tag bytes with the high bit set.
  static uint32_t MatchFree(__m128i ctrl) { return static_cast<uint32_t>(_mm_movemask_epi8(ctrl)); }
  int8_t* mutable_ctrl() { return reinterpret_cast<int8_t*>(buf_.data()); }
  uint32_t* mutable_slots() { return reinterpret_cast<uint32_t*>(buf_.data() + num_buckets_); }
  void SetGeometry(size_t buckets);
  // Position of the bucket of `key` holding `slot`, or SIZE_MAX.
  size_t Locate(uint64_t key, uint32_t slot) const;
  // Puts (fp, slot) into the first free bucket of its probe path (no key check: rebuilds).
  void Place(uint32_t fp, uint32_t slot) {
    size_t g = Home(fp);
    for (size_t step = 1;; g = (g + step++) & group_mask_) {
      const uint32_t free = MatchFree(Group(g));
      if (free != 0) {
        const size_t pos = g * kGroup + static_cast<size_t>(__builtin_ctz(free));
        mutable_ctrl()[pos] = static_cast<int8_t>(fp & 0x7f);
        mutable_slots()[pos] = slot;
        return;
      }
    }
  }

  MappedBuffer buf_;
  size_t num_buckets_ = 0;
  size_t group_mask_ = 0;
  size_t size_ = 0;
  size_t deleted_ = 0;
  size_t growth_left_ = 0;  // empty buckets that may still be taken before a rebuild
};

}  // namespace ferry::ps
