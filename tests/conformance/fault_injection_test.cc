// Injected faults through FaultTransport ("fault+" configurations only: tests/common/backends.h).
//
// Whatever the wrapper injects, the transport contract still holds for the caller: every posted
// op completes exactly once, with the injected error where one was injected, and an op that
// never reached the inner transport (fail_after_ops) or the part of a read that was cut off
// (short_reads) leaves the memory it names untouched. The same cases run over every base
// backend, so a backend whose completions the wrapper mishandles (contexts, ordering, duplicate
// completions) fails here.
#include <map>
#include <set>

#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

class FaultInjection : public Conformance {
 protected:
  void SetUp() override {
    Conformance::SetUp();
    ASSERT_TRUE(config().fault_wrapped) << config().name;
    ASSERT_NO_FATAL_FAILURE(MakePair(&p_));
    fault_ = FaultOf(p_.a.get());
    ASSERT_NE(fault_, nullptr) << "MakeTransport did not wrap " << config().name;
    FillPattern(p_.a_mem(), p_.a_mr->size(), 21);
    FillPattern(p_.b_mem(), p_.b_mr->size(), 22);
    a_image_.assign(p_.a_mem(), p_.a_mem() + p_.a_mr->size());
    b_image_.assign(p_.b_mem(), p_.b_mem() + p_.b_mr->size());
  }

  // Drives until every context in `want` completed on A, then a while longer to catch a second
  // completion of any of them; returns every completion seen, by context.
  std::map<uint64_t, std::vector<Completion>> Collect(Poller& poller,
                                                      const std::set<uint64_t>& want) {
    std::map<uint64_t, std::vector<Completion>> got;
    auto take = [&] {
      auto& q = poller.queue(p_.a.get());
      for (Completion& c : q) {
        if (c.type != OpType::kNotify) got[c.context].push_back(std::move(c));
      }
      q.clear();
    };
    const auto end = Clock::now() + kOpTimeout;
    auto all_in = [&] {
      for (uint64_t ctx : want) {
        if (got.find(ctx) == got.end()) return false;
      }
      return true;
    };
    while (!all_in() && Clock::now() < end) {
      if (poller.Drive() == 0) (void)p_.a->Wait(Millis(1));
      take();
    }
    poller.DriveFor(Millis(100));
    take();
    return got;
  }

  // Every context in `want` completed exactly once, and nothing else completed.
  ::testing::AssertionResult ExactlyOnce(const std::map<uint64_t, std::vector<Completion>>& got,
                                         const std::set<uint64_t>& want) {
    for (uint64_t ctx : want) {
      auto it = got.find(ctx);
      if (it == got.end()) return ::testing::AssertionFailure() << "ctx " << ctx << " never done";
      if (it->second.size() != 1) {
        return ::testing::AssertionFailure()
               << "ctx " << ctx << " completed " << it->second.size() << " times";
      }
    }
    for (const auto& [ctx, cs] : got) {
      if (want.count(ctx) == 0) return ::testing::AssertionFailure() << "stray ctx " << ctx;
    }
    return ::testing::AssertionSuccess();
  }

  static bool Injected(const Completion& c) {
    return c.error.find("injected") != std::string::npos;
  }

  // Posts `ops` on A and collects their completions; every op's context must complete exactly
  // once (fails the test otherwise: callers check HasFatalFailure via ASSERT_NO_FATAL_FAILURE).
  void PostAll(const std::vector<Op>& ops, std::set<uint64_t>* want,
               std::map<uint64_t, std::vector<Completion>>* got) {
    for (const Op& op : ops) want->insert(op.context);
    ASSERT_OK(p_.a->Post(ops));
    Poller poller = PollerFor(p_);
    *got = Collect(poller, *want);
    ASSERT_TRUE(ExactlyOnce(*got, *want));
  }

  Pair p_;
  FaultTransport* fault_ = nullptr;
  std::vector<uint8_t> a_image_, b_image_;
};

TEST_P(FaultInjection, FailAfterOpsFailsEveryLaterOpOnceWithoutTouchingMemory) {
  const Capabilities& caps = p_.a->capabilities();
  FERRY_REQUIRE_CAP(caps, write);
  FERRY_REQUIRE_CAP(caps, read);
  FaultPlan plan;
  plan.fail_after_ops = 4;
  plan.fail_code = Code::kPeerFailure;
  fault_->SetPlan(plan);
  constexpr uint64_t kLen = 4096;
  Endpoint* ep = p_.a_ep();
  const MemoryRegion* mr = p_.a_mr.get();
  const RemoteKey* key = p_.b_key.get();
  std::vector<Op> ops;
  // Ops 1-4 reach the backend; 5-8 write, 9-10 read, then a sparse write and a send if the
  // backend has them: all of those must fail without moving a byte.
  for (uint64_t i = 0; i < 8; ++i)
    ops.push_back(WriteOp(ep, mr, i * kLen, key, i * kLen, kLen, i + 1));
  for (uint64_t i = 0; i < 2; ++i) {
    ops.push_back(ReadOp(ep, mr, (16 + i) * kLen, key, (16 + i) * kLen, kLen, 9 + i));
  }
  const Segment segs[] = {{20 * kLen, 20 * kLen, 100}, {21 * kLen, 22 * kLen, 100}};
  if (caps.sparse_write) ops.push_back(SparseOp(OpType::kSparseWrite, ep, mr, key, segs, 2, 11));
  if (caps.send_recv) ops.push_back(SendOp(ep, mr, 0, 64, 12));
  std::set<uint64_t> want;
  std::map<uint64_t, std::vector<Completion>> got;
  ASSERT_NO_FATAL_FAILURE(PostAll(ops, &want, &got));
  for (uint64_t ctx : want) {
    const Completion& c = got[ctx][0];
    if (ctx <= 4) {
      EXPECT_TRUE(c.ok()) << "ctx " << ctx << ": " << c.error;
    } else {
      EXPECT_EQ(c.code, Code::kPeerFailure) << "ctx " << ctx << ": " << c.error;
      EXPECT_TRUE(Injected(c)) << "ctx " << ctx << ": " << c.error;
    }
  }
  EXPECT_EQ(fault_->counters().ops_failed_injected, want.size() - 4);
  // The first four writes landed; nothing else changed on either side.
  std::vector<uint8_t> b_want = b_image_;
  std::copy(a_image_.begin(), a_image_.begin() + 4 * kLen, b_want.begin());
  EXPECT_TRUE(SameBytes("target", p_.b_mem(), b_want.data(), b_want.size()));
  EXPECT_TRUE(SameBytes("initiator", p_.a_mem(), a_image_.data(), a_image_.size()))
      << "a failed read moved bytes";
}

TEST_P(FaultInjection, ErrorRateFailsSomeCompletionsOnceAndTheOpsStillRan) {
  FERRY_REQUIRE_CAP(p_.a->capabilities(), write);
  FaultPlan plan;
  plan.error_rate = 0.5;
  plan.seed = 7;
  fault_->SetPlan(plan);
  constexpr uint64_t kOps = 16, kLen = 1024;
  std::vector<Op> ops;
  for (uint64_t i = 0; i < kOps; ++i) {
    ops.push_back(
        WriteOp(p_.a_ep(), p_.a_mr.get(), i * kLen, p_.b_key.get(), i * kLen, kLen, 100 + i));
  }
  std::set<uint64_t> want;
  std::map<uint64_t, std::vector<Completion>> got;
  ASSERT_NO_FATAL_FAILURE(PostAll(ops, &want, &got));
  uint64_t failed = 0;
  for (uint64_t ctx : want) {
    const Completion& c = got[ctx][0];
    if (c.ok()) continue;
    ++failed;
    EXPECT_EQ(c.code, Code::kIoError) << c.error;
    EXPECT_TRUE(Injected(c)) << c.error;
  }
  EXPECT_EQ(failed, fault_->counters().completions_corrupted);
  EXPECT_GT(failed, 0u) << "error_rate 0.5 corrupted nothing of " << kOps;
  EXPECT_LT(failed, kOps) << "error_rate 0.5 corrupted everything";
  // error_rate models a lost acknowledgement: the write ran, only its completion is an error.
  // So every write landed, the failed ones included (a caller must not assume "error: untouched").
  std::vector<uint8_t> b_want = b_image_;
  std::copy(a_image_.begin(), a_image_.begin() + kOps * kLen, b_want.begin());
  EXPECT_TRUE(SameBytes("target", p_.b_mem(), b_want.data(), b_want.size()));
}

TEST_P(FaultInjection, ShortReadsMoveHalfAndFailOnceLeavingTheRestUntouched) {
  const Capabilities& caps = p_.a->capabilities();
  FERRY_REQUIRE_CAP(caps, read);
  FaultPlan plan;
  plan.short_reads = true;
  fault_->SetPlan(plan);
  constexpr uint64_t kLen = 8192, kDst = 64 << 10;
  Endpoint* ep = p_.a_ep();
  const MemoryRegion* mr = p_.a_mr.get();
  const RemoteKey* key = p_.b_key.get();
  std::vector<Op> ops = {ReadOp(ep, mr, kDst, key, 0, kLen, 1)};
  // Four segments: the wrapper forwards the first two only.
  const Segment segs[] = {{kDst + 16384, 16384, 512},
                          {kDst + 20480, 20480, 512},
                          {kDst + 24576, 24576, 512},
                          {kDst + 28672, 28672, 512}};
  if (caps.sparse_read) ops.push_back(SparseOp(OpType::kSparseRead, ep, mr, key, segs, 4, 2));
  // A write is not a read: it must pass untouched. (It lands past every byte read here: the
  // batch's ops may run in any order.)
  constexpr uint64_t kWriteAt = 40960;
  if (caps.write) ops.push_back(WriteOp(ep, mr, 0, key, kWriteAt, 256, 3));
  std::set<uint64_t> want;
  std::map<uint64_t, std::vector<Completion>> got;
  ASSERT_NO_FATAL_FAILURE(PostAll(ops, &want, &got));
  for (uint64_t ctx : {uint64_t{1}, uint64_t{2}}) {
    if (want.count(ctx) == 0) continue;
    const Completion& c = got[ctx][0];
    EXPECT_EQ(c.code, Code::kIoError) << "ctx " << ctx << ": " << c.error;
    EXPECT_TRUE(Injected(c)) << c.error;
  }
  if (want.count(3) != 0) {
    EXPECT_TRUE(got[3][0].ok()) << got[3][0].error;
  }
  std::vector<uint8_t> a_want = a_image_;
  std::copy(b_image_.begin(), b_image_.begin() + kLen / 2, a_want.begin() + kDst);
  if (caps.sparse_read) {
    for (size_t i = 0; i < 2; ++i) {
      std::copy(b_image_.begin() + segs[i].remote_offset,
                b_image_.begin() + segs[i].remote_offset + segs[i].length,
                a_want.begin() + segs[i].local_offset);
    }
  }
  EXPECT_TRUE(SameBytes("initiator", p_.a_mem(), a_want.data(), a_want.size()))
      << "a short read moved more (or other) bytes than its first half";
  std::vector<uint8_t> b_want = b_image_;
  if (caps.write) std::copy(a_image_.begin(), a_image_.begin() + 256, b_want.begin() + kWriteAt);
  EXPECT_TRUE(SameBytes("target", p_.b_mem(), b_want.data(), b_want.size()));
}

TEST_P(FaultInjection, ShortReceiveFailsOnce) {
  FERRY_REQUIRE_CAP(p_.a->capabilities(), send_recv);
  FaultPlan plan;
  plan.short_reads = true;
  fault_->SetPlan(plan);
  ASSERT_OK(p_.a->Post({{RecvOp(p_.a_ep(), p_.a_mr.get(), 0, 4096, 7)}}));
  ASSERT_OK(p_.b->Post({{SendOp(p_.b_ep(), p_.b_mr.get(), 0, 1000, 8)}}));
  Poller poller = PollerFor(p_);
  auto got = Collect(poller, {7});
  ASSERT_TRUE(ExactlyOnce(got, {7}));
  const Completion& c = got[7][0];
  EXPECT_EQ(c.code, Code::kIoError) << c.error;
  EXPECT_TRUE(Injected(c)) << c.error;
  EXPECT_EQ(c.bytes, 500u) << "a short receive reports half the message";
  Completion sent;
  ASSERT_TRUE(poller.Await(p_.b.get(), 8, &sent));
  EXPECT_TRUE(sent.ok()) << "the sender's side is not the wrapped one: " << sent.error;
}

TEST_P(FaultInjection, DelayHoldsEveryCompletionBackAndLosesNone) {
  FERRY_REQUIRE_CAP(p_.a->capabilities(), write);
  FaultPlan plan;
  plan.delay = Millis(50);
  fault_->SetPlan(plan);
  std::vector<Op> ops;
  std::set<uint64_t> want;
  for (uint64_t i = 0; i < 4; ++i) {
    ops.push_back(WriteOp(p_.a_ep(), p_.a_mr.get(), i * 512, p_.b_key.get(), i * 512, 512, i + 1));
    want.insert(i + 1);
  }
  const auto posted = Clock::now();
  ASSERT_OK(p_.a->Post(ops));
  Poller poller = PollerFor(p_);
  std::map<uint64_t, std::vector<Completion>> got;
  Completion first;
  ASSERT_TRUE(poller.Await(p_.a.get(), 1, &first));
  // A lower bound only (never an upper one: the machine is noisy).
  EXPECT_GE(Clock::now() - posted, plan.delay);
  got[1].push_back(first);
  want.erase(1);
  for (auto& [ctx, cs] : Collect(poller, want))
    got[ctx].insert(got[ctx].end(), cs.begin(), cs.end());
  want.insert(1);
  ASSERT_TRUE(ExactlyOnce(got, want));
  for (const auto& [ctx, cs] : got) EXPECT_TRUE(cs[0].ok()) << cs[0].error;
  EXPECT_EQ(fault_->counters().completions_delayed, 4u);
  std::vector<uint8_t> b_want = b_image_;
  std::copy(a_image_.begin(), a_image_.begin() + 4 * 512, b_want.begin());
  EXPECT_TRUE(SameBytes("target", p_.b_mem(), b_want.data(), b_want.size()));
}

// Instantiated for the "fault+" configurations selected (none unless FERRY_TEST_BACKENDS names
// some; tests/conformance/meson.build registers those runs).
std::vector<BackendConfig> FaultConfigs() {
  std::vector<BackendConfig> out;
  for (const BackendConfig& c : SelectedConfigs().run) {
    if (c.fault_wrapped) out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjection, ::testing::ValuesIn(FaultConfigs()),
                         [](const auto& info) { return info.param.TestName(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FaultInjection);

}  // namespace
}  // namespace ferry::testing
