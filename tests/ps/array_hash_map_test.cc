#include "ps/store/array_hash_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_set>
#include <vector>

#include "tests/common/fake_transport.h"

namespace ferry::ps {
namespace {

std::unique_ptr<ArrayHashMap> Make(TableOptions o = {}) {
  auto m = ArrayHashMap::Create(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

TEST(RowLayout, FieldsAreContiguousAndAligned) {
  const RowLayout l = RowLayout::For(16, OptimizerStateFloats(Optimizer::kFtrl, 16), true);
  EXPECT_EQ(l.embedding_offset, 24u);
  EXPECT_EQ(l.state_offset, 24u + 64u);
  EXPECT_EQ(l.stride, 24u + 64u + 128u);
  EXPECT_EQ(l.stride % 8, 0u);
  auto v = l.Field(RowField::kVersionedEmbedding);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->offset, 20u);  // RowMeta::version sits right before the embedding
  EXPECT_EQ(v->length, 68u);
  const RowLayout bare = RowLayout::For(1, 0, false);
  EXPECT_EQ(bare.stride, 16u);
  EXPECT_EQ(bare.Field(RowField::kVersionedEmbedding).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(OptimizerStateFloats(Optimizer::kAdagrad, 8), 8u);
}

TEST(ArrayHashMap, InsertFindEraseAndSlotReuse) {
  auto m = Make();
  auto a = m->Insert(42);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->inserted);
  m->Embedding(a->row)[0] = 1.5f;
  auto again = m->Insert(42);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->inserted);
  EXPECT_EQ(again->slot, a->slot);
  EXPECT_EQ(m->Embedding(m->Find(42))[0], 1.5f);
  EXPECT_EQ(ArrayHashMap::RowKey(m->Find(42)), 42u);
  ASSERT_TRUE(m->Insert(0).ok());
  ASSERT_TRUE(m->Insert(~0ull).ok());
  EXPECT_NE(m->Find(0), nullptr);
  EXPECT_NE(m->Find(~0ull), nullptr);
  EXPECT_EQ(m->size(), 3u);
  EXPECT_TRUE(m->Erase(42));
  EXPECT_FALSE(m->Erase(42));
  EXPECT_EQ(m->Find(42), nullptr);
  EXPECT_EQ(m->free_slots(), 1u);
  auto b = m->Insert(7);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->slot, a->slot) << "the freed slot is reused first";
  EXPECT_EQ(m->Embedding(b->row)[0], 0.0f) << "a reused row starts zeroed";
  EXPECT_EQ(m->high_water(), 3u);
  ASSERT_TRUE(m->Clear().ok());
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(m->Find(7), nullptr);
  EXPECT_EQ(m->Find(0), nullptr);
  size_t live = 0;
  m->ForEach([&](uint32_t, const uint8_t*) { ++live; });
  EXPECT_EQ(live, 0u);
  auto c = m->Insert(7);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->slot, 0u);
}

TEST(ArrayHashMap, IterationIsInSlotOrder) {
  auto m = Make();
  for (uint64_t k = 100; k < 1100; ++k) ASSERT_TRUE(m->Insert(k * 31).ok());
  for (uint64_t k = 100; k < 1100; k += 3) ASSERT_TRUE(m->Erase(k * 31));
  uint32_t prev = 0;
  bool first = true;
  size_t n = 0;
  m->ForEach([&](uint32_t slot, const uint8_t* row) {
    if (!first) {
      EXPECT_GT(slot, prev);
    }
    first = false;
    prev = slot;
    EXPECT_EQ(m->FindSlot(ArrayHashMap::RowKey(row)), slot);
    ++n;
  });
  EXPECT_EQ(n, m->size());
}

TEST(ArrayHashMap, ReservePreventsGrowth) {
  auto m = Make();
  ASSERT_TRUE(m->Reserve(100000).ok());
  const uint64_t growths = m->growths();
  const size_t index_bytes = m->index_bytes();
  for (uint64_t k = 0; k < 100000; ++k) ASSERT_TRUE(m->Insert(k).ok());
  EXPECT_EQ(m->growths(), growths);
  EXPECT_EQ(m->index_bytes(), index_bytes);
}

TEST(ArrayHashMap, CompactionFillsHolesAndShrinks) {
  TableOptions o;
  o.dim = 4;
  auto m = Make(o);
  for (uint64_t k = 0; k < 20000; ++k) {
    auto r = m->Insert(k);
    ASSERT_TRUE(r.ok());
    m->Embedding(r->row)[3] = static_cast<float>(k);
  }
  const size_t before = m->rows_bytes();
  for (uint64_t k = 0; k < 20000; ++k) {
    if (k % 5 != 0) {
      ASSERT_TRUE(m->Erase(k));
    }
  }
  ASSERT_TRUE(m->Compact().ok());
  EXPECT_EQ(m->high_water(), 4000u);
  EXPECT_EQ(m->free_slots(), 0u);
  EXPECT_LT(m->rows_bytes(), before);
  for (uint64_t k = 0; k < 20000; ++k) {
    const uint8_t* row = m->Find(k);
    if (k % 5 != 0) {
      EXPECT_EQ(row, nullptr);
      continue;
    }
    ASSERT_NE(row, nullptr);
    EXPECT_LT(m->FindSlot(k), 4000u);
    EXPECT_EQ(m->Embedding(const_cast<uint8_t*>(row))[3], static_cast<float>(k));
  }
  ASSERT_TRUE(m->Insert(99999).ok());
  EXPECT_EQ(m->FindSlot(99999), 4000u);
}

TEST(ArrayHashMap, ReserveModeKeepsTheBaseAddress) {
  TableOptions o;
  o.growth = GrowthMode::kReserve;
  o.initial_rows = 64;
  o.reserve_rows = 1u << 18;
  auto m = Make(o);
  const uint8_t* base = m->Row(0);
  for (uint64_t k = 0; k < (1u << 18); ++k) ASSERT_TRUE(m->Insert(k).ok());
  EXPECT_EQ(m->Row(0), base);
  EXPECT_GT(m->growths(), 5u);
  // The reservation is a hard bound in this mode.
  bool exhausted = false;
  for (uint64_t k = 1u << 18; k < (1u << 18) + 100000 && !exhausted; ++k) {
    auto r = m->Insert(k);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kResourceExhausted) << r.status().ToString();
      exhausted = true;
    }
  }
  EXPECT_TRUE(exhausted);
}

TEST(ArrayHashMap, GrowthReregistersAndBumpsTheEpoch) {
  testing::FakeTransport t;
  TableOptions o;
  o.dim = 2;
  o.initial_rows = 64;
  auto m = Make(o);
  ASSERT_TRUE(m->AttachTransport(&t, kAccessRemoteRead).ok());
  EXPECT_EQ(m->epoch(), 1u);
  EXPECT_EQ(m->descriptor().epoch, 1u);
  std::vector<uint64_t> seen_epochs{m->epoch()};
  for (uint64_t k = 0; k < 300000; ++k) {
    const uint64_t before = m->epoch();
    auto r = m->Insert(k * 7919);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    m->Embedding(r->row)[1] = static_cast<float>(k);
    if (m->epoch() != before) {
      EXPECT_EQ(m->epoch(), before + 1);
      EXPECT_EQ(m->CheckEpoch(before).code(), Code::kStale);
      EXPECT_TRUE(m->CheckEpoch(m->epoch()).ok());
      EXPECT_EQ(m->descriptor().epoch, m->epoch());
      EXPECT_EQ(m->descriptor().addr, reinterpret_cast<uint64_t>(m->Row(0)));
      EXPECT_EQ(m->descriptor().length, m->rows_bytes());
      seen_epochs.push_back(m->epoch());
    }
  }
  EXPECT_GE(seen_epochs.size(), 12u) << "many growth cycles";
  EXPECT_EQ(t.overlapping_registrations(), 0) << "old region must be gone before the remap";
  EXPECT_EQ(t.live(), 1);
  for (uint64_t k = 0; k < 300000; ++k) {
    const uint8_t* row = m->Find(k * 7919);
    ASSERT_NE(row, nullptr);
    ASSERT_EQ(m->Embedding(const_cast<uint8_t*>(row))[1], static_cast<float>(k));
  }
  Status stale = m->CheckEpoch(1);
  EXPECT_EQ(stale.code(), Code::kStale);
  EXPECT_NE(stale.message().find("stale"), std::string::npos);
  const uint64_t e = m->epoch();
  ASSERT_TRUE(m->Compact().ok());
  EXPECT_EQ(m->epoch(), e + 1) << "compaction moves rows: new epoch";
  // Clear discards the pages a registration pinned: it must register the rows again.
  ASSERT_TRUE(m->Clear().ok());
  EXPECT_EQ(m->epoch(), e + 2) << "clear re-registers";
  EXPECT_EQ(m->CheckEpoch(e + 1).code(), Code::kStale);
  EXPECT_TRUE(m->CheckEpoch(m->epoch()).ok());
  EXPECT_EQ(t.live(), 1);
  EXPECT_EQ(t.overlapping_registrations(), 0) << "old region must be gone before the discard";
  m->DetachTransport();
  EXPECT_EQ(t.live(), 0);
  EXPECT_EQ(m->CheckEpoch(m->epoch()).code(), Code::kNotFound);
}

TEST(ArrayHashMap, FailedRegistrationIsReportedAndOldEpochStaysStale) {
  testing::FakeTransport t;
  TableOptions o;
  o.initial_rows = 64;
  auto m = Make(o);
  ASSERT_TRUE(m->AttachTransport(&t, kAccessRemoteRead).ok());
  const size_t cap = m->capacity();
  for (uint64_t k = 0; k < cap; ++k) ASSERT_TRUE(m->Insert(k).ok());
  t.FailNextRegistration();
  auto r = m->Insert(1000);  // grows
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(m->CheckEpoch(1).code(), Code::kNotFound) << "no registration is current";
}

TEST(ArrayHashMap, GatherProducesSegmentsAndMissing) {
  TableOptions o;
  o.dim = 4;
  auto m = Make(o);
  for (uint64_t k = 1; k <= 10; ++k) ASSERT_TRUE(m->Insert(k).ok());
  const RowLayout& l = m->layout();
  std::vector<uint64_t> keys = {3, 4, 5, 77, 1};
  std::vector<Segment> segs;
  std::vector<size_t> missing;
  ASSERT_TRUE(m->RowSegments(keys, RowField::kEmbedding, 1000, 16, &segs, &missing).ok());
  ASSERT_EQ(missing, std::vector<size_t>{3});
  ASSERT_EQ(segs.size(), 4u);  // embeddings are not adjacent in the rows: no merge
  EXPECT_EQ(segs[0].local_offset, m->FindSlot(3) * l.stride + l.embedding_offset);
  EXPECT_EQ(segs[0].remote_offset, 1000u);
  EXPECT_EQ(segs[3].remote_offset, 1000u + 4 * 16);
  EXPECT_EQ(segs[3].length, 16u);
  // Whole rows of consecutive slots to consecutive destinations merge into one segment.
  segs.clear();
  ASSERT_TRUE(
      m->RowSegments(std::vector<uint64_t>{3, 4, 5}, RowField::kRow, 0, l.stride, &segs, nullptr)
          .ok());
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].length, 3u * l.stride);
  EXPECT_EQ(m->RowSegments(keys, RowField::kEmbedding, 0, 8, &segs, nullptr).code(),
            Code::kInvalidArgument);
}

TEST(ArrayHashMap, RejectsBadOptions) {
  TableOptions o;
  o.dim = 0;
  EXPECT_EQ(ArrayHashMap::Create(o).status().code(), Code::kInvalidArgument);
  o.dim = 4;
  o.admission.kind = AdmissionOptions::Kind::kProbability;
  o.admission.probability = 1.5;
  EXPECT_EQ(ArrayHashMap::Create(o).status().code(), Code::kInvalidArgument);
}

TEST(ArrayHashMap, MaxRowsBoundOnInsert) {
  TableOptions o;
  o.max_rows = 10;
  auto m = Make(o);
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(m->Insert(k).ok());
  EXPECT_EQ(m->Insert(10).status().code(), Code::kResourceExhausted);
  EXPECT_TRUE(m->Insert(3).ok()) << "existing keys are still found at the bound";
}

}  // namespace
}  // namespace ferry::ps

namespace ferry::ps {
namespace {

// shareable_rows: the rows live in a published memfd mapping through every growth (so a
// same-host ucx peer can map them), and rows survive the moves intact.
TEST(ArrayHashMap, ShareableRowsStayPublishedAndIntactAcrossGrowth) {
  TableOptions o;
  o.dim = 4;
  o.initial_rows = 16;
  o.shareable_rows = true;
  auto m = Make(o);
  ASSERT_NE(m, nullptr);
  constexpr uint64_t kKeys = 50000;  // ~12 doublings from 16 rows
  for (uint64_t k = 1; k <= kKeys; ++k) {
    auto r = m->Insert(k * 0x9e3779b97f4a7c15ull);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    m->Embedding(r->row)[0] = static_cast<float>(k);
    if (k % 5000 == 0) {
      auto* row = m->Find(k * 0x9e3779b97f4a7c15ull);
      ASSERT_NE(row, nullptr);
      EXPECT_GE(FindShareableBacking(row, 1).fd, 0) << "rows not published after growth, k=" << k;
    }
  }
  for (uint64_t k = 1; k <= kKeys; ++k) {
    auto* row = m->Find(k * 0x9e3779b97f4a7c15ull);
    ASSERT_NE(row, nullptr) << k;
    ASSERT_EQ(m->Embedding(row)[0], static_cast<float>(k)) << k;
  }
  TableOptions plain = o;
  plain.shareable_rows = false;
  auto p = Make(plain);
  auto r = p->Insert(1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(FindShareableBacking(r->row, 1).fd, -1) << "ordinary tables stay anonymous memory";
}

}  // namespace
}  // namespace ferry::ps
