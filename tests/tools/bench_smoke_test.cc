// Smoke test of every ferry_bench kernel: latency and bandwidth for all ops (contiguous, sparse
// and the pack references), each size in both passes (checked, then timed as the reference
// tools check), plus bidirectional, multi-endpoint/multi-thread, duration and single-pass
// variants. Both ends run in this process: the server on its own thread with the transport's
// progress thread on, the client on the test thread with a ThreadMode::kSingle transport when it
// runs one worker (the worker then posts the main thread's control traffic: Router's outbox).
// tcp always; ucx (UCX_TLS=shm,self) when built and usable. Iteration counts are tiny: this
// checks correctness (every transfer of the checked pass pattern-checked), not speed.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "ferry_config.h"
#include "tests/common/skips.h"
#include "tools/bench/config.h"
#include "tools/bench/runner.h"

namespace ferry::bench {
namespace {

struct Case {
  std::string transport;
  Mode mode;
  BenchOp op;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.transport + "_" + std::string(ModeName(info.param.mode)) + "_" +
         std::string(BenchOpName(info.param.op));
}

PeerOptions Peer(const std::string& transport, bool server, ThreadMode mode) {
  PeerOptions p;
  p.transport = transport;
  if (transport == "ucx") p.params["UCX_TLS"] = "shm,self";
  p.progress_thread = server;
  p.thread_mode = mode;
  p.connect_timeout = Millis(10000);
  return p;
}

// Skips (with the reason) when the backend is compiled in but cannot run here.
bool Available(const std::string& transport, std::string* why) {
  for (const BackendInfo& b : ListBackends()) {
    if (b.name == transport) {
      *why = b.reason;
      return b.available;
    }
  }
  *why = transport + " is not compiled in";
  return false;
}

BenchConfig SmallConfig(Mode mode, BenchOp op) {
  BenchConfig c;
  c.mode = mode;
  c.op = op;
  c.iters = mode == Mode::kLatency ? 20 : 64;
  c.warmup = 2;
  c.depth = 4;
  // Odd sizes too: a tag byte or a pattern window must not assume alignment.
  c.sizes = {1, 8, 1000, 65536 + 3};
  c.rows = 8;
  c.row_size = 72;
  c.region_size = 256 << 10;
  c.timeout_ms = 20000;
  return c;
}

struct Outcome {
  Status server;
  Result<Report> client = Status(Code::kInternal, "not run");
};

// The client runs single-threaded whenever it may (one worker thread), as the tools do.
Outcome RunPair(const std::string& transport, const BenchConfig& config,
                ThreadMode client_mode = ThreadMode::kSingle) {
  Outcome out;
  auto server = BenchServer::Listen(Peer(transport, true, ThreadMode::kMulti), "127.0.0.1:0");
  if (!server.ok()) {
    out.server = server.status();
    return out;
  }
  if (config.threads > 1) client_mode = ThreadMode::kMulti;
  std::thread t([&] { out.server = (*server)->Serve(Millis(20000)); });
  out.client = RunClient(Peer(transport, false, client_mode), config, (*server)->address());
  t.join();
  return out;
}

void ExpectGoodReport(const BenchConfig& c, const Outcome& o) {
  ASSERT_TRUE(o.client.ok()) << o.client.status().ToString();
  ASSERT_TRUE(o.server.ok()) << o.server.ToString();
  const Report& r = *o.client;
  const std::vector<PhaseSpec> specs = PhaseSpecs(c);
  const size_t phases = specs.size();
  if (c.mode == Mode::kLatency) {
    ASSERT_EQ(r.latency.size(), phases);
    for (size_t i = 0; i < phases; ++i) {
      const LatencyRow& row = r.latency[i];
      EXPECT_EQ(row.bytes, OpBytes(c, specs[i].size));
      EXPECT_EQ(row.check, specs[i].check);
      if (c.duration_s == 0) {
        EXPECT_EQ(row.iterations, c.iters);
      }
      EXPECT_GT(row.usec.min, 0);
      EXPECT_LE(row.usec.min, row.usec.typical);
      EXPECT_LE(row.usec.typical, row.usec.max);
      EXPECT_LE(row.usec.p99, row.usec.max);
    }
  } else {
    ASSERT_EQ(r.bandwidth.size(), phases);
    for (size_t i = 0; i < phases; ++i) {
      const BandwidthRow& row = r.bandwidth[i];
      EXPECT_EQ(row.bytes, OpBytes(c, specs[i].size));
      EXPECT_EQ(row.check, specs[i].check);
      const uint64_t directions = c.bidir ? 2 : 1;
      if (c.duration_s == 0) {
        EXPECT_EQ(row.bw.ops, c.iters * c.endpoints * directions);
      } else {
        EXPECT_GT(row.bw.ops, 0u);
      }
      EXPECT_GT(row.bw.bw_avg_mb, 0);
      EXPECT_GE(row.bw.bw_peak_mb, row.bw.bw_avg_mb * 0.999);
      if (UsesRows(c.op)) {
        EXPECT_EQ(row.bw.rows, row.bw.ops * c.rows);
      }
    }
  }
}

class KernelSmoke : public ::testing::TestWithParam<Case> {};

TEST_P(KernelSmoke, RunsVerified) {
  const Case& k = GetParam();
  std::string why;
  if (!Available(k.transport, &why)) GTEST_SKIP() << k.transport << " unavailable: " << why;
  const BenchConfig c = SmallConfig(k.mode, k.op);
  ExpectGoodReport(c, RunPair(k.transport, c));
}

std::vector<Case> AllCases() {
  std::vector<std::string> transports = {"tcp"};
#if FERRY_HAVE_UCX
  transports.push_back("ucx");
#endif
#if FERRY_HAVE_VERBS
  transports.push_back("verbs");  // skipped without an RDMA device; runs in the soft-RoCE VM
#endif
  std::vector<Case> cases;
  for (const std::string& t : transports) {
    for (Mode m : {Mode::kLatency, Mode::kBandwidth}) {
      for (BenchOp op :
           {BenchOp::kSend, BenchOp::kWrite, BenchOp::kRead, BenchOp::kWriteImm,
            BenchOp::kSparseWrite, BenchOp::kSparseRead, BenchOp::kPackWrite, BenchOp::kPackRead}) {
        if (IsPack(op) && m == Mode::kLatency) continue;  // bandwidth references only
        cases.push_back({t, m, op});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, KernelSmoke, ::testing::ValuesIn(AllCases()), CaseName);

class VariantSmoke : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!Available(GetParam(), &why)) GTEST_SKIP() << GetParam() << " unavailable: " << why;
  }
};

TEST_P(VariantSmoke, BidirectionalBandwidth) {
  for (BenchOp op : {BenchOp::kSend, BenchOp::kWrite, BenchOp::kWriteImm, BenchOp::kRead,
                     BenchOp::kSparseWrite}) {
    BenchConfig c = SmallConfig(Mode::kBandwidth, op);
    c.bidir = true;
    c.sizes = {4096};
    SCOPED_TRACE(std::string(BenchOpName(op)));
    ExpectGoodReport(c, RunPair(GetParam(), c));
  }
}

TEST_P(VariantSmoke, SeveralEndpointsAndThreads) {
  for (Mode mode : {Mode::kLatency, Mode::kBandwidth}) {
    for (BenchOp op : {BenchOp::kSend, BenchOp::kWriteImm, BenchOp::kSparseRead}) {
      BenchConfig c = SmallConfig(mode, op);
      c.endpoints = 3;
      c.threads = 2;
      c.sizes = {512};
      SCOPED_TRACE(std::string(ModeName(mode)) + " " + std::string(BenchOpName(op)));
      ExpectGoodReport(c, RunPair(GetParam(), c));
    }
  }
}

TEST_P(VariantSmoke, DurationAndUnchecked) {
  BenchConfig c = SmallConfig(Mode::kBandwidth, BenchOp::kWrite);
  c.duration_s = 0.2;
  c.sizes = {8192};
  ExpectGoodReport(c, RunPair(GetParam(), c));
  c = SmallConfig(Mode::kLatency, BenchOp::kWrite);
  c.duration_s = 0.2;
  c.sizes = {64};
  ExpectGoodReport(c, RunPair(GetParam(), c));
  c = SmallConfig(Mode::kBandwidth, BenchOp::kSend);
  c.check = CheckPolicy::kRef;
  ExpectGoodReport(c, RunPair(GetParam(), c));
  c = SmallConfig(Mode::kLatency, BenchOp::kSparseWrite);
  c.check = CheckPolicy::kFull;
  ExpectGoodReport(c, RunPair(GetParam(), c));
}

// The same kernels with a thread-safe client transport (what --threads > 1 and standalone
// servers use): nothing in the bench may rely on the single-threaded mode.
TEST_P(VariantSmoke, MultiThreadedClientTransport) {
  for (Mode mode : {Mode::kLatency, Mode::kBandwidth}) {
    for (BenchOp op : {BenchOp::kWrite, BenchOp::kSparseWrite, BenchOp::kSend}) {
      BenchConfig c = SmallConfig(mode, op);
      SCOPED_TRACE(std::string(ModeName(mode)) + " " + std::string(BenchOpName(op)));
      ExpectGoodReport(c, RunPair(GetParam(), c, ThreadMode::kMulti));
    }
  }
}

TEST_P(VariantSmoke, DeepWindowWrapsSlotsAndCredits) {
  // Many more ops than slots: every slot and credit buffer is reused many times.
  for (BenchOp op : {BenchOp::kSend, BenchOp::kWriteImm, BenchOp::kSparseWrite,
                     BenchOp::kSparseRead, BenchOp::kPackRead}) {
    BenchConfig c = SmallConfig(Mode::kBandwidth, op);
    c.iters = 3000;
    c.depth = 16;
    c.sizes = {64};
    SCOPED_TRACE(std::string(BenchOpName(op)));
    ExpectGoodReport(c, RunPair(GetParam(), c));
  }
}

std::vector<std::string> Transports() {
  std::vector<std::string> t = {"tcp"};
#if FERRY_HAVE_UCX
  t.push_back("ucx");
#endif
#if FERRY_HAVE_VERBS
  t.push_back("verbs");
#endif
  return t;
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantSmoke, ::testing::ValuesIn(Transports()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(ServerSide, ConnectToNothingFailsCleanly) {
  BenchConfig c = SmallConfig(Mode::kLatency, BenchOp::kSend);
  PeerOptions p = Peer("tcp", false, ThreadMode::kSingle);
  p.connect_timeout = Millis(2000);
  // Port 1 on loopback: nothing listens there.
  Result<Report> r = RunClient(p, c, "127.0.0.1:1");
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return ferry::testing::RunAllTestsVisibly();  // 77 when every case skipped (no device)
}
