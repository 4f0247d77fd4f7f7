// The packed segment table (transport/common/segment_codec.h): exact round trips of every table
// shape a sparse op can have, the worked example of the header, the size it promises for rows of
// one size, and hostile tables (cut short, counts that lie, offsets that wrap, leftover bytes),
// each refused with kProtocol and never a crash (run under asan to prove the latter).
#include "transport/common/segment_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/common/print.h"

namespace ferry::common {
namespace {

std::vector<Segment> RoundTrip(const std::vector<Segment>& in, size_t* bytes) {
  std::vector<uint8_t> wire = {0xaa};  // Encode appends: what was there stays
  const size_t n = EncodePackedTable(in, &wire);
  EXPECT_EQ(wire.size(), n + 1);
  EXPECT_EQ(wire[0], 0xaa);
  *bytes = n;
  std::vector<Segment> out;
  uint64_t total = 0;
  Status s = DecodePackedTable(std::span<const uint8_t>(wire).subspan(1), in.size(), &out, &total);
  EXPECT_TRUE(s.ok()) << s.ToString();
  uint64_t want = 0;
  for (const Segment& g : in) want += g.length;
  EXPECT_EQ(total, want);
  return out;
}

void ExpectSameRemote(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].remote_offset, b[i].remote_offset) << "segment " << i;
    EXPECT_EQ(a[i].length, b[i].length) << "segment " << i;
    EXPECT_EQ(b[i].local_offset, 0u) << "segment " << i;  // not sent
  }
}

TEST(PackedTable, TheHeaderExampleIsFourBytesOfEntries) {
  const std::vector<Segment> rows = {{0, 3 * 64, 64}, {64, 1000 * 64, 64}, {128, 999 * 64, 64}};
  size_t bytes = 0;
  ExpectSameRemote(rows, RoundTrip(rows, &bytes));
  EXPECT_EQ(bytes, kPackedHeaderSize + 4);
}

TEST(PackedTable, RoundTripsEveryShape) {
  std::mt19937_64 rng(7);
  const std::vector<std::vector<Segment>> shapes = {
      {},                                                 // empty
      {{0, 0, 0}},                                        // one empty segment
      {{5, 7, 3}},                                        // odd offset and length
      {{0, 100, 8}, {0, 50, 8}, {0, 100, 8}},             // backwards, repeated
      {{0, 4096, 64}, {0, 4160, 128}, {0, 0, 1}},         // mixed lengths
      {{0, uint64_t{1} << 62, 64}, {0, 0, 64}},           // huge offsets, big steps down
      {{0, (uint64_t{1} << 62) + 3, 5}, {0, 1, 1 << 20}}  // no common power of two
  };
  for (const auto& shape : shapes) {
    size_t bytes = 0;
    ExpectSameRemote(shape, RoundTrip(shape, &bytes));
  }
  // Random tables of one row size and of random lengths.
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Segment> t(1 + rng() % 300);
    const bool uniform = trial % 2 == 0;
    const uint64_t row = uint64_t{1} << (rng() % 12);
    for (Segment& s : t) {
      s.local_offset = rng();
      s.remote_offset = (rng() % (uint64_t{1} << 40)) * (uniform ? row : 1);
      s.length = uniform ? row : rng() % 5000;
    }
    size_t bytes = 0;
    ExpectSameRemote(t, RoundTrip(t, &bytes));
  }
}

// What the tcp and ucx paths buy: scattered 64 B rows of a 64 MiB region take about three bytes
// each instead of a 24-byte Segment.
TEST(PackedTable, ScatteredRowsOfOneSizeAreAboutThreeBytes) {
  std::mt19937_64 rng(3);
  std::vector<Segment> t(10000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = {i * 64, (rng() % (1 << 20)) * 64, 64};
  size_t bytes = 0;
  ExpectSameRemote(t, RoundTrip(t, &bytes));
  EXPECT_LE(bytes, kPackedHeaderSize + 3 * t.size());
}

TEST(PackedTable, DecodingReusesTheOutputAndReplacesItsContent) {
  std::vector<uint8_t> wire;
  const std::vector<Segment> two = {{0, 8, 8}, {0, 16, 8}};
  EncodePackedTable(two, &wire);
  std::vector<Segment> out(50, Segment{1, 2, 3});
  uint64_t total = 0;
  ASSERT_TRUE(DecodePackedTable(wire, 2, &out, &total).ok());
  ExpectSameRemote(two, out);
  EXPECT_EQ(total, 16u);
}

Status Decode(const std::vector<uint8_t>& wire, uint64_t count) {
  std::vector<Segment> out;
  uint64_t total = 0;
  return DecodePackedTable(wire, count, &out, &total);
}

TEST(PackedTable, HostileTablesAreRefused) {
  std::vector<uint8_t> good;
  EncodePackedTable(std::vector<Segment>{{0, 64, 64}, {0, 128, 64}, {0, 0, 64}}, &good);
  ASSERT_TRUE(Decode(good, 3).ok());

  auto expect_refused = [](const std::vector<uint8_t>& wire, uint64_t count, const char* why) {
    Status s = Decode(wire, count);
    EXPECT_EQ(s.code(), Code::kProtocol) << why << ": " << s.ToString();
  };
  expect_refused({}, 0, "no header");
  expect_refused(std::vector<uint8_t>(good.begin(), good.end() - 1), 3, "last entry cut");
  expect_refused(good, 4, "count differs from the frame's");
  std::vector<uint8_t> w = good;
  w.push_back(0);
  expect_refused(w, 3, "leftover bytes");
  w = good;
  w[0] = 9;
  expect_refused(w, 3, "unknown version");
  w = good;
  w[1] |= 0x80;
  expect_refused(w, 3, "unknown flag");
  w = good;
  w[2] = 63;
  expect_refused(w, 3, "shift too large");
  w = good;
  w[4] = 0xff;  // count 255 with 3 one-byte entries
  expect_refused(w, 255, "a count the bytes cannot hold");

  // An offset that steps below zero or past 2^64.
  std::vector<uint8_t> neg(good.begin(), good.begin() + kPackedHeaderSize);
  neg[4] = 1;           // one entry
  neg.push_back(0x03);  // zigzag(-2)
  expect_refused(neg, 1, "negative offset");
  // One entry of delta 2^63 - 1 (zigzag 2^64 - 2: fe ff ff ff ff ff ff ff ff 01), shift 0.
  std::vector<uint8_t> step = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  std::vector<uint8_t> big(good.begin(), good.begin() + kPackedHeaderSize);
  big[2] = 0;
  big[4] = 1;
  big.insert(big.end(), step.begin(), step.end());
  ASSERT_TRUE(Decode(big, 1).ok()) << "2^63 - 1 itself is an offset";
  std::vector<uint8_t> three = big;
  three[4] = 3;
  for (int i = 0; i < 2; ++i) three.insert(three.end(), step.begin(), step.end());
  expect_refused(three, 3, "an offset past 2^64");
  std::vector<uint8_t> long_varint(good.begin(), good.begin() + kPackedHeaderSize);
  long_varint[4] = 1;
  for (int i = 0; i < 10; ++i) long_varint.push_back(0xff);
  long_varint.push_back(0x01);
  expect_refused(long_varint, 1, "a varint over 64 bits");

  // Lengths of a non-uniform table that sum past 2^64.
  std::vector<uint8_t> sum;
  EncodePackedTable(std::vector<Segment>{{0, 0, uint64_t{1} << 62}, {0, 0, 1}}, &sum);
  ASSERT_TRUE(Decode(sum, 2).ok());
  std::vector<Segment> huge(5, Segment{0, 0, std::numeric_limits<uint64_t>::max() / 4});
  std::vector<uint8_t> over;
  EncodePackedTable(huge, &over);
  expect_refused(over, 5, "lengths overflow");
}

}  // namespace
}  // namespace ferry::common
