// The pure planning steps of a worker's requests (ps/worker/request_plan.h), without a transport.
#include "ps/worker/request_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "ps/wire/protocol.h"

namespace ferry::ps {
namespace {

constexpr uint32_t kNo = kNoSlotValue;

bool SameRange(const RangePlan& r, uint32_t shard, uint32_t begin, uint32_t end, bool want) {
  return r.shard == shard && r.begin == begin && r.end == end && r.want_slots == want;
}

TEST(RequestPlan, RangesAreCutIntoRequestsOfAtMostCapKeys) {
  const std::vector<RangePlan> ranges = {{0, 0, 5, false}, {1, 5, 5, false}, {2, 5, 11, true}};
  const std::vector<RequestChunk> plan = PlanRequests(ranges, 3);
  const std::vector<RequestChunk> want = {
      {0, 0, 3, false}, {0, 3, 2, false}, {2, 5, 3, true}, {2, 8, 3, true}};
  EXPECT_EQ(plan, want);
  EXPECT_EQ(RequestsFor(5, 3), 2u);
  EXPECT_EQ(RequestsFor(0, 3), 0u);
  EXPECT_EQ(RequestsFor(6, 3), 2u);
  EXPECT_EQ(PlanRequests(ranges, 100).size(), 2u);
}

TEST(RequestPlan, SplitPutsEachServersUncachedKeysFirstAndKeepsOrder) {
  // Server 0: positions 0..4 (mixed), server 1: 5..6 (all cached), server 2: none,
  // server 3: 7..8 (none cached).
  std::vector<uint32_t> begin = {0, 5, 7, 7, 9};
  std::vector<uint64_t> keys = {10, 11, 12, 13, 14, 20, 21, 40, 41};
  std::vector<uint32_t> slots = {3, kNo, 5, kNo, 9, 1, 2, kNo, kNo};
  const CacheSplit plan = SplitByCache(begin, keys, slots);
  EXPECT_EQ(keys, (std::vector<uint64_t>{11, 13, 10, 12, 14, 20, 21, 40, 41}));
  EXPECT_EQ(slots, (std::vector<uint32_t>{kNo, kNo, 3, 5, 9, 1, 2, kNo, kNo}));
  EXPECT_EQ(plan.new_position, (std::vector<uint32_t>{2, 0, 3, 1, 4, 5, 6, 7, 8}));
  ASSERT_EQ(plan.requests.size(), 2u);
  EXPECT_TRUE(SameRange(plan.requests[0], 0, 0, 2, true));
  EXPECT_TRUE(SameRange(plan.requests[1], 3, 7, 9, true));
  ASSERT_EQ(plan.cached.size(), 2u);
  EXPECT_TRUE(SameRange(plan.cached[0], 0, 2, 5, false));
  EXPECT_TRUE(SameRange(plan.cached[1], 1, 5, 7, false));
}

TEST(RequestPlan, SplitMovesNothingWhenNoGroupIsMixed) {
  std::vector<uint32_t> begin = {0, 2, 4};
  std::vector<uint64_t> keys = {1, 2, 3, 4};
  std::vector<uint32_t> slots = {kNo, kNo, 7, 8};
  const CacheSplit plan = SplitByCache(begin, keys, slots);
  EXPECT_TRUE(plan.new_position.empty());
  EXPECT_EQ(keys, (std::vector<uint64_t>{1, 2, 3, 4}));
  ASSERT_EQ(plan.requests.size(), 1u);
  EXPECT_TRUE(SameRange(plan.requests[0], 0, 0, 2, true));
  ASSERT_EQ(plan.cached.size(), 1u);
  EXPECT_TRUE(SameRange(plan.cached[0], 1, 2, 4, false));
}

TEST(RequestPlan, ReadSegmentsMergeRowsNeighbouringOnBothSides) {
  // Positions 1..4 land at 1000 + p * 32; slots 4, 5 (neighbours), 9, 10 (neighbours but the
  // local rows of 9 and 10 are too: merged), each row 24 bytes of a 32-byte stride.
  const std::vector<uint32_t> slots = {kNo, 4, 5, 9, 10};
  const std::vector<Segment> segs = ReadSegments(slots, 1, 5, 1000, 32, 32, 32);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].local_offset, 1032u);
  EXPECT_EQ(segs[0].remote_offset, 128u);
  EXPECT_EQ(segs[0].length, 64u);
  EXPECT_EQ(segs[1].local_offset, 1096u);
  EXPECT_EQ(segs[1].remote_offset, 288u);
  EXPECT_EQ(segs[1].length, 64u);
  // Shorter reads than the stride never merge: the gap would be read too.
  EXPECT_EQ(ReadSegments(slots, 1, 5, 1000, 32, 32, 24).size(), 4u);
}

TEST(RequestPlan, ChunksRespectSegmentAndByteLimits) {
  std::vector<Segment> segs(7, Segment{0, 0, 10});
  using Chunks = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(ChunkSegments(segs, 3, 1000), (Chunks{{0, 3}, {3, 6}, {6, 7}}));
  EXPECT_EQ(ChunkSegments(segs, 100, 25), (Chunks{{0, 2}, {2, 4}, {4, 6}, {6, 7}}));
  segs[2].length = 50;  // over max_bytes alone: a chunk of its own
  EXPECT_EQ(ChunkSegments(segs, 100, 25), (Chunks{{0, 2}, {2, 3}, {3, 5}, {5, 7}}));
  EXPECT_TRUE(ChunkSegments({}, 4, 4).empty());
}

}  // namespace
}  // namespace ferry::ps
