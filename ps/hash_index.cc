#include "ps/hash_index.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ferry::ps {
namespace {

// Buckets past the home range: probes run into them instead of wrapping around. When an
// insertion would need the final (sentinel) bucket, the tail is extended by this much.
constexpr size_t kTail = 64;
// In-place growth recomputes new positions in chunks of this many entries (see GrowTo).
constexpr size_t kChunk = 4096;
constexpr size_t kMinCapacity = 16;

uint32_t Fp(uint64_t v) {
  return static_cast<uint32_t>(v >> 32);
}

}  // namespace

Result<HashIndex> HashIndex::Create(size_t capacity, bool huge_pages) {
  HashIndex index;
  index.capacity_ = std::max(capacity, kMinCapacity);
  if (index.capacity_ > (1ull << 32)) {
    return InvalidArgument("hash index capacity " + std::to_string(capacity) +
                           " exceeds 2^32 buckets");
  }
  index.num_buckets_ = index.capacity_ + kTail;
  FERRY_ASSIGN_OR_RETURN(
      index.buf_, MappedBuffer::Create(GrowthMode::kRemap, index.num_buckets_ * sizeof(uint64_t), 0,
                                       huge_pages));
  return index;
}

Status HashIndex::SetBuckets(size_t num_buckets) {
  // Bytes past num_buckets_ are always zero, so the new buckets are empty.
  FERRY_RETURN_IF_ERROR(buf_.Resize(num_buckets * sizeof(uint64_t)));
  num_buckets_ = num_buckets;
  return Status::Ok();
}

void HashIndex::Clear() {
  std::memset(buf_.data(), 0, num_buckets_ * sizeof(uint64_t));
  size_ = 0;
}

Status HashIndex::Insert(uint64_t key, uint32_t slot) {
  FERRY_RETURN_IF_ERROR(EnsureRoomForOne());
  const uint32_t fp = static_cast<uint32_t>(Hash(key) >> 32);
  const uint64_t* b = buckets();
  size_t pos = Home(fp, capacity_);
  while (b[pos] != 0 && Fp(b[pos]) <= fp) ++pos;
  return InsertAt(InsertPoint{pos, fp}, slot);
}

Status HashIndex::InsertAt(const InsertPoint& at, uint32_t slot) {
  if (size_ + 1 > MaxEntries()) return Internal("HashIndex::InsertAt without room");
  const uint64_t entry = (static_cast<uint64_t>(at.fp) << 32) | (static_cast<uint64_t>(slot) + 1);
  uint64_t* b = mutable_buckets();
  const size_t pos = at.pos;
  size_t empty = pos;
  while (b[empty] != 0) ++empty;
  if (empty + 1 >= num_buckets_) {
    // The run reaches the sentinel: lengthen the tail (no rehash needed).
    FERRY_RETURN_IF_ERROR(SetBuckets(num_buckets_ + kTail));
    b = mutable_buckets();
  }
  std::memmove(b + pos + 1, b + pos, (empty - pos) * sizeof(uint64_t));
  b[pos] = entry;
  ++size_;
  return Status::Ok();
}

size_t HashIndex::Locate(uint64_t entry) const {
  const uint32_t fp = Fp(entry);
  const uint64_t* b = buckets();
  for (size_t pos = Home(fp, capacity_);; ++pos) {
    const uint64_t v = b[pos];
    if (v == 0 || Fp(v) > fp) return num_buckets_;
    if (v == entry) return pos;
  }
}

bool HashIndex::Erase(uint64_t key, uint32_t slot) {
  const uint32_t fp = static_cast<uint32_t>(Hash(key) >> 32);
  const size_t pos = Locate((static_cast<uint64_t>(fp) << 32) | (static_cast<uint64_t>(slot) + 1));
  if (pos == num_buckets_) return false;
  // Backward shift: pull left every following entry that is displaced from its home.
  uint64_t* b = mutable_buckets();
  size_t end = pos + 1;
  while (b[end] != 0 && Home(Fp(b[end]), capacity_) < end) ++end;
  std::memmove(b + pos, b + pos + 1, (end - pos - 1) * sizeof(uint64_t));
  b[end - 1] = 0;
  --size_;
  return true;
}

bool HashIndex::Relocate(uint64_t key, uint32_t old_slot, uint32_t new_slot) {
  const uint64_t fp = Hash(key) >> 32;
  const size_t pos = Locate((fp << 32) | (static_cast<uint64_t>(old_slot) + 1));
  if (pos == num_buckets_) return false;
  mutable_buckets()[pos] = (fp << 32) | (static_cast<uint64_t>(new_slot) + 1);
  return true;
}

Status HashIndex::Reserve(size_t entries) {
  const size_t need = static_cast<size_t>(static_cast<double>(entries) / kMaxLoad) + 1;
  if (need <= capacity_) return Status::Ok();
  return GrowTo(
      std::max(need, static_cast<size_t>(static_cast<double>(capacity_) * kGrowthFactor)));
}

// In-place growth. Entries e_0..e_{n-1} in bucket order (= fp order) sit at old positions p_i;
// their new positions are q_i = max(home'(fp_i), q_{i-1} + 1). Since home' >= home and
// p_i = max(home(fp_i), p_{i-1} + 1) (or larger, never smaller), q_i >= p_i by induction.
// Moving entries from last to first therefore never overwrites an entry not yet moved.
// q_i depends on the whole prefix, so pass 1 records (p_i, q_{i-1}+1) every kChunk entries and
// pass 2 recomputes each chunk's q from its checkpoint: O(n/kChunk + kChunk) extra memory.
Status HashIndex::GrowTo(size_t new_capacity) {
  if (new_capacity > (1ull << 32)) {
    return ResourceExhausted("hash index would exceed 2^32 buckets");
  }
  const size_t old_buckets = num_buckets_;
  struct Checkpoint {
    size_t old_pos;
    size_t next;
  };
  std::vector<Checkpoint> checkpoints;
  checkpoints.reserve(size_ / kChunk + 1);
  const uint64_t* b = buckets();
  size_t next = 0;
  size_t i = 0;
  for (size_t pos = 0; pos < old_buckets; ++pos) {
    const uint64_t v = b[pos];
    if (v == 0) continue;
    if (i % kChunk == 0) checkpoints.push_back({pos, next});
    next = std::max(Home(Fp(v), new_capacity), next) + 1;
    ++i;
  }
  FERRY_RETURN_IF_ERROR(SetBuckets(std::max(new_capacity + kTail, next + kTail)));
  uint64_t* w = mutable_buckets();
  std::vector<std::pair<size_t, size_t>> moves(kChunk);
  for (size_t c = checkpoints.size(); c-- > 0;) {
    size_t pos = checkpoints[c].old_pos;
    next = checkpoints[c].next;
    size_t m = 0;
    for (; m < kChunk && pos < old_buckets; ++pos) {
      const uint64_t v = w[pos];
      if (v == 0) continue;
      const size_t q = std::max(Home(Fp(v), new_capacity), next);
      moves[m++] = {pos, q};
      next = q + 1;
    }
    while (m-- > 0) {
      const auto [from, to] = moves[m];
      if (from != to) {
        w[to] = w[from];
        w[from] = 0;
      }
    }
  }
  capacity_ = new_capacity;
  return Status::Ok();
}

Status HashIndex::Adopt(size_t capacity, size_t num_buckets, MappedBuffer buf,
                        uint32_t slot_limit) {
  if (buf.size() < num_buckets * sizeof(uint64_t) || capacity < kMinCapacity ||
      capacity > (1ull << 32) || num_buckets < capacity + 1 ||
      num_buckets > capacity + (1ull << 30)) {
    return ProtocolError("index geometry is invalid (capacity " + std::to_string(capacity) +
                         ", buckets " + std::to_string(num_buckets) + ")");
  }
  const uint64_t* raw = reinterpret_cast<const uint64_t*>(buf.data());
  if (raw[num_buckets - 1] != 0) return ProtocolError("index sentinel bucket is not empty");
  size_t count = 0;
  uint32_t prev_fp = 0;
  size_t last_empty = SIZE_MAX;  // position of the latest empty bucket seen
  for (size_t pos = 0; pos < num_buckets; ++pos) {
    const uint64_t v = raw[pos];
    if (v == 0) {
      last_empty = pos;
      continue;
    }
    const uint32_t slot_plus_one = static_cast<uint32_t>(v);
    const uint32_t fp = Fp(v);
    const size_t home = Home(fp, capacity);
    if (slot_plus_one == 0 || slot_plus_one - 1 >= slot_limit) {
      return ProtocolError("index bucket " + std::to_string(pos) + " names an invalid row slot");
    }
    if (fp < prev_fp || home > pos || (last_empty != SIZE_MAX && last_empty >= home)) {
      return ProtocolError("index bucket " + std::to_string(pos) + " breaks the probe order");
    }
    prev_fp = fp;
    ++count;
  }
  buf_ = std::move(buf);
  capacity_ = capacity;
  num_buckets_ = num_buckets;
  size_ = count;
  return Status::Ok();
}

}  // namespace ferry::ps
