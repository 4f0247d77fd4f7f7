// The ArrayHashMap against std::unordered_map on the same random operation sequences.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>

#include "ps/store/array_hash_map.h"
#include "tests/common/fake_transport.h"

namespace ferry::ps {
namespace {

struct Expected {
  float stamp;
  uint32_t last_seen;
};

class ReferenceModel : public ::testing::TestWithParam<std::tuple<uint64_t, GrowthMode>> {
 protected:
  void CheckAll(const ArrayHashMap& m, const std::unordered_map<uint64_t, Expected>& model) {
    ASSERT_EQ(m.size(), model.size());
    size_t n = 0;
    m.ForEach([&](uint32_t, const uint8_t* row) {
      auto it = model.find(ArrayHashMap::RowKey(row));
      ASSERT_NE(it, model.end());
      ASSERT_EQ(reinterpret_cast<const float*>(row + m.layout().embedding_offset)[2],
                it->second.stamp);
      ++n;
    });
    ASSERT_EQ(n, model.size());
    for (const auto& [key, e] : model) ASSERT_NE(m.FindSlot(key), ArrayHashMap::kNoSlot) << key;
  }
};

TEST_P(ReferenceModel, RandomOperationSequences) {
  const auto [seed, mode] = GetParam();
  std::mt19937_64 rng(seed);
  TableOptions o;
  o.dim = 3;
  o.initial_rows = 64;
  o.growth = mode;
  o.reserve_rows = 1u << 20;
  // Declared first, so it outlives the table whose registered regions name it.
  testing::FakeTransport transport;
  auto created = ArrayHashMap::Create(o);
  ASSERT_TRUE(created.ok());
  std::unique_ptr<ArrayHashMap> m = std::move(created).value();
  ASSERT_TRUE(m->AttachTransport(&transport, kAccessRemoteRead).ok());
  std::unordered_map<uint64_t, Expected> model;
  const std::string snap = ::testing::TempDir() + "ferry_ref_" + std::to_string(getpid()) + "_" +
                           std::to_string(seed) + ".snap";

  constexpr int kOps = 600000;  // two seeds x two modes: 2.4M operations in all
  uint64_t key_space = 1000;
  uint64_t epoch_checks = 0;
  for (int op = 0; op < kOps; ++op) {
    // The key space breathes: it widens (growth cycles) and narrows (deletions dominate).
    if (op % 50000 == 0) key_space = (op / 50000) % 3 == 2 ? 2000 : key_space * 4;
    const uint64_t key = HashIndex::Hash(rng() % key_space) ^ seed;  // arbitrary 64-bit ids
    const int r = static_cast<int>(rng() % 100);
    const uint64_t epoch_before = m->epoch();
    if (r < 40) {
      auto ins = m->Access(key);
      ASSERT_TRUE(ins.ok()) << ins.status().ToString();
      auto it = model.find(key);
      ASSERT_EQ(ins->inserted, it == model.end());
      float* emb = m->Embedding(ins->row);
      if (ins->inserted) {
        emb[2] = static_cast<float>(op);
        model[key] = {emb[2], m->tick()};
      } else {
        ASSERT_EQ(emb[2], it->second.stamp);
        it->second.last_seen = m->tick();
      }
    } else if (r < 70) {
      const uint8_t* row = m->Find(key);
      auto it = model.find(key);
      ASSERT_EQ(row != nullptr, it != model.end());
      if (row != nullptr) {
        ASSERT_EQ(ArrayHashMap::RowKey(row), key);
        ASSERT_EQ(reinterpret_cast<const float*>(row + m->layout().embedding_offset)[2],
                  it->second.stamp);
      }
    } else if (r < 95) {
      ASSERT_EQ(m->Erase(key), model.erase(key) == 1);
    } else if (r < 96) {
      ASSERT_TRUE(m->Reserve(m->size() + rng() % 5000).ok());
    } else {
      m->AdvanceTick();
    }
    if (m->epoch() != epoch_before) {
      ASSERT_EQ(m->CheckEpoch(epoch_before).code(), Code::kStale);
      ASSERT_EQ(m->descriptor().epoch, m->epoch());
      ASSERT_EQ(m->descriptor().addr, reinterpret_cast<uint64_t>(m->Row(0)));
      ++epoch_checks;
    }
    if (op % 100000 == 99999) {  // evict: unseen for more than 20 ticks
      auto evicted = m->EvictUnseen(20);
      ASSERT_TRUE(evicted.ok());
      size_t expect = 0;
      for (auto it = model.begin(); it != model.end();) {
        if (m->tick() - it->second.last_seen > 20) {
          it = model.erase(it);
          ++expect;
        } else {
          ++it;
        }
      }
      ASSERT_EQ(*evicted, expect);
    }
    if (op % 150000 == 74999) {
      ASSERT_TRUE(m->Compact().ok());
      ASSERT_EQ(m->free_slots(), 0u);
      CheckAll(*m, model);
    }
    if (op % 200000 == 199999) {  // snapshot and restore, then carry on with the restored table
      ASSERT_TRUE(m->SaveSnapshot(snap).ok());
      auto restored = ArrayHashMap::LoadSnapshot(snap, o);
      ASSERT_TRUE(restored.ok()) << restored.status().ToString();
      m->DetachTransport();
      m = std::move(restored).value();
      ASSERT_TRUE(m->AttachTransport(&transport, kAccessRemoteRead).ok());
      CheckAll(*m, model);
    }
    ASSERT_EQ(m->size(), model.size());
  }
  CheckAll(*m, model);
  EXPECT_GE(m->growths() + epoch_checks, 10u);
  EXPECT_EQ(transport.overlapping_registrations(), 0);
  std::remove(snap.c_str());
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReferenceModel,
                         ::testing::Combine(::testing::Values(1u, 20261121u),
                                            ::testing::Values(GrowthMode::kRemap,
                                                              GrowthMode::kReserve)));

}  // namespace
}  // namespace ferry::ps
