// UCX-specific tests: both required configurations connect and move data (two-sided, one-sided,
// sparse lists of 100,000 random segments, notifications), parameter validation, handshake
// refusal, close, and peer failure (a child process killed with SIGKILL or stopped with SIGSTOP).
//
// The peer-failure tests re-execute this binary with --ucx-child <config>: the child serves one
// registered region and drives progress until it is killed.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "tests/common/skips.h"
#include "tests/ucx/ucx_test_util.h"

namespace ferry::ucx_test {
namespace {

using std::chrono::steady_clock;

class UcxConfigTest : public ::testing::TestWithParam<UcxConfig> {};

std::string ConfigName(const ::testing::TestParamInfo<UcxConfig>& info) {
  return info.param.name;
}

using testing::RecvOp;
using testing::SendOp;

TEST(UcxParams, RejectsKeysWithoutUcxPrefix) {
  TransportOptions o;
  o.params = {{"TLS", "tcp"}};
  auto t = CreateTransport("ucx", o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find("TLS"), std::string::npos) << t.status().ToString();
}

TEST(UcxParams, RejectsUnknownUcxVariableAndBadValue) {
  TransportOptions o;
  o.params = {{"UCX_NO_SUCH_VARIABLE_XYZ", "1"}};
  auto t = CreateTransport("ucx", o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  o.params = {{"UCX_KEEPALIVE_INTERVAL", "not-a-time"}};
  t = CreateTransport("ucx", o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
}

TEST(UcxParams, RegistryListsUcxAsAvailable) {
  bool found = false;
  for (const BackendInfo& b : ListBackends()) {
    if (b.name != "ucx") continue;
    found = true;
    EXPECT_TRUE(b.available) << b.reason;
    EXPECT_EQ(b.priority, 20);
  }
  EXPECT_TRUE(found);
}

TEST(UcxDevices, ListsTheTransportsOfThisHost) {
  auto t = CreateTransport("ucx", TransportOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto devs = (*t)->devices();
  bool lo = false, shm = false;
  for (const DeviceInfo& d : devs) {
    if (d.name == "lo" && d.attributes.at("transport") == "tcp") lo = true;
    if (d.kind == "shm") shm = true;
  }
  EXPECT_TRUE(lo) << "tcp on lo missing from devices()";
  EXPECT_TRUE(shm) << "no shared-memory transport in devices()";
  const Capabilities& caps = (*t)->capabilities();
  EXPECT_TRUE(caps.send_recv && caps.write && caps.read && caps.sparse_write && caps.sparse_read &&
              caps.notify && caps.shared_recv && caps.zero_copy_sparse);
  EXPECT_TRUE(caps.target_checks) << "every one-sided path checks (region table, HCA, AM target)";
  EXPECT_TRUE(caps.final_deregistration);
}

TEST_P(UcxConfigTest, SendRecvOrderedSharedAndTruncated) {
  auto pair = Connect(Options(GetParam()), Options(GetParam()));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  Pair& p = *pair;
  std::vector<uint8_t> sbuf(4096), rbuf(4096, 0);
  for (size_t i = 0; i < sbuf.size(); ++i) sbuf[i] = static_cast<uint8_t>(i * 7 + 1);
  auto smr = p.client->RegisterMemory(sbuf.data(), sbuf.size(), kAccessLocal);
  auto rmr = p.server->RegisterMemory(rbuf.data(), rbuf.size(), kAccessLocal);
  ASSERT_TRUE(smr.ok() && rmr.ok());

  // Two Recvs on the endpoint, then one shared Recv; three Sends in order.
  Op recvs[] = {RecvOp(p.server_ep.get(), rmr->get(), 0, 1024, 1),
                RecvOp(p.server_ep.get(), rmr->get(), 1024, 1024, 2),
                RecvOp(nullptr, rmr->get(), 2048, 1024, 3)};
  ASSERT_TRUE(p.server->Post(recvs).ok());
  Op sends[] = {SendOp(p.client_ep.get(), smr->get(), 0, 100, 11),
                SendOp(p.client_ep.get(), smr->get(), 100, 200, 12),
                SendOp(p.client_ep.get(), smr->get(), 300, 300, 13)};
  ASSERT_TRUE(p.client->Post(sends).ok());
  auto got = Reap(*p.server, 3, {p.client.get()});
  ASSERT_EQ(got.size(), 3u);
  std::sort(got.begin(), got.end(),
            [](const Completion& a, const Completion& b) { return a.context < b.context; });
  const uint64_t lens[] = {100, 200, 300};
  const uint64_t src[] = {0, 100, 300};
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(got[i].ok()) << got[i].error;
    EXPECT_EQ(got[i].type, OpType::kRecv);
    EXPECT_EQ(got[i].bytes, lens[i]);
    EXPECT_EQ(got[i].ep, p.server_ep.get()) << "recv " << i << " not attributed to its sender";
    EXPECT_EQ(0, std::memcmp(rbuf.data() + 1024 * i, sbuf.data() + src[i], lens[i])) << i;
  }
  auto sent = Reap(*p.client, 3, {p.server.get()});
  ASSERT_EQ(sent.size(), 3u);
  for (const auto& c : sent) EXPECT_TRUE(c.ok()) << c.error;

  // A message longer than the posted buffer: kOutOfRange, endpoint still healthy.
  Op small = RecvOp(p.server_ep.get(), rmr->get(), 0, 16, 21);
  ASSERT_TRUE(p.server->Post({&small, 1}).ok());
  Op big = SendOp(p.client_ep.get(), smr->get(), 0, 512, 22);
  ASSERT_TRUE(p.client->Post({&big, 1}).ok());
  got = Reap(*p.server, 1, {p.client.get()});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, Code::kOutOfRange) << got[0].error;
  Reap(*p.client, 1, {p.server.get()});
  EXPECT_TRUE(p.server_ep->status().ok()) << p.server_ep->status().ToString();
  Op again_r = RecvOp(p.server_ep.get(), rmr->get(), 0, 64, 31);
  Op again_s = SendOp(p.client_ep.get(), smr->get(), 64, 64, 32);
  ASSERT_TRUE(p.server->Post({&again_r, 1}).ok());
  ASSERT_TRUE(p.client->Post({&again_s, 1}).ok());
  got = Reap(*p.server, 1, {p.client.get()});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(0, std::memcmp(rbuf.data(), sbuf.data() + 64, 64));
  Reap(*p.client, 1, {p.server.get()});
}

struct OneSidedPair {
  Pair p;
  std::vector<uint8_t> remote_mem;  // server side
  std::vector<uint8_t> local_mem;   // client side
  std::unique_ptr<MemoryRegion> remote_mr, local_mr;
  std::unique_ptr<RemoteKey> key;
};

// Server registers and advertises `remote_size` bytes; the client imports them.
void MakeOneSided(const UcxConfig& cfg, size_t remote_size, size_t local_size, OneSidedPair* o) {
  o->remote_mem.assign(remote_size, 0);
  o->local_mem.assign(local_size, 0);
  auto server_opts = Options(cfg);
  auto pair = Connect(server_opts, Options(cfg));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  o->p = std::move(*pair);
  auto rmr = o->p.server->RegisterMemory(o->remote_mem.data(), remote_size, kAccessRemote);
  ASSERT_TRUE(rmr.ok()) << rmr.status().ToString();
  o->remote_mr = std::move(*rmr);
  auto lmr = o->p.client->RegisterMemory(o->local_mem.data(), local_size, kAccessLocal);
  ASSERT_TRUE(lmr.ok()) << lmr.status().ToString();
  o->local_mr = std::move(*lmr);
  // Round-trip the descriptor through its wire encoding, as a real peer would receive it.
  auto desc = DecodeRemoteRegion(EncodeRemoteRegion(o->remote_mr->descriptor()));
  ASSERT_TRUE(desc.ok());
  auto key = o->p.client_ep->Import(*desc);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  o->key = std::move(*key);
}

TEST_P(UcxConfigTest, AdvertisedRegionWriteRead) {
  std::vector<uint8_t> mem(1 << 16, 0);
  auto server = CreateTransport("ucx", Options(GetParam()));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto mr = (*server)->RegisterMemory(mem.data(), mem.size(), kAccessRemote);
  ASSERT_TRUE(mr.ok());
  (*server)->Advertise({(*mr)->descriptor()});
  auto addr = (*server)->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  auto opts = Options(GetParam());
  opts.hello_info = {1, 2, 3};
  auto client = CreateTransport("ucx", opts);
  ASSERT_TRUE(client.ok());
  Transport* s = server->get();
  auto acc = std::async(std::launch::async, [s] { return s->Accept(Millis(20000)); });
  auto ep = (*client)->Connect(*addr, Millis(20000));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  auto sep = acc.get();
  ASSERT_TRUE(sep.ok()) << sep.status().ToString();
  EXPECT_EQ((*sep)->peer_info(), std::vector<uint8_t>({1, 2, 3}));
  ASSERT_EQ((*ep)->peer_regions().size(), 1u);
  EXPECT_EQ((*ep)->peer_regions()[0], (*mr)->descriptor());
  auto key = (*ep)->Import((*ep)->peer_regions()[0]);
  ASSERT_TRUE(key.ok()) << key.status().ToString();

  std::vector<uint8_t> local(8192);
  for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<uint8_t>(i ^ 0x5a);
  auto lmr = (*client)->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());
  Op w;
  w.type = OpType::kWrite;
  w.ep = ep->get();
  w.local = lmr->get();
  w.local_offset = 0;
  w.length = 4096;
  w.remote = key->get();
  w.remote_offset = 1000;
  w.context = 1;
  ASSERT_TRUE((*client)->Post({&w, 1}).ok());
  auto got = Reap(**client, 1, {s});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(0, std::memcmp(mem.data() + 1000, local.data(), 4096));  // landed on completion
  Op r = w;
  r.type = OpType::kRead;
  r.local_offset = 4096;
  r.context = 2;
  ASSERT_TRUE((*client)->Post({&r, 1}).ok());
  got = Reap(**client, 1, {s});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(0, std::memcmp(local.data() + 4096, local.data(), 4096));
  // Outside the descriptor: rejected before anything is posted.
  Op bad = w;
  bad.remote_offset = mem.size() - 10;
  EXPECT_EQ((*client)->Post({&bad, 1}).code(), Code::kOutOfRange);
}

// 100,000 random segments: destination slots never overlap, sources may.
std::vector<Segment> RandomSegments(size_t n, size_t slot, size_t src_size, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Segment> segs(n);
  std::vector<size_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  for (size_t i = 0; i < n; ++i) {
    uint64_t len = 1 + rng() % slot;
    uint64_t start = slots[i] * slot + rng() % (slot - len + 1);
    segs[i] = Segment{rng() % (src_size - len), start, len};
  }
  return segs;
}

TEST_P(UcxConfigTest, SparseWriteAndRead100kRandomSegments) {
  constexpr size_t kSegments = 100000;
  constexpr size_t kSlot = 48;
  constexpr size_t kRemote = kSegments * kSlot;
  constexpr size_t kSource = 1 << 20;
  OneSidedPair o;
  MakeOneSided(GetParam(), kRemote, kSource + kRemote, &o);
  if (HasFatalFailure()) return;
  std::mt19937 rng(7);
  for (size_t i = 0; i < kSource; ++i) o.local_mem[i] = static_cast<uint8_t>(rng());
  auto segs = RandomSegments(kSegments, kSlot, kSource, 11);

  Op w;
  w.type = OpType::kSparseWrite;
  w.ep = o.p.client_ep.get();
  w.local = o.local_mr.get();
  w.remote = o.key.get();
  w.segments = segs.data();
  w.num_segments = segs.size();
  w.context = 1;
  ASSERT_TRUE(o.p.client->Post({&w, 1}).ok());
  auto got = Reap(*o.p.client, 1, {o.p.server.get()}, Millis(60000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  uint64_t total = 0;
  std::vector<uint8_t> expect(kRemote, 0);
  for (const Segment& s : segs) {
    std::memcpy(expect.data() + s.remote_offset, o.local_mem.data() + s.local_offset, s.length);
    total += s.length;
  }
  EXPECT_EQ(got[0].bytes, total);
  ASSERT_TRUE(o.remote_mem == expect) << "sparse write not byte-exact";

  // Read every segment back into a second local area (local = kSource + remote offset).
  std::vector<Segment> back(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    back[i] = Segment{kSource + segs[i].remote_offset, segs[i].remote_offset, segs[i].length};
  }
  Op r = w;
  r.type = OpType::kSparseRead;
  r.segments = back.data();
  r.num_segments = back.size();
  r.context = 2;
  ASSERT_TRUE(o.p.client->Post({&r, 1}).ok());
  got = Reap(*o.p.client, 1, {o.p.server.get()}, Millis(60000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(0, std::memcmp(o.local_mem.data() + kSource, expect.data(), kRemote))
      << "sparse read not byte-exact";
}

TEST_P(UcxConfigTest, NotifyArrivesOnlyAfterTheData) {
  constexpr size_t kSize = 1 << 20;
  OneSidedPair o;
  MakeOneSided(GetParam(), kSize, kSize, &o);
  if (HasFatalFailure()) return;
  std::vector<Segment> rows;
  for (size_t off = 0; off < kSize; off += 256) rows.push_back(Segment{off, off, 64});
  for (uint32_t iter = 1; iter <= 40; ++iter) {
    std::memset(o.local_mem.data(), static_cast<int>(iter), kSize);
    Op w;
    w.ep = o.p.client_ep.get();
    w.local = o.local_mr.get();
    w.remote = o.key.get();
    w.flags = kOpNotify;
    w.imm = 1000 + iter;
    w.context = iter;
    const bool sparse = iter % 2 == 0;
    if (sparse) {
      w.type = OpType::kSparseWrite;
      w.segments = rows.data();
      w.num_segments = rows.size();
    } else {
      w.type = OpType::kWrite;
      w.length = kSize;
    }
    ASSERT_TRUE(o.p.client->Post({&w, 1}).ok());
    auto n = Reap(*o.p.server, 1, {o.p.client.get()});
    ASSERT_EQ(n.size(), 1u);
    ASSERT_EQ(n[0].type, OpType::kNotify);
    EXPECT_EQ(n[0].imm, 1000 + iter);
    EXPECT_EQ(n[0].ep, o.p.server_ep.get());
    EXPECT_EQ(n[0].bytes, sparse ? rows.size() * 64 : kSize);
    // Every byte the write covers must already be there.
    bool ok = true;
    if (sparse) {
      for (const Segment& s : rows) {
        for (size_t i = 0; i < s.length; ++i) ok &= o.remote_mem[s.remote_offset + i] == iter;
      }
    } else {
      for (size_t i = 0; i < kSize; ++i) ok &= o.remote_mem[i] == iter;
    }
    ASSERT_TRUE(ok) << "notification " << iter << " arrived before its data";
    auto c = Reap(*o.p.client, 1, {o.p.server.get()});
    ASSERT_EQ(c.size(), 1u);
    EXPECT_TRUE(c[0].ok()) << c[0].error;
  }
}

TEST_P(UcxConfigTest, WrongSecretIsRefusedAndListenerCarriesOn) {
  auto so = Options(GetParam());
  so.secret = "right";
  auto server = CreateTransport("ucx", so);
  ASSERT_TRUE(server.ok());
  auto addr = (*server)->Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  Transport* s = server->get();
  auto bad_opts = Options(GetParam());
  bad_opts.secret = "wrong";
  auto bad = CreateTransport("ucx", bad_opts);
  ASSERT_TRUE(bad.ok());
  auto acc = std::async(std::launch::async, [s] { return s->Accept(Millis(20000)); });
  auto ep = (*bad)->Connect(*addr, Millis(10000));
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), Code::kPermissionDenied) << ep.status().ToString();
  auto good_opts = Options(GetParam());
  good_opts.secret = "right";
  auto good = CreateTransport("ucx", good_opts);
  ASSERT_TRUE(good.ok());
  auto ep2 = (*good)->Connect(*addr, Millis(20000));
  ASSERT_TRUE(ep2.ok()) << ep2.status().ToString();
  auto accepted = acc.get();
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  EXPECT_TRUE((*accepted)->status().ok());
}

TEST_P(UcxConfigTest, CloseCancelsPendingRecv) {
  auto pair = Connect(Options(GetParam()), Options(GetParam()));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  std::vector<uint8_t> buf(256);
  auto mr = pair->server->RegisterMemory(buf.data(), buf.size(), kAccessLocal);
  ASSERT_TRUE(mr.ok());
  Op r = RecvOp(pair->server_ep.get(), mr->get(), 0, 256, 5);
  ASSERT_TRUE(pair->server->Post({&r, 1}).ok());
  pair->server_ep->Close();
  auto got = Reap(*pair->server, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code, Code::kCancelled) << got[0].error;
  EXPECT_EQ(pair->server_ep->status().code(), Code::kCancelled);
  // The peer learns about it: its endpoint fails instead of hanging.
  Op r2 = RecvOp(pair->client_ep.get(), mr->get(), 0, 256, 6);
  std::vector<uint8_t> cbuf(256);
  auto cmr = pair->client->RegisterMemory(cbuf.data(), cbuf.size(), kAccessLocal);
  ASSERT_TRUE(cmr.ok());
  r2.local = cmr->get();
  ASSERT_TRUE(pair->client->Post({&r2, 1}).ok());
  got = Reap(*pair->client, 1, {pair->server.get()});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].ok());
}

// Alive but busy is not dead: the server's owner does not drive its transport for three times
// peer_timeout (a Post that takes that long under emulated RDMA, a compute loop) while the
// client waits on a Recv from it. The heartbeat thread (transport/ucx/liveness.h) keeps
// answering, so the client's endpoint stays healthy and the message arrives once the server
// sends it. (A stopped peer still fails: PeerStoppedOpsFailWithinBound.)
TEST_P(UcxConfigTest, OwnerStuckLongerThanPeerTimeoutIsNotDeclaredDead) {
  const Millis timeout(600);
  auto pair = Connect(Options(GetParam(), timeout), Options(GetParam(), timeout));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  std::vector<uint8_t> cbuf(64, 0), sbuf(64, 0x5a);
  auto cmr = pair->client->RegisterMemory(cbuf.data(), cbuf.size(), kAccessLocal);
  auto smr = pair->server->RegisterMemory(sbuf.data(), sbuf.size(), kAccessLocal);
  ASSERT_TRUE(cmr.ok() && smr.ok());
  Op r = RecvOp(pair->client_ep.get(), cmr->get(), 0, 64, 7);
  ASSERT_TRUE(pair->client->Post({&r, 1}).ok());
  // Only the client drives progress meanwhile.
  const auto until = steady_clock::now() + 3 * timeout;
  Completion c;
  while (steady_clock::now() < until) {
    ASSERT_EQ(pair->client->Poll({&c, 1}), 0u) << "the Recv ended early: " << c.error;
    (void)pair->client->Wait(Millis(5));
  }
  EXPECT_TRUE(pair->client_ep->status().ok()) << pair->client_ep->status().ToString();
  Op send = SendOp(pair->server_ep.get(), smr->get(), 0, 64, 8);
  ASSERT_TRUE(pair->server->Post({&send, 1}).ok());
  auto got = Reap(*pair->client, 1, {pair->server.get()});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(cbuf[0], 0x5a);
}

TEST_P(UcxConfigTest, ProgressThreadServesOneSidedAndWakesWait) {
  auto server_opts = Options(GetParam());
  server_opts.progress_thread = true;
  OneSidedPair o;
  {
    // MakeOneSided with a progress-thread server.
    o.remote_mem.assign(1 << 16, 0);
    o.local_mem.assign(1 << 16, 0);
    auto pair = Connect(server_opts, Options(GetParam()));
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    o.p = std::move(*pair);
    auto rmr = o.p.server->RegisterMemory(o.remote_mem.data(), o.remote_mem.size(), kAccessRemote);
    auto lmr = o.p.client->RegisterMemory(o.local_mem.data(), o.local_mem.size(), kAccessLocal);
    ASSERT_TRUE(rmr.ok() && lmr.ok());
    o.remote_mr = std::move(*rmr);
    o.local_mr = std::move(*lmr);
    auto key = o.p.client_ep->Import(o.remote_mr->descriptor());
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    o.key = std::move(*key);
  }
  for (size_t i = 0; i < o.local_mem.size(); ++i) o.local_mem[i] = static_cast<uint8_t>(i * 3);
  // The server never polls during the transfers: its progress thread serves them.
  Op w;
  w.type = OpType::kWrite;
  w.ep = o.p.client_ep.get();
  w.local = o.local_mr.get();
  w.length = 1 << 15;
  w.remote = o.key.get();
  w.flags = kOpNotify;
  w.imm = 77;
  ASSERT_TRUE(o.p.client->Post({&w, 1}).ok());
  auto got = Reap(*o.p.client, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  // Wait() on the server wakes for the notification queued by its progress thread.
  ASSERT_TRUE(o.p.server->Wait(Millis(10000)).ok());
  Completion n;
  ASSERT_EQ(o.p.server->Poll({&n, 1}), 1u);
  EXPECT_EQ(n.type, OpType::kNotify);
  EXPECT_EQ(n.imm, 77u);
  EXPECT_EQ(0, std::memcmp(o.remote_mem.data(), o.local_mem.data(), 1 << 15));
  Op r = w;
  r.type = OpType::kRead;
  r.flags = kOpNone;
  r.local_offset = 1 << 15;
  ASSERT_TRUE(o.p.client->Post({&r, 1}).ok());
  got = Reap(*o.p.client, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_EQ(0, std::memcmp(o.local_mem.data() + (1 << 15), o.local_mem.data(), 1 << 15));
  // Nothing more to wait for: Wait() times out instead of hanging.
  EXPECT_EQ(o.p.server->Wait(Millis(50)).code(), Code::kTimeout);
}

// ---- peer failure: a child process serving one region ----

struct Child {
  pid_t pid = -1;
  std::string address;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

void StartChild(const UcxConfig& cfg, Child* child) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    char self[] = "/proc/self/exe";
    char flag[] = "--ucx-child";
    std::string name = cfg.name;
    char* argv[] = {self, flag, name.data(), nullptr};
    execv(self, argv);
    _exit(127);
  }
  close(fds[1]);
  child->pid = pid;
  // UCX may print warnings on stdout too: take the first line that starts with ADDR or ERR.
  std::string line;
  while (true) {
    line.clear();
    char c;
    bool got = false;
    while (read(fds[0], &c, 1) == 1) {
      got = true;
      if (c == '\n') break;
      line += c;
    }
    if (!got || line.rfind("ADDR ", 0) == 0 || line.rfind("ERR ", 0) == 0) break;
  }
  close(fds[0]);
  ASSERT_EQ(line.rfind("ADDR ", 0), 0u) << "child said: " << line;
  child->address = line.substr(5);
}

void PeerFailureCase(const UcxConfig& cfg, int signal_number) {
  Child child;
  StartChild(cfg, &child);
  if (::testing::Test::HasFatalFailure()) return;
  const Millis peer_timeout(1000);
  auto t = CreateTransport("ucx", Options(cfg, peer_timeout));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ep = (*t)->Connect(child.address, Millis(20000));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  ASSERT_EQ((*ep)->peer_regions().size(), 1u);
  auto key = (*ep)->Import((*ep)->peer_regions()[0]);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  std::vector<uint8_t> local(1 << 16, 3);
  auto mr = (*t)->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(mr.ok());

  // Healthy first.
  Op w;
  w.type = OpType::kWrite;
  w.ep = ep->get();
  w.local = mr->get();
  w.length = 4096;
  w.remote = key->get();
  ASSERT_TRUE((*t)->Post({&w, 1}).ok());
  auto got = Reap(**t, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;

  ASSERT_EQ(kill(child.pid, signal_number), 0);
  const auto t0 = steady_clock::now();
  // A pending Recv, a Read and a notifying Write on the now dead / silent peer.
  Op r = RecvOp(ep->get(), mr->get(), 0, 1024, 1);
  Op rd = w;
  rd.type = OpType::kRead;
  rd.context = 2;
  Op wn = w;
  wn.flags = kOpNotify;
  wn.context = 3;
  Op ops[] = {r, rd, wn};
  ASSERT_TRUE((*t)->Post(ops).ok());
  got = Reap(**t, 3, {}, Millis(30000));
  const auto elapsed = std::chrono::duration_cast<Millis>(steady_clock::now() - t0);
  ASSERT_EQ(got.size(), 3u) << "ops on a dead peer did not complete";
  for (const auto& c : got) {
    // A read/write may have finished before the signal took effect; the Recv cannot.
    if (c.context == 1) {
      EXPECT_FALSE(c.ok());
    }
    if (!c.ok()) {
      EXPECT_FALSE(c.error.empty());
    }
  }
  // Generous bound (peer_timeout + progress interval, with room for a loaded machine).
  EXPECT_LT(elapsed.count(), 10 * peer_timeout.count()) << "took " << elapsed.count() << " ms";
  EXPECT_FALSE((*ep)->status().ok());
  // The endpoint stays failed: later Ops complete with its error at once.
  ASSERT_TRUE((*t)->Post({&w, 1}).ok());
  got = Reap(**t, 1, {}, Millis(5000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].ok());
  std::printf("[ peer %s ] ops failed after %lld ms: %s\n",
              signal_number == SIGKILL ? "killed" : "stopped",
              static_cast<long long>(elapsed.count()), (*ep)->status().ToString().c_str());
}

// Between processes (shm: Ferry's CMA route; tcp: UCP put/get): 100,000 random segments are
// written into the child's region, read back, and compared.
TEST_P(UcxConfigTest, CrossProcessSparseRoundTrip) {
  Child child;
  StartChild(GetParam(), &child);
  if (HasFatalFailure()) return;
  auto t = CreateTransport("ucx", Options(GetParam()));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ep = (*t)->Connect(child.address, Millis(20000));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  ASSERT_EQ((*ep)->peer_regions().size(), 1u);
  const RemoteRegion& region = (*ep)->peer_regions()[0];
  auto key = (*ep)->Import(region);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  constexpr size_t kSegments = 100000;
  ASSERT_GE(region.length, kSegments * 48);
  const size_t n = kSegments;
  const size_t width = 48;
  constexpr size_t kSource = 1 << 20;
  std::vector<uint8_t> local(kSource + region.length, 0);
  std::mt19937 rng(5);
  for (size_t i = 0; i < kSource; ++i) local[i] = static_cast<uint8_t>(rng());
  auto mr = (*t)->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(mr.ok());
  auto segs = RandomSegments(n, width, kSource, 3);
  Op w;
  w.type = OpType::kSparseWrite;
  w.ep = ep->get();
  w.local = mr->get();
  w.remote = key->get();
  w.segments = segs.data();
  w.num_segments = segs.size();
  ASSERT_TRUE((*t)->Post({&w, 1}).ok());
  auto got = Reap(**t, 1, {}, Millis(60000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  std::vector<Segment> back(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    back[i] = Segment{kSource + segs[i].remote_offset, segs[i].remote_offset, segs[i].length};
  }
  Op r = w;
  r.type = OpType::kSparseRead;
  r.segments = back.data();
  ASSERT_TRUE((*t)->Post({&r, 1}).ok());
  got = Reap(**t, 1, {}, Millis(60000));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].error;
  size_t bad = 0;
  for (const Segment& s : segs) {
    bad += std::memcmp(local.data() + kSource + s.remote_offset, local.data() + s.local_offset,
                       s.length) != 0;
  }
  EXPECT_EQ(bad, 0u) << "segments not byte-exact after a round trip through the peer";
}

TEST_P(UcxConfigTest, PeerKilledOpsFailWithinBound) {
  PeerFailureCase(GetParam(), SIGKILL);
}

TEST_P(UcxConfigTest, PeerStoppedOpsFailWithinBound) {
  PeerFailureCase(GetParam(), SIGSTOP);
}

// With UCX_TLS=tcp,self there is no rc/dc verbs lane, so one-sided Ops run Ferry's
// active-message protocol (never UCX's software RMA, which writes wherever the peer says). The
// target must therefore refuse, on its own, what a forged or stale descriptor asks for: beyond
// the region, without the right, or a region deregistered since.
TEST(UcxTcpTargetChecks, TargetRefusesForgedAndStaleDescriptors) {
  const UcxConfig tcp{"tcp", {{"UCX_TLS", "tcp,self"}}};
  auto pair = Connect(Options(tcp), Options(tcp));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  Transport* s = pair->server.get();
  Transport* c = pair->client.get();
  std::vector<uint8_t> guard(3 * 4096, 0);  // the region is the middle page only
  auto mr = s->RegisterMemory(guard.data() + 4096, 4096, kAccessRemoteRead);
  ASSERT_TRUE(mr.ok());
  std::vector<uint8_t> local(8192, 0xab);
  auto lmr = c->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());

  auto run = [&](RemoteRegion desc, OpType type, uint64_t remote_offset) -> Completion {
    auto key = pair->client_ep->Import(desc);
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    if (!key.ok()) return Completion{};
    Op op;
    op.type = type;
    op.ep = pair->client_ep.get();
    op.local = lmr->get();
    op.length = 4096;
    op.remote = key->get();
    op.remote_offset = remote_offset;
    EXPECT_TRUE(c->Post({&op, 1}).ok());
    auto got = Reap(*c, 1, {s});
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? Completion{} : got[0];
  };

  // A legitimate read works through the protocol.
  std::fill(guard.begin() + 4096, guard.begin() + 8192, 0x11);
  Completion ok = run((*mr)->descriptor(), OpType::kRead, 0);
  EXPECT_TRUE(ok.ok()) << ok.error;
  EXPECT_EQ(local[0], 0x11);
  EXPECT_EQ(local[4095], 0x11);

  // Forged: claims write access. The target's region grants read only.
  RemoteRegion forged = (*mr)->descriptor();
  forged.access = kAccessRemote;
  Completion denied = run(forged, OpType::kWrite, 0);
  EXPECT_EQ(denied.code, Code::kPermissionDenied) << denied.error;
  // Forged: claims a longer region, reads past its end.
  forged = (*mr)->descriptor();
  forged.length = 3 * 4096;
  Completion oob = run(forged, OpType::kRead, 4096);
  EXPECT_EQ(oob.code, Code::kOutOfRange) << oob.error;
  // Forged: a different address under the same epoch.
  forged = (*mr)->descriptor();
  forged.addr -= 4096;
  Completion moved = run(forged, OpType::kRead, 0);
  EXPECT_EQ(moved.code, Code::kStale) << moved.error;
  // Stale: the region was deregistered.
  const RemoteRegion old = (*mr)->descriptor();
  mr->reset();
  Completion stale = run(old, OpType::kRead, 0);
  EXPECT_EQ(stale.code, Code::kStale) << stale.error;
  // Nothing outside the region, nor inside it, was written; the endpoint is still healthy.
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(guard[i], 0) << i;
  for (size_t i = 4096; i < 8192; ++i) ASSERT_EQ(guard[i], 0x11) << i;
  for (size_t i = 8192; i < guard.size(); ++i) ASSERT_EQ(guard[i], 0) << i;
  EXPECT_TRUE(pair->client_ep->status().ok());
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxConfigTest, ::testing::ValuesIn(Configs()), ConfigName);

int ChildMain(const std::string& name) {
  UcxConfig cfg{};
  bool found = false;
  for (const auto& c : Configs()) {
    if (name == c.name) {
      cfg = c;
      found = true;
    }
  }
  if (!found) return 2;
  auto t = CreateTransport("ucx", Options(cfg));
  if (!t.ok()) {
    std::printf("ERR %s\n", t.status().ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> mem(100000 * 48);
  auto mr = (*t)->RegisterMemory(mem.data(), mem.size(), kAccessRemote);
  if (!mr.ok()) return 1;
  (*t)->Advertise({(*mr)->descriptor()});
  auto addr = (*t)->Listen("127.0.0.1:0");
  if (!addr.ok()) {
    std::printf("ERR %s\n", addr.status().ToString().c_str());
    return 1;
  }
  std::printf("ADDR %s\n", addr->c_str());
  std::fflush(stdout);
  auto ep = (*t)->Accept(Millis(30000));
  if (!ep.ok()) return 1;
  // Serve until killed (bounded, so a broken parent never leaves us behind).
  const auto end = steady_clock::now() + std::chrono::seconds(60);
  std::vector<Completion> buf(16);
  while (steady_clock::now() < end) {
    (void)(*t)->Wait(Millis(100));
    (*t)->Poll(buf);
  }
  return 0;
}

}  // namespace
}  // namespace ferry::ucx_test

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--ucx-child") {
    return ferry::ucx_test::ChildMain(argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return ferry::testing::RunAllTestsVisibly();  // 77 when every selected case skipped
}

namespace ferry::ucx_test {
namespace {

// Path (3) serves sparse reads straight from the target region (UCP iov replies, no gather
// buffer). Deregistering the region while replies are queued or being sent must neither let UCX
// read the memory afterwards (it is unmapped right after the MemoryRegion dies: a late read
// would fault) nor hang: every read completes, ok with the right bytes or with an error.
TEST(UcxTcpSparseRead, RepliesComeFromTheRegionAndDeregistrationDrainsThem) {
  const UcxConfig tcp{"tcp", {{"UCX_TLS", "tcp,self"}}};
  auto pair = Connect(Options(tcp), Options(tcp));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  Transport* s = pair->server.get();
  Transport* c = pair->client.get();
  constexpr size_t kRegion = 32u << 20, kRows = 8192, kRow = 512, kOps = 4;
  void* mem = mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* target = static_cast<uint8_t*>(mem);
  for (size_t i = 0; i < kRegion; ++i) target[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  auto mr = s->RegisterMemory(target, kRegion, kAccessRemoteRead);
  ASSERT_TRUE(mr.ok()) << mr.status().ToString();
  std::vector<uint8_t> local(kOps * kRows * kRow, 0);
  auto lmr = c->RegisterMemory(local.data(), local.size(), kAccessLocal);
  ASSERT_TRUE(lmr.ok());
  auto key = pair->client_ep->Import((*mr)->descriptor());
  ASSERT_TRUE(key.ok());
  std::vector<std::vector<Segment>> segs(kOps);
  std::vector<Op> ops(kOps);
  for (size_t o = 0; o < kOps; ++o) {
    for (size_t r = 0; r < kRows; ++r) {
      // Every other row is adjacent to the previous one (merged into one iov entry).
      const uint64_t row = (r % 2 == 1) ? (((r - 1) * 7919 + o) % (kRegion / kRow - 1)) + 1
                                        : (r * 7919 + o) % (kRegion / kRow - 1);
      segs[o].push_back({(o * kRows + r) * kRow, row * kRow, kRow});
    }
    ops[o].type = OpType::kSparseRead;
    ops[o].ep = pair->client_ep.get();
    ops[o].local = lmr->get();
    ops[o].remote = key->get();
    ops[o].segments = segs[o].data();
    ops[o].num_segments = segs[o].size();
    ops[o].context = o;
  }
  // The first read completes normally.
  ASSERT_TRUE(c->Post({ops.data(), 1}).ok());
  auto first = Reap(*c, 1, {s});
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0].ok()) << first[0].error;
  for (const Segment& g : segs[0]) {
    ASSERT_EQ(0, std::memcmp(local.data() + g.local_offset, target + g.remote_offset, g.length));
  }
  // Three more; the server serves some of them, then deregisters and unmaps mid-stream.
  ASSERT_TRUE(c->Post({ops.data() + 1, kOps - 1}).ok());
  for (int i = 0; i < 200; ++i) {
    (void)c->Wait(Millis(0));
    (void)s->Wait(Millis(0));
  }
  std::vector<uint8_t> expected(target, target + kRegion);
  mr->reset();  // drains replies that still reference the region
  ASSERT_EQ(munmap(mem, kRegion), 0);
  auto rest = Reap(*c, kOps - 1, {s});
  ASSERT_EQ(rest.size(), kOps - 1) << "every read completes";
  for (const Completion& done : rest) {
    if (!done.ok()) continue;  // refused (stale) or the endpoint failed: both are allowed
    for (const Segment& g : segs[done.context]) {
      ASSERT_EQ(0, std::memcmp(local.data() + g.local_offset, expected.data() + g.remote_offset,
                               g.length));
    }
  }
}

}  // namespace
}  // namespace ferry::ucx_test
