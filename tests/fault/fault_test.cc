// FaultTransport over every backend available here (tcp, ucx over shared memory, ucx over tcp):
// each kind of injected fault reaches the caller as the contract says (an error completion per
// op, never a lost op), and a clean plan is transparent. The wrapper sits above the Transport
// interface, so every case must hold unchanged on every backend; a backend that breaks one has
// a bug in the wrapper or in itself, which is why nothing here is skipped per backend.
#include "transport/fault/fault.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace ferry {
namespace {

using namespace std::chrono_literals;

struct Config {
  const char* name;  // gtest parameter name
  const char* backend;
  std::map<std::string, std::string> params;
};

const Config kConfigs[] = {
    {"tcp", "tcp", {}},
    {"ucx_shm", "ucx", {{"UCX_TLS", "shm,self"}}},
    {"ucx_tcp", "ucx", {{"UCX_TLS", "tcp,self"}}},
};

// Empty when `backend` can run here, else why not.
std::string Unavailable(const std::string& backend) {
  for (const BackendInfo& b : ListBackends()) {
    if (b.name == backend) return b.available ? "" : b.reason;
  }
  return "not compiled in";
}

class FaultTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    const Config& cfg = GetParam();
    if (std::string why = Unavailable(cfg.backend); !why.empty()) {
      GTEST_SKIP() << cfg.backend << " unavailable: " << why;
    }
    TransportOptions server_opts;
    server_opts.params = cfg.params;
    server_opts.progress_thread = true;  // passive target
    server_opts.peer_timeout = 2000ms;
    auto server = CreateTransport(cfg.backend, server_opts);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    target_mem_.assign(1 << 20, 0);
    auto mr = server_->RegisterMemory(target_mem_.data(), target_mem_.size(), kAccessRemote);
    ASSERT_TRUE(mr.ok()) << mr.status().ToString();
    target_mr_ = std::move(*mr);
    server_->Advertise({target_mr_->descriptor()});
    auto addr = server_->Listen("127.0.0.1:0");
    ASSERT_TRUE(addr.ok()) << addr.status().ToString();

    TransportOptions client_opts;
    client_opts.params = cfg.params;
    client_opts.peer_timeout = 2000ms;
    auto inner = CreateTransport(cfg.backend, client_opts);
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    client_ = std::make_unique<FaultTransport>(std::move(*inner), FaultPlan{});
    auto ep = client_->Connect(*addr, 5000ms);
    ASSERT_TRUE(ep.ok()) << ep.status().ToString();
    ep_ = *ep;
    auto accepted = server_->Accept(5000ms);
    ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
    server_ep_ = *accepted;
    ASSERT_EQ(ep_->peer_regions().size(), 1u);
    auto key = ep_->Import(ep_->peer_regions()[0]);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    key_ = std::move(*key);
    local_mem_.resize(1 << 20);
    std::iota(local_mem_.begin(), local_mem_.end(), 0);
    auto lmr = client_->RegisterMemory(local_mem_.data(), local_mem_.size(), kAccessLocal);
    ASSERT_TRUE(lmr.ok()) << lmr.status().ToString();
    local_mr_ = std::move(*lmr);
  }

  void TearDown() override {
    if (ep_) ep_->Close();
    key_.reset();
    local_mr_.reset();
    ep_.reset();
    client_.reset();
    server_ep_.reset();
    target_mr_.reset();
    server_.reset();
  }

  Op Write(uint64_t ctx, uint64_t offset, uint64_t len) {
    Op op;
    op.type = OpType::kWrite;
    op.ep = ep_.get();
    op.context = ctx;
    op.local = local_mr_.get();
    op.local_offset = offset;
    op.length = len;
    op.remote = key_.get();
    op.remote_offset = offset;
    return op;
  }

  // Polls until `n` completions arrived or 10 s passed.
  std::vector<Completion> Drain(size_t n) {
    std::vector<Completion> got;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    Completion buf[16];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      size_t k = client_->Poll(buf);
      for (size_t i = 0; i < k; ++i) got.push_back(buf[i]);
      if (k == 0) (void)client_->Wait(10ms);
    }
    return got;
  }

  std::unique_ptr<Transport> server_;
  std::unique_ptr<FaultTransport> client_;
  std::shared_ptr<Endpoint> ep_, server_ep_;
  std::vector<uint8_t> target_mem_, local_mem_;
  std::unique_ptr<MemoryRegion> target_mr_, local_mr_;
  std::unique_ptr<RemoteKey> key_;
};

TEST_P(FaultTest, CleanPlanIsTransparent) {
  std::vector<Op> ops;
  for (uint64_t i = 0; i < 8; ++i) ops.push_back(Write(100 + i, i * 4096, 4096));
  ASSERT_TRUE(client_->Post(ops).ok());
  auto got = Drain(8);
  ASSERT_EQ(got.size(), 8u);
  for (const auto& c : got) {
    EXPECT_TRUE(c.ok()) << c.error;
    EXPECT_GE(c.context, 100u);
    EXPECT_LT(c.context, 108u);
  }
  EXPECT_TRUE(std::equal(local_mem_.begin(), local_mem_.begin() + 8 * 4096, target_mem_.begin()));
}

TEST_P(FaultTest, FailAfterNOpsFailsEveryLaterOpWithoutTouchingTheTarget) {
  FaultPlan plan;
  plan.fail_after_ops = 3;
  plan.fail_code = Code::kPeerFailure;
  client_->SetPlan(plan);
  std::vector<Op> ops;
  for (uint64_t i = 0; i < 6; ++i) ops.push_back(Write(i, i * 4096, 4096));
  ASSERT_TRUE(client_->Post(ops).ok());
  auto got = Drain(6);
  ASSERT_EQ(got.size(), 6u);
  size_t failed = 0;
  for (const auto& c : got) {
    if (c.context >= 3) {
      EXPECT_EQ(c.code, Code::kPeerFailure);
      EXPECT_NE(c.error.find("injected"), std::string::npos);
      ++failed;
    } else {
      EXPECT_TRUE(c.ok()) << c.error;
    }
  }
  EXPECT_EQ(failed, 3u);
  EXPECT_EQ(client_->counters().ops_failed_injected, 3u);
  // The failed writes never reached the target.
  for (size_t i = 3 * 4096; i < 6 * 4096; ++i) ASSERT_EQ(target_mem_[i], 0) << i;
}

TEST_P(FaultTest, ErrorRateOneTurnsEveryCompletionIntoAnError) {
  FaultPlan plan;
  plan.error_rate = 1.0;
  client_->SetPlan(plan);
  std::vector<Op> ops;
  for (uint64_t i = 0; i < 4; ++i) ops.push_back(Write(i, i * 64, 64));
  ASSERT_TRUE(client_->Post(ops).ok());
  auto got = Drain(4);
  ASSERT_EQ(got.size(), 4u);
  for (const auto& c : got) EXPECT_EQ(c.code, Code::kIoError);
  EXPECT_EQ(client_->counters().completions_corrupted, 4u);
}

TEST_P(FaultTest, DelayHoldsCompletionsBack) {
  FaultPlan plan;
  plan.delay = 200ms;
  client_->SetPlan(plan);
  Op op = Write(7, 0, 64);
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->Post({&op, 1}).ok());
  auto got = Drain(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok());
  // A lower bound only: the completion must not be released before its delay.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
}

TEST_P(FaultTest, ShortReadMovesPartAndReportsAnError) {
  for (size_t i = 0; i < 8192; ++i) target_mem_[i] = static_cast<uint8_t>(0xA0 ^ i);
  std::fill(local_mem_.begin(), local_mem_.end(), 0);
  FaultPlan plan;
  plan.short_reads = true;
  client_->SetPlan(plan);
  Op op;
  op.type = OpType::kRead;
  op.ep = ep_.get();
  op.context = 9;
  op.local = local_mr_.get();
  op.length = 8192;
  op.remote = key_.get();
  ASSERT_TRUE(client_->Post({&op, 1}).ok());
  auto got = Drain(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, Code::kIoError);
  EXPECT_EQ(got[0].context, 9u);
  EXPECT_EQ(client_->counters().short_reads, 1u);
  // The first half arrived, the second half was never read.
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(local_mem_[i], static_cast<uint8_t>(0xA0 ^ i));
  for (size_t i = 4096; i < 8192; ++i) ASSERT_EQ(local_mem_[i], 0);
}

TEST_P(FaultTest, MalformedBatchIsRejectedAsWithoutTheWrapper) {
  Op bad = Write(1, (1 << 20) - 8, 64);  // past the end of the local region
  Status s = client_->Post({&bad, 1});
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.ToString();
  EXPECT_EQ(client_->counters().ops_posted, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultTest, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ferry
