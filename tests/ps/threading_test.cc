// The threading model: one writer per shard (one thread per shard), and many concurrent readers
// of a table no one is mutating.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ps/store/array_hash_map.h"

namespace ferry::ps {
namespace {

TEST(Threading, OneThreadPerShard) {
  constexpr uint32_t kShards = 4;
  std::vector<std::unique_ptr<ArrayHashMap>> shards;
  TableOptions o;
  o.dim = 2;
  for (uint32_t s = 0; s < kShards; ++s)
    shards.push_back(std::move(ArrayHashMap::Create(o).value()));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < kShards; ++s) {
    threads.emplace_back([&, s] {
      ArrayHashMap& m = *shards[s];
      for (uint64_t k = 0; k < 400000; ++k) {
        if (ArrayHashMap::ShardOf(k, kShards) != s) continue;
        auto r = m.Insert(k);
        if (!r.ok()) {
          failures++;
          return;
        }
        m.Embedding(r->row)[0] = static_cast<float>(k);
        if (k % 3 == 0 && !m.Erase(k)) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  size_t total = 0;
  for (auto& m : shards) total += m->size();
  EXPECT_EQ(total, 400000u - 133334u);
  for (uint32_t s = 0; s < kShards; ++s) {
    EXPECT_GT(shards[s]->size(), 50000u) << "ShardOf spreads keys";
  }
  for (uint64_t k = 0; k < 400000; ++k) {
    const uint8_t* row = shards[ArrayHashMap::ShardOf(k, kShards)]->Find(k);
    ASSERT_EQ(row != nullptr, k % 3 != 0);
    if (row) {
      ASSERT_EQ(reinterpret_cast<const float*>(row + 24)[0], static_cast<float>(k));
    }
  }
}

TEST(Threading, ConcurrentReadersOfAQuiescentTable) {
  TableOptions o;
  o.dim = 4;
  auto m = std::move(ArrayHashMap::Create(o).value());
  for (uint64_t k = 0; k < 200000; ++k) {
    auto r = m->Insert(k * 13);
    ASSERT_TRUE(r.ok());
    m->Embedding(r->row)[3] = static_cast<float>(k);
  }
  const ArrayHashMap& view = *m;
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (uint64_t k = static_cast<uint64_t>(t); k < 200000; k += 2) {
        const uint8_t* row = view.Find(k * 13);
        if (row == nullptr || reinterpret_cast<const float*>(row + 24)[3] != static_cast<float>(k))
          bad++;
        if (view.Find(k * 13 + 1) != nullptr) bad++;
      }
      std::vector<Segment> segs;
      std::vector<uint64_t> keys = {13, 26, 39};
      if (!view.RowSegments(keys, RowField::kEmbedding, 0, 16, &segs, nullptr).ok() ||
          segs.size() != 3)
        bad++;
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace ferry::ps
