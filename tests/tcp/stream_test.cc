// Streaming, failure detection and concurrency of the tcp backend: a 100,000-segment sparse
// write, a 256 MiB transfer, heartbeats against a silent peer, Close(), unexpected-message
// limits, two posting threads, and deregistration while a transfer streams.
#include <atomic>
#include <numeric>
#include <random>
#include <thread>

#include "tests/tcp/tcp_test_util.h"

namespace ferry::tcp::testing {
namespace {

TEST(TcpStream, UnknownParamIsInvalidArgument) {
  TransportOptions o;
  o.params["sndbuff"] = "1";
  auto t = CreateTransport("tcp", o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("sndbuff"), std::string::npos);
  o.params = {{"sndbuf", "1048576"}, {"rcvbuf", "1048576"}};
  EXPECT_TRUE(CreateTransport("tcp", o).ok());
}

TEST(TcpStream, DevicesListNetdevsWithAddresses) {
  auto t = MakeTcp();
  auto devs = t->devices();
  bool lo = false;
  for (const auto& d : devs) {
    EXPECT_EQ(d.kind, "netdev");
    if (d.name == "lo") {
      lo = true;
      EXPECT_EQ(d.attributes.at("ipv4"), "127.0.0.1");
      EXPECT_TRUE(d.attributes.count("mtu"));
    }
  }
  EXPECT_TRUE(lo);
}

TEST(TcpStream, ConnectionRefusedFailsQuickly) {
  auto t = MakeTcp();
  // A port that was just free: bind, read it, close.
  auto probe = MakeTcp();
  std::string addr = *probe->Listen("127.0.0.1:0");
  probe.reset();
  const auto start = Clock::now();
  auto ep = t->Connect(addr, Millis(30000));
  ASSERT_FALSE(ep.ok());
  EXPECT_TRUE(ep.status().code() == Code::kPeerFailure || ep.status().code() == Code::kIoError)
      << ep.status().ToString();
  EXPECT_LT(Clock::now() - start, Millis(20000)) << "refusal should not wait for the timeout";
}

TEST(TcpStream, HundredThousandSegmentSparseWriteAndRead) {
  TransportOptions o;
  Pair p = ConnectPair(o, o);
  ASSERT_NE(p.ab, nullptr);
  constexpr size_t kSegs = 100000;
  std::mt19937_64 rng(11);
  std::vector<Segment> segs(kSegs);
  // Remote: a permutation of 16-byte slots with random lengths 1..16; local: packed.
  std::vector<uint64_t> slots(kSegs);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  uint64_t local_off = 0;
  for (size_t i = 0; i < kSegs; ++i) {
    const uint64_t len = 1 + rng() % 16;
    segs[i] = {local_off, slots[i] * 16, len};
    local_off += len;
  }
  std::vector<uint8_t> src(local_off), dst(kSegs * 16, 0), back(local_off, 0);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto back_mr = Take(p.a->RegisterMemory(back.data(), back.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));
  Op w = MakeOp(OpType::kSparseWrite, p.ab.get(), src_mr.get(), 0, 0, 1, key.get());
  w.segments = segs.data();
  w.num_segments = segs.size();
  w.flags = kOpNotify;
  w.imm = 99;
  ASSERT_TRUE(p.a->Post({&w, 1}).ok());
  Driver d({p.a.get(), p.b.get()});
  auto c = d.Next(0);
  ASSERT_TRUE(c && c->ok()) << (c ? c->error : "timeout");
  EXPECT_EQ(c->bytes, local_off);
  auto n = d.Next(1);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->type, OpType::kNotify);
  EXPECT_EQ(n->imm, 99u);
  EXPECT_EQ(n->bytes, local_off);
  for (size_t i = 0; i < kSegs; ++i) {
    ASSERT_EQ(0, std::memcmp(dst.data() + segs[i].remote_offset, src.data() + segs[i].local_offset,
                             segs[i].length))
        << "segment " << i;
  }
  Op r = MakeOp(OpType::kSparseRead, p.ab.get(), back_mr.get(), 0, 0, 2, key.get());
  r.segments = segs.data();
  r.num_segments = segs.size();
  ASSERT_TRUE(p.a->Post({&r, 1}).ok());
  auto rc = d.Next(0);
  ASSERT_TRUE(rc && rc->ok()) << (rc ? rc->error : "timeout");
  EXPECT_EQ(back, src);
}

TEST(TcpStream, QuarterGibibyteWriteAndReadStream) {
  Pair p = ConnectPair();
  ASSERT_NE(p.ab, nullptr);
  constexpr size_t kBytes = 256u << 20;
  std::vector<uint8_t> src(kBytes), dst(kBytes, 0);
  std::mt19937_64 rng(5);
  for (size_t i = 0; i < kBytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(src.data() + i, &v, 8);
  }
  auto src_mr = Take(p.a->RegisterMemory(src.data(), kBytes, kAccessRemoteRead));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), kBytes, kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));
  Op w = MakeOp(OpType::kWrite, p.ab.get(), src_mr.get(), 0, kBytes, 1, key.get());
  ASSERT_TRUE(p.a->Post({&w, 1}).ok());
  Driver d({p.a.get(), p.b.get()});
  auto c = d.Next(0, Millis(120000));
  ASSERT_TRUE(c && c->ok()) << (c ? c->error : "timeout");
  EXPECT_EQ(c->bytes, kBytes);
  EXPECT_TRUE(dst == src);
  // And back: the server reads the client's region into a zeroed buffer.
  std::fill(dst.begin(), dst.end(), 0);
  auto back_key = Take(p.ba->Import(src_mr->descriptor()));
  Op r = MakeOp(OpType::kRead, p.ba.get(), dst_mr.get(), 0, kBytes, 2, back_key.get());
  ASSERT_TRUE(p.b->Post({&r, 1}).ok());
  auto rc = d.Next(1, Millis(120000));
  ASSERT_TRUE(rc && rc->ok()) << (rc ? rc->error : "timeout");
  EXPECT_TRUE(dst == src);
}

// A raw peer completes the handshake, advertises a region, then goes silent. The transport must
// heartbeat it and fail the endpoint (and the pending write) within peer_timeout + slack.
TEST(TcpStream, SilentPeerIsDetectedByHeartbeatTimeout) {
  TransportOptions o;
  o.peer_timeout = Millis(600);
  o.progress_thread = true;
  auto t = MakeTcp(o);
  auto address = *t->Listen("127.0.0.1:0");
  RawPeer raw;
  ASSERT_TRUE(raw.Connect(address));
  RemoteRegion fake;
  fake.addr = 0x1000;
  fake.length = 4096;
  fake.access = kAccessRemote;
  fake.rkey.assign(8, 1);
  ASSERT_TRUE(raw.Handshake(RawHello({fake})).ok());
  auto ep = *t->Accept(Millis(5000));
  ASSERT_EQ(ep->peer_regions().size(), 1u);
  auto key = Take(ep->Import(ep->peer_regions()[0]));
  std::vector<uint8_t> buf(4096, 1);
  auto mr = Take(t->RegisterMemory(buf.data(), buf.size(), kAccessLocal));
  Op w = MakeOp(OpType::kWrite, ep.get(), mr.get(), 0, 4096, 7, key.get());
  const auto start = Clock::now();
  ASSERT_TRUE(t->Post({&w, 1}).ok());
  Completion c;
  while (t->Poll({&c, 1}) == 0) {
    ASSERT_LT(Clock::now() - start, Millis(20000)) << "silent peer never detected";
    (void)t->Wait(Millis(50));
  }
  EXPECT_EQ(c.context, 7u);
  EXPECT_EQ(c.code, Code::kPeerFailure) << c.error;
  EXPECT_EQ(ep->status().code(), Code::kPeerFailure);
  EXPECT_NE(ep->status().message().find("nothing received"), std::string::npos)
      << ep->status().message();
  // The silent side saw our write, then heartbeats while idle.
  FrameHeader h;
  ASSERT_TRUE(raw.RecvHeader(&h));
  EXPECT_EQ(h.kind, FrameKind::kWrite);
  std::vector<uint8_t> payload(h.length);
  ASSERT_TRUE(raw.RecvAll(payload.data(), payload.size()));
  ASSERT_TRUE(raw.RecvHeader(&h));
  EXPECT_EQ(h.kind, FrameKind::kHeartbeat);
}

// Two real transports that keep polling but exchange no data stay connected for several
// peer_timeouts: heartbeats keep them alive.
TEST(TcpStream, IdleButLivePeersStayConnected) {
  TransportOptions o;
  o.peer_timeout = Millis(300);
  Pair p = ConnectPair(o, o);
  ASSERT_NE(p.ab, nullptr);
  Driver d({p.a.get(), p.b.get()});
  const auto end = Clock::now() + Millis(1500);
  while (Clock::now() < end) {
    d.PollAll();
    std::this_thread::sleep_for(Millis(5));
  }
  EXPECT_TRUE(p.ab->status().ok()) << p.ab->status().ToString();
  EXPECT_TRUE(p.ba->status().ok()) << p.ba->status().ToString();
}

// A peer transport that stops polling is failed by the one that keeps polling.
TEST(TcpStream, PeerThatStopsPollingIsFailed) {
  TransportOptions o;
  o.peer_timeout = Millis(400);
  Pair p = ConnectPair(o, o);
  ASSERT_NE(p.ab, nullptr);
  const auto start = Clock::now();
  while (p.ab->status().ok() && Clock::now() - start < Millis(20000)) {
    Completion c[4];
    p.a->Poll(c);  // only a progresses; b is "stopped"
    std::this_thread::sleep_for(Millis(2));
  }
  EXPECT_EQ(p.ab->status().code(), Code::kPeerFailure) << p.ab->status().ToString();
}

TEST(TcpStream, CloseCancelsPendingAndPeerSeesClosed) {
  Pair p = ConnectPair();
  ASSERT_NE(p.ab, nullptr);
  std::vector<uint8_t> buf(64);
  auto mr = Take(p.a->RegisterMemory(buf.data(), buf.size(), kAccessLocal));
  Op r = MakeOp(OpType::kRecv, p.ab.get(), mr.get(), 0, 64, 5);
  ASSERT_TRUE(p.a->Post({&r, 1}).ok());
  p.ab->Close();
  p.ab->Close();  // idempotent
  Driver d({p.a.get(), p.b.get()});
  auto c = d.Next(0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->code, Code::kCancelled);
  EXPECT_EQ(c->context, 5u);
  const auto start = Clock::now();
  while (p.ba->status().ok() && Clock::now() - start < Millis(10000)) d.PollAll();
  EXPECT_EQ(p.ba->status().code(), Code::kPeerFailure);
  EXPECT_NE(p.ba->status().message().find("peer closed the connection"), std::string::npos)
      << p.ba->status().message();
  // Ops posted on the failed endpoint complete with its error.
  Op s = MakeOp(OpType::kSend, p.ab.get(), mr.get(), 0, 8, 6);
  ASSERT_TRUE(p.a->Post({&s, 1}).ok());
  auto sc = d.Next(0);
  ASSERT_TRUE(sc.has_value());
  EXPECT_EQ(sc->code, Code::kCancelled);
}

// An endpoint with nothing posted fails without a completion: Wait() still returns at once, so
// an idle loop that watches its endpoints' status (a PS control client, the coordinator) sees a
// dead peer without sitting out its wait's timeout.
TEST(TcpStream, WaitReturnsWhenAnIdleEndpointFails) {
  Pair p = ConnectPair();
  ASSERT_NE(p.ab, nullptr);
  Completion c[4];
  (void)p.b->Poll(c);
  (void)p.a->Wait(Millis(0));  // consume any earlier wake-up
  p.ab->Close();
  (void)p.a->Poll(c);
  // b: nothing posted on ba; its peer closed.
  const auto start = Clock::now();
  Status st;
  while (p.ba->status().ok() && Clock::now() - start < Millis(10000)) st = p.b->Wait(Millis(5000));
  const auto waited = std::chrono::duration_cast<Millis>(Clock::now() - start);
  EXPECT_EQ(p.ba->status().code(), Code::kPeerFailure) << p.ba->status().ToString();
  EXPECT_LT(waited.count(), 2500) << "Wait sat out its timeout: " << st.ToString();
}

TEST(TcpStream, MessagesTooLongAndUnexpectedLimits) {
  TransportOptions ob;
  ob.params["max_unexpected_bytes"] = std::to_string(1 << 20);
  Pair p = ConnectPair({}, ob);
  ASSERT_NE(p.ab, nullptr);
  std::vector<uint8_t> src(256 << 10, 3), dst(1024, 0);
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessLocal));
  Driver d({p.a.get(), p.b.get()});
  // Too long for the posted buffer: that recv fails, the endpoint stays healthy.
  Op r = MakeOp(OpType::kRecv, p.ba.get(), dst_mr.get(), 0, 16, 1);
  ASSERT_TRUE(p.b->Post({&r, 1}).ok());
  Op s = MakeOp(OpType::kSend, p.ab.get(), src_mr.get(), 0, 100, 2);
  ASSERT_TRUE(p.a->Post({&s, 1}).ok());
  auto rc = d.Next(1);
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(rc->code, Code::kOutOfRange) << rc->error;
  EXPECT_EQ(rc->bytes, 100u);
  // Ordered delivery of small messages through the unexpected queue.
  for (uint8_t i = 0; i < 3; ++i) {
    src[i] = i;
    Op m = MakeOp(OpType::kSend, p.ab.get(), src_mr.get(), i, 1, 10 + i);
    ASSERT_TRUE(p.a->Post({&m, 1}).ok());
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(d.Next(0).has_value());  // 4 sends complete
  for (uint8_t i = 0; i < 3; ++i) {
    Op m = MakeOp(OpType::kRecv, nullptr, dst_mr.get(), i, 1, 20 + i);  // shared queue
    ASSERT_TRUE(p.b->Post({&m, 1}).ok());
    auto mc = d.Next(1);
    ASSERT_TRUE(mc && mc->ok()) << (mc ? mc->error : "timeout");
    EXPECT_EQ(mc->ep, p.ba.get());
    EXPECT_EQ(dst[i], i);
  }
  EXPECT_TRUE(p.ba->status().ok());
  // Flood without receives: beyond 1 MiB buffered the endpoint fails with kResourceExhausted.
  for (int i = 0; i < 6; ++i) {
    Op m = MakeOp(OpType::kSend, p.ab.get(), src_mr.get(), 0, src.size(), 30 + i);
    ASSERT_TRUE(p.a->Post({&m, 1}).ok());
  }
  const auto start = Clock::now();
  while (p.ba->status().ok() && Clock::now() - start < Millis(20000)) d.PollAll();
  EXPECT_EQ(p.ba->status().code(), Code::kResourceExhausted) << p.ba->status().ToString();
  EXPECT_NE(p.ba->status().message().find("max_unexpected_bytes"), std::string::npos);
}

TEST(TcpStream, TwoThreadsPostAtOnce) {
  TransportOptions ob;
  ob.progress_thread = true;
  Pair p = ConnectPair({}, ob);
  ASSERT_NE(p.ab, nullptr);
  constexpr int kPerThread = 2000;
  constexpr size_t kChunk = 256;
  std::vector<uint8_t> src(2 * kPerThread * kChunk), dst(src.size(), 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 256);
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));
  std::atomic<int> done{0};
  std::atomic<int> errors{0};
  auto worker = [&](int tid) {
    for (int i = 0; i < kPerThread; ++i) {
      const uint64_t off = (static_cast<uint64_t>(tid) * kPerThread + i) * kChunk;
      Op op = MakeOp(i % 2 ? OpType::kWrite : OpType::kSend, p.ab.get(), src_mr.get(), off, kChunk,
                     off, key.get(), off);
      if (op.type == OpType::kSend) op.remote = nullptr;
      if (!p.a->Post({&op, 1}).ok()) errors++;
      Completion c[16];
      size_t n = p.a->Poll(c);
      for (size_t k = 0; k < n; ++k) {
        if (!c[k].ok()) errors++;
        done++;
      }
    }
  };
  // The server receives the sends (kPerThread of them, interleaved arbitrarily between the two
  // threads) into separate slots of a scratch region.
  std::vector<uint8_t> scratch(kPerThread * kChunk);
  auto scratch_mr = Take(p.b->RegisterMemory(scratch.data(), scratch.size(), kAccessLocal));
  std::vector<Op> recvs;
  for (int i = 0; i < kPerThread; ++i) {
    recvs.push_back(MakeOp(OpType::kRecv, p.ba.get(), scratch_mr.get(),
                           static_cast<uint64_t>(i) * kChunk, kChunk, i));
  }
  ASSERT_TRUE(p.b->Post(recvs).ok());
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  const auto start = Clock::now();
  while (done < 2 * kPerThread && Clock::now() - start < Millis(30000)) {
    Completion c[64];
    size_t n = p.a->Poll(c);
    for (size_t k = 0; k < n; ++k) {
      if (!c[k].ok()) errors++;
      done++;
    }
  }
  EXPECT_EQ(done.load(), 2 * kPerThread);
  EXPECT_EQ(errors.load(), 0);
  int received = 0;
  while (received < kPerThread && Clock::now() - start < Millis(30000)) {
    Completion c[64];
    size_t n = p.b->Poll(c);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_TRUE(c[k].ok()) << c[k].error;
      EXPECT_EQ(c[k].bytes, kChunk);
      received++;
    }
  }
  EXPECT_EQ(received, kPerThread);
  // Every write landed where it was aimed.
  for (int tid = 0; tid < 2; ++tid) {
    for (int i = 1; i < kPerThread; i += 2) {
      const uint64_t off = (static_cast<uint64_t>(tid) * kPerThread + i) * kChunk;
      ASSERT_EQ(0, std::memcmp(dst.data() + off, src.data() + off, kChunk)) << off;
    }
  }
}

// Destroying a region while a large write streams into it must not let bytes land afterwards:
// the rest is discarded and the initiator sees kStale (or ok if it had already landed).
TEST(TcpStream, DeregisterWhileAWriteStreamsIn) {
  Pair p = ConnectPair();
  ASSERT_NE(p.ab, nullptr);
  constexpr size_t kBytes = 64u << 20;
  std::vector<uint8_t> src(kBytes, 0x11);
  auto dst = std::make_unique<std::vector<uint8_t>>(kBytes, 0);
  auto src_mr = Take(p.a->RegisterMemory(src.data(), kBytes, kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst->data(), kBytes, kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));
  Op w = MakeOp(OpType::kWrite, p.ab.get(), src_mr.get(), 0, kBytes, 1, key.get());
  ASSERT_TRUE(p.a->Post({&w, 1}).ok());
  Driver d({p.a.get(), p.b.get()});
  // Let some bytes land, then deregister and scribble over the memory as a new owner would.
  while ((*dst)[0] == 0) d.PollAll();
  dst_mr.reset();
  std::fill(dst->begin(), dst->end(), 0x77);
  auto c = d.Next(0, Millis(60000));
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->code == Code::kStale || c->ok()) << c->error;
  EXPECT_TRUE(std::all_of(dst->begin(), dst->end(), [](uint8_t b) { return b == 0x77; }))
      << "bytes landed after deregistration";
  EXPECT_TRUE(p.ab->status().ok());
}

}  // namespace
}  // namespace ferry::tcp::testing

namespace ferry::tcp::testing {
namespace {

// Destroying a region while a read response streams out of it blocks until the response has
// drained (the peer keeps polling on another thread), and the data arrives intact.
TEST(TcpStream, DeregisterWhileAReadStreamsOut) {
  Pair p = ConnectPair();
  ASSERT_NE(p.ab, nullptr);
  constexpr size_t kBytes = 64u << 20;
  auto src = std::make_unique<std::vector<uint8_t>>(kBytes);
  for (size_t i = 0; i < kBytes; ++i) (*src)[i] = static_cast<uint8_t>(i * 31 + i / 8192);
  std::vector<uint8_t> dst(kBytes, 0);
  auto src_mr = Take(p.b->RegisterMemory(src->data(), kBytes, kAccessRemoteRead));
  auto dst_mr = Take(p.a->RegisterMemory(dst.data(), kBytes, kAccessLocal));
  auto key = Take(p.ab->Import(src_mr->descriptor()));
  Op r = MakeOp(OpType::kRead, p.ab.get(), dst_mr.get(), 0, kBytes, 1, key.get());
  ASSERT_TRUE(p.a->Post({&r, 1}).ok());
  std::optional<Completion> done;
  std::atomic<bool> started{false};
  std::thread client([&] {
    Completion c;
    const auto deadline = Clock::now() + Millis(60000);
    while (Clock::now() < deadline) {
      if (dst[kBytes / 1024] != 0 || dst[0] != 0) started = true;
      if (p.a->Poll({&c, 1}) == 1) {
        done = c;
        return;
      }
    }
  });
  // Serve until the response is under way, then deregister in the middle of it.
  while (!started) {
    Completion c;
    p.b->Poll({&c, 1});
  }
  src_mr.reset();  // blocks until the response has drained
  std::fill(src->begin(), src->end(), 0xcc);
  client.join();
  ASSERT_TRUE(done.has_value());
  if (done->ok()) {
    for (size_t i = 0; i < kBytes; i += 4093) {
      ASSERT_EQ(dst[i], static_cast<uint8_t>(i * 31 + i / 8192)) << i;
    }
  } else {
    EXPECT_EQ(done->code, Code::kStale) << done->error;
  }
  EXPECT_TRUE(p.ab->status().ok());
}

TEST(TcpStream, MaxEndpointsIsRespected) {
  TransportOptions ob;
  ob.max_endpoints = 1;
  ob.progress_thread = true;
  auto server = MakeTcp(ob);
  auto address = Take(server->Listen("127.0.0.1:0"));
  auto c1 = MakeTcp();
  auto c2 = MakeTcp();
  auto ep1 = c1->Connect(address, Millis(10000));
  ASSERT_TRUE(ep1.ok()) << ep1.status().ToString();
  auto ep2 = c2->Connect(address, Millis(10000));
  EXPECT_FALSE(ep2.ok());
  auto accepted = server->Accept(Millis(200));
  ASSERT_TRUE(accepted.ok());
  auto none = server->Accept(Millis(200));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("max_endpoints"), std::string::npos)
      << none.status().message();
}

}  // namespace
}  // namespace ferry::tcp::testing
