#include "ps/hash_index.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace ferry::ps {
namespace {

// Keys live in a vector indexed by slot, standing in for the rows buffer.
struct Harness {
  std::vector<uint64_t> keys;
  HashIndex index = std::move(HashIndex::Create(16).value());
  uint32_t Find(uint64_t key) const {
    return index.Find(key, [this](uint32_t s) { return keys[s]; });
  }
};

TEST(HashIndex, InPlaceGrowthKeepsEveryEntry) {
  Harness h;
  std::mt19937_64 rng(7);
  for (uint32_t i = 0; i < 200000; ++i) {
    h.keys.push_back(rng());
    ASSERT_TRUE(h.index.Insert(h.keys.back(), i).ok());
  }
  EXPECT_EQ(h.index.size(), 200000u);
  EXPECT_GE(static_cast<double>(h.index.capacity()) * HashIndex::kMaxLoad, 200000.0);
  for (uint32_t i = 0; i < h.keys.size(); ++i) ASSERT_EQ(h.Find(h.keys[i]), i);
  for (int i = 0; i < 10000; ++i) EXPECT_EQ(h.Find(rng()), HashIndex::kNoSlot);
  // Bytes per key stay within 8 / (0.85 / 1.5) plus the tail.
  EXPECT_LE(static_cast<double>(h.index.bytes()) / 200000.0, 16.0);
}

TEST(HashIndex, SequentialKeysAndEraseBackwardShift) {
  Harness h;
  for (uint32_t i = 0; i < 50000; ++i) {
    h.keys.push_back(i);  // raw ids are often dense
    ASSERT_TRUE(h.index.Insert(i, i).ok());
  }
  for (uint32_t i = 0; i < 50000; i += 2) ASSERT_TRUE(h.index.Erase(i, i));
  EXPECT_FALSE(h.index.Erase(0, 0));
  for (uint32_t i = 0; i < 50000; ++i) {
    ASSERT_EQ(h.Find(i), i % 2 == 0 ? HashIndex::kNoSlot : i) << i;
  }
  ASSERT_TRUE(h.index.Relocate(1, 1, 0));
  h.keys[0] = 1;
  EXPECT_EQ(h.Find(1), 0u);
}

TEST(HashIndex, ReserveAndClear) {
  Harness h;
  ASSERT_TRUE(h.index.Reserve(100000).ok());
  const size_t cap = h.index.capacity();
  for (uint32_t i = 0; i < 100000; ++i) {
    h.keys.push_back(i * 0x9e3779b97f4a7c15ull);
    ASSERT_TRUE(h.index.Insert(h.keys.back(), i).ok());
  }
  EXPECT_EQ(h.index.capacity(), cap) << "Reserve must prevent growth";
  h.index.Clear();
  EXPECT_EQ(h.index.size(), 0u);
  EXPECT_EQ(h.Find(h.keys[5]), HashIndex::kNoSlot);
}

TEST(HashIndex, AdoptRejectsBrokenOrder) {
  auto buf = MappedBuffer::Create(GrowthMode::kRemap, 80 * 8);
  ASSERT_TRUE(buf.ok());
  uint64_t* b = reinterpret_cast<uint64_t*>(buf->data());
  b[3] = (0xf0000000ull << 32) | 1;  // fp far above what bucket 3 may hold
  b[4] = (0x00000001ull << 32) | 2;  // and a smaller fp after it
  HashIndex index = std::move(HashIndex::Create(16).value());
  Status s = index.Adopt(16, 80, std::move(buf).value(), 10);
  EXPECT_EQ(s.code(), Code::kProtocol) << s.ToString();
}

}  // namespace
}  // namespace ferry::ps
