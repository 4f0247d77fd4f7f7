// The fused find-or-insert probe (HashIndex::FindForInsert + InsertAt, used by
// ArrayHashMap::Insert) and the batch APIs (FindBatch, InsertBatch with its inserted flags),
// checked against the single-key calls and std::unordered_map.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "ps/store/array_hash_map.h"
#include "ps/store/hash_index.h"

namespace ferry::ps {
namespace {

TEST(HashIndexFused, FindForInsertMatchesFindAcrossRebuilds) {
  std::vector<uint64_t> keys;  // slot -> key, standing in for the rows buffer
  std::vector<uint64_t> live;  // every slot is live
  auto index = std::move(HashIndex::Create(16).value());
  const auto key_at = [&keys](uint32_t s) { return keys[s]; };
  std::mt19937_64 rng(11);
  std::vector<uint64_t> pool(5000);
  for (auto& k : pool) k = rng();
  size_t rebuilds = 0;
  for (int op = 0; op < 100000; ++op) {
    const uint64_t key = pool[rng() % pool.size()];
    const size_t buckets = index.num_buckets();
    const RowKeys rows{reinterpret_cast<const uint8_t*>(keys.data()), 8, live.data(), keys.size()};
    ASSERT_TRUE(index.EnsureRoomForOne(rows).ok());
    rebuilds += index.num_buckets() != buckets;
    HashIndex::InsertPoint at;
    const uint32_t got = index.FindForInsert(key, key_at, &at);
    ASSERT_EQ(got, index.Find(key, key_at));
    if (got == HashIndex::kNoSlot) {
      keys.push_back(key);
      live.resize(keys.size() / 64 + 1);
      live[(keys.size() - 1) / 64] |= 1ull << ((keys.size() - 1) % 64);
      ASSERT_TRUE(index.InsertAt(at, static_cast<uint32_t>(keys.size() - 1)).ok());
      // The insertion point is used up: a second insert there is refused.
      ASSERT_EQ(index.InsertAt(at, 0).code(), Code::kInternal);
    } else {
      ASSERT_EQ(keys[got], key);
    }
  }
  EXPECT_EQ(index.size(), keys.size());
  EXPECT_GE(rebuilds, 5u);  // 64 buckets grew to hold 5000 keys
  for (uint32_t s = 0; s < keys.size(); ++s) ASSERT_EQ(index.Find(keys[s], key_at), s);
}

void RunReferenceModel(GrowthMode growth, uint64_t seed) {
  TableOptions o;
  o.dim = 2;
  o.growth = growth;
  o.initial_rows = 64;
  o.reserve_rows = 1 << 18;
  auto m = std::move(ArrayHashMap::Create(o).value());
  std::unordered_map<uint64_t, float> ref;
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> pool(60000);
  for (auto& k : pool) k = (rng() % 3 == 0) ? rng() % 100000 : rng();  // dense and sparse ids
  std::vector<uint64_t> batch;
  std::vector<uint32_t> slots;
  for (int op = 0; op < 1000000; ++op) {
    const uint64_t key = pool[rng() % pool.size()];
    const unsigned r = static_cast<unsigned>(rng() % 100);
    if (r < 55) {
      auto ins = m->Insert(key);
      ASSERT_TRUE(ins.ok()) << ins.status().ToString();
      ASSERT_EQ(ins->inserted, ref.count(key) == 0) << "op " << op;
      ASSERT_EQ(ArrayHashMap::RowKey(ins->row), key);
      float* e = m->Embedding(ins->row);
      if (ins->inserted) {
        ASSERT_EQ(e[0], 0.0f);
        e[0] = static_cast<float>(op);
        ref[key] = e[0];
      } else {
        ASSERT_EQ(e[0], ref[key]);
      }
    } else if (r < 75) {
      ASSERT_EQ(m->Erase(key), ref.erase(key) == 1);
    } else if (r < 77) {
      // A batch insert of up to 50 keys (repeats inside the batch included).
      batch.resize(1 + rng() % 50);
      for (auto& k : batch) k = pool[rng() % pool.size()];
      slots.assign(batch.size(), ArrayHashMap::kNoSlot);
      std::vector<uint8_t> inserted(batch.size(), 7);
      ASSERT_TRUE(m->InsertBatch(batch, slots, inserted).ok());
      for (size_t i = 0; i < batch.size(); ++i) {
        ASSERT_EQ(slots[i], m->FindSlot(batch[i]));
        float* e = m->Embedding(m->Row(slots[i]));
        // Created by this batch exactly when absent before it and not repeated earlier in it.
        ASSERT_EQ(inserted[i], ref.count(batch[i]) == 0 ? 1 : 0) << "op " << op << " key " << i;
        if (ref.count(batch[i]) == 0) {
          ASSERT_EQ(e[0], 0.0f);
          e[0] = static_cast<float>(op) + 0.5f;
          ref[batch[i]] = e[0];
        } else {
          ASSERT_EQ(e[0], ref[batch[i]]);
        }
      }
    } else if (r < 78) {
      // A batch lookup of up to 100 keys (present, absent, repeated), compared with FindSlot.
      batch.resize(1 + rng() % 100);
      for (auto& k : batch) k = pool[rng() % pool.size()];
      slots.assign(batch.size(), 0);
      ASSERT_TRUE(m->FindBatch(batch, slots).ok());
      for (size_t i = 0; i < batch.size(); ++i) {
        const auto it = ref.find(batch[i]);
        if (it == ref.end()) {
          ASSERT_EQ(slots[i], ArrayHashMap::kNoSlot);
        } else {
          ASSERT_NE(slots[i], ArrayHashMap::kNoSlot);
          ASSERT_EQ(slots[i], m->FindSlot(batch[i]));
          ASSERT_EQ(m->Embedding(m->Row(slots[i]))[0], it->second);
        }
      }
    } else {
      const uint8_t* row = m->Find(key);
      const auto it = ref.find(key);
      ASSERT_EQ(row != nullptr, it != ref.end());
      if (row != nullptr) {
        ASSERT_EQ(reinterpret_cast<const float*>(row + m->layout().embedding_offset)[0],
                  it->second);
      }
    }
    ASSERT_EQ(m->size(), ref.size());
  }
  EXPECT_GT(m->growths(), 0u);
}

TEST(ArrayHashMapFused, ReferenceModelRemap) {
  RunReferenceModel(GrowthMode::kRemap, 1);
}
TEST(ArrayHashMapFused, ReferenceModelReserve) {
  RunReferenceModel(GrowthMode::kReserve, 2);
}

TEST(ArrayHashMapFused, BatchesRejectMismatchedSpans) {
  auto m = std::move(ArrayHashMap::Create(TableOptions{}).value());
  std::vector<uint64_t> keys(3, 1);
  std::vector<uint32_t> slots(2);
  EXPECT_EQ(m->FindBatch(keys, slots).code(), Code::kInvalidArgument);
  EXPECT_EQ(m->InsertBatch(keys, slots).code(), Code::kInvalidArgument);
  std::vector<uint32_t> three(3);
  std::vector<uint8_t> flags(2);
  EXPECT_EQ(m->InsertBatch(keys, three, flags).code(), Code::kInvalidArgument);
  EXPECT_EQ(m->size(), 0u);  // refused before inserting anything
  std::vector<uint32_t> empty;
  EXPECT_TRUE(m->FindBatch({}, empty).ok());
  EXPECT_TRUE(m->InsertBatch({}, empty).ok());
}

}  // namespace
}  // namespace ferry::ps
