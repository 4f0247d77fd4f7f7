#include "ps/store/array_hash_map.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace ferry::ps {
namespace {

// Slots are stored +1 in 32-bit index buckets, so 0xfffffffe slots at most.
constexpr size_t kMaxSlots = 0xfffffffeu;
constexpr size_t kMinSlots = 64;

size_t BitmapBytes(size_t slots) {
  return (slots + 63) / 64 * 8;
}

}  // namespace

uint32_t OptimizerStateFloats(Optimizer optimizer, uint32_t dim) {
  switch (optimizer) {
    case Optimizer::kNone:
    case Optimizer::kSgd:
      return 0;
    case Optimizer::kAdagrad:
      return dim;  // per-coordinate sum of squared gradients
    case Optimizer::kFtrl:
      return 2 * dim;  // z and n per coordinate
    case Optimizer::kAdam:
      return 2 * dim;  // first and second moments (the step count is the row's update_count)
  }
  return 0;
}

RowLayout RowLayout::For(uint32_t dim, uint32_t state_floats, bool metadata) {
  RowLayout l;
  l.dim = dim;
  l.state_floats = state_floats;
  l.metadata = metadata;
  l.embedding_offset = metadata ? 8 + static_cast<uint32_t>(sizeof(RowMeta)) : 8;
  l.state_offset = l.embedding_offset + dim * 4;
  l.stride = (l.state_offset + state_floats * 4 + 7) / 8 * 8;
  return l;
}

Result<FieldSpan> RowLayout::Field(RowField field) const {
  switch (field) {
    case RowField::kRow:
      return FieldSpan{0, stride};
    case RowField::kValue:
      return FieldSpan{8, stride - 8};
    case RowField::kEmbedding:
      return FieldSpan{embedding_offset, dim * 4};
    case RowField::kVersionedEmbedding:
      if (!metadata) {
        return InvalidArgument("kVersionedEmbedding needs a table with metadata (version word)");
      }
      return FieldSpan{embedding_offset - 4, dim * 4 + 4};
    case RowField::kState:
      return FieldSpan{state_offset, state_floats * 4};
  }
  return InvalidArgument("unknown RowField");
}

namespace {

CountMinFilter NewFilter(const AdmissionOptions& a) {
  return CountMinFilter(a.kind == AdmissionOptions::Kind::kFrequency ? a.filter_width : 64,
                        a.aging_period);
}

}  // namespace

ArrayHashMap::ArrayHashMap(const TableOptions& options)
    : options_(options),
      layout_(RowLayout::For(options.dim, options.state_floats, options.metadata)),
      filter_(NewFilter(options.admission)),
      rng_(options.admission.seed * 0x9e3779b97f4a7c15ull + 1) {}

ArrayHashMap::~ArrayHashMap() {
  region_.reset();  // deregister before the rows buffer is unmapped
}

Result<std::unique_ptr<ArrayHashMap>> ArrayHashMap::Create(const TableOptions& options) {
  if (options.dim == 0 || options.dim > (1u << 20) || options.state_floats > (1u << 22)) {
    return InvalidArgument("table dim must be in [1, 2^20] and state_floats <= 2^22 (dim " +
                           std::to_string(options.dim) + ", state_floats " +
                           std::to_string(options.state_floats) + ")");
  }
  if (options.admission.kind == AdmissionOptions::Kind::kProbability &&
      !(options.admission.probability >= 0.0 && options.admission.probability <= 1.0)) {
    return InvalidArgument("admission probability must be within [0, 1]");
  }
  if (options.score_half_life < 0) return InvalidArgument("score_half_life must be >= 0");
  std::unique_ptr<ArrayHashMap> map(new ArrayHashMap(options));
  FERRY_RETURN_IF_ERROR(map->Init());
  return map;
}

Status ArrayHashMap::Init() {
  const size_t slots = std::clamp(options_.initial_rows, kMinSlots, kMaxSlots);
  const size_t reserve = options_.growth == GrowthMode::kReserve
                             ? std::max(options_.reserve_rows, slots) * layout_.stride
                             : 0;
  FERRY_ASSIGN_OR_RETURN(rows_,
                         MappedBuffer::Create(options_.growth, slots * layout_.stride, reserve,
                                              options_.huge_pages, options_.shareable_rows));
  FERRY_ASSIGN_OR_RETURN(live_, MappedBuffer::Create(GrowthMode::kRemap, BitmapBytes(slots)));
  FERRY_ASSIGN_OR_RETURN(index_, HashIndex::Create(slots, options_.huge_pages));
  capacity_slots_ = std::min({rows_.size() / layout_.stride, live_.size() * 8, kMaxSlots});
  return Status::Ok();
}

Status ArrayHashMap::ResizeRows(size_t slots) {
  if (slots > kMaxSlots) {
    return ResourceExhausted("table would exceed 2^32-2 rows; shard the keys over more tables");
  }
  // The old registration must go before the buffer moves: its destructor drains target-side
  // accesses, and after it any access with the old key is refused instead of touching memory
  // that mremap has unmapped.
  region_.reset();
  Status s = rows_.Resize(slots * layout_.stride);
  if (s.ok()) s = live_.Resize(BitmapBytes(slots));
  capacity_slots_ = std::min({rows_.size() / layout_.stride, live_.size() * 8, kMaxSlots});
  if (transport_ != nullptr) {
    Status r = Register();
    if (s.ok()) s = r;
  }
  return s;
}

Status ArrayHashMap::GrowRows() {
  size_t want = std::min(std::max(capacity_slots_ * 2, kMinSlots), kMaxSlots);
  if (options_.growth == GrowthMode::kReserve) {
    want = std::min(want, rows_.reserved() / layout_.stride);
  }
  if (want <= capacity_slots_) {
    return ResourceExhausted("rows buffer is full at " + std::to_string(capacity_slots_) +
                             " rows (reserve exhausted); raise TableOptions::reserve_rows");
  }
  FERRY_RETURN_IF_ERROR(ResizeRows(want));
  ++growths_;
  return Status::Ok();
}

void ArrayHashMap::FreeSlot(uint32_t slot) {
  const uint64_t next = free_head_;
  std::memcpy(Row(slot), &next, sizeof next);  // the dead row's key word links the free list
  free_head_ = slot;
  ++free_count_;
}

Status ArrayHashMap::FindBatch(std::span<const uint64_t> keys, std::span<uint32_t> slots) const {
  if (keys.size() != slots.size()) {
    return InvalidArgument("FindBatch: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(slots.size()) + " slots");
  }
  ResolveBatch(keys, [slots](size_t i, uint32_t slot) { slots[i] = slot; });
  return Status::Ok();
}

Status ArrayHashMap::InsertBatch(std::span<const uint64_t> keys, std::span<uint32_t> slots,
                                 std::span<uint8_t> inserted) {
  if (keys.size() != slots.size() || (!inserted.empty() && inserted.size() != keys.size())) {
    return InvalidArgument("InsertBatch: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(slots.size()) + " slots and " +
                           std::to_string(inserted.size()) + " flags");
  }
  // Home groups are prefetched kAhead keys in advance: about what the core's fill buffers track
  // at once (two lines per key). A rebuild in between only wastes some prefetches (they are
  // hints, never correctness).
  // Each key is hashed once, when its group is prefetched; the ring keeps the fingerprints.
  constexpr size_t kAhead = 8;
  uint32_t fp[kAhead];
  const size_t n = keys.size();
  for (size_t j = 0; j < std::min(n, kAhead); ++j) fp[j] = index_.Prefetch(keys[j]);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key_fp = fp[i % kAhead];
    if (i + kAhead < n) fp[i % kAhead] = index_.Prefetch(keys[i + kAhead]);
    FERRY_ASSIGN_OR_RETURN(const Insertion ins, InsertWithFp(keys[i], key_fp));
    slots[i] = ins.slot;
    if (!inserted.empty()) inserted[i] = ins.inserted ? 1 : 0;
  }
  return Status::Ok();
}

Result<ArrayHashMap::Insertion> ArrayHashMap::Insert(uint64_t key) {
  return InsertWithFp(key, HashIndex::Fingerprint(key));
}

Result<ArrayHashMap::Insertion> ArrayHashMap::InsertWithFp(uint64_t key, uint32_t fp) {
  // An index rebuild moves every entry, so it happens before the probe (from the rows as they
  // are: this key has no row yet); row growth (GrowRows) does not touch the index, so the
  // insertion point found by the probe stays valid across it.
  if (index_.growth_left() == 0) FERRY_RETURN_IF_ERROR(index_.EnsureRoomForOne(Keys()));
  HashIndex::InsertPoint at;
  const uint32_t slot = index_.FindForInsertWithFp(key, fp, KeyAt(), &at);
  if (slot != kNoSlot) return Insertion{Row(slot), slot, false};
  return InsertAt(key, at);
}

Result<ArrayHashMap::Insertion> ArrayHashMap::InsertAt(uint64_t key,
                                                       const HashIndex::InsertPoint& at) {
  if (options_.max_rows != 0 && size_ >= options_.max_rows) {
    return ResourceExhausted("table is at its max_rows bound of " +
                             std::to_string(options_.max_rows) + "; evict rows first");
  }
  // The hot path builds no Status: an insert is ~100 instructions, and an ok Status or Result
  // costs a handful each time it is made, moved and destroyed.
  if (free_head_ == kNoSlot && high_water_ == capacity_slots_) FERRY_RETURN_IF_ERROR(GrowRows());
  uint32_t slot;
  if (free_head_ != kNoSlot) {
    slot = free_head_;
    free_head_ = static_cast<uint32_t>(RowKey(Row(slot)));
    --free_count_;
  } else {
    slot = high_water_++;
  }
  uint8_t* row = Row(slot);
  std::memset(row, 0, layout_.stride);
  std::memcpy(row, &key, sizeof key);
  if (!index_.TryInsertAt(at, slot)) {
    FreeSlot(slot);
    return Internal("index insertion point of key " + std::to_string(key) + " is stale");
  }
  SetLive(slot, true);
  ++size_;
  return Insertion{row, slot, true};
}

float ArrayHashMap::DecayedScore(const uint8_t* row) const {
  const RowMeta* m = Meta(row);
  // Seen this tick (most sightings are): nothing has decayed, and exp2 is skipped.
  if (options_.score_half_life <= 0 || m->last_seen == tick_) return m->score;
  const double age = static_cast<double>(tick_ - m->last_seen);
  return static_cast<float>(m->score * std::exp2(-age / options_.score_half_life));
}

Result<ArrayHashMap::Insertion> ArrayHashMap::AccessWithFp(uint64_t key, uint32_t fp) {
  if (index_.growth_left() == 0) {
    FERRY_RETURN_IF_ERROR(index_.EnsureRoomForOne(Keys()));  // before the probe (see Insert)
  }
  HashIndex::InsertPoint at;
  const uint32_t slot = index_.FindForInsertWithFp(key, fp, KeyAt(), &at);
  Insertion result{nullptr, slot, false};
  if (slot == kNoSlot) {
    const AdmissionOptions& adm = options_.admission;
    if (adm.kind == AdmissionOptions::Kind::kFrequency) {
      if (filter_.Add(key) < adm.min_count) return result;
    } else if (adm.kind == AdmissionOptions::Kind::kProbability) {
      rng_ ^= rng_ << 13;  // xorshift64
      rng_ ^= rng_ >> 7;
      rng_ ^= rng_ << 17;
      const double u = static_cast<double>(rng_ >> 11) * 0x1.0p-53;
      if (u >= adm.probability) return result;
    }
    if (options_.max_rows != 0 && size_ >= options_.max_rows) {
      const size_t target = options_.max_rows - std::max<size_t>(1, options_.max_rows / 16);
      if (options_.metadata) {
        FERRY_RETURN_IF_ERROR(EvictToCapacity(target).status());
      }
      // Eviction reshaped the index: the insertion point is stale, so probe again.
      FERRY_ASSIGN_OR_RETURN(result, Insert(key));
    } else {
      FERRY_ASSIGN_OR_RETURN(result, InsertAt(key, at));
    }
  } else {
    result.row = Row(slot);
  }
  if (options_.metadata) {
    RowMeta* m = Meta(result.row);
    m->score = DecayedScore(result.row) + 1.0f;
    m->last_seen = tick_;
  }
  return result;
}

bool ArrayHashMap::Erase(uint64_t key) {
  const uint32_t slot = FindSlot(key);
  if (slot == kNoSlot) return false;
  index_.Erase(key, slot);
  SetLive(slot, false);
  FreeSlot(slot);
  --size_;
  return true;
}

Status ArrayHashMap::Reserve(size_t rows) {
  if (rows > capacity_slots_) {
    if (options_.growth == GrowthMode::kReserve && rows * layout_.stride > rows_.reserved()) {
      return ResourceExhausted("Reserve(" + std::to_string(rows) +
                               ") exceeds the address-space reservation; raise reserve_rows");
    }
    FERRY_RETURN_IF_ERROR(ResizeRows(rows));
    ++growths_;
  }
  return index_.Reserve(rows, Keys());
}

Status ArrayHashMap::Compact() {
  uint32_t lo = 0;
  uint32_t hi = high_water_;
  for (;;) {
    while (lo < hi && IsLive(lo)) ++lo;
    while (hi > lo && !IsLive(hi - 1)) --hi;
    if (lo >= hi) break;
    // lo is a hole below the live row hi-1.
    const uint32_t from = hi - 1;
    const uint64_t key = RowKey(Row(from));
    std::memcpy(Row(lo), Row(from), layout_.stride);
    if (!index_.Relocate(key, from, lo)) {
      return Internal("compaction lost the index entry of key " + std::to_string(key));
    }
    SetLive(lo, true);
    SetLive(from, false);
  }
  const uint32_t old_high = high_water_;
  high_water_ = static_cast<uint32_t>(size_);
  free_head_ = kNoSlot;
  free_count_ = 0;
  // Deregistered before the discard: a registration pins the pages, and RDMA would keep
  // reaching the discarded ones (ResizeRows registers again).
  region_.reset();
  rows_.Discard(static_cast<size_t>(high_water_) * layout_.stride,
                static_cast<size_t>(old_high - high_water_) * layout_.stride);
  // Shrinking never moves a kRemap buffer, but the rows did move: a new epoch either way.
  return ResizeRows(std::max<size_t>(size_, kMinSlots));
}

Status ArrayHashMap::Clear() {
  // A registration pins the rows' pages: after the discard, RDMA through the old registration
  // would reach the discarded pages while the table writes fresh ones. So deregister first and
  // register again afterwards (a new epoch: descriptors of the old contents are stale).
  region_.reset();
  index_.Clear();
  std::memset(live_.data(), 0, live_.size());
  rows_.Discard(0, rows_.size());
  high_water_ = 0;
  free_head_ = kNoSlot;
  free_count_ = 0;
  size_ = 0;
  // As a new table: no sightings, tick 0, the admission coin from its seed.
  filter_ = NewFilter(options_.admission);
  rng_ = decltype(rng_)(options_.admission.seed * 0x9e3779b97f4a7c15ull + 1);
  tick_ = 0;
  if (transport_ != nullptr) return Register();
  return Status::Ok();
}

Result<size_t> ArrayHashMap::EraseWhere(bool (*pred)(const ArrayHashMap&, const uint8_t*, double),
                                        double arg) {
  if (!options_.metadata) return InvalidArgument("eviction needs a table with metadata");
  std::vector<uint64_t> victims;
  ForEach([&](uint32_t, const uint8_t* row) {
    if (pred(*this, row, arg)) victims.push_back(RowKey(row));
  });
  for (uint64_t key : victims) Erase(key);
  if (eviction_log_ != nullptr)
    eviction_log_->insert(eviction_log_->end(), victims.begin(), victims.end());
  return victims.size();
}

Result<size_t> ArrayHashMap::EvictUnseen(uint32_t max_age) {
  return EraseWhere(
      [](const ArrayHashMap& m, const uint8_t* row, double age) {
        return static_cast<double>(m.tick_ - Meta(row)->last_seen) > age;
      },
      static_cast<double>(max_age));
}

Result<size_t> ArrayHashMap::EvictBelowScore(float threshold) {
  return EraseWhere(
      [](const ArrayHashMap& m, const uint8_t* row, double t) { return m.DecayedScore(row) < t; },
      threshold);
}

Result<size_t> ArrayHashMap::EvictToCapacity(size_t target) {
  if (!options_.metadata) return InvalidArgument("eviction needs a table with metadata");
  if (size_ <= target) return size_t{0};
  std::vector<std::pair<float, uint64_t>> scored;
  scored.reserve(size_);
  ForEach(
      [&](uint32_t, const uint8_t* row) { scored.emplace_back(DecayedScore(row), RowKey(row)); });
  const size_t victims = size_ - target;
  std::nth_element(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(victims - 1),
                   scored.end());
  for (size_t i = 0; i < victims; ++i) {
    Erase(scored[i].second);
    if (eviction_log_ != nullptr) eviction_log_->push_back(scored[i].second);
  }
  return victims;
}

void ArrayHashMap::Touch(uint8_t* row) {
  if (!options_.metadata) return;
  RowMeta* m = Meta(row);
  m->score = DecayedScore(row) + 1.0f;
  m->last_seen = tick_;
}

}  // namespace ferry::ps
