// Pure setup decisions of the verbs backend (no device): CQ sizing and the send budget
// (setup.cc), and the rdma_cm connection parameters of both sides (connect_cm.cc).
#include <gtest/gtest.h>

#include "transport/verbs/verbs_transport.h"

namespace ferry::verbs {
namespace {

TEST(QueueSizing, CqHoldsReceivesAndSendsWithinTheDeviceLimit) {
  // 256 buffers + 2 * 256 send slots + 64 = 832, above the configured 512.
  EXPECT_EQ(CqEntries(512, 256, 256, 1u << 20), 832u);
  // A configured depth above that stays.
  EXPECT_EQ(CqEntries(8192, 256, 256, 1u << 20), 8192u);
  // The device's max_cqe caps both.
  EXPECT_EQ(CqEntries(8192, 256, 256, 4096), 4096u);
  EXPECT_EQ(CqEntries(1, 256, 256, 500), 500u);
}

TEST(QueueSizing, SendBudgetIsWhatReceivesLeaveAndAtLeast16) {
  // 8192 entries, 256 buffers: 256 + 32 reserved.
  EXPECT_EQ(SendCqBudget(8192, 256), 8192u - 288u);
  // Just above the reserve + 16: the difference; at or below it: 16.
  EXPECT_EQ(SendCqBudget(288 + 17, 256), 17u);
  EXPECT_EQ(SendCqBudget(288 + 16, 256), 16u);
  EXPECT_EQ(SendCqBudget(100, 256), 16u);
}

TEST(QueueSizing, TheCqGrowsToHoldEverySendQueueAtLeastByHalf) {
  // Fits already: unchanged.
  EXPECT_EQ(CqGrowth(8192, 8192, 1u << 20), 8192u);
  EXPECT_EQ(CqGrowth(8192, 100, 1u << 20), 8192u);
  // Just over: half as much again (amortised); far over: what is needed.
  EXPECT_EQ(CqGrowth(8192, 8193, 1u << 20), 12288u);
  EXPECT_EQ(CqGrowth(8192, 20000, 1u << 20), 20000u);
  // Never past the device's max_cqe, and a CQ at it stays.
  EXPECT_EQ(CqGrowth(8192, 20000, 10000), 10000u);
  EXPECT_EQ(CqGrowth(10000, 20000, 10000), 10000u);
}

TEST(QueueSizing, ASendQueueGetsTheSlotsTheCqStillHoldsAndAtLeast16) {
  // 832 entries = 256 receives + 64 slack + 2 x 256: two full shares.
  EXPECT_EQ(SendQueueShare(832, 256, 0, 256), 256u);
  EXPECT_EQ(SendQueueShare(832, 256, 256, 256), 256u);
  // A cut share, down to kMinSendShare; past the CQ's capacity still kMinSendShare (never
  // refused: it overcommits the CQ by that).
  EXPECT_EQ(SendQueueShare(832, 256, 400, 256), 112u);
  EXPECT_EQ(SendQueueShare(832, 256, 512 - kMinSendShare, 256), kMinSendShare);
  EXPECT_EQ(SendQueueShare(832, 256, 512, 256), kMinSendShare);
  EXPECT_EQ(SendQueueShare(100, 256, 0, 256), kMinSendShare);
  // A send queue smaller than kMinSendShare gets itself.
  EXPECT_EQ(SendQueueShare(832, 256, 504, 8), 8u);
  EXPECT_EQ(SendQueueShare(832, 256, 900, 8), 8u);
}

TEST(CmParams, ActiveSideOffersTheDeviceDepthsCappedAt16) {
  DeviceLimits limits;
  limits.max_rd_atom = 4;
  limits.max_init_rd_atom = 128;
  rdma_conn_param p = CmConnParam(limits, nullptr);
  EXPECT_EQ(p.responder_resources, 4);
  EXPECT_EQ(p.initiator_depth, 16);
  EXPECT_EQ(p.retry_count, 7);
  EXPECT_EQ(p.rnr_retry_count, 7);  // unlimited
}

TEST(CmParams, PassiveSideAlsoKeepsWithinTheRequest) {
  DeviceLimits limits;
  limits.max_rd_atom = 16;
  limits.max_init_rd_atom = 8;
  rdma_conn_param request{};
  request.initiator_depth = 2;       // bounds our responder resources
  request.responder_resources = 64;  // bounds our initiator depth (ours is smaller here)
  rdma_conn_param p = CmConnParam(limits, &request);
  EXPECT_EQ(p.responder_resources, 2);
  EXPECT_EQ(p.initiator_depth, 8);
  EXPECT_EQ(p.retry_count, 7);
  EXPECT_EQ(p.rnr_retry_count, 7);
  request.initiator_depth = 255;
  request.responder_resources = 1;
  p = CmConnParam(limits, &request);
  EXPECT_EQ(p.responder_resources, 16);
  EXPECT_EQ(p.initiator_depth, 1);
}

}  // namespace
}  // namespace ferry::verbs
