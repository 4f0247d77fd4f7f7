// HashIndex (SSE2 tag groups over a slot array) on its own: the rows are a vector of keys with
// a live bitmap, the RowKeys an index rebuilds from.
#include "ps/store/hash_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry::ps {
namespace {

struct Harness {
  std::vector<uint64_t> keys;  // slot -> key: rows of stride 8
  std::vector<uint64_t> live;  // live bitmap
  HashIndex index = std::move(HashIndex::Create(16).value());

  RowKeys Rows() const {
    return RowKeys{reinterpret_cast<const uint8_t*>(keys.data()), sizeof(uint64_t), live.data(),
                   keys.size()};
  }
  uint32_t Find(uint64_t key) const {
    return index.Find(key, [this](uint32_t s) { return keys[s]; });
  }
  uint32_t Add(uint64_t key) {  // key must be absent
    const uint32_t slot = static_cast<uint32_t>(keys.size());
    EXPECT_TRUE(index.Insert(key, slot, Rows()).ok());
    keys.push_back(key);
    live.resize(keys.size() / 64 + 1);
    live[slot / 64] |= 1ull << (slot % 64);
    return slot;
  }
  bool Remove(uint32_t slot) {
    live[slot / 64] &= ~(1ull << (slot % 64));
    return index.Erase(keys[slot], slot);
  }
};

uint32_t Tag(uint64_t key) {
  return HashIndex::Fingerprint(key) & 0x7f;
}
size_t HomeGroup(uint64_t key, size_t buckets) {
  return static_cast<size_t>((uint64_t{HashIndex::Fingerprint(key)} * (buckets / 16)) >> 32);
}

// Keys sharing one home group AND one tag in an index of `buckets` buckets: every lookup of one
// of them meets the others' tag matches first (tag collisions), and more than 16 of them
// overflow the group into the probe sequence.
std::vector<uint64_t> CollidingKeys(size_t buckets, size_t count, uint64_t seed) {
  std::map<std::pair<size_t, uint32_t>, std::vector<uint64_t>> by_class;
  std::mt19937_64 rng(seed);
  for (;;) {
    const uint64_t k = rng();
    auto& v = by_class[{HomeGroup(k, buckets), Tag(k)}];
    v.push_back(k);
    if (v.size() == count) return v;
  }
}

TEST(HashIndex, GrowthRebuildsFromTheRowsAndKeepsEveryEntry) {
  Harness h;
  std::mt19937_64 rng(7);
  for (uint32_t i = 0; i < 200000; ++i) h.Add(rng());
  EXPECT_EQ(h.index.size(), 200000u);
  EXPECT_GE(h.index.MaxEntries(), 200000u);
  EXPECT_EQ(h.index.num_buckets() & (h.index.num_buckets() - 1), 0u);
  for (uint32_t i = 0; i < h.keys.size(); ++i) ASSERT_EQ(h.Find(h.keys[i]), i);
  for (int i = 0; i < 10000; ++i) EXPECT_EQ(h.Find(rng()), HashIndex::kNoSlot);
  // 5 bytes per bucket at a load of at least 7/16 right after a doubling.
  EXPECT_LE(static_cast<double>(h.index.bytes()) / 200000.0, 5.0 / (7.0 / 16.0) + 0.01);
}

TEST(HashIndex, TagCollisionsInOneGroupOverflowIntoTheProbeSequence) {
  Harness h;
  ASSERT_TRUE(h.index.Reserve(200, h.Rows()).ok());
  const size_t buckets = h.index.num_buckets();
  const std::vector<uint64_t> same = CollidingKeys(buckets, 40, 3);
  for (uint64_t k : same) h.Add(k);
  ASSERT_EQ(h.index.num_buckets(), buckets) << "Reserve must prevent a rebuild";
  // 40 entries with one home and one tag: the home group is full, 24 sit in later groups.
  const size_t g = HomeGroup(same[0], buckets);
  for (size_t b = 0; b < 16; ++b) ASSERT_EQ(h.index.ctrl()[g * 16 + b], Tag(same[0]));
  for (uint32_t s = 0; s < same.size(); ++s) ASSERT_EQ(h.Find(same[s]), s);
  // A key with the same home and tag that is absent walks every colliding bucket, then misses.
  std::vector<uint64_t> more = CollidingKeys(buckets, 41, 3);
  EXPECT_EQ(h.Find(more.back()), HashIndex::kNoSlot);
}

TEST(HashIndex, EraseLeavesTombstonesOnlyInFullGroups) {
  Harness h;
  ASSERT_TRUE(h.index.Reserve(200, h.Rows()).ok());
  const std::vector<uint64_t> same = CollidingKeys(h.index.num_buckets(), 20, 5);
  for (uint64_t k : same) h.Add(k);
  // The first 16 filled the home group; erasing one of them must leave a tombstone, or the 4
  // that overflowed past the (now not full) group would no longer be found.
  ASSERT_TRUE(h.Remove(2));
  EXPECT_EQ(h.index.tombstones(), 1u);
  for (uint32_t s = 0; s < same.size(); ++s) {
    ASSERT_EQ(h.Find(same[s]), s == 2 ? HashIndex::kNoSlot : s) << s;
  }
  EXPECT_FALSE(h.index.Erase(same[2], 2)) << "erased twice";
  // The overflow group still has empty buckets: erasing there frees the bucket outright.
  ASSERT_TRUE(h.Remove(19));
  EXPECT_EQ(h.index.tombstones(), 1u);
  // A re-insert of a colliding key reuses the tombstone (first free bucket on its path).
  h.Add(same[2]);
  EXPECT_EQ(h.index.tombstones(), 0u);
  EXPECT_EQ(h.Find(same[2]), 20u);
  ASSERT_TRUE(h.index.Relocate(same[3], 3, 17));
  const auto moved = [&](uint32_t s) { return s == 17 ? same[3] : h.keys[s]; };
  EXPECT_EQ(h.index.Find(same[3], moved), 17u);
  EXPECT_FALSE(h.index.Relocate(same[3], 3, 18)) << "relocated from a slot it no longer has";
}

TEST(HashIndex, ChurnAtFixedSizeCleansTombstonesWithoutGrowing) {
  Harness h;
  std::mt19937_64 rng(9);
  std::vector<uint32_t> present;
  for (int i = 0; i < 5000; ++i) present.push_back(h.Add(rng()));
  const size_t buckets = h.index.num_buckets();
  // Erase-and-insert at a constant 5000 entries: tombstones accumulate in full groups and a
  // rebuild at the same size drops them; the index never doubles.
  size_t most_tombstones = 0;
  size_t cleanups = 0;
  for (int op = 0; op < 200000; ++op) {
    const size_t i = rng() % present.size();
    ASSERT_TRUE(h.Remove(present[i]));
    const size_t before = h.index.tombstones();
    present[i] = h.Add(rng());
    cleanups += h.index.tombstones() + 1 < before;  // a rebuild dropped them
    most_tombstones = std::max(most_tombstones, h.index.tombstones());
    ASSERT_LE(h.index.size() + h.index.tombstones(), h.index.MaxEntries());
  }
  EXPECT_GT(most_tombstones, 100u);
  EXPECT_GT(cleanups, 0u);
  EXPECT_EQ(h.index.num_buckets(), buckets);
  EXPECT_EQ(h.index.size(), 5000u);
  for (uint32_t s : present) ASSERT_EQ(h.Find(h.keys[s]), s);
}

TEST(HashIndex, ReferenceModelWithCollisionsErasesAndRelocations) {
  Harness h;
  std::unordered_map<uint64_t, uint32_t> ref;
  std::mt19937_64 rng(21);
  // Half the keys come from a few colliding classes, so groups overflow and tombstones form.
  std::vector<uint64_t> pool = CollidingKeys(64, 30, 1);
  for (uint64_t k : CollidingKeys(256, 30, 2)) pool.push_back(k);
  while (pool.size() < 3000) pool.push_back(rng());
  for (int op = 0; op < 300000; ++op) {
    const uint64_t key = pool[rng() % pool.size()];
    const auto it = ref.find(key);
    const unsigned r = static_cast<unsigned>(rng() % 10);
    if (r < 5) {
      if (it == ref.end()) ref[key] = h.Add(key);
      ASSERT_EQ(h.Find(key), ref[key]);
    } else if (r < 8) {
      ASSERT_EQ(it != ref.end(), it != ref.end() && h.Remove(it->second));
      if (it != ref.end()) ref.erase(it);
      ASSERT_EQ(h.Find(key), HashIndex::kNoSlot);
    } else if (r < 9 && it != ref.end()) {
      // Move the row to a fresh slot, as Compact does.
      const uint32_t to = static_cast<uint32_t>(h.keys.size());
      h.keys.push_back(key);
      h.live.resize(h.keys.size() / 64 + 1);
      h.live[to / 64] |= 1ull << (to % 64);
      h.live[it->second / 64] &= ~(1ull << (it->second % 64));
      ASSERT_TRUE(h.index.Relocate(key, it->second, to));
      it->second = to;
    } else {
      ASSERT_EQ(h.Find(key), it == ref.end() ? HashIndex::kNoSlot : it->second);
    }
    ASSERT_EQ(h.index.size(), ref.size());
  }
  for (const auto& [k, s] : ref) ASSERT_EQ(h.Find(k), s);
}

TEST(HashIndex, ReserveAndClear) {
  Harness h;
  ASSERT_TRUE(h.index.Reserve(100000, h.Rows()).ok());
  const size_t buckets = h.index.num_buckets();
  for (uint32_t i = 0; i < 100000; ++i) h.Add(i * 0x9e3779b97f4a7c15ull);
  EXPECT_EQ(h.index.num_buckets(), buckets) << "Reserve must prevent growth";
  h.index.Clear();
  EXPECT_EQ(h.index.size(), 0u);
  EXPECT_EQ(h.Find(h.keys[5]), HashIndex::kNoSlot);
}

TEST(HashIndex, InsertAtWithoutRoomIsAnError) {
  Harness h;
  while (h.index.size() < h.index.MaxEntries()) h.Add(h.keys.size() * 7919 + 1);
  HashIndex::InsertPoint at;
  const auto key_at = [&h](uint32_t s) { return h.keys[s]; };
  ASSERT_EQ(h.index.FindForInsert(999999937, key_at, &at), HashIndex::kNoSlot);
  EXPECT_EQ(h.index.InsertAt(at, 0).code(), Code::kInternal);  // refused, not corrupted
  for (uint32_t s = 0; s < h.keys.size(); ++s) ASSERT_EQ(h.Find(h.keys[s]), s);
}

MappedBuffer RawIndex(size_t buckets) {
  auto buf = MappedBuffer::Create(GrowthMode::kRemap, buckets * HashIndex::kBytesPerBucket);
  EXPECT_TRUE(buf.ok());
  std::memset(buf->data(), 0x80, buckets);  // every bucket empty
  return std::move(buf).value();
}

TEST(HashIndex, AdoptChecksTagsSlotsLoadAndGeometry) {
  HashIndex index = std::move(HashIndex::Create(16).value());
  {
    MappedBuffer b = RawIndex(64);
    b.data()[3] = 0x85;  // high bit set but neither empty nor deleted
    EXPECT_EQ(index.Adopt(64, std::move(b), 10).code(), Code::kProtocol);
  }
  {
    MappedBuffer b = RawIndex(64);
    b.data()[3] = 0x11;
    const uint32_t slot = 10;  // == slot_limit
    std::memcpy(b.data() + 64 + 3 * 4, &slot, 4);
    EXPECT_EQ(index.Adopt(64, std::move(b), 10).code(), Code::kProtocol);
  }
  {
    MappedBuffer b = RawIndex(64);
    std::memset(b.data(), 0xfe, 57);  // 57 tombstones > 7/8 of 64: probes might never end
    EXPECT_EQ(index.Adopt(64, std::move(b), 10).code(), Code::kProtocol);
  }
  EXPECT_EQ(index.Adopt(96, RawIndex(96), 10).code(), Code::kProtocol);  // not a power of two
  {
    MappedBuffer b = RawIndex(64);
    b.data()[5] = 0x11;
    std::memset(b.data() + 64 + 5 * 4, 0, 4);  // slot 0
    b.data()[6] = static_cast<uint8_t>(HashIndex::kDeleted);
    ASSERT_TRUE(index.Adopt(64, std::move(b), 10).ok());
    EXPECT_EQ(index.size(), 1u);
    EXPECT_EQ(index.tombstones(), 1u);
  }
}

}  // namespace
}  // namespace ferry::ps
