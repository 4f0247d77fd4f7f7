// The checkers the conformance suite relies on must notice a single wrong byte.
#include "tests/common/pattern.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry::testing {
namespace {

TEST(PatternTest, SubRangesMatchTheWholeStream) {
  std::vector<uint8_t> whole(1000), part(300);
  FillPattern(whole.data(), whole.size(), 42);
  FillPattern(part.data(), part.size(), 42, 333);
  EXPECT_TRUE(SameBytes("sub-range", part.data(), whole.data() + 333, part.size()));
  EXPECT_TRUE(CheckPattern(whole.data() + 5, 990, 42, 5));
  EXPECT_TRUE(CheckPattern(whole.data(), 0, 7));
}

TEST(PatternTest, SeedsDiffer) {
  std::vector<uint8_t> a(64), b(64);
  FillPattern(a.data(), a.size(), 1);
  FillPattern(b.data(), b.size(), 2);
  EXPECT_FALSE(SameBytes("seeds", a.data(), b.data(), a.size()));
}

TEST(PatternTest, OneFlippedBitIsFound) {
  std::vector<uint8_t> v(200000);
  FillPattern(v.data(), v.size(), 9);
  for (size_t pos : {size_t{0}, size_t{7}, size_t{65535}, size_t{65536}, size_t{199999}}) {
    std::vector<uint8_t> w = v;
    w[pos] ^= 0x10;
    ::testing::AssertionResult r = CheckPattern(w.data(), w.size(), 9);
    ASSERT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("offset " + std::to_string(pos)), std::string::npos)
        << r.message();
    ::testing::AssertionResult s = SameBytes("copy", w.data(), v.data(), v.size());
    ASSERT_FALSE(s);
    EXPECT_NE(std::string(s.message()).find("1 of 200000 bytes differ"), std::string::npos)
        << s.message();
  }
}

TEST(PatternTest, BufferIsAlignedAndZeroed) {
  Buffer b(12345);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  EXPECT_EQ(b.size(), 12345u);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b.data()[i], 0) << i;
}

}  // namespace
}  // namespace ferry::testing
