// Network faults between two namespaces, for every backend configuration in kConfigs: this
// process (namespace A) writes a pattern into a ferry_test_peer's region (namespace B) and reads
// it back, round after round, while the link loses packets, is rate limited, goes dark, loses its
// carrier, or runs through a FaultProxy that delays, re-segments, stalls or cuts the stream.
//
// The rule checked for every scenario: each transfer either completes with the right bytes
// (checked byte for byte), or fails with a clear error (a message and a failure code) no later
// than peer_timeout + slack after the fault began; the endpoint then reports why it failed.
// Never a hang (every case has a watchdog), never corrupted bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <tuple>

#include "tests/common/print.h"
#include "tests/netns/harness.h"

namespace ferry::netns {
namespace {

enum class Kind { kLoss, kBlackHole, kRate, kLinkDown, kProxyDelay, kProxyChunk, kProxyStall,
                  kProxyCut };
enum class Expect { kComplete, kFail, kEither };

struct Scenario {
  const char* name;
  Kind kind;
  int param;     // loss percent / proxy delay ms / proxy max chunk
  int rounds;    // rounds of 1 MiB up + 1 MiB down when nothing fails
  Expect expect;
};

const Scenario kScenarios[] = {
    {"loss1", Kind::kLoss, 1, 6, Expect::kComplete},
    // At 10 % loss a retransmission can back off past peer_timeout (2 s): failing is allowed,
    // as long as it is clear and in time.
    {"loss10", Kind::kLoss, 10, 3, Expect::kEither},
    {"blackhole", Kind::kBlackHole, 0, 2, Expect::kFail},
    {"rate10mbit", Kind::kRate, 10, 2, Expect::kComplete},
    {"linkdown", Kind::kLinkDown, 0, 2, Expect::kFail},
    {"proxy-delay50ms", Kind::kProxyDelay, 50, 4, Expect::kComplete},
    {"proxy-chunk", Kind::kProxyChunk, 1400, 2, Expect::kComplete},
    {"proxy-stall", Kind::kProxyStall, 0, 2, Expect::kFail},
    {"proxy-cut", Kind::kProxyCut, 0, 2, Expect::kFail},
};

const char* const kConfigs[] = {"tcp", "ucx-tcp"};

std::atomic<int> g_next_index{0};

bool IsProxy(Kind k) {
  return k == Kind::kProxyDelay || k == Kind::kProxyChunk || k == Kind::kProxyStall ||
         k == Kind::kProxyCut;
}
bool IsMidTransfer(Kind k) {
  return k == Kind::kBlackHole || k == Kind::kLinkDown || k == Kind::kProxyStall ||
         k == Kind::kProxyCut;
}

class NetnsFault : public ::testing::TestWithParam<std::tuple<const char*, Scenario>> {};

TEST_P(NetnsFault, CompletesOrFailsInBound) {
  const testing::BackendConfig& config = ConfigNamed(std::get<0>(GetParam()));
  const Scenario sc = std::get<1>(GetParam());
  if (std::string why = MissingRequirements(); !why.empty()) GTEST_SKIP() << why;
  if (std::string why = ConfigUnavailable(config); !why.empty()) GTEST_SKIP() << why;
  Watchdog watchdog(sc.name, config.name, std::chrono::seconds(60));

  Outcome out;
  out.scenario = sc.name;
  out.backend = config.name;
  auto pair = NetnsPair::Create(g_next_index++ % 256);
  if (!pair.ok()) {
    out.outcome = "setup";
    out.error = pair.status().ToString();
    Report(out);
    FAIL() << pair.status().ToString();
  }
  NetnsPair& p = **pair;
  Status pre;
  if (sc.kind == Kind::kLoss) pre = p.RandomLoss(sc.param);
  if (sc.kind == Kind::kRate) pre = p.RateLimit(std::to_string(sc.param) + "mbit");
  ASSERT_TRUE(pre.ok()) << pre.ToString();

  const uint64_t seed = 1000 + static_cast<uint64_t>(g_next_index.load());
  Session s;
  SessionOptions so;
  so.via_proxy = IsProxy(sc.kind);
  so.seed = seed;
  Status opened = OpenSession(config, p, so, &s);
  if (!opened.ok()) {
    out.outcome = "setup";
    out.error = opened.ToString();
    Report(out);
    FAIL() << opened.ToString();
  }
  if (sc.kind == Kind::kProxyDelay) s.proxy->SetDelay(Millis(sc.param));
  if (sc.kind == Kind::kProxyChunk) s.proxy->SetChunking(static_cast<size_t>(sc.param));

  TrafficOptions to;
  to.rounds = sc.rounds;
  to.budget = Millis(45000);
  if (IsMidTransfer(sc.kind)) {
    to.fault_round = 1;
    to.inject = [&]() -> Status {
      switch (sc.kind) {
        case Kind::kBlackHole: return p.BlackHole();
        case Kind::kLinkDown: return p.LinkDown();
        case Kind::kProxyStall: s.proxy->Stall(); return Status::Ok();
        case Kind::kProxyCut: s.proxy->Cut(); return Status::Ok();
        default: return Internal("not a mid-transfer fault");
      }
    };
  }
  const auto start = Clock::now();
  TrafficResult r = RunTraffic(s, to, seed);
  const auto end = Clock::now();

  out.ops = r.ops;
  out.errors = r.errors;
  out.bytes = r.bytes;
  out.elapsed_ms = MsBetween(start, end);
  if (r.injected && r.errors > 0) {
    out.detect_ms = MsBetween(r.inject_at, r.first_error);
    out.drain_ms = MsBetween(r.inject_at, r.last_completion);
  }
  if (s.proxy) {
    ProxyCounters pc = s.proxy->counters();
    out.proxy_bytes = static_cast<int64_t>(pc.bytes_up + pc.bytes_down);
    if (pc.bytes_up + pc.bytes_down < r.bytes / 2) {
      out.note = "data-lanes-bypass-proxy(only-the-control-connection-is-relayed)";
    }
  }
  bool bypassed = false;
  if (s.proxy) {
    ProxyCounters pc = s.proxy->counters();
    bypassed = pc.bytes_up + pc.bytes_down < r.bytes / 2;
  }
  const Status ep_status = s.ep->status();
  out.error = r.errors > 0 ? r.first_error_text + " | endpoint: " + ep_status.ToString() : "";
  const int64_t bound_ms = (kPeerTimeout + kSlack).count();
  if (r.corrupt > 0) {
    out.outcome = "corrupt";
  } else if (r.hung) {
    out.outcome = "hang";
  } else if (r.errors > 0 && (r.unclear || ep_status.ok())) {
    out.outcome = "unclear-error";
  } else if (r.errors > 0 && r.injected && out.drain_ms > bound_ms) {
    out.outcome = "late";
  } else if (r.errors > 0) {
    out.outcome = "failed-in-bound";
  } else if (r.undetected && !bypassed) {
    out.outcome = "undetected";
  } else if (r.undetected) {
    out.outcome = "completed";
    out.note += ";fault-on-control-connection-only:ops-kept-completing-for-" +
                std::to_string(MsBetween(r.inject_at, end)) + "ms";
  } else {
    out.outcome = "completed";
  }
  if (!r.inject_error.empty()) out.note = "inject failed: " + r.inject_error;
  Report(out);

  EXPECT_TRUE(r.inject_error.empty()) << r.inject_error;
  EXPECT_EQ(r.corrupt, 0u) << r.corrupt_text;
  EXPECT_FALSE(r.hung) << "ops still pending at the bound "
                       << (r.injected ? "after the fault" : "") << "; first error: "
                       << r.first_error_text;
  EXPECT_FALSE(r.undetected && !bypassed) << "the fault on the data path was never reported";
  if (r.errors > 0) {
    EXPECT_FALSE(r.unclear) << "an error completion had no message or an unexpected code: "
                            << r.first_error_text;
    EXPECT_FALSE(ep_status.ok()) << "ops failed but the endpoint still reports ok";
    if (r.injected) {
      EXPECT_LE(out.drain_ms, bound_ms) << "the last affected op completed "
                                        << out.drain_ms << " ms after the fault";
    }
  }
  switch (sc.expect) {
    case Expect::kComplete:
      EXPECT_EQ(r.errors, 0u) << "a degraded but live link was declared failed: "
                              << r.first_error_text;
      EXPECT_EQ(r.rounds_done, sc.rounds);
      EXPECT_GT(r.checked, 0u);
      break;
    case Expect::kFail:
      // Through a bypassed proxy the fault hits only the control connection; data lanes keep
      // working and count as liveness, so completing every op correctly is right there.
      if (!bypassed) {
        EXPECT_GT(r.errors, 0u) << "the fault was never reported";
      }
      break;
    case Expect::kEither:
      if (r.errors == 0) {
        EXPECT_EQ(r.rounds_done, sc.rounds);
      }
      break;
  }
}

std::string Name(const ::testing::TestParamInfo<NetnsFault::ParamType>& info) {
  std::string n = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Netns, NetnsFault,
                         ::testing::Combine(::testing::ValuesIn(kConfigs),
                                            ::testing::ValuesIn(kScenarios)),
                         Name);

}  // namespace
}  // namespace ferry::netns
