// Hostile peers and forged descriptors against the tcp backend. A misbehaving peer must fail
// only its own endpoint, with a clear error; the transport, the listener and other endpoints
// carry on; a forged descriptor must never change a byte of the target's memory.
#include <random>
#include <thread>

#include "tests/tcp/tcp_test_util.h"

namespace ferry::tcp::testing {
namespace {

// A server with a progress thread (so raw peers can handshake without anyone calling Accept),
// plus a well-behaved client endpoint to prove the server keeps working.
struct Server {
  Server() {
    TransportOptions o;
    o.progress_thread = true;
    o.max_message_size = 1u << 20;
    o.max_segments = 64;
    t = MakeTcp(o);
    address = *t->Listen("127.0.0.1:0");
  }
  std::shared_ptr<Endpoint> AcceptOne() {
    auto ep = t->Accept(Millis(10000));
    EXPECT_TRUE(ep.ok()) << ep.status().ToString();
    return ep.ok() ? *ep : nullptr;
  }
  // The endpoint status once it has failed (or ok if it did not within the timeout).
  static Status WaitFailed(Endpoint& ep, Millis timeout = Millis(10000)) {
    const auto deadline = Clock::now() + timeout;
    while (ep.status().ok() && Clock::now() < deadline) {
      std::this_thread::sleep_for(Millis(5));
    }
    return ep.status();
  }
  std::unique_ptr<Transport> t;
  std::string address;
};

// Sends one message from a fresh real client and checks it arrives: the server is healthy.
void ExpectServerStillWorks(Server& s) {
  auto client = MakeTcp();
  auto ep = client->Connect(s.address, Millis(10000));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  auto server_ep = s.AcceptOne();
  ASSERT_NE(server_ep, nullptr);
  std::vector<uint8_t> src(100, 0x5a), dst(100, 0);
  auto src_mr = Take(client->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(s.t->RegisterMemory(dst.data(), dst.size(), kAccessLocal));
  Op recv = MakeOp(OpType::kRecv, server_ep.get(), dst_mr.get(), 0, 100, 1);
  ASSERT_TRUE(s.t->Post({&recv, 1}).ok());
  Op send = MakeOp(OpType::kSend, ep->get(), src_mr.get(), 0, 100, 2);
  ASSERT_TRUE(client->Post({&send, 1}).ok());
  Driver d({client.get(), s.t.get()});
  auto sc = d.Next(0);
  ASSERT_TRUE(sc && sc->ok()) << (sc ? sc->error : "timeout");
  auto rc = d.Next(1);
  ASSERT_TRUE(rc && rc->ok()) << (rc ? rc->error : "timeout");
  EXPECT_EQ(rc->bytes, 100u);
  EXPECT_EQ(dst, src);
}

TEST(TcpHostile, GarbageHandshakeIsDroppedAndListenerCarriesOn) {
  Server s;
  RawPeer raw;
  ASSERT_TRUE(raw.Connect(s.address));
  const char garbage[] = "GET / HTTP/1.1\r\nHost: ferry\r\n\r\n";
  ASSERT_TRUE(raw.SendAll(garbage, sizeof(garbage)));
  EXPECT_TRUE(raw.SeesClose());
  auto none = s.t->Accept(Millis(200));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kTimeout);
  EXPECT_NE(none.status().message().find("handshake frame"), std::string::npos)
      << none.status().message();

  // A syntactically fine length prefix with a FlatBuffers-garbage body.
  RawPeer raw2;
  ASSERT_TRUE(raw2.Connect(s.address));
  std::vector<uint8_t> frame(4 + 64, 0xab);
  uint32_t len = 64;
  std::memcpy(frame.data(), &len, 4);
  ASSERT_TRUE(raw2.SendAll(frame.data(), frame.size()));
  EXPECT_TRUE(raw2.SeesClose());
  ExpectServerStillWorks(s);
}

TEST(TcpHostile, WrongBackendOrSecretIsRefused) {
  TransportOptions o;
  o.progress_thread = true;
  o.secret = "right";
  auto t = MakeTcp(o);
  auto address = *t->Listen("127.0.0.1:0");
  RawPeer raw;
  ASSERT_TRUE(raw.Connect(address));
  HelloParams p = RawHello();
  p.secret = "wrong";
  Status st = raw.Handshake(p);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kPermissionDenied) << st.ToString();
  TransportOptions c;
  c.secret = "wrong";
  auto client = MakeTcp(c);
  auto ep = client->Connect(address, Millis(5000));
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), Code::kPermissionDenied) << ep.status().ToString();
}

// A hello that arrives after peer_timeout (as one lost after a retransmitted SYN does, behind
// Linux's 3 s fallback RTO) still completes: the handshake bound is never below kHandshakeFloor.
TEST(TcpHostile, SlowHelloPastPeerTimeoutIsStillAccepted) {
  TransportOptions o;
  o.progress_thread = true;
  o.peer_timeout = Millis(300);
  auto t = MakeTcp(o);
  auto address = *t->Listen("127.0.0.1:0");
  RawPeer raw;
  ASSERT_TRUE(raw.Connect(address));
  std::this_thread::sleep_for(Millis(1200));
  Status st = raw.Handshake(RawHello());
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto ep = t->Accept(Millis(5000));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
}

struct HostileCase {
  const char* name;
  std::vector<uint8_t> bytes;  // sent after the handshake
  Code code;
  const char* needle;
};

std::vector<uint8_t> HeaderBytes(const FrameHeader& h) {
  std::vector<uint8_t> b(kHeaderSize);
  EncodeHeader(h, b.data());
  return b;
}

TEST(TcpHostile, BadFramesFailOnlyThatEndpoint) {
  std::vector<HostileCase> cases;
  FrameHeader h;
  h.kind = static_cast<FrameKind>(42);
  cases.push_back({"unknown kind", HeaderBytes(h), Code::kProtocol, "unknown frame kind 42"});
  h = FrameHeader();
  h.kind = FrameKind::kMessage;
  h.length = 1ull << 62;
  cases.push_back({"absurd length", HeaderBytes(h), Code::kProtocol, "exceeds the limit"});
  h = FrameHeader();
  h.kind = FrameKind::kSparseWrite;
  h.req_id = 1;
  h.key = 5;
  h.arg = 1u << 30;
  h.length = 8;
  cases.push_back({"too many segments", HeaderBytes(h), Code::kProtocol, "segment count"});
  h.arg = 0;
  cases.push_back({"zero segments", HeaderBytes(h), Code::kProtocol, "segment count 0"});
  // A table whose lengths do not add up to the header's length.
  h.arg = 2;
  h.length = 100;
  std::vector<uint8_t> mismatch = HeaderBytes(h);
  Segment segs[2] = {{0, 0, 10}, {0, 16, 10}};
  mismatch.insert(mismatch.end(), reinterpret_cast<uint8_t*>(segs),
                  reinterpret_cast<uint8_t*>(segs) + sizeof(segs));
  cases.push_back({"table/length mismatch", mismatch, Code::kProtocol, "sum to 20"});
  h = FrameHeader();
  h.kind = FrameKind::kReadResponse;
  h.req_id = 12345;
  h.length = 4;
  cases.push_back(
      {"unsolicited read response", HeaderBytes(h), Code::kProtocol, "oldest outstanding request"});
  h = FrameHeader();
  h.kind = FrameKind::kMessage;
  h.length = 1000;
  std::vector<uint8_t> truncated = HeaderBytes(h);
  truncated.resize(truncated.size() + 10, 7);  // then EOF
  cases.push_back({"truncated frame", truncated, Code::kPeerFailure, "closed the connection"});
  std::vector<uint8_t> half = HeaderBytes(h);
  half.resize(20);
  cases.push_back({"truncated header", half, Code::kPeerFailure, "closed the connection"});

  Server s;
  for (const HostileCase& hc : cases) {
    SCOPED_TRACE(hc.name);
    RawPeer raw;
    ASSERT_TRUE(raw.Connect(s.address));
    ASSERT_TRUE(raw.Handshake(RawHello()).ok());
    auto ep = s.AcceptOne();
    ASSERT_NE(ep, nullptr);
    ASSERT_TRUE(raw.SendAll(hc.bytes.data(), hc.bytes.size()));
    if (hc.code == Code::kPeerFailure) shutdown(raw.fd(), SHUT_WR);
    Status st = Server::WaitFailed(*ep);
    EXPECT_EQ(st.code(), hc.code) << st.ToString();
    EXPECT_NE(st.message().find(hc.needle), std::string::npos) << st.message();
    if (hc.code == Code::kProtocol) {
      EXPECT_TRUE(raw.SeesClose());
    }
  }
  ExpectServerStillWorks(s);
}

// A raw request with a forged key gets an error response and its payload is drained: the
// connection stays usable for the next (valid) frame.
TEST(TcpHostile, RawWriteWithUnknownKeyGetsAnErrorResponse) {
  Server s;
  RawPeer raw;
  ASSERT_TRUE(raw.Connect(s.address));
  ASSERT_TRUE(raw.Handshake(RawHello()).ok());
  auto ep = s.AcceptOne();
  FrameHeader w;
  w.kind = FrameKind::kWrite;
  w.req_id = 1;
  w.key = 0x1234;
  w.length = 5000;
  ASSERT_TRUE(raw.SendHeader(w));
  std::vector<uint8_t> payload(5000, 1);
  ASSERT_TRUE(raw.SendAll(payload.data(), payload.size()));
  FrameHeader r;
  do {
    ASSERT_TRUE(raw.RecvHeader(&r));
  } while (r.kind == FrameKind::kHeartbeat);
  EXPECT_EQ(r.kind, FrameKind::kResponse);
  EXPECT_EQ(r.req_id, 1u);
  EXPECT_EQ(r.imm, static_cast<uint32_t>(Code::kPermissionDenied));
  std::string text(r.length, '\0');
  ASSERT_TRUE(raw.RecvAll(text.data(), text.size()));
  EXPECT_NE(text.find("unknown remote key"), std::string::npos) << text;
  // Still in sync: a heartbeat and a message are accepted.
  ASSERT_TRUE(raw.SendHeader(FrameHeader()));
  std::this_thread::sleep_for(Millis(50));
  EXPECT_TRUE(ep->status().ok()) << ep->status().ToString();
}

// ---- Forged descriptors ---------------------------------------------------------------------

class TcpForged : public ::testing::Test {
 protected:
  void SetUp() override {
    pair_ = ConnectPair();
    ASSERT_NE(pair_.ab, nullptr);
    target_.assign(1 << 16, 0);
    std::mt19937 rng(3);
    for (auto& b : target_) b = static_cast<uint8_t>(rng());
    snapshot_ = target_;
    rw_ = Take(pair_.b->RegisterMemory(target_.data(), 1 << 15, kAccessRemote));
    ro_ = Take(pair_.b->RegisterMemory(target_.data() + (1 << 15), 1 << 15, kAccessRemoteRead));
    src_.assign(1 << 16, 0xee);
    src_mr_ = Take(pair_.a->RegisterMemory(src_.data(), src_.size(), kAccessLocal));
  }
  // Posts one op on the client and returns its completion (both sides progressed).
  Completion Run(Op op) {
    Status st = pair_.a->Post({&op, 1});
    EXPECT_TRUE(st.ok()) << st.ToString();
    Driver d({pair_.a.get(), pair_.b.get()});
    auto c = d.Next(0);
    EXPECT_TRUE(c.has_value());
    return c ? *c : Completion();
  }
  std::unique_ptr<RemoteKey> Import(RemoteRegion r) {
    auto k = pair_.ab->Import(r);
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    return std::move(k).value();
  }
  void ExpectTargetUntouched() {
    EXPECT_TRUE(target_ == snapshot_) << "a refused request changed target memory";
    EXPECT_TRUE(pair_.ab->status().ok()) << "a refused request must not fail the endpoint";
  }

  Pair pair_;
  std::vector<uint8_t> target_, snapshot_, src_;
  std::unique_ptr<MemoryRegion> rw_, ro_, src_mr_;
};

TEST_F(TcpForged, WrongKeyIsPermissionDenied) {
  RemoteRegion r = rw_->descriptor();
  r.rkey[0] ^= 0x5a;
  auto key = Import(r);
  Completion c =
      Run(MakeOp(OpType::kWrite, pair_.ab.get(), src_mr_.get(), 0, 4096, 1, key.get(), 0));
  EXPECT_EQ(c.code, Code::kPermissionDenied) << c.error;
  Completion rd = Run(MakeOp(OpType::kRead, pair_.ab.get(), src_mr_.get(), 0, 64, 2, key.get()));
  EXPECT_EQ(rd.code, Code::kPermissionDenied) << rd.error;
  ExpectTargetUntouched();
}

TEST_F(TcpForged, OutOfBoundsOffsetIsOutOfRange) {
  RemoteRegion r = rw_->descriptor();
  r.length = 1ull << 40;  // the forger claims a huge region
  auto key = Import(r);
  Completion c = Run(MakeOp(OpType::kWrite, pair_.ab.get(), src_mr_.get(), 0, 4096, 1, key.get(),
                            (1 << 15) - 100));
  EXPECT_EQ(c.code, Code::kOutOfRange) << c.error;
  Completion far =
      Run(MakeOp(OpType::kWrite, pair_.ab.get(), src_mr_.get(), 0, 8, 2, key.get(), 1ull << 39));
  EXPECT_EQ(far.code, Code::kOutOfRange) << far.error;
  Completion rd =
      Run(MakeOp(OpType::kRead, pair_.ab.get(), src_mr_.get(), 0, 4096, 3, key.get(), 1 << 15));
  EXPECT_EQ(rd.code, Code::kOutOfRange) << rd.error;
  // Sparse: valid segments first, one bad segment last. Nothing may land.
  std::vector<Segment> segs;
  for (uint64_t i = 0; i < 50; ++i) segs.push_back({i * 16, i * 32, 16});
  segs.push_back({0, (1 << 15) - 4, 16});
  Op sw = MakeOp(OpType::kSparseWrite, pair_.ab.get(), src_mr_.get(), 0, 0, 4, key.get());
  sw.segments = segs.data();
  sw.num_segments = segs.size();
  Completion sc = Run(sw);
  EXPECT_EQ(sc.code, Code::kOutOfRange) << sc.error;
  ExpectTargetUntouched();
}

TEST_F(TcpForged, ReadOnlyRegionClaimedWritableIsPermissionDenied) {
  RemoteRegion r = ro_->descriptor();
  r.access = kAccessRemote;
  auto key = Import(r);
  Completion c =
      Run(MakeOp(OpType::kWrite, pair_.ab.get(), src_mr_.get(), 0, 1024, 1, key.get(), 0));
  EXPECT_EQ(c.code, Code::kPermissionDenied) << c.error;
  Segment seg{0, 0, 128};
  Op sw = MakeOp(OpType::kSparseWrite, pair_.ab.get(), src_mr_.get(), 0, 0, 2, key.get());
  sw.segments = &seg;
  sw.num_segments = 1;
  EXPECT_EQ(Run(sw).code, Code::kPermissionDenied);
  // Reading it is allowed.
  Completion rd =
      Run(MakeOp(OpType::kRead, pair_.ab.get(), src_mr_.get(), 0, 1024, 3, key.get(), 0));
  EXPECT_TRUE(rd.ok()) << rd.error;
  EXPECT_EQ(0, std::memcmp(src_.data(), target_.data() + (1 << 15), 1024));
  ExpectTargetUntouched();
}

TEST_F(TcpForged, DeregisteredRegionIsStale) {
  RemoteRegion r = rw_->descriptor();
  auto key = Import(r);
  Completion ok = Run(MakeOp(OpType::kRead, pair_.ab.get(), src_mr_.get(), 0, 64, 1, key.get()));
  EXPECT_TRUE(ok.ok()) << ok.error;
  rw_.reset();  // deregister
  Completion c =
      Run(MakeOp(OpType::kWrite, pair_.ab.get(), src_mr_.get(), 0, 1024, 2, key.get(), 0));
  EXPECT_EQ(c.code, Code::kStale) << c.error;
  Completion rd = Run(MakeOp(OpType::kRead, pair_.ab.get(), src_mr_.get(), 0, 64, 3, key.get()));
  EXPECT_EQ(rd.code, Code::kStale) << rd.error;
  // A new registration of the same memory gets a fresh key; the old one stays stale.
  auto again = Take(pair_.b->RegisterMemory(target_.data(), 1 << 15, kAccessRemote));
  EXPECT_NE(again->descriptor().rkey, r.rkey);
  Completion c2 =
      Run(MakeOp(OpType::kWrite, pair_.ab.get(), src_mr_.get(), 0, 1024, 4, key.get(), 0));
  EXPECT_EQ(c2.code, Code::kStale) << c2.error;
  ExpectTargetUntouched();
}

TEST_F(TcpForged, KeyFromAnotherBackendIsRejectedAtImport) {
  RemoteRegion r = rw_->descriptor();
  r.rkey.resize(20);
  auto k = pair_.ab->Import(r);
  EXPECT_EQ(k.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::tcp::testing
