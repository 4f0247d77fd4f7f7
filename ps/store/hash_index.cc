#include "ps/store/hash_index.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace ferry::ps {
namespace {

constexpr size_t kMinBuckets = 64;  // 4 groups: the slot array starts on a 64-byte line
constexpr size_t kMaxBuckets = size_t{1} << 32;
// Rebuilds hash this many rows ahead of the one they place, prefetching its home group: the
// placements' cache misses then overlap instead of being paid one after another.
constexpr size_t kRebuildAhead = 16;

}  // namespace

size_t HashIndex::BucketsFor(size_t entries) {
  size_t buckets = kMinBuckets;
  while (buckets - buckets / 8 < entries && buckets < kMaxBuckets) buckets *= 2;
  return buckets;
}

Result<HashIndex> HashIndex::Create(size_t entries, bool huge_pages) {
  const size_t buckets = BucketsFor(entries);
  if (buckets - buckets / 8 < entries) {
    return InvalidArgument("hash index for " + std::to_string(entries) +
                           " entries exceeds 2^32 buckets");
  }
  HashIndex index;
  FERRY_ASSIGN_OR_RETURN(
      index.buf_,
      MappedBuffer::Create(GrowthMode::kRemap, buckets * kBytesPerBucket, 0, huge_pages));
  index.SetGeometry(buckets);
  index.Clear();
  return index;
}

void HashIndex::SetGeometry(size_t buckets) {
  num_buckets_ = buckets;
  group_mask_ = buckets / kGroup - 1;
}

void HashIndex::Clear() {
  std::memset(mutable_ctrl(), static_cast<uint8_t>(kEmpty), num_buckets_);
  size_ = 0;
  deleted_ = 0;
  growth_left_ = MaxEntries();
}

Status HashIndex::InsertAt(const InsertPoint& at, uint32_t slot) {
  if (!TryInsertAt(at, slot)) {
    return Internal("HashIndex::InsertAt: bucket " + std::to_string(at.pos) +
                    " is taken, or empty with no room left (call EnsureRoomForOne first)");
  }
  return Status::Ok();
}

Status HashIndex::Insert(uint64_t key, uint32_t slot, const RowKeys& rows) {
  FERRY_RETURN_IF_ERROR(EnsureRoomForOne(rows));
  const uint32_t fp = Fingerprint(key);
  size_t g = Home(fp);
  for (size_t step = 1;; g = (g + step++) & group_mask_) {
    const uint32_t free = MatchFree(Group(g));
    if (free != 0) {
      return InsertAt(InsertPoint{g * kGroup + static_cast<size_t>(__builtin_ctz(free)), fp}, slot);
    }
  }
}

size_t HashIndex::Locate(uint64_t key, uint32_t slot) const {
  const uint32_t fp = Fingerprint(key);
  const __m128i tag = _mm_set1_epi8(static_cast<char>(fp & 0x7f));
  size_t g = Home(fp);
  for (size_t step = 1; step <= group_mask_ + 1; g = (g + step++) & group_mask_) {
    const __m128i ctrl = Group(g);
    for (uint32_t m = Match(ctrl, tag); m != 0; m &= m - 1) {
      const size_t pos = g * kGroup + static_cast<size_t>(__builtin_ctz(m));
      if (slots()[pos] == slot) return pos;
    }
    if (MatchEmpty(ctrl) != 0) break;
  }
  return SIZE_MAX;
}

bool HashIndex::Erase(uint64_t key, uint32_t slot) {
  const size_t pos = Locate(key, slot);
  if (pos == SIZE_MAX) return false;
  // A group with an empty bucket was never full since the last rebuild, so no probe went on
  // past it: its bucket may become empty again. A full group keeps a tombstone instead, or the
  // probes that continued past it would stop short of their keys.
  if (MatchEmpty(Group(pos / kGroup)) != 0) {
    mutable_ctrl()[pos] = kEmpty;
    ++growth_left_;
  } else {
    mutable_ctrl()[pos] = kDeleted;
    ++deleted_;
  }
  --size_;
  return true;
}

bool HashIndex::Relocate(uint64_t key, uint32_t old_slot, uint32_t new_slot) {
  const size_t pos = Locate(key, old_slot);
  if (pos == SIZE_MAX) return false;
  mutable_slots()[pos] = new_slot;
  return true;
}

Status HashIndex::Reserve(size_t entries, const RowKeys& rows) {
  if (entries <= size_ + growth_left_) return Status::Ok();
  const size_t buckets = std::max(BucketsFor(entries), num_buckets_);
  if (buckets - buckets / 8 < entries) {
    return ResourceExhausted("hash index for " + std::to_string(entries) +
                             " entries would exceed 2^32 buckets");
  }
  return Rebuild(buckets, rows);
}

Status HashIndex::Rebuild(size_t buckets, const RowKeys& rows) {
  if (buckets > kMaxBuckets || buckets < kMinBuckets || (buckets & (buckets - 1)) != 0) {
    return ResourceExhausted("hash index would need " + std::to_string(buckets) +
                             " buckets (a power of two within [64, 2^32])");
  }
  // Resizing first is the only step that can fail; the old entries are not needed afterwards
  // (the rows hold every key), so the new layout simply overwrites the old bytes.
  FERRY_RETURN_IF_ERROR(buf_.Resize(buckets * kBytesPerBucket));
  SetGeometry(buckets);
  Clear();
  // Slot order = a sequential scan of the rows and the live bitmap. Each row's home group is
  // prefetched when its key is read and filled kRebuildAhead rows later, by which time the
  // group's two lines have arrived: the misses of ~16 placements overlap.
  uint32_t ring_fp[kRebuildAhead];
  uint32_t ring_slot[kRebuildAhead];
  size_t queued = 0;
  const size_t words = (rows.slots + 63) / 64;
  for (size_t w = 0; w < words; ++w) {
    for (uint64_t bits = rows.live[w]; bits != 0; bits &= bits - 1) {
      const size_t slot = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
      uint64_t key;
      std::memcpy(&key, rows.rows + slot * rows.stride, sizeof key);
      const uint32_t fp = Fingerprint(key);
      const size_t g = Home(fp);
      __builtin_prefetch(ctrl() + g * kGroup, 1);
      __builtin_prefetch(slots() + g * kGroup, 1);
      const size_t r = queued % kRebuildAhead;
      if (queued >= kRebuildAhead) Place(ring_fp[r], ring_slot[r]);
      ring_fp[r] = fp;
      ring_slot[r] = static_cast<uint32_t>(slot);
      ++queued;
    }
  }
  for (size_t i = queued > kRebuildAhead ? queued - kRebuildAhead : 0; i < queued; ++i) {
    Place(ring_fp[i % kRebuildAhead], ring_slot[i % kRebuildAhead]);
  }
  size_ = queued;
  growth_left_ = MaxEntries() - std::min(MaxEntries(), queued);
  return Status::Ok();
}

Status HashIndex::Adopt(size_t num_buckets, MappedBuffer buf, uint32_t slot_limit) {
  if (num_buckets < kMinBuckets || num_buckets > kMaxBuckets ||
      (num_buckets & (num_buckets - 1)) != 0 || buf.size() < num_buckets * kBytesPerBucket) {
    return ProtocolError("index geometry is invalid (" + std::to_string(num_buckets) +
                         " buckets; a power of two within [64, 2^32] is expected)");
  }
  const int8_t* ctrl = reinterpret_cast<const int8_t*>(buf.data());
  const uint32_t* slot = reinterpret_cast<const uint32_t*>(buf.data() + num_buckets);
  size_t full = 0;
  size_t deleted = 0;
  for (size_t pos = 0; pos < num_buckets; ++pos) {
    const int8_t c = ctrl[pos];
    if (c == kEmpty) continue;
    if (c == kDeleted) {
      ++deleted;
      continue;
    }
    if (c < 0) {
      return ProtocolError("index bucket " + std::to_string(pos) + " has an invalid tag byte");
    }
    if (slot[pos] >= slot_limit) {
      return ProtocolError("index bucket " + std::to_string(pos) + " names an invalid row slot");
    }
    ++full;
  }
  const size_t max_entries = num_buckets - num_buckets / 8;
  if (full + deleted > max_entries) {
    return ProtocolError("index is loaded past 7/8 (" + std::to_string(full + deleted) + " of " +
                         std::to_string(num_buckets) + " buckets taken)");
  }
  buf_ = std::move(buf);
  SetGeometry(num_buckets);
  size_ = full;
  deleted_ = deleted;
  growth_left_ = max_entries - full - deleted;
  return Status::Ok();
}

}  // namespace ferry::ps
