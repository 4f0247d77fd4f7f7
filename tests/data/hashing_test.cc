// Feature hashing: stability, field awareness, masking and the reserved id range.
#include "models/data/hashing.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace ferry::models {
namespace {

// Pinned values: ids must never change between versions (saved models refer to them).
constexpr uint64_t kIndex010 = 0xa6cd8fc32994760full;   // HashIndex(0, 1, 0)
constexpr uint64_t kIndex7x9 = 0xcd609e051a40ff84ull;   // HashIndex(7, 123456, 9)
constexpr uint64_t kIndex7x9Bits20 = 0xff84ull;         // HashIndex(7, 123456, 9, 20)
constexpr uint64_t kTokenA = 0x7b013ec73230c3a1ull;     // HashToken(0, "a", 0)
constexpr uint64_t kToken68fd = 0xd0cb9e5fbad278baull;  // HashToken(3, "68fd1e64", 42)

TEST(Hashing, StableAcrossRuns) {
  EXPECT_EQ(HashIndex(0, 1, 0), kIndex010);
  EXPECT_EQ(HashIndex(7, 123456, 9), kIndex7x9);
  EXPECT_EQ(HashIndex(7, 123456, 9, 20), kIndex7x9Bits20);
  EXPECT_EQ(HashToken(0, "a", 0), kTokenA);
  EXPECT_EQ(HashToken(3, "68fd1e64", 42), kToken68fd);
}

// No hidden state: the same inputs give the pinned ids again after many other calls, in the
// opposite order, and from a token that is a view into a longer buffer (its bytes, not its
// address or a terminator, are hashed).
TEST(Hashing, SameInputsGiveThePinnedIdsInAnyCallOrder) {
  uint64_t sink = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    sink ^= HashIndex(static_cast<uint32_t>(i % 13), i, i * 7, 20);
    sink ^= HashToken(static_cast<uint32_t>(i % 5), std::to_string(i), i);
  }
  EXPECT_NE(sink, 0u);  // uses the results
  EXPECT_EQ(HashToken(3, "68fd1e64", 42), kToken68fd);
  EXPECT_EQ(HashToken(0, "a", 0), kTokenA);
  EXPECT_EQ(HashIndex(7, 123456, 9, 20), kIndex7x9Bits20);
  EXPECT_EQ(HashIndex(7, 123456, 9), kIndex7x9);
  EXPECT_EQ(HashIndex(0, 1, 0), kIndex010);
  const std::string longer = "x68fd1e64y";
  EXPECT_EQ(HashToken(3, std::string_view(longer).substr(1, 8), 42), kToken68fd);
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
