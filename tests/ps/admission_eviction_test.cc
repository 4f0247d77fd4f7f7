#include <gtest/gtest.h>

#include <set>

#include "ps/store/array_hash_map.h"

namespace ferry::ps {
namespace {

std::unique_ptr<ArrayHashMap> MakeMap(const TableOptions& o) {
  auto m = ArrayHashMap::Create(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

TEST(CountMinFilter, NeverUnderCountsAndAges) {
  CountMinFilter f(1024);
  for (int i = 0; i < 5; ++i) f.Add(11);
  for (uint64_t k = 100; k < 2000; ++k) f.Add(k);
  EXPECT_GE(f.Estimate(11), 5u);
  EXPECT_LE(f.Estimate(11), 8u);
  f.Age();
  EXPECT_GE(f.Estimate(11), 2u);
  EXPECT_LE(f.Estimate(11), 4u);
}

TEST(Admission, FrequencyThreshold) {
  TableOptions o;
  o.admission.kind = AdmissionOptions::Kind::kFrequency;
  o.admission.min_count = 3;
  auto m = MakeMap(o);
  auto a = m->Access(5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->row, nullptr);
  EXPECT_EQ(m->Access(5)->row, nullptr);
  auto third = m->Access(5);
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->row, nullptr);
  EXPECT_TRUE(third->inserted);
  EXPECT_EQ(m->size(), 1u);
  // One-off keys (the long tail) mostly never get a row.
  for (uint64_t k = 1000; k < 11000; ++k) ASSERT_TRUE(m->Access(k).ok());
  EXPECT_LT(m->size(), 1 + 10000 / 20) << "count-min false admissions should be rare";
  // Clear starts admission afresh: key 5 needs its three sightings again.
  m->AdvanceTick(4);
  ASSERT_TRUE(m->Clear().ok());
  EXPECT_EQ(m->tick(), 0u);
  EXPECT_EQ(m->Access(5)->row, nullptr);
  EXPECT_EQ(m->Access(5)->row, nullptr);
  EXPECT_NE(m->Access(5)->row, nullptr);
}

TEST(Admission, Probability) {
  TableOptions o;
  o.admission.kind = AdmissionOptions::Kind::kProbability;
  o.admission.probability = 0.25;
  o.admission.seed = 3;
  auto m = MakeMap(o);
  for (uint64_t k = 0; k < 20000; ++k) ASSERT_TRUE(m->Access(k).ok());
  EXPECT_GT(m->size(), 4400u);
  EXPECT_LT(m->size(), 5600u);
  o.admission.probability = 0.0;
  auto none = MakeMap(o);
  for (uint64_t k = 0; k < 1000; ++k) ASSERT_TRUE(none->Access(k).ok());
  EXPECT_EQ(none->size(), 0u);
}

TEST(Eviction, UnseenForNTicks) {
  auto m = MakeMap(TableOptions{});
  for (uint64_t k = 0; k < 100; ++k) ASSERT_TRUE(m->Access(k).ok());
  m->AdvanceTick(10);
  for (uint64_t k = 0; k < 100; k += 2) ASSERT_TRUE(m->Access(k).ok());  // evens seen at 10
  m->AdvanceTick(5);
  auto n = m->EvictUnseen(8);  // odds are 15 ticks old, evens 5
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 50u);
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(m->Find(k) != nullptr, k % 2 == 0) << k;
}

TEST(Eviction, DecayedScoreBelowThreshold) {
  TableOptions o;
  o.score_half_life = 10;
  auto m = MakeMap(o);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(m->Access(1).ok());  // score 8
  ASSERT_TRUE(m->Access(2).ok());                              // score 1
  m->AdvanceTick(20);                                          // two half-lives: 2 and 0.25
  EXPECT_NEAR(m->DecayedScore(m->Find(1)), 2.0, 1e-4);
  auto n = m->EvictBelowScore(1.0f);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_NE(m->Find(1), nullptr);
  EXPECT_EQ(m->Find(2), nullptr);
}

TEST(Eviction, CapacityBoundKeepsTheHottestRows) {
  TableOptions o;
  o.max_rows = 64;
  auto m = MakeMap(o);
  // Keys 0..15 are hot (seen 10 times); the rest stream past once.
  for (int round = 0; round < 10; ++round) {
    for (uint64_t k = 0; k < 16; ++k) ASSERT_TRUE(m->Access(k).ok());
  }
  for (uint64_t k = 1000; k < 3000; ++k) {
    auto r = m->Access(k);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_NE(r->row, nullptr);
    ASSERT_LE(m->size(), 64u);
  }
  for (uint64_t k = 0; k < 16; ++k) EXPECT_NE(m->Find(k), nullptr) << k;
  auto n = m->EvictToCapacity(20);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(m->size(), 20u);
  for (uint64_t k = 0; k < 16; ++k) EXPECT_NE(m->Find(k), nullptr) << k;
}

TEST(Eviction, NeedsMetadata) {
  TableOptions o;
  o.metadata = false;
  auto m = MakeMap(o);
  EXPECT_EQ(m->EvictUnseen(1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(m->EvictToCapacity(0).status().code(), Code::kInvalidArgument);
}

TEST(Metadata, MarkUpdatedBumpsVersion) {
  auto m = MakeMap(TableOptions{});
  auto r = m->Insert(9);
  ASSERT_TRUE(r.ok());
  ArrayHashMap::MarkUpdated(r->row);
  ArrayHashMap::MarkUpdated(r->row);
  EXPECT_EQ(ArrayHashMap::Meta(r->row)->version, 2u);
  EXPECT_EQ(ArrayHashMap::Meta(r->row)->update_count, 2u);
}

}  // namespace
}  // namespace ferry::ps
