// Verbs-specific tests; need an RDMA device (run inside tools/softroce/ferry-vm, suite 'rdma').
//
// The binary doubles as its own child process (re-executed through /proc/self/exe, never plain
// fork: librdmacm's device contexts must not be shared with a child) for the peer-death and
// memlock cases.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/skips.h"
#include "tests/common/status_asserts.h"
#include "tests/verbs/verbs_test_util.h"
#include "transport/transport.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry {
namespace {

using std::chrono::steady_clock;
using Params = std::map<std::string, std::string>;

const char* g_self = nullptr;

TransportOptions Opts(Params p, Millis peer_timeout = Millis(5000)) {
  TransportOptions o;
  o.params = std::move(p);
  o.peer_timeout = peer_timeout;
  return o;
}

using Pair = verbs_test::TransportPair;

// Server + client transports in this process, connected (Accept on a helper thread).
// own_ip: listen on the server device's own IPv4 address instead of 127.0.0.1 (needed when the
// client uses another device: a loopback host means "my own device" to each side in cm mode).
Pair Connect(TransportOptions so, TransportOptions co, bool own_ip = false) {
  Pair p;
  auto s = CreateTransport("verbs", so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return p;
  auto c = CreateTransport("verbs", co);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return p;
  p.server = std::move(s).value();
  p.client = std::move(c).value();
  std::string host = "127.0.0.1";
  if (own_ip) {
    const std::string gid = verbs::VerbsStats(*p.server)->gid;  // "::ffff:a.b.c.d"
    host = gid.substr(gid.rfind(':') + 1);
  }
  verbs_test::ConnectTransports(&p, host);
  return p;
}

// Polls both transports until `want` completions arrived on each (or the timeout).
void PollUntil(Transport* a, std::vector<Completion>* ca, size_t want_a, Transport* b,
               std::vector<Completion>* cb, size_t want_b, Millis timeout = Millis(30000)) {
  const auto deadline = steady_clock::now() + timeout;
  Completion buf[64];
  while ((ca->size() < want_a || (b && cb->size() < want_b)) && steady_clock::now() < deadline) {
    size_t n = a->Poll(buf);
    ca->insert(ca->end(), buf, buf + n);
    if (b != nullptr) {
      size_t m = b->Poll(buf);
      cb->insert(cb->end(), buf, buf + m);
    }
    if (n == 0) (void)a->Wait(Millis(1));
  }
}

std::vector<Completion> Drain(Transport* t, size_t want, Millis timeout = Millis(30000)) {
  std::vector<Completion> out, none;
  PollUntil(t, &out, want, nullptr, &none, 0, timeout);
  return out;
}

// Posts one op and waits for its one completion, which must be a success.
void PostOne(Transport* t, const Op& op, Completion* out) {
  ASSERT_OK(t->Post({&op, 1}));
  auto cc = Drain(t, 1);
  ASSERT_EQ(cc.size(), 1u);
  ASSERT_TRUE(cc[0].ok()) << cc[0].error;
  *out = std::move(cc[0]);
}

std::unique_ptr<MemoryRegion> Reg(Transport* t, std::vector<uint8_t>& buf, uint32_t access) {
  auto r = t->RegisterMemory(buf.data(), buf.size(), access);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

void Fill(std::vector<uint8_t>& b, uint8_t seed) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

verbs::Stats StatsOf(const Transport& t) {
  return *verbs::VerbsStats(t);
}

// The one-sided tests' setup: a connected pair, `local` (filled from `seed`) registered on the
// client, `remote` registered for remote access on the server and imported by the client.
struct OneSided {
  Pair p;
  std::vector<uint8_t> local, remote;
  std::unique_ptr<MemoryRegion> lmr, rmr;
  std::unique_ptr<RemoteKey> key;
  bool ok() const { return p.c_ep && lmr && rmr && key; }
};
std::unique_ptr<OneSided> MakeOneSided(size_t local_bytes, size_t remote_bytes, uint8_t seed,
                                       Params client_params = {}) {
  auto s = std::make_unique<OneSided>();
  s->p = Connect(Opts({}), Opts(std::move(client_params)));
  if (!s->p.c_ep) return s;
  s->local.resize(local_bytes);
  s->remote.resize(remote_bytes);
  Fill(s->local, seed);
  s->lmr = Reg(s->p.client.get(), s->local, kAccessLocal);
  s->rmr = Reg(s->p.server.get(), s->remote, kAccessRemote);
  if (!s->rmr) return s;
  auto key = s->p.c_ep->Import(s->rmr->descriptor());
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  if (key.ok()) s->key = std::move(key).value();
  return s;
}

class VerbsModes : public ::testing::TestWithParam<std::string> {};

TEST_P(VerbsModes, SendRecvWriteReadNotify) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({{"connect", GetParam()}}), Opts({{"connect", GetParam()}}));
  ASSERT_TRUE(p.c_ep && p.s_ep);
  std::vector<uint8_t> src(20000), dst(20000), remote(65536);
  Fill(src, 3);
  auto smr = Reg(p.client.get(), src, kAccessLocal);
  auto dmr = Reg(p.client.get(), dst, kAccessLocal);
  auto rmr = Reg(p.server.get(), remote, kAccessRemote);
  std::vector<uint8_t> rbuf(20000);
  auto rbmr = Reg(p.server.get(), rbuf, kAccessLocal);

  // A message bigger than one receive buffer (8 KiB): three fragments.
  Op recv{
      .type = OpType::kRecv, .ep = nullptr, .context = 11, .local = rbmr.get(), .length = 20000};
  ASSERT_OK(p.server->Post({&recv, 1}));
  Op send{.type = OpType::kSend,
          .ep = p.c_ep.get(),
          .context = 12,
          .local = smr.get(),
          .length = 20000};
  ASSERT_OK(p.client->Post({&send, 1}));
  std::vector<Completion> cc, sc;
  PollUntil(p.client.get(), &cc, 1, p.server.get(), &sc, 1);
  ASSERT_EQ(cc.size(), 1u);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_TRUE(cc[0].ok()) << cc[0].error;
  ASSERT_TRUE(sc[0].ok()) << sc[0].error;
  EXPECT_EQ(sc[0].bytes, 20000u);
  EXPECT_EQ(sc[0].ep, p.s_ep.get());
  EXPECT_EQ(rbuf, src);

  auto key = p.c_ep->Import(rmr->descriptor());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  Op write{.type = OpType::kWrite,
           .flags = kOpNotify,
           .imm = 0xabcdef01,
           .ep = p.c_ep.get(),
           .context = 13,
           .local = smr.get(),
           .length = 5000,
           .remote = key->get(),
           .remote_offset = 100};
  ASSERT_OK(p.client->Post({&write, 1}));
  cc.clear();
  sc.clear();
  PollUntil(p.client.get(), &cc, 1, p.server.get(), &sc, 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_TRUE(cc[0].ok()) << cc[0].error;
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].type, OpType::kNotify);
  EXPECT_EQ(sc[0].imm, 0xabcdef01u);
  EXPECT_EQ(std::memcmp(remote.data() + 100, src.data(), 5000), 0);

  Op read{.type = OpType::kRead,
          .ep = p.c_ep.get(),
          .context = 14,
          .local = dmr.get(),
          .length = 5000,
          .remote = key->get(),
          .remote_offset = 100};
  ASSERT_OK(p.client->Post({&read, 1}));
  cc = Drain(p.client.get(), 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_TRUE(cc[0].ok()) << cc[0].error;
  EXPECT_EQ(cc[0].context, 14u);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 5000), 0);
  EXPECT_GT(StatsOf(*p.client).path_mtu, 0);
}

TEST_P(VerbsModes, ConnectToNobodyFailsWithoutHanging) {
  REQUIRE_RDMA();
  auto t = CreateTransport("verbs", Opts({{"connect", GetParam()}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto start = steady_clock::now();
  auto ep = (*t)->Connect("127.0.0.1:1", Millis(5000));
  EXPECT_FALSE(ep.ok());
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(30));
}

TEST_P(VerbsModes, WrongSecretIsRefused) {
  REQUIRE_RDMA();
  TransportOptions so = Opts({{"connect", GetParam()}});
  TransportOptions co = so;
  so.secret = "right";
  co.secret = "wrong";
  auto s = CreateTransport("verbs", so);
  auto c = CreateTransport("verbs", co);
  ASSERT_TRUE(s.ok() && c.ok());
  auto addr = (*s)->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok());
  auto accepted = std::async(std::launch::async, [&] { return (*s)->Accept(Millis(5000)); });
  auto ep = (*c)->Connect(*addr, Millis(10000));
  EXPECT_FALSE(ep.ok());
  EXPECT_FALSE(accepted.get().ok());
}

INSTANTIATE_TEST_SUITE_P(Connect, VerbsModes, ::testing::Values("cm", "oob"));

// Contiguous-remote sparse lists are cut into WRs at exactly max_sge SGEs.
TEST(Verbs, SparseSplitsAtMaxSge) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({}), Opts({}));
  ASSERT_TRUE(p.c_ep);
  const uint32_t max_sge = StatsOf(*p.client).max_send_sge;
  const size_t n = 3 * max_sge + 1;
  std::vector<uint8_t> local(n * 32), remote(n * 16), back(n * 32);
  Fill(local, 9);
  auto lmr = Reg(p.client.get(), local, kAccessLocal);
  auto bmr = Reg(p.client.get(), back, kAccessLocal);
  auto rmr = Reg(p.server.get(), remote, kAccessRemote);
  auto key = p.c_ep->Import(rmr->descriptor());
  ASSERT_TRUE(key.ok());
  // Local pieces in reverse order, remote contiguous: one run of n segments.
  std::vector<Segment> segs;
  for (size_t i = 0; i < n; ++i) segs.push_back({(n - 1 - i) * 32, i * 16, 16});
  const auto before = StatsOf(*p.client);
  Op w{.type = OpType::kSparseWrite,
       .ep = p.c_ep.get(),
       .local = lmr.get(),
       .remote = key->get(),
       .segments = segs.data(),
       .num_segments = segs.size()};
  ASSERT_OK(p.client->Post({&w, 1}));
  auto cc = Drain(p.client.get(), 1);
  ASSERT_EQ(cc.size(), 1u);
  ASSERT_TRUE(cc[0].ok()) << cc[0].error;
  EXPECT_EQ(cc[0].bytes, n * 16);
  const auto after = StatsOf(*p.client);
  EXPECT_EQ(after.wrs_posted - before.wrs_posted, (n + max_sge - 1) / max_sge);
  EXPECT_EQ(after.max_sges_in_wr, max_sge);
  EXPECT_EQ(after.signaled_wrs - before.signaled_wrs, 1u);  // one completion per Op
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(remote.data() + i * 16, local.data() + (n - 1 - i) * 32, 16), 0) << i;
  }
  // Read it back the same way (READ WRs use max_sge_rd).
  Op r{.type = OpType::kSparseRead,
       .ep = p.c_ep.get(),
       .local = bmr.get(),
       .remote = key->get(),
       .segments = segs.data(),
       .num_segments = segs.size()};
  ASSERT_OK(p.client->Post({&r, 1}));
  cc = Drain(p.client.get(), 1);
  ASSERT_EQ(cc.size(), 1u);
  ASSERT_TRUE(cc[0].ok()) << cc[0].error;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(back.data() + (n - 1 - i) * 32, local.data() + (n - 1 - i) * 32, 16), 0);
  }
}

// Ops larger than the port's max_msg_sz (8 MiB on rxe) are cut into several WRs and land whole:
// a contiguous write and read, and a sparse write whose rows add up to more than max_msg_sz.
TEST(Verbs, OpsBeyondTheDevicesMaxMessageSizeAreSplit) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({}), Opts({}));
  ASSERT_TRUE(p.c_ep);
  uint64_t max_msg = 0;
  for (const auto& d : p.client->devices()) {
    if (d.attributes.count("max_msg_sz")) max_msg = std::stoull(d.attributes.at("max_msg_sz"));
  }
  ASSERT_GT(max_msg, 0u);
  ASSERT_LE(max_msg, 64ull << 20) << "a device with a larger max_msg_sz needs larger buffers here";
  EXPECT_GT(p.client->capabilities().max_message_size, max_msg);
  const uint64_t len = 2 * max_msg + 12285;  // not a multiple of anything
  std::vector<uint8_t> local(len), remote(len), back(len);
  Fill(local, 21);
  auto lmr = Reg(p.client.get(), local, kAccessLocal);
  auto bmr = Reg(p.client.get(), back, kAccessLocal);
  auto rmr = Reg(p.server.get(), remote, kAccessRemote);
  auto key = p.c_ep->Import(rmr->descriptor());
  ASSERT_TRUE(key.ok());
  const auto before = StatsOf(*p.client);
  Op w{.type = OpType::kWrite,
       .ep = p.c_ep.get(),
       .local = lmr.get(),
       .length = len,
       .remote = key->get()};
  Completion c;
  ASSERT_NO_FATAL_FAILURE(PostOne(p.client.get(), w, &c));
  EXPECT_EQ(c.bytes, len);
  EXPECT_GE(StatsOf(*p.client).wrs_posted - before.wrs_posted, 2u);
  ASSERT_EQ(std::memcmp(remote.data(), local.data(), len), 0);
  Op r{.type = OpType::kRead,
       .ep = p.c_ep.get(),
       .local = bmr.get(),
       .length = len,
       .remote = key->get()};
  ASSERT_NO_FATAL_FAILURE(PostOne(p.client.get(), r, &c));
  ASSERT_EQ(std::memcmp(back.data(), local.data(), len), 0);
  // Sparse: 4 KiB rows, local pieces in reverse order, every other remote row (no merging).
  const uint64_t row = 4096, rows = len / (2 * row);
  ASSERT_GT(rows * row, max_msg);
  std::fill(remote.begin(), remote.end(), 0);
  std::vector<Segment> segs;
  for (uint64_t i = 0; i < rows; ++i) segs.push_back({(rows - 1 - i) * row, 2 * i * row, row});
  Op s{.type = OpType::kSparseWrite,
       .ep = p.c_ep.get(),
       .local = lmr.get(),
       .remote = key->get(),
       .segments = segs.data(),
       .num_segments = segs.size()};
  ASSERT_NO_FATAL_FAILURE(PostOne(p.client.get(), s, &c));
  EXPECT_EQ(c.bytes, rows * row);
  for (uint64_t i = 0; i < rows; ++i) {
    ASSERT_EQ(std::memcmp(remote.data() + 2 * i * row, local.data() + (rows - 1 - i) * row, row), 0)
        << i;
    ASSERT_EQ(remote[(2 * i + 1) * row], 0) << "gap row " << i << " was written";
  }
}

// More WRs than the send queue holds: split into several post-lists, each signaled at its end.
TEST(Verbs, PostListBatchingThroughSmallSendQueue) {
  REQUIRE_RDMA();
  const size_t n = 500;
  auto one = MakeOneSided(n * 8, n * 16, 1, {{"sq_depth", "8"}});
  ASSERT_TRUE(one->ok());
  auto& [p, local, remote, lmr, rmr, key] = *one;
  EXPECT_EQ(StatsOf(*p.client).sq_depth, 8u);
  std::vector<Segment> segs;
  for (size_t i = 0; i < n; ++i) segs.push_back({i * 8, i * 16, 8});  // gaps: one WR each
  std::vector<Op> ops;
  ops.push_back(Op{.type = OpType::kSparseWrite,
                   .ep = p.c_ep.get(),
                   .context = 1,
                   .local = lmr.get(),
                   .remote = key.get(),
                   .segments = segs.data(),
                   .num_segments = segs.size()});
  for (uint64_t i = 0; i < 40; ++i) {  // and many small ops behind it, in one Post
    ops.push_back(Op{.type = OpType::kWrite,
                     .ep = p.c_ep.get(),
                     .context = 100 + i,
                     .local = lmr.get(),
                     .local_offset = i * 8,
                     .length = 8,
                     .remote = key.get(),
                     .remote_offset = i * 16 + 8});
  }
  const auto before = StatsOf(*p.client);
  ASSERT_OK(p.client->Post(ops));
  auto cc = Drain(p.client.get(), ops.size());
  ASSERT_EQ(cc.size(), ops.size());
  for (size_t i = 0; i < cc.size(); ++i) {
    EXPECT_TRUE(cc[i].ok()) << cc[i].error;
    EXPECT_EQ(cc[i].context, i == 0 ? 1u : 100 + (i - 1));  // in order, each exactly once
  }
  const auto after = StatsOf(*p.client);
  EXPECT_EQ(after.wrs_posted - before.wrs_posted, n + 40);
  EXPECT_GE(after.post_calls - before.post_calls, (n + 40) / 8);
  EXPECT_GT(after.backlog_waits, before.backlog_waits);
  // Each post-list signals its last WR only, and that completion retires the whole list.
  EXPECT_EQ(after.signaled_wrs - before.signaled_wrs, after.post_calls - before.post_calls);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(remote.data() + i * 16, local.data() + i * 8, 8), 0) << i;
  }
  for (size_t i = 0; i < 40; ++i) {
    ASSERT_EQ(std::memcmp(remote.data() + i * 16 + 8, local.data() + i * 8, 8), 0) << i;
  }
}

// Small writes posted to one peer in one Post: one post-list, a signaled WR per 16 (not per Op),
// and every Op completes, in order.
TEST(Verbs, OnePostOfSmallOpsIsOneListSignaledEverySixteenWrs) {
  REQUIRE_RDMA();
  const size_t n = 32;
  auto one = MakeOneSided(n * 8, n * 8, 3);
  ASSERT_TRUE(one->ok());
  auto& [p, local, remote, lmr, rmr, key] = *one;
  std::vector<Op> ops;
  for (uint64_t i = 0; i < n; ++i) {
    ops.push_back(Op{.type = OpType::kWrite,
                     .ep = p.c_ep.get(),
                     .context = 10 + i,
                     .local = lmr.get(),
                     .local_offset = i * 8,
                     .length = 8,
                     .remote = key.get(),
                     .remote_offset = (n - 1 - i) * 8});
  }
  const auto before = StatsOf(*p.client);
  ASSERT_OK(p.client->Post(ops));
  const auto posted = StatsOf(*p.client);
  EXPECT_EQ(posted.post_calls - before.post_calls, 1u);
  EXPECT_EQ(posted.wrs_posted - before.wrs_posted, n);
  EXPECT_EQ(posted.signaled_wrs - before.signaled_wrs, n / 16);
  auto cc = Drain(p.client.get(), n);
  ASSERT_EQ(cc.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(cc[i].ok()) << cc[i].error;
    EXPECT_EQ(cc[i].context, 10 + i);
    EXPECT_EQ(cc[i].bytes, 8u);
    ASSERT_EQ(std::memcmp(remote.data() + (n - 1 - i) * 8, local.data() + i * 8, 8), 0) << i;
  }
}

// An error in the middle of a post-list: the Ops before it completed on the wire without a
// completion of their own and succeed; the refused one and those after it fail.
TEST(Verbs, ErrorInsideAPostListSucceedsTheOpsBeforeIt) {
  REQUIRE_RDMA();
  auto one = MakeOneSided(64, 64, 4);
  ASSERT_TRUE(one->ok());
  auto& [p, local, remote, lmr, rmr, key] = *one;
  RemoteRegion forged = rmr->descriptor();
  forged.rkey[0] ^= 0x5a;
  forged.rkey[2] ^= 0x11;
  auto bad = p.c_ep->Import(forged);
  ASSERT_TRUE(bad.ok());
  std::vector<Op> ops;
  for (uint64_t i = 0; i < 5; ++i) {
    ops.push_back(Op{.type = OpType::kWrite,
                     .ep = p.c_ep.get(),
                     .context = i,
                     .local = lmr.get(),
                     .local_offset = i * 8,
                     .length = 8,
                     .remote = i == 2 ? bad->get() : key.get(),
                     .remote_offset = i * 8});
  }
  const auto before = StatsOf(*p.client);
  ASSERT_OK(p.client->Post(ops));
  EXPECT_EQ(StatsOf(*p.client).signaled_wrs - before.signaled_wrs, 1u);
  auto cc = Drain(p.client.get(), ops.size());
  ASSERT_EQ(cc.size(), ops.size());
  for (size_t i = 0; i < cc.size(); ++i) {
    EXPECT_EQ(cc[i].context, i);
    if (i < 2) {
      EXPECT_TRUE(cc[i].ok()) << i << ": " << cc[i].error;
      EXPECT_EQ(std::memcmp(remote.data() + i * 8, local.data() + i * 8, 8), 0) << i;
    } else {
      EXPECT_FALSE(cc[i].ok()) << i;
    }
  }
  EXPECT_EQ(cc[2].code, Code::kPermissionDenied) << cc[2].error;
  EXPECT_FALSE(p.c_ep->status().ok());
}

// Every send WR makes a completion when its QP fails and flushes, signaled or not, so the shared
// CQ grows with the endpoints: many QPs failing at once with full send queues fit in it. 12
// endpoints on a client whose CQ was made for two (cq_depth 64: 832 entries), each with a list of
// 200 writes whose first names a forged rkey: the QP fails on it and flushes the rest. A CQ that
// did not grow would get 2400 completions in 832 entries (an overflow fails the whole transport);
// now every op completes with an error, and the transport goes on working.
TEST(Verbs, TheCqHoldsTheFlushOfManyFailedSendQueuesAtOnce) {
  REQUIRE_RDMA();
  constexpr size_t kEndpoints = 12, kWrites = 200;
  auto s = CreateTransport("verbs", Opts({}));
  auto c = CreateTransport("verbs", Opts({{"cq_depth", "64"}}));
  ASSERT_TRUE(s.ok() && c.ok());
  Transport* server = s->get();
  Transport* client = c->get();
  // Made for 256 receives, 2 x 256 send slots and 64 (a device may round it up), not for 13 QPs.
  const uint32_t made = StatsOf(*client).cq_entries;
  EXPECT_GE(made, 256u + 2 * 256u + 64u);
  EXPECT_LT(made, 256u + 64u + (kEndpoints + 1) * 256u);
  auto addr = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  std::vector<std::shared_ptr<Endpoint>> eps, accepted;
  for (size_t i = 0; i < kEndpoints + 1; ++i) {
    auto a = std::async(std::launch::async, [&] { return server->Accept(Millis(20000)); });
    auto ep = client->Connect(*addr, Millis(20000));
    auto sep = a.get();
    ASSERT_TRUE(ep.ok() && sep.ok()) << ep.status().ToString() << " / " << sep.status().ToString();
    eps.push_back(*ep);
    accepted.push_back(*sep);
  }
  const verbs::Stats grown = StatsOf(*client);
  EXPECT_GE(grown.cq_entries, 256u + 64u + (kEndpoints + 1) * grown.sq_depth);
  EXPECT_GT(grown.cq_resizes, 0u);
  EXPECT_EQ(grown.send_shares_cut, 0u);

  std::vector<uint8_t> local(kWrites * 8), remote(kWrites * 8);
  Fill(local, 9);
  auto lmr = Reg(client, local, kAccessLocal);
  auto rmr = Reg(server, remote, kAccessRemote);
  RemoteRegion forged = rmr->descriptor();
  forged.rkey[0] ^= 0x5a;
  forged.rkey[2] ^= 0x11;
  std::vector<std::unique_ptr<RemoteKey>> bad;
  std::vector<Op> ops;
  for (size_t e = 0; e < kEndpoints; ++e) {
    auto k = eps[e]->Import(forged);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    bad.push_back(std::move(k).value());
  }
  for (size_t e = 0; e < kEndpoints; ++e) {
    for (size_t i = 0; i < kWrites; ++i) {
      ops.push_back(Op{.type = OpType::kWrite,
                       .ep = eps[e].get(),
                       .context = e * kWrites + i,
                       .local = lmr.get(),
                       .local_offset = i * 8,
                       .length = 8,
                       .remote = bad[e].get(),
                       .remote_offset = i * 8});
    }
  }
  ASSERT_OK(client->Post(ops));
  auto cc = Drain(client, ops.size(), Millis(60000));
  ASSERT_EQ(cc.size(), ops.size()) << "completions lost: the CQ overflowed";
  for (const Completion& x : cc) EXPECT_FALSE(x.ok()) << x.context;

  // The transport is healthy: the spare endpoint writes.
  auto key = eps[kEndpoints]->Import(rmr->descriptor());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  Op w{.type = OpType::kWrite,
       .ep = eps[kEndpoints].get(),
       .local = lmr.get(),
       .length = 64,
       .remote = key->get()};
  Completion done;
  ASSERT_NO_FATAL_FAILURE(PostOne(client, w, &done));
  EXPECT_TRUE(done.ok()) << done.error;
  EXPECT_EQ(std::memcmp(remote.data(), local.data(), 64), 0);
}

TEST(Verbs, InlineBelowMaxInlineOnly) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({}), Opts({}));
  ASSERT_TRUE(p.c_ep);
  const uint32_t max_inline = StatsOf(*p.client).max_inline;
  if (max_inline == 0) GTEST_SKIP() << "device supports no inline data";
  std::vector<uint8_t> local(max_inline * 4), remote(max_inline * 4);
  Fill(local, 5);
  auto lmr = Reg(p.client.get(), local, kAccessLocal);
  auto rmr = Reg(p.server.get(), remote, kAccessRemote);
  auto key = p.c_ep->Import(rmr->descriptor());
  ASSERT_TRUE(key.ok());
  for (uint64_t len :
       {uint64_t{1}, uint64_t{max_inline}, uint64_t{max_inline} + 1, uint64_t{max_inline} * 3}) {
    std::fill(remote.begin(), remote.end(), 0);
    const auto before = StatsOf(*p.client);
    Op w{.type = OpType::kWrite,
         .ep = p.c_ep.get(),
         .local = lmr.get(),
         .length = len,
         .remote = key->get()};
    Completion c;
    ASSERT_NO_FATAL_FAILURE(PostOne(p.client.get(), w, &c));
    EXPECT_EQ(StatsOf(*p.client).inline_wrs - before.inline_wrs, len <= max_inline ? 1u : 0u)
        << "len " << len;
    EXPECT_EQ(std::memcmp(remote.data(), local.data(), len), 0);
  }
}

// More messages than receive buffers, before any kRecv: the sender is held back by RNR retries
// until the receiver posts receives and its buffers are refilled.
TEST(Verbs, ReceivePoolExhaustionAndRefill) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({{"recv_buffers", "8"}, {"recv_buffer_size", "4096"}}), Opts({}));
  ASSERT_TRUE(p.c_ep && p.s_ep);
  const size_t n = 60;
  const size_t len = 5000;  // two fragments each: 120 fragments through 8 buffers
  std::vector<uint8_t> src(n * len), dst(n * len);
  Fill(src, 77);
  auto smr = Reg(p.client.get(), src, kAccessLocal);
  auto dmr = Reg(p.server.get(), dst, kAccessLocal);
  std::vector<Op> sends;
  for (size_t i = 0; i < n; ++i) {
    sends.push_back(Op{.type = OpType::kSend,
                       .ep = p.c_ep.get(),
                       .context = i,
                       .local = smr.get(),
                       .local_offset = i * len,
                       .length = len});
  }
  ASSERT_OK(p.client->Post(sends));
  // Let the pool run dry.
  std::vector<Completion> cc, sc;
  PollUntil(p.client.get(), &cc, n, p.server.get(), &sc, 1, Millis(1500));
  EXPECT_LT(cc.size(), n);
  EXPECT_TRUE(sc.empty());
  std::vector<Op> recvs;
  for (size_t i = 0; i < n; ++i) {
    recvs.push_back(Op{.type = OpType::kRecv,
                       .ep = p.s_ep.get(),
                       .context = 1000 + i,
                       .local = dmr.get(),
                       .local_offset = i * len,
                       .length = len});
  }
  ASSERT_OK(p.server->Post(recvs));
  PollUntil(p.client.get(), &cc, n, p.server.get(), &sc, n, Millis(60000));
  ASSERT_EQ(cc.size(), n);
  ASSERT_EQ(sc.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(sc[i].ok()) << sc[i].error;
    EXPECT_EQ(sc[i].context, 1000 + i);
    EXPECT_EQ(sc[i].bytes, len);
  }
  EXPECT_EQ(dst, src);
  EXPECT_GE(StatsOf(*p.server).recv_reposts, 8u + 2 * n);
}

TEST(Verbs, MessageLargerThanRecvIsReportedAndNextOneArrives) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({}), Opts({}));
  ASSERT_TRUE(p.c_ep && p.s_ep);
  std::vector<uint8_t> src(100), dst(100);
  Fill(src, 1);
  auto smr = Reg(p.client.get(), src, kAccessLocal);
  auto dmr = Reg(p.server.get(), dst, kAccessLocal);
  Op recvs[2] = {
      {.type = OpType::kRecv, .ep = p.s_ep.get(), .context = 1, .local = dmr.get(), .length = 10},
      {.type = OpType::kRecv, .ep = p.s_ep.get(), .context = 2, .local = dmr.get(), .length = 100}};
  ASSERT_OK(p.server->Post(recvs));
  Op sends[2] = {{.type = OpType::kSend, .ep = p.c_ep.get(), .local = smr.get(), .length = 100},
                 {.type = OpType::kSend, .ep = p.c_ep.get(), .local = smr.get(), .length = 100}};
  ASSERT_OK(p.client->Post(sends));
  std::vector<Completion> cc, sc;
  PollUntil(p.client.get(), &cc, 2, p.server.get(), &sc, 2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].code, Code::kOutOfRange);
  EXPECT_NE(sc[0].error.find("does not fit"), std::string::npos) << sc[0].error;
  EXPECT_TRUE(sc[1].ok()) << sc[1].error;
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(p.s_ep->status().ok());
}

// A forged descriptor (wrong rkey) is refused by the target HCA: REM_ACCESS_ERR.
TEST(Verbs, ForgedKeyIsRemoteAccessError) {
  REQUIRE_RDMA();
  Pair p = Connect(Opts({}), Opts({}));
  ASSERT_TRUE(p.c_ep);
  std::vector<uint8_t> local(64), remote(64);
  auto lmr = Reg(p.client.get(), local, kAccessLocal);
  auto rmr = Reg(p.server.get(), remote, kAccessRemote);
  RemoteRegion forged = rmr->descriptor();
  forged.rkey[0] ^= 0x5a;
  forged.rkey[2] ^= 0x11;
  auto key = p.c_ep->Import(forged);
  ASSERT_TRUE(key.ok());
  Op w{.type = OpType::kWrite,
       .ep = p.c_ep.get(),
       .local = lmr.get(),
       .length = 64,
       .remote = key->get()};
  ASSERT_OK(p.client->Post({&w, 1}));
  auto cc = Drain(p.client.get(), 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].code, Code::kPermissionDenied) << cc[0].error;
  EXPECT_NE(cc[0].error.find("qp 0x"), std::string::npos) << cc[0].error;
  EXPECT_FALSE(p.c_ep->status().ok());
  // Ops on the failed endpoint complete with its error.
  ASSERT_OK(p.client->Post({&w, 1}));
  cc = Drain(p.client.get(), 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_FALSE(cc[0].ok());
}

// ---- child processes ----

int RunSelf(std::vector<std::string> args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(g_self));
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Child: connect to `address` in `mode`, advertise a region, then die without any cleanup.
// With keep_socket, a grandchild first keeps the TCP control connection open (and nothing else:
// every non-socket descriptor, the verbs device included, is closed), so only the QP's own
// retries or the heartbeat can notice the death.
int PeerChild(const std::string& mode, const std::string& address, bool keep_socket) {
  std::vector<uint8_t> mem(4096);
  auto t = CreateTransport("verbs", Opts({{"connect", mode}}));
  if (!t.ok()) return 2;
  auto mr = (*t)->RegisterMemory(mem.data(), mem.size(), kAccessRemote);
  if (!mr.ok()) return 3;
  (*t)->Advertise({(*mr)->descriptor()});
  auto ep = (*t)->Connect(address, Millis(20000));
  if (!ep.ok()) return 4;
  int exec_done[2] = {-1, -1};
  if (keep_socket && pipe2(exec_done, O_CLOEXEC) != 0) return 6;
  if (keep_socket && fork() == 0) {
    // exec drops the inherited mappings of the verbs device (they would keep the QP alive);
    // only the sockets survive it.
    for (int fd = 0; fd < 1024; ++fd) {
      struct stat st {};
      if (fstat(fd, &st) != 0 || fd == exec_done[1]) continue;
      if (S_ISSOCK(st.st_mode)) {
        fcntl(fd, F_SETFD, 0);
      } else {
        close(fd);
      }
    }
    execl("/bin/sleep", "sleep", "10", static_cast<char*>(nullptr));
    _exit(0);
  }
  if (keep_socket) {  // wait until the grandchild has exec'd (its pipe end closed on exec)
    close(exec_done[1]);
    char c;
    while (read(exec_done[0], &c, 1) > 0) {
    }
  }
  kill(getpid(), SIGKILL);
  return 5;
}

// Accepts the child's connection, in slices, giving up as soon as the child has exited.
Result<std::shared_ptr<Endpoint>> AcceptChild(Transport* t, std::future<int>* child) {
  const auto end = steady_clock::now() + std::chrono::seconds(60);
  while (steady_clock::now() < end) {
    auto ep = t->Accept(Millis(500));
    if (ep.ok() || ep.status().code() != Code::kTimeout) return ep;
    if (child->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      // It may have connected and died within the last slice: one more look.
      auto late = t->Accept(Millis(2000));
      if (late.ok() || late.status().code() != Code::kTimeout) return late;
      int status = child->get();
      return Internal("the child exited before connecting: status " + std::to_string(status));
    }
  }
  return Timeout("the child did not connect within 60 s");
}

class VerbsPeerDeath : public ::testing::TestWithParam<std::string> {};

TEST_P(VerbsPeerDeath, QpErrorAfterPeerDies) {
  REQUIRE_RDMA();
  auto s = CreateTransport("verbs", Opts({{"connect", GetParam()}}, Millis(2000)));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto addr = (*s)->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok());
  auto child = std::async(std::launch::async, [&] {
    return RunSelf({"--peer-child", GetParam(), *addr});
  });
  auto ep = AcceptChild(s->get(), &child);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  const int status = child.get();
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit status " << status;
  ASSERT_EQ((*ep)->peer_regions().size(), 1u);
  auto key = (*ep)->Import((*ep)->peer_regions()[0]);
  std::vector<uint8_t> local(4096);
  auto lmr = Reg(s->get(), local, kAccessLocal);
  const auto start = steady_clock::now();
  if (key.ok()) {
    Op w{.type = OpType::kWrite,
         .ep = ep->get(),
         .local = lmr.get(),
         .length = 4096,
         .remote = key->get()};
    ASSERT_OK((*s)->Post({&w, 1}));
    auto cc = Drain(s->get(), 1, Millis(20000));
    ASSERT_EQ(cc.size(), 1u) << "no completion: the write hung";
    EXPECT_FALSE(cc[0].ok());
    std::cerr << "write to the dead peer: " << cc[0].error << " after "
              << std::chrono::duration_cast<Millis>(steady_clock::now() - start).count() << " ms\n";
  }
  EXPECT_FALSE((*ep)->status().ok());
  // Generous bound (noisy emulated machine): peer_timeout is 2 s.
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(15));
}

// Without any traffic, the endpoint still notices (heartbeat / DISCONNECTED / control EOF).
TEST_P(VerbsPeerDeath, IdleEndpointNoticesDeadPeer) {
  REQUIRE_RDMA();
  auto s = CreateTransport("verbs", Opts({{"connect", GetParam()}}, Millis(2000)));
  ASSERT_TRUE(s.ok());
  auto addr = (*s)->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok());
  auto child = std::async(std::launch::async, [&] {
    return RunSelf({"--peer-child", GetParam(), *addr});
  });
  auto ep = AcceptChild(s->get(), &child);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  child.get();
  const auto deadline = steady_clock::now() + std::chrono::seconds(15);
  Completion buf[4];
  while ((*ep)->status().ok() && steady_clock::now() < deadline) {
    (void)(*s)->Poll(buf);
    (void)(*s)->Wait(Millis(10));
  }
  EXPECT_FALSE((*ep)->status().ok());
  std::cerr << "idle endpoint: " << (*ep)->status().ToString() << "\n";
}

INSTANTIATE_TEST_SUITE_P(Connect, VerbsPeerDeath, ::testing::Values("cm", "oob"));

// The peer's QP vanishes while its control connection stays open: the write must fail through
// the QP's transport retries (RETRY_EXC_ERR), within the bound set from peer_timeout.
TEST(Verbs, QpRetryErrorWhenOnlyTheQpDies) {
  REQUIRE_RDMA();
  auto s = CreateTransport("verbs", Opts({{"connect", "oob"}}, Millis(2000)));
  ASSERT_TRUE(s.ok());
  auto addr = (*s)->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok());
  auto child = std::async(std::launch::async, [&] {
    return RunSelf({"--peer-child-keep-socket", "oob", *addr});
  });
  auto ep = AcceptChild(s->get(), &child);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  ASSERT_TRUE(WIFSIGNALED(child.get()));
  ASSERT_EQ((*ep)->peer_regions().size(), 1u);
  auto key = (*ep)->Import((*ep)->peer_regions()[0]);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  std::vector<uint8_t> local(4096);
  auto lmr = Reg(s->get(), local, kAccessLocal);
  const auto start = steady_clock::now();
  Op w{.type = OpType::kWrite,
       .ep = ep->get(),
       .local = lmr.get(),
       .length = 4096,
       .remote = key->get()};
  ASSERT_OK((*s)->Post({&w, 1}));
  auto cc = Drain(s->get(), 1, Millis(9000));
  ASSERT_EQ(cc.size(), 1u) << "no completion: the write hung";
  EXPECT_EQ(cc[0].code, Code::kPeerFailure) << cc[0].error;
  // Either the QP's retries (RETRY_EXC_ERR) or the acknowledgement deadline catches it.
  EXPECT_TRUE(cc[0].error.find("retry") != std::string::npos ||
              cc[0].error.find("acknowledged nothing") != std::string::npos)
      << cc[0].error;
  EXPECT_NE(cc[0].error.find("qp 0x"), std::string::npos) << cc[0].error;
  EXPECT_FALSE((*ep)->status().ok());
  std::cerr << "QP-only death: " << cc[0].error << " after "
            << std::chrono::duration_cast<Millis>(steady_clock::now() - start).count() << " ms\n";
}

int MemlockChild(const std::string& which) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  lim.rlim_cur = which == "create" ? 64 * 1024 : 8 * 1024 * 1024;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_cur > lim.rlim_max) lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 2;
  auto t = CreateTransport("verbs", Opts({}));
  Status st;
  if (which == "create") {
    if (t.ok()) return 3;
    st = t.status();
  } else {
    if (!t.ok()) return 4;
    std::vector<uint8_t> big(16 << 20);
    auto mr = (*t)->RegisterMemory(big.data(), big.size(), kAccessRemote);
    if (mr.ok()) return 5;
    st = mr.status();
  }
  std::cerr << "memlock child (" << which << "): " << st.ToString() << "\n";
  if (st.code() != Code::kResourceExhausted) return 6;
  if (st.message().find("ulimit -l") == std::string::npos) return 7;
  if (st.message().find("LimitMEMLOCK") == std::string::npos) return 8;
  return 0;
}

TEST(Verbs, MemlockTooLowIsAClearError) {
  REQUIRE_RDMA();
  for (const char* which : {"create", "register"}) {
    int status = RunSelf({"--memlock-child", which});
    ASSERT_TRUE(WIFEXITED(status)) << which;
    EXPECT_EQ(WEXITSTATUS(status), 0) << which << " (see the child's message above)";
  }
}

TEST(Verbs, GidOverride) {
  REQUIRE_RDMA();
  auto t = CreateTransport("verbs", Opts({}));
  ASSERT_TRUE(t.ok());
  const int automatic = StatsOf(**t).gid_index;
  EXPECT_GE(automatic, 0);
  const std::string idx = std::to_string(automatic);
  Pair p = Connect(Opts({{"connect", "oob"}, {"gid_index", idx}}),
                   Opts({{"connect", "oob"}, {"gid_index", idx}}));
  ASSERT_TRUE(p.c_ep);
  EXPECT_EQ(StatsOf(*p.client).gid_index, automatic);
  std::vector<uint8_t> local(256), remote(256);
  Fill(local, 4);
  auto lmr = Reg(p.client.get(), local, kAccessLocal);
  auto rmr = Reg(p.server.get(), remote, kAccessRemote);
  auto key = p.c_ep->Import(rmr->descriptor());
  ASSERT_TRUE(key.ok());
  Op w{.type = OpType::kWrite,
       .ep = p.c_ep.get(),
       .local = lmr.get(),
       .length = 256,
       .remote = key->get()};
  ASSERT_OK(p.client->Post({&w, 1}));
  auto cc = Drain(p.client.get(), 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_TRUE(cc[0].ok()) << cc[0].error;
  EXPECT_EQ(remote, local);

  auto bad = CreateTransport("verbs", Opts({{"gid_index", "999"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gid_index"), std::string::npos) << bad.status().ToString();
  auto typo = CreateTransport("verbs", Opts({{"gid_idx", "1"}}));
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), Code::kInvalidArgument);
}

TEST(Verbs, DevicesAndProbe) {
  REQUIRE_RDMA();
  auto t = CreateTransport("verbs", Opts({}));
  ASSERT_TRUE(t.ok());
  auto devs = (*t)->devices();
  ASSERT_FALSE(devs.empty());
  bool active = false;
  for (const auto& d : devs) {
    EXPECT_EQ(d.kind, "rdma");
    for (const char* k :
         {"state", "link_layer", "active_mtu", "gids", "max_sge", "max_inline", "max_qp_wr"}) {
      EXPECT_TRUE(d.attributes.count(k)) << d.name << " lacks " << k;
    }
    if (d.attributes.at("state") == "ACTIVE") active = true;
    std::cerr << d.name << ": gids " << d.attributes.at("gids") << ", max_inline "
              << d.attributes.at("max_inline") << "\n";
  }
  EXPECT_TRUE(active);
  EXPECT_EQ(verbs::ProbeVerbs(), "");
}

// Two rxe devices (veth layout): the client picks the second device by name.
TEST(Verbs, SecondDeviceByName) {
  REQUIRE_RDMA();
  auto t = CreateTransport("verbs", Opts({}));
  ASSERT_TRUE(t.ok());
  std::vector<std::string> names;
  for (const auto& d : (*t)->devices()) {
    if (d.attributes.at("state") == "ACTIVE") names.push_back(d.name.substr(0, d.name.find(':')));
  }
  if (names.size() < 2) GTEST_SKIP() << "needs two active RDMA devices (ferry-vm --layout veth)";
  for (const char* mode : {"cm", "oob"}) {
    Pair p = Connect(Opts({{"connect", mode}, {"device", names[0]}}),
                     Opts({{"connect", mode}, {"device", names[1]}}), /*own_ip=*/true);
    ASSERT_TRUE(p.c_ep) << mode;
    EXPECT_EQ(StatsOf(*p.client).device, names[1] + ":1");
    std::vector<uint8_t> local(1000), remote(1000);
    Fill(local, 8);
    auto lmr = Reg(p.client.get(), local, kAccessLocal);
    auto rmr = Reg(p.server.get(), remote, kAccessRemote);
    auto key = p.c_ep->Import(rmr->descriptor());
    ASSERT_TRUE(key.ok());
    Op w{.type = OpType::kWrite,
         .ep = p.c_ep.get(),
         .local = lmr.get(),
         .length = 1000,
         .remote = key->get()};
    ASSERT_OK(p.client->Post({&w, 1}));
    auto cc = Drain(p.client.get(), 1);
    ASSERT_EQ(cc.size(), 1u);
    EXPECT_TRUE(cc[0].ok()) << mode << ": " << cc[0].error;
    EXPECT_EQ(remote, local) << mode;
  }
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::g_self = argv[0];
  if (argc == 4 && std::string(argv[1]) == "--peer-child") {
    return ferry::PeerChild(argv[2], argv[3], false);
  }
  if (argc == 4 && std::string(argv[1]) == "--peer-child-keep-socket") {
    return ferry::PeerChild(argv[2], argv[3], true);
  }
  if (argc == 3 && std::string(argv[1]) == "--memlock-child") {
    return ferry::MemlockChild(argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return ferry::testing::RunAllTestsVisibly();  // 77 when every case skipped (no device)
}
