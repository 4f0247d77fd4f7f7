// Feature hashing: stability, field awareness, masking and the reserved id range.
#include "models/data/hashing.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ferry::models {
namespace {

TEST(Hashing, StableAcrossRuns) {
  // Pinned values: ids must never change between versions (saved models refer to them).
  EXPECT_EQ(HashIndex(0, 1, 0), HashIndex(0, 1, 0));
  EXPECT_EQ(HashToken(3, "68fd1e64", 42), HashToken(3, "68fd1e64", 42));
  EXPECT_EQ(HashIndex(0, 1, 0), 0xa6cd8fc32994760full);
  EXPECT_EQ(HashToken(0, "a", 0), 0x7b013ec73230c3a1ull);
}

TEST(Hashing, FieldAndSeedChangeTheId) {
  EXPECT_NE(HashIndex(0, 7, 0), HashIndex(1, 7, 0));
  EXPECT_NE(HashIndex(0, 7, 0), HashIndex(0, 7, 1));
  EXPECT_NE(HashToken(13, "abc", 0), HashToken(14, "abc", 0));
  EXPECT_NE(HashToken(13, "abc", 0), HashToken(13, "abd", 0));
}

TEST(Hashing, NoCollisionsAmongManyIndices) {
  std::set<uint64_t> ids;
  for (uint64_t i = 0; i < 100000; ++i) ids.insert(HashIndex(0, i, 5));
  EXPECT_EQ(ids.size(), 100000u);
}

TEST(Hashing, MaskingKeepsIdsInRangeAndOutOfTheReservedIds) {
  for (uint32_t bits : {8u, 12u, 20u, 63u}) {
    for (uint64_t i = 0; i < 5000; ++i) {
      const uint64_t id = HashIndex(2, i, 9, bits);
      EXPECT_LT(id, uint64_t{1} << bits);
      EXPECT_GE(id, kReservedIds);
      // Masking is the low bits of the full id (unless it had to leave the reserved range).
      const uint64_t low = HashIndex(2, i, 9) & ((uint64_t{1} << bits) - 1);
      EXPECT_TRUE(id == low || id == low + kReservedIds);
    }
  }
  EXPECT_EQ(HashToken(1, "x", 3, 64), HashToken(1, "x", 3, 0));
}

TEST(Hashing, ReservedIdsAreNeverProduced) {
  for (uint64_t id = 0; id < kReservedIds; ++id) {
    EXPECT_EQ(MaskId(id, 0), id + kReservedIds);
    EXPECT_GE(MaskId(id << 8, 8), kReservedIds);
  }
  EXPECT_EQ(MaskId(12345, 0), 12345u);
}

TEST(Hashing, ValidatesHashBits) {
  EXPECT_TRUE(ValidateHashBits(0).ok());
  EXPECT_TRUE(ValidateHashBits(8).ok());
  EXPECT_TRUE(ValidateHashBits(64).ok());
  EXPECT_FALSE(ValidateHashBits(7).ok());
  EXPECT_FALSE(ValidateHashBits(65).ok());
}

}  // namespace
}  // namespace ferry::models
