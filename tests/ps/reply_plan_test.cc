// The pure planning of a server's pull replies (ps/server/reply_plan.h), without a table.
#include "ps/server/reply_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry::ps {
namespace {

constexpr uint32_t kNone = 0xffffffffu;

TEST(ReplyPlan, RowsLandAtTheirDestinationsAndNeighboursMerge) {
  // Rows of 64 bytes, the embedding (16 bytes) at offset 24; destinations of 16 bytes each from
  // 4096: slots 7 and 8 are not neighbours in the rows (stride 64 > 16), slot 2's key was refused.
  const ReplyRowShape row{64, 24, 16};
  std::vector<Segment> segs;
  PlanReplySegments(std::vector<uint32_t>{7, 8, kNone, 3}, kNone, row, 4096, 16, &segs);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].local_offset, 7u * 64 + 24);
  EXPECT_EQ(segs[0].remote_offset, 4096u);
  EXPECT_EQ(segs[1].local_offset, 8u * 64 + 24);
  EXPECT_EQ(segs[1].remote_offset, 4112u);
  EXPECT_EQ(segs[2].local_offset, 3u * 64 + 24);
  EXPECT_EQ(segs[2].remote_offset, 4096u + 3 * 16);
  for (const Segment& s : segs) EXPECT_EQ(s.length, 16u);
}

TEST(ReplyPlan, WholeRowsOfNeighbouringSlotsToNeighbouringDestinationsAreOneSegment) {
  const ReplyRowShape row{32, 0, 32};
  std::vector<Segment> segs = {Segment{1, 2, 3}};  // cleared first
  PlanReplySegments(std::vector<uint32_t>{4, 5, 6}, kNone, row, 0, 32, &segs);
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].local_offset, 128u);
  EXPECT_EQ(segs[0].remote_offset, 0u);
  EXPECT_EQ(segs[0].length, 96u);
  PlanReplySegments(std::vector<uint32_t>{kNone, kNone}, kNone, row, 0, 32, &segs);
  EXPECT_TRUE(segs.empty());
}

}  // namespace
}  // namespace ferry::ps
