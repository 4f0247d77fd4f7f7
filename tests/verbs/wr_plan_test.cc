// Pure planning tests (no device): SGE merging/splitting and post-list batching.
#include "transport/verbs/wr_plan.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <numeric>

namespace ferry::verbs {
namespace {

TEST(WrPlan, ContiguousRemoteRunsShareOneWr) {
  std::vector<Segment> segs = {{0, 100, 8}, {64, 108, 8}, {32, 116, 8}, {0, 500, 8}};
  WrPlan plan;
  PlanSparse(segs, 1000, 7, 5000, 9, IBV_WR_RDMA_WRITE, 16, 1ull << 31, &plan);
  ASSERT_EQ(plan.wrs.size(), 2u);
  EXPECT_EQ(plan.wrs[0].num_sge, 3u);
  EXPECT_EQ(plan.wrs[0].remote_addr, 5100u);
  EXPECT_EQ(plan.wrs[0].bytes, 24u);
  EXPECT_EQ(plan.sges[1].addr, 1064u);
  EXPECT_EQ(plan.sges[1].lkey, 7u);
  EXPECT_EQ(plan.wrs[1].num_sge, 1u);
  EXPECT_EQ(plan.wrs[1].remote_addr, 5500u);
  EXPECT_EQ(plan.bytes, 32u);
}

// n contiguous remote segments split exactly at max_sge boundaries.
TEST(WrPlan, SplitsAtMaxSge) {
  for (uint32_t max_sge : {1u, 2u, 3u, 30u, 32u}) {
    for (size_t n : {size_t{1}, size_t{max_sge}, size_t{max_sge} + 1, size_t{3} * max_sge + 1}) {
      std::vector<Segment> segs;
      for (size_t i = 0; i < n; ++i) segs.push_back({i * 16, i * 4, 4});  // remote contiguous
      WrPlan plan;
      PlanSparse(segs, 0, 1, 0, 2, IBV_WR_RDMA_READ, max_sge, 1ull << 31, &plan);
      ASSERT_EQ(plan.wrs.size(), (n + max_sge - 1) / max_sge) << max_sge << " " << n;
      for (size_t w = 0; w < plan.wrs.size(); ++w) {
        EXPECT_LE(plan.wrs[w].num_sge, max_sge);
        EXPECT_EQ(plan.wrs[w].remote_addr, w * max_sge * 4);
      }
      EXPECT_EQ(plan.sges.size(), n);
    }
  }
}

TEST(WrPlan, RespectsMaxWrBytesAndDropsEmptySegments) {
  std::vector<Segment> segs = {{0, 0, 0}, {0, 0, 10}, {10, 10, 10}, {20, 20, 0}, {20, 20, 10}};
  WrPlan plan;
  PlanSparse(segs, 0, 1, 0, 2, IBV_WR_RDMA_WRITE, 8, 16, &plan);
  uint64_t total = 0;
  for (const auto& wr : plan.wrs) {
    EXPECT_LE(wr.bytes, 16u);
    total += wr.bytes;
  }
  EXPECT_EQ(total, 30u);
  EXPECT_EQ(plan.bytes, 30u);
}

TEST(WrPlan, SendFragmentsAndLastFlag) {
  WrPlan plan;
  PlanSend(4096, 10000, 3, 4096, 0x100, &plan);
  ASSERT_EQ(plan.wrs.size(), 3u);
  EXPECT_EQ(plan.wrs[0].imm, 0x100u);
  EXPECT_EQ(plan.wrs[2].imm, 0x100u | kLastFragment);
  EXPECT_EQ(plan.wrs[2].bytes, 10000u - 8192u);
  WrPlan empty;
  PlanSend(0, 0, 3, 4096, 0x100, &empty);
  ASSERT_EQ(empty.wrs.size(), 1u);
  EXPECT_EQ(empty.wrs[0].num_sge, 0u);
  EXPECT_EQ(empty.wrs[0].imm, 0x100u | kLastFragment);
}

TEST(WrPlan, NotifyOnLastWrOrAddsEmptyOne) {
  WrPlan plan;
  PlanContiguous(0, 100, 1, 200, 2, IBV_WR_RDMA_WRITE, 1ull << 31, &plan);
  AddNotify(42, 200, 2, &plan);
  ASSERT_EQ(plan.wrs.size(), 1u);
  EXPECT_EQ(plan.wrs[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(plan.wrs[0].imm, 42u);
  WrPlan none;
  AddNotify(7, 300, 2, &none);
  ASSERT_EQ(none.wrs.size(), 1u);
  EXPECT_EQ(none.wrs[0].bytes, 0u);
  EXPECT_EQ(none.wrs[0].remote_addr, 300u);
}

TEST(WrPlan, FurthestWrGoesFirst) {
  std::vector<Segment> segs = {{0, 10, 10}, {0, 500, 10}, {0, 100, 10}};
  WrPlan plan;
  PlanSparse(segs, 0, 1, 1000, 2, IBV_WR_RDMA_WRITE, 4, 1ull << 31, &plan);
  ASSERT_EQ(plan.wrs.size(), 3u);
  PutFurthestFirst(&plan);
  EXPECT_EQ(plan.wrs[0].remote_addr, 1500u);
  EXPECT_EQ(plan.wrs[1].remote_addr, 1010u);
  EXPECT_EQ(plan.wrs[2].remote_addr, 1100u);
  EXPECT_EQ(plan.sges[plan.wrs[0].first_sge].length, 10u);
}

// PlanPostBatch with a fresh output vector.
std::vector<BatchPiece> Batch(std::span<const size_t> remaining, size_t sq_free, size_t cq_budget,
                              size_t max_batch) {
  std::vector<BatchPiece> out;
  PlanPostBatch(remaining, sq_free, cq_budget, max_batch, 16, &out);
  return out;
}

TEST(SendWr, RdmaFieldsImmediateAndSges) {
  WrPlan plan;
  PlanSparse(std::vector<Segment>{{0, 100, 8}, {64, 108, 8}}, 1000, 7, 5000, 9, IBV_WR_RDMA_WRITE,
             16, 1ull << 31, &plan);
  AddNotify(0x01020304, 5000, 9, &plan);
  ibv_send_wr wr = MakeSendWr(plan.wrs[0], plan.sges.data(), 0);
  EXPECT_EQ(wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(wr.imm_data, htonl(0x01020304));
  EXPECT_EQ(wr.wr.rdma.remote_addr, 5100u);
  EXPECT_EQ(wr.wr.rdma.rkey, 9u);
  EXPECT_EQ(wr.sg_list, &plan.sges[0]);
  EXPECT_EQ(wr.num_sge, 2);
  EXPECT_EQ(wr.send_flags, 0u);  // max_inline 0
  EXPECT_EQ(wr.wr_id, 0u);       // the poster's
  EXPECT_EQ(wr.next, nullptr);
}

TEST(SendWr, SendHasNoRdmaFieldsAndAnEmptyOneNoSges) {
  WrPlan plan;
  PlanSend(4096, 0, 7, 64, 0x200, &plan);
  ibv_send_wr wr = MakeSendWr(plan.wrs[0], plan.sges.data(), 256);
  EXPECT_EQ(wr.opcode, IBV_WR_SEND_WITH_IMM);
  EXPECT_EQ(wr.imm_data, htonl(0x200 | kLastFragment));
  EXPECT_EQ(wr.sg_list, nullptr);
  EXPECT_EQ(wr.num_sge, 0);
  EXPECT_EQ(wr.wr.rdma.remote_addr, 0u);
  EXPECT_EQ(wr.send_flags, 0u);  // nothing to inline
}

TEST(SendWr, InlineUpToMaxInlineAndNeverForReads) {
  for (uint64_t bytes : {1u, 64u, 65u}) {
    for (ibv_wr_opcode opcode : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ}) {
      WrPlan plan;
      PlanContiguous(0, bytes, 1, 0, 2, opcode, 1ull << 31, &plan);
      ibv_send_wr wr = MakeSendWr(plan.wrs[0], plan.sges.data(), 64);
      const bool inline_expected = opcode == IBV_WR_RDMA_WRITE && bytes <= 64;
      EXPECT_EQ((wr.send_flags & IBV_SEND_INLINE) != 0, inline_expected) << bytes << " " << opcode;
    }
  }
}

TEST(PostBatch, FillsSqUpToAPartialOp) {
  std::vector<size_t> remaining = {3, 5, 100, 2};
  auto pieces = Batch(remaining, 20, 100, 64);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].count, 3u);
  EXPECT_EQ(pieces[1].count, 5u);
  EXPECT_EQ(pieces[2].count, 12u);  // partial op: stops here, nothing overtakes it
  size_t total = 0;
  for (auto& p : pieces) total += p.count;
  EXPECT_EQ(total, 20u);
}

// Signaled WRs are every 16th and the last, whatever Ops they belong to: a CQ entry per 16 WRs,
// not per Op.
TEST(PostBatch, TakesACqEntryPerSixteenWrsAndIsLimitedByBatchSize) {
  std::vector<size_t> remaining(10, 1);
  EXPECT_EQ(Batch(remaining, 100, 1, 64).size(), 10u);
  EXPECT_EQ(Batch(remaining, 100, 100, 6).size(), 6u);
  const std::vector<size_t> forty(40, 1);
  EXPECT_EQ(Batch(forty, 100, 1, 64).size(), 16u);
  EXPECT_EQ(Batch(forty, 100, 2, 64).size(), 32u);
  EXPECT_EQ(Batch(forty, 100, 3, 64).size(), 40u);
  EXPECT_TRUE(Batch(remaining, 0, 100, 64).empty());
  EXPECT_TRUE(Batch(remaining, 100, 0, 64).empty());
}

TEST(PostBatch, SignalsEverySixteenthWrAndTheLast) {
  std::vector<size_t> signaled;
  for (size_t k = 0; k < 40; ++k) {
    if (IsSignaled(k, 40, 16)) signaled.push_back(k);
  }
  EXPECT_EQ(signaled, (std::vector<size_t>{15, 31, 39}));
  EXPECT_EQ(SignaledWrs(40, 16), 3u);
  EXPECT_EQ(SignaledWrs(32, 16), 2u);
  EXPECT_TRUE(IsSignaled(31, 32, 16));
  EXPECT_EQ(SignaledWrs(1, 16), 1u);
  EXPECT_TRUE(IsSignaled(0, 1, 16));
  EXPECT_FALSE(IsSignaled(0, 2, 16));
}

// The data path reuses one vector for every batch: a reused one holds exactly the new batch.
TEST(PostBatch, ReusedOutputIsReplaced) {
  std::vector<BatchPiece> out;
  const std::vector<size_t> many(10, 1);
  PlanPostBatch(many, 100, 100, 64, 16, &out);
  ASSERT_EQ(out.size(), 10u);
  const std::vector<size_t> one = {0, 7};
  PlanPostBatch(one, 100, 100, 64, 16, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, 1u);
  EXPECT_EQ(out[0].count, 7u);
  PlanPostBatch(one, 0, 100, 64, 16, &out);
  EXPECT_TRUE(out.empty());
}

// A long op drains through many batches of a small SQ: every batch ends signaled, so slots
// always come back.
TEST(PostBatch, LongListDrainsThroughSmallQueue) {
  std::vector<size_t> remaining = {1000};
  size_t batches = 0;
  while (remaining[0] > 0) {
    auto pieces = Batch(remaining, 16, 8, 64);
    ASSERT_EQ(pieces.size(), 1u);
    ASSERT_LE(pieces[0].count, 16u);
    remaining[0] -= pieces[0].count;
    ++batches;
  }
  EXPECT_EQ(batches, (1000u + 15) / 16);
}

// What completions retire, oldest first: record 1 (3 WRs), 2 (1), 3 (20, posted as 12 then 8 in
// two lists), 4 (5).
using Retired = std::vector<std::pair<uint64_t, uint32_t>>;
PostedWrs FourRecords() {
  PostedWrs p;
  p.Posted(1, 3);
  p.Posted(2, 1);
  p.Posted(3, 12);
  p.Posted(3, 8);
  p.Posted(4, 5);
  return p;
}

TEST(PostedWrs, ACompletionRetiresTheOldestWrsAcrossRecordsAndInParts) {
  PostedWrs p = FourRecords();
  Retired got;
  auto log = [&](uint64_t r, uint32_t n) { got.emplace_back(r, n); };
  p.Retire(16, log);  // the 16th WR was signaled
  EXPECT_EQ(got, (Retired{{1, 3}, {2, 1}, {3, 12}}));
  got.clear();
  p.Retire(4, log);  // part of a piece
  p.Retire(5, log);  // the rest of it, and one WR of the next record
  EXPECT_EQ(got, (Retired{{3, 4}, {3, 4}, {4, 1}}));
  got.clear();
  p.Retire(100, log);  // more than is posted: what there is
  EXPECT_EQ(got, (Retired{{4, 4}}));
  EXPECT_TRUE(p.empty());
}

TEST(PostedWrs, AnErrorRetiresWhatWasPostedBeforeTheFailedRecord) {
  PostedWrs p = FourRecords();
  Retired got;
  auto log = [&](uint64_t r, uint32_t n) { got.emplace_back(r, n); };
  p.Retire(2, log);  // record 1 partly retired by an earlier completion
  got.clear();
  p.RetireBefore(3, log);
  EXPECT_EQ(got, (Retired{{1, 1}, {2, 1}}));
  got.clear();
  p.RetireBefore(3, log);  // the failed record is first now: nothing more
  EXPECT_TRUE(got.empty());
  p.RetireBefore(9, log);  // a record never posted here: everything
  EXPECT_EQ(got, (Retired{{3, 12}, {3, 8}, {4, 5}}));
  EXPECT_TRUE(p.empty());
  p.Posted(5, 1);
  p.Clear();
  EXPECT_TRUE(p.empty());
}

}  // namespace
}  // namespace ferry::verbs
