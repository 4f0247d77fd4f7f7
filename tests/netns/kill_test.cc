// A peer process SIGKILLed at random points of long transfers, many times (seeded).
//
// Each iteration: this process (namespace A) registers a fresh target region and advertises it;
// a ferry_test_peer in namespace B connects and keeps large writes of its pattern in flight into
// that region while this process keeps reads of the peer's region in flight. After a random delay
// the peer is SIGKILLed. The survivor must: see an error on every pending op within
// peer_timeout + slack of the kill, report why on the endpoint, never have read wrong bytes, hold
// only the peer's pattern (or zeros) in its target region, close the endpoint and deregister its
// regions without hanging, and accept the next peer on the same transport. After the last kill a
// fresh peer must serve a full pattern-checked read.
//
// FERRY_NETNS_KILLS (default 20) and FERRY_NETNS_SEED (default 20261121) override the loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <vector>

#include "tests/common/print.h"
#include "tests/netns/harness.h"

namespace ferry::netns {
namespace {

constexpr uint64_t kRegionBytes = 4u << 20;
constexpr uint64_t kReadChunk = 1u << 20;

uint64_t EnvUint(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

struct Iteration {
  uint64_t ops = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;
  int64_t detect_ms = -1;
  int64_t drain_ms = -1;
  int64_t dereg_ms = -1;
};

class NetnsKill : public ::testing::TestWithParam<const char*> {};

TEST_P(NetnsKill, SurvivorReportsFreesAndReconnects) {
  const testing::BackendConfig& config = ConfigNamed(GetParam());
  if (std::string why = MissingRequirements(); !why.empty()) GTEST_SKIP() << why;
  if (std::string why = ConfigUnavailable(config); !why.empty()) GTEST_SKIP() << why;
  const uint64_t iterations = EnvUint("FERRY_NETNS_KILLS", 20);
  const uint64_t seed = EnvUint("FERRY_NETNS_SEED", 20261121);
  Watchdog watchdog("sigkill", config.name, std::chrono::seconds(40 + 6 * iterations));

  Outcome out;
  out.scenario = "sigkill";
  out.backend = config.name;
  auto pair = NetnsPair::Create(200 + (config.name == "tcp" ? 0 : 1));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  NetnsPair& p = **pair;
  auto in_a = NetnsEnter::Enter(p.fd_a());
  ASSERT_TRUE(in_a.ok()) << in_a.status().ToString();
  TransportOptions topts = config.Options();
  topts.peer_timeout = kPeerTimeout;
  auto created = CreateTransport(config.backend, topts);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<Transport> transport = std::move(*created);
  Transport& t = *transport;
  auto listen = t.Listen(p.addr(Side::kA) + ":0");
  ASSERT_TRUE(listen.ok()) << listen.status().ToString();

  std::mt19937_64 rng(seed);
  const int64_t bound_ms = (kPeerTimeout + kSlack).count();
  std::vector<Iteration> its;
  std::vector<Completion> done(32);
  std::string last_error;
  const auto start = Clock::now();

  auto spawn = [&](uint64_t peer_seed, const std::string& mode) {
    testing::PeerOptions po;
    po.connect = *listen;
    po.region_bytes = kRegionBytes;
    po.seed = peer_seed;
    po.peer_timeout = kPeerTimeout;
    po.mode = mode;
    po.lifetime = Millis(60000);
    return testing::PeerProcess::Spawn(p.ExecIn(Side::kB, PeerCommandLine(config, po)));
  };

  for (uint64_t it = 0; it < iterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    Iteration rec;
    const uint64_t peer_seed = seed + 17 * (it + 1);
    testing::Buffer target_buf(kRegionBytes);
    auto target = t.RegisterMemory(target_buf.data(), target_buf.size(), kAccessRemote);
    ASSERT_TRUE(target.ok()) << target.status().ToString();
    t.Advertise({(*target)->descriptor()});
    auto peer = spawn(peer_seed, "write");
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    auto accepted = t.Accept(Millis(20000));
    ASSERT_TRUE(accepted.ok()) << accepted.status().ToString() << " (peer "
                               << ((*peer)->Running() ? "running" : (*peer)->exit_description())
                               << ")";
    std::shared_ptr<Endpoint> ep = std::move(*accepted);
    ASSERT_FALSE(ep->peer_regions().empty());
    auto key = ep->Import(ep->peer_regions().front());
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    testing::Buffer local_buf(kRegionBytes);
    auto local = t.RegisterMemory(local_buf.data(), local_buf.size(), kAccessLocal);
    ASSERT_TRUE(local.ok()) << local.status().ToString();

    // Reads of the peer's region, four in flight, each on its own quarter of the local buffer.
    const int64_t kill_after_ms = 50 + static_cast<int64_t>(rng() % 750);
    const auto kill_at = Clock::now() + Millis(kill_after_ms);
    Clock::time_point killed{}, first_error{}, last{};
    bool failed = false, stop_posting = false;
    uint64_t next = 0, in_flight = 0;
    std::string first_error_text;
    bool unclear = false;
    while (true) {
      const auto now = Clock::now();
      if (killed == Clock::time_point{} && now >= kill_at) {
        (*peer)->Kill();
        killed = Clock::now();
      }
      if (killed != Clock::time_point{} && MsBetween(killed, now) > bound_ms) break;
      if (failed && in_flight == 0) break;
      while (!stop_posting && in_flight < 4) {
        Op op;
        op.type = OpType::kRead;
        op.ep = ep.get();
        op.context = next;
        op.local = local->get();
        op.local_offset = (next % 4) * kReadChunk;
        op.length = kReadChunk;
        op.remote = key->get();
        op.remote_offset = (next % 4) * kReadChunk;
        Status st = t.Post({&op, 1});
        ++rec.ops;
        if (!st.ok()) {
          ++rec.errors;
          stop_posting = failed = true;
          first_error = Clock::now();
          first_error_text = "Post: " + st.ToString();
          break;
        }
        ++next;
        ++in_flight;
      }
      size_t n = t.Poll(done);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = done[i];
        if (c.type != OpType::kRead) continue;
        --in_flight;
        last = Clock::now();
        if (c.ok()) {
          rec.bytes += c.bytes;
          const uint64_t off = (c.context % 4) * kReadChunk;
          ASSERT_TRUE(testing::CheckPattern(local_buf.data() + off, kReadChunk, peer_seed, off))
              << "a read that completed ok returned wrong bytes";
          continue;
        }
        ++rec.errors;
        if (c.error.empty() || c.code == Code::kOk || c.code == Code::kInternal) unclear = true;
        if (!failed) {
          failed = stop_posting = true;
          first_error = last;
          first_error_text = std::string(CodeName(c.code)) + ": " + c.error;
        }
      }
      if (n == 0) (void)t.Wait(Millis(10));
    }
    ASSERT_NE(killed, Clock::time_point{}) << "the peer was never killed (failed before: "
                                           << first_error_text << ")";
    ASSERT_TRUE(failed) << "no op failed within " << bound_ms << " ms of the SIGKILL";
    ASSERT_EQ(in_flight, 0u) << "ops still pending " << bound_ms << " ms after the SIGKILL";
    EXPECT_FALSE(unclear) << first_error_text;
    EXPECT_FALSE(ep->status().ok()) << "endpoint still ok after its peer was killed";
    rec.detect_ms = std::max<int64_t>(0, MsBetween(killed, first_error));
    rec.drain_ms = std::max<int64_t>(0, MsBetween(killed, last));
    EXPECT_LE(rec.drain_ms, bound_ms);

    // The peer wrote only its own pattern from offset 0; everything else must still be zero.
    testing::Buffer expect(kRegionBytes);
    testing::FillPattern(expect.data(), kRegionBytes, peer_seed);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < kRegionBytes; ++i) {
      const uint8_t b = target_buf.data()[i];
      if (b != 0 && b != expect.data()[i]) ++bad;
    }
    EXPECT_EQ(bad, 0u) << "target region holds bytes the peer never wrote";

    // Free everything; deregistration must not wait on the dead peer beyond the bound.
    key->reset();
    ep->Close();
    ep.reset();
    local->reset();
    const auto dereg_start = Clock::now();
    target->reset();
    rec.dereg_ms = MsBetween(dereg_start, Clock::now());
    EXPECT_LE(rec.dereg_ms, bound_ms);
    std::printf("kill %llu/%llu: killed after %lld ms of transfer, %llu reads ok, first error "
                "after %lld ms, drained after %lld ms, deregistered in %lld ms: %s\n",
                static_cast<unsigned long long>(it + 1),
                static_cast<unsigned long long>(iterations),
                static_cast<long long>(kill_after_ms),
                static_cast<unsigned long long>(rec.bytes / kReadChunk),
                static_cast<long long>(rec.detect_ms), static_cast<long long>(rec.drain_ms),
                static_cast<long long>(rec.dereg_ms), first_error_text.c_str());
    last_error = first_error_text;
    its.push_back(rec);
    if (::testing::Test::HasFatalFailure()) break;
  }

  // A new peer after all the kills: a full pattern-checked read of its region.
  t.Advertise({});
  const uint64_t final_seed = seed + 99991;
  auto peer = spawn(final_seed, "serve");
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  auto accepted = t.Accept(Millis(20000));
  ASSERT_TRUE(accepted.ok()) << "no new peer after the kill loop: "
                             << accepted.status().ToString();
  std::shared_ptr<Endpoint> ep = std::move(*accepted);
  auto key = ep->Import(ep->peer_regions().front());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  testing::Buffer local_buf(kRegionBytes);
  auto local = t.RegisterMemory(local_buf.data(), local_buf.size(), kAccessLocal);
  ASSERT_TRUE(local.ok());
  Op op;
  op.type = OpType::kRead;
  op.ep = ep.get();
  op.context = 777;
  op.local = local->get();
  op.length = kRegionBytes;
  op.remote = key->get();
  ASSERT_TRUE(t.Post({&op, 1}).ok());
  bool got = false;
  Completion final_c;
  const auto final_deadline = Clock::now() + Millis(20000);
  while (!got && Clock::now() < final_deadline) {
    size_t n = t.Poll(done);
    for (size_t i = 0; i < n; ++i) {
      if (done[i].context == 777) {
        got = true;
        final_c = done[i];
      }
    }
    if (n == 0) (void)t.Wait(Millis(10));
  }
  ASSERT_TRUE(got) << "read from the new peer never completed";
  EXPECT_TRUE(final_c.ok()) << final_c.error;
  EXPECT_TRUE(testing::CheckPattern(local_buf.data(), kRegionBytes, final_seed));
  key->reset();
  ep->Close();
  ep.reset();
  local->reset();
  transport.reset();
  in_a->reset();

  out.ops = 0;
  std::vector<int64_t> detects;
  int64_t max_drain = 0, max_dereg = 0;
  for (const Iteration& r : its) {
    out.ops += r.ops;
    out.errors += r.errors;
    out.bytes += r.bytes;
    detects.push_back(r.detect_ms);
    max_drain = std::max(max_drain, r.drain_ms);
    max_dereg = std::max(max_dereg, r.dereg_ms);
  }
  std::sort(detects.begin(), detects.end());
  out.detect_ms = detects.empty() ? -1 : detects.back();
  out.drain_ms = its.empty() ? -1 : max_drain;
  out.elapsed_ms = MsBetween(start, Clock::now());
  const bool all_ok = !::testing::Test::HasFailure() && its.size() == iterations;
  out.outcome = all_ok ? "failed-in-bound" : "violation";
  out.note = "kills=" + std::to_string(its.size()) + "/" + std::to_string(iterations) +
             ",seed=" + std::to_string(seed) + ",detect_ms_median=" +
             (detects.empty() ? "-" : std::to_string(detects[detects.size() / 2])) +
             ",dereg_ms_max=" + std::to_string(max_dereg) +
             ",reconnect=" + (final_c.ok() ? "ok" : "failed");
  out.error = last_error;
  Report(out);
}

INSTANTIATE_TEST_SUITE_P(Netns, NetnsKill, ::testing::Values("tcp", "ucx-tcp"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ferry::netns
