// The handshake state machine (transport/handshake.h), driven frame by frame in memory. Besides
// the happy paths, these tests play a hostile peer: wrong or missing secrets, replayed proofs,
// forged frames, version/backend mismatches and garbage, and check that nothing about regions
// leaves a side that has not seen a valid proof.
#include "transport/handshake.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/common/print.h"
#include "transport/schema/wire_generated.h"

namespace ferry {
namespace {

using Frame = std::vector<uint8_t>;

RemoteRegion MakeRegion(uint64_t addr, uint8_t key_byte) {
  RemoteRegion r;
  r.addr = addr;
  r.length = 4096;
  r.access = kAccessRemote;
  r.epoch = 3;
  r.rkey = {key_byte, 0x01, 0x02, 0x03};
  return r;
}

HelloParams Params(const std::string& backend, const std::string& secret, uint8_t tag) {
  HelloParams p;
  p.backend = backend;
  p.secret = secret;
  p.regions = {MakeRegion(0x1000u * tag, tag), MakeRegion(0x2000u * tag, tag + 1)};
  p.info = {tag, 'i', 'n', 'f', 'o'};
  p.transport_data = {tag, 't', 'd'};
  p.max_message_size = 1000u + tag;
  p.max_segments = 50u + tag;
  return p;
}

wire::Body BodyOf(const Frame& f) {
  flatbuffers::Verifier v(f.data(), f.size());
  if (!wire::VerifyFrameBuffer(v)) return wire::Body::NONE;
  return wire::GetFrame(f.data())->body_type();
}

// Delivers frames between the two sides until neither has anything to send. A side stops
// receiving after its first error (as a backend would drop the connection).
struct Exchange {
  Status client_status;
  Status server_status;
  std::vector<Frame> client_sent;
  std::vector<Frame> server_sent;

  size_t Count(const std::vector<Frame>& frames, wire::Body body) const {
    size_t n = 0;
    for (const Frame& f : frames) n += BodyOf(f) == body;
    return n;
  }
};

Exchange Pump(Handshake& client, Handshake& server) {
  Exchange ex;
  bool moved = true;
  while (moved) {
    moved = false;
    while (std::optional<Frame> f = client.TakeOutgoing()) {
      moved = true;
      ex.client_sent.push_back(*f);
      if (ex.server_status.ok()) ex.server_status = server.OnFrame(*f);
    }
    while (std::optional<Frame> f = server.TakeOutgoing()) {
      moved = true;
      ex.server_sent.push_back(*f);
      if (ex.client_status.ok()) ex.client_status = client.OnFrame(*f);
    }
  }
  return ex;
}

Frame HelloFrame(uint32_t magic, uint16_t version, const std::string& backend,
                 std::vector<uint8_t> nonce, std::vector<uint8_t> proof = {}) {
  flatbuffers::FlatBufferBuilder b;
  auto h = wire::CreateHello(b, magic, version, b.CreateString(backend), b.CreateVector(nonce),
                             b.CreateVector(proof));
  b.Finish(wire::CreateFrame(b, wire::Body::Hello, h.Union()));
  return Frame(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

Frame WelcomeFrame(std::vector<uint8_t> proof, const RemoteRegion& region) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<wire::Region>> regions = {wire::CreateRegion(
      b, region.addr, region.length, region.access, region.epoch, b.CreateVector(region.rkey))};
  auto w = wire::CreateWelcome(b, b.CreateVector(proof), b.CreateVector(regions),
                               b.CreateVector(std::vector<uint8_t>{1}),
                               b.CreateVector(std::vector<uint8_t>{}), 10, 10);
  b.Finish(wire::CreateFrame(b, wire::Body::Welcome, w.Union()));
  return Frame(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

constexpr uint32_t kMagic = 0x59525246;

void ExpectConnected(const Exchange& ex, const Handshake& client, const Handshake& server,
                     const HelloParams& cp, const HelloParams& sp) {
  ASSERT_TRUE(ex.client_status.ok()) << ex.client_status.ToString();
  ASSERT_TRUE(ex.server_status.ok()) << ex.server_status.ToString();
  ASSERT_TRUE(client.done());
  ASSERT_TRUE(server.done());
  EXPECT_EQ(client.peer().regions, sp.regions);
  EXPECT_EQ(client.peer().info, sp.info);
  EXPECT_EQ(client.peer().transport_data, sp.transport_data);
  EXPECT_EQ(client.peer().max_message_size, sp.max_message_size);
  EXPECT_EQ(client.peer().max_segments, sp.max_segments);
  EXPECT_EQ(server.peer().regions, cp.regions);
  EXPECT_EQ(server.peer().info, cp.info);
  EXPECT_EQ(server.peer().transport_data, cp.transport_data);
  EXPECT_EQ(server.peer().max_message_size, cp.max_message_size);
  EXPECT_EQ(server.peer().max_segments, cp.max_segments);
  // Four frames: Hello, Hello, Welcome, Welcome.
  EXPECT_EQ(ex.client_sent.size(), 2u);
  EXPECT_EQ(ex.server_sent.size(), 2u);
  EXPECT_EQ(ex.Count(ex.client_sent, wire::Body::Reject), 0u);
  EXPECT_EQ(ex.Count(ex.server_sent, wire::Body::Reject), 0u);
}

TEST(HandshakeTest, WithoutSecretExchangesRegionsInfoAndLimits) {
  HelloParams cp = Params("tcp", "", 1), sp = Params("tcp", "", 7);
  Handshake client(Handshake::Role::kClient, cp), server(Handshake::Role::kServer, sp);
  Exchange ex = Pump(client, server);
  ExpectConnected(ex, client, server, cp, sp);
}

TEST(HandshakeTest, WithSameSecretConnects) {
  HelloParams cp = Params("ucx", "s3cret", 1), sp = Params("ucx", "s3cret", 7);
  Handshake client(Handshake::Role::kClient, cp), server(Handshake::Role::kServer, sp);
  Exchange ex = Pump(client, server);
  ExpectConnected(ex, client, server, cp, sp);
}

TEST(HandshakeTest, EmptyRegionListIsFine) {
  HelloParams cp = Params("tcp", "", 1), sp = Params("tcp", "", 2);
  cp.regions.clear();
  sp.info.clear();
  Handshake client(Handshake::Role::kClient, cp), server(Handshake::Role::kServer, sp);
  Exchange ex = Pump(client, server);
  ExpectConnected(ex, client, server, cp, sp);
}

// A refused handshake: both sides report kPermissionDenied, neither is done, and no Welcome
// (the only frame that carries regions or info) left either side.
void ExpectRefusedBeforeRegions(const std::string& client_secret,
                                const std::string& server_secret) {
  SCOPED_TRACE("client secret '" + client_secret + "', server secret '" + server_secret + "'");
  Handshake client(Handshake::Role::kClient, Params("tcp", client_secret, 1));
  Handshake server(Handshake::Role::kServer, Params("tcp", server_secret, 2));
  Exchange ex = Pump(client, server);
  EXPECT_EQ(ex.client_status.code(), Code::kPermissionDenied) << ex.client_status.ToString();
  EXPECT_EQ(ex.server_status.code(), Code::kPermissionDenied) << ex.server_status.ToString();
  EXPECT_FALSE(client.done());
  EXPECT_FALSE(server.done());
  EXPECT_EQ(ex.Count(ex.client_sent, wire::Body::Welcome), 0u);
  EXPECT_EQ(ex.Count(ex.server_sent, wire::Body::Welcome), 0u);
  EXPECT_TRUE(client.peer().regions.empty());
  EXPECT_TRUE(server.peer().regions.empty());
  EXPECT_TRUE(client.peer().info.empty());
  EXPECT_TRUE(server.peer().info.empty());
  // The secret itself never travels.
  for (const auto* frames : {&ex.client_sent, &ex.server_sent}) {
    for (const Frame& f : *frames) {
      for (const std::string& s : {client_secret, server_secret}) {
        if (s.empty()) continue;
        std::string bytes(f.begin(), f.end());
        EXPECT_EQ(bytes.find(s), std::string::npos) << "secret '" << s << "' sent in clear";
      }
    }
  }
}

TEST(HandshakeTest, WrongSecretIsRefusedOnBothSides) {
  ExpectRefusedBeforeRegions("alpha-secret", "bravo-secret");
  ExpectRefusedBeforeRegions("", "bravo-secret");
  ExpectRefusedBeforeRegions("alpha-secret", "");
}

// A client that ignores the server's proof and sends a Welcome with a made-up proof: the server
// refuses it and sends back a Reject, never its own Welcome.
TEST(HandshakeTest, ServerRefusesForgedClientProof) {
  for (const std::vector<uint8_t>& forged :
       {std::vector<uint8_t>{}, std::vector<uint8_t>(32, 0), std::vector<uint8_t>(31, 7)}) {
    Handshake server(Handshake::Role::kServer, Params("tcp", "s3cret", 2));
    std::vector<uint8_t> nonce(16, 0x42);
    ASSERT_TRUE(server.OnFrame(HelloFrame(kMagic, kProtocolVersion, "tcp", nonce)).ok());
    std::optional<Frame> hello = server.TakeOutgoing();
    ASSERT_TRUE(hello.has_value());
    EXPECT_EQ(BodyOf(*hello), wire::Body::Hello);
    Status s = server.OnFrame(WelcomeFrame(forged, MakeRegion(0x9000, 9)));
    EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
    EXPECT_FALSE(server.done());
    EXPECT_TRUE(server.peer().regions.empty()) << "regions accepted from an unproven client";
    std::optional<Frame> reply = server.TakeOutgoing();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(BodyOf(*reply), wire::Body::Reject);
    EXPECT_FALSE(server.TakeOutgoing().has_value());
  }
}

// A client proof recorded from one session is useless in the next: the server's nonce changes.
TEST(HandshakeTest, ReplayedClientProofIsRefused) {
  HelloParams cp = Params("tcp", "s3cret", 1), sp = Params("tcp", "s3cret", 2);
  Handshake client(Handshake::Role::kClient, cp), server(Handshake::Role::kServer, sp);
  Exchange ex = Pump(client, server);
  ExpectConnected(ex, client, server, cp, sp);

  Handshake server2(Handshake::Role::kServer, sp);
  ASSERT_TRUE(server2.OnFrame(ex.client_sent[0]).ok());  // replayed Hello
  ASSERT_TRUE(server2.TakeOutgoing().has_value());
  Status s = server2.OnFrame(ex.client_sent[1]);  // replayed Welcome
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_FALSE(server2.done());
  std::optional<Frame> reply = server2.TakeOutgoing();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(BodyOf(*reply), wire::Body::Reject);
}

TEST(HandshakeTest, NoncesDifferBetweenSessions) {
  Handshake a(Handshake::Role::kClient, Params("tcp", "", 1));
  Handshake b(Handshake::Role::kClient, Params("tcp", "", 1));
  std::optional<Frame> fa = a.TakeOutgoing(), fb = b.TakeOutgoing();
  ASSERT_TRUE(fa && fb);
  EXPECT_NE(*fa, *fb);
}

TEST(HandshakeTest, BackendMismatchIsAProtocolError) {
  Handshake client(Handshake::Role::kClient, Params("tcp", "", 1));
  Handshake server(Handshake::Role::kServer, Params("ucx", "", 2));
  Exchange ex = Pump(client, server);
  EXPECT_EQ(ex.server_status.code(), Code::kProtocol);
  EXPECT_NE(ex.server_status.message().find("backend"), std::string::npos)
      << ex.server_status.message();
  EXPECT_EQ(ex.client_status.code(), Code::kProtocol) << ex.client_status.ToString();
  EXPECT_FALSE(client.done());
  EXPECT_FALSE(server.done());
  EXPECT_EQ(ex.Count(ex.server_sent, wire::Body::Welcome), 0u);
  EXPECT_EQ(ex.Count(ex.client_sent, wire::Body::Welcome), 0u);
}

TEST(HandshakeTest, VersionMismatchIsRefusedBySeverAndClient) {
  const std::vector<uint8_t> nonce(16, 1);
  {
    Handshake server(Handshake::Role::kServer, Params("tcp", "", 2));
    Status s = server.OnFrame(HelloFrame(kMagic, kProtocolVersion + 1, "tcp", nonce));
    EXPECT_EQ(s.code(), Code::kProtocol);
    EXPECT_NE(s.message().find("version"), std::string::npos) << s.message();
    std::optional<Frame> reply = server.TakeOutgoing();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(BodyOf(*reply), wire::Body::Reject);
  }
  {
    Handshake client(Handshake::Role::kClient, Params("tcp", "", 1));
    ASSERT_TRUE(client.TakeOutgoing().has_value());
    Status s = client.OnFrame(HelloFrame(kMagic, 0, "tcp", nonce));
    EXPECT_EQ(s.code(), Code::kProtocol);
    EXPECT_FALSE(client.done());
    std::optional<Frame> reply = client.TakeOutgoing();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(BodyOf(*reply), wire::Body::Reject);
  }
}

TEST(HandshakeTest, BadMagicAndBadNonceAreRefused) {
  Handshake s1(Handshake::Role::kServer, Params("tcp", "", 2));
  EXPECT_EQ(s1.OnFrame(HelloFrame(0x12345678, kProtocolVersion, "tcp", std::vector<uint8_t>(16, 1)))
                .code(),
            Code::kProtocol);
  for (size_t len : {0, 15, 17, 1000}) {
    Handshake s2(Handshake::Role::kServer, Params("tcp", "", 2));
    Status s =
        s2.OnFrame(HelloFrame(kMagic, kProtocolVersion, "tcp", std::vector<uint8_t>(len, 1)));
    EXPECT_EQ(s.code(), Code::kProtocol) << "nonce of " << len << " bytes";
  }
}

TEST(HandshakeTest, UnexpectedFrameOrderIsRefused) {
  // A server that receives a Welcome before any Hello.
  Handshake server(Handshake::Role::kServer, Params("tcp", "", 2));
  Status s = server.OnFrame(WelcomeFrame({}, MakeRegion(1, 1)));
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_TRUE(server.peer().regions.empty());
  // A client that receives a Welcome instead of the server's Hello.
  Handshake client(Handshake::Role::kClient, Params("tcp", "", 1));
  ASSERT_TRUE(client.TakeOutgoing().has_value());
  s = client.OnFrame(WelcomeFrame({}, MakeRegion(1, 1)));
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_TRUE(client.peer().regions.empty());
  // A region descriptor is not a handshake frame.
  Handshake server2(Handshake::Role::kServer, Params("tcp", "", 2));
  EXPECT_EQ(server2.OnFrame(EncodeRemoteRegion(MakeRegion(1, 1))).code(), Code::kProtocol);
}

TEST(HandshakeTest, FramesAfterDoneOrFailureAreErrors) {
  HelloParams cp = Params("tcp", "", 1), sp = Params("tcp", "", 2);
  Handshake client(Handshake::Role::kClient, cp), server(Handshake::Role::kServer, sp);
  Exchange ex = Pump(client, server);
  ExpectConnected(ex, client, server, cp, sp);
  EXPECT_FALSE(server.OnFrame(ex.client_sent[1]).ok());
  EXPECT_FALSE(client.OnFrame(ex.server_sent[1]).ok());
  EXPECT_TRUE(server.done());

  Handshake failed(Handshake::Role::kServer, sp);
  EXPECT_FALSE(failed.OnFrame(std::vector<uint8_t>{1, 2, 3}).ok());
  Status again = failed.OnFrame(ex.client_sent[0]);
  EXPECT_FALSE(again.ok());
  EXPECT_FALSE(failed.done());
}

TEST(HandshakeTest, RejectFromPeerEndsHandshake) {
  flatbuffers::FlatBufferBuilder b;
  auto rej = wire::CreateReject(b, b.CreateString("server is full"));
  b.Finish(wire::CreateFrame(b, wire::Body::Reject, rej.Union()));
  Frame reject(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  Handshake client(Handshake::Role::kClient, Params("tcp", "", 1));
  ASSERT_TRUE(client.TakeOutgoing().has_value());
  Status s = client.OnFrame(reject);
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("server is full"), std::string::npos) << s.message();
  EXPECT_FALSE(client.done());
  // Reject with no reason at all.
  flatbuffers::FlatBufferBuilder e;
  auto bare = wire::CreateReject(e);
  e.Finish(wire::CreateFrame(e, wire::Body::Reject, bare.Union()));
  Handshake server(Handshake::Role::kServer, Params("tcp", "", 2));
  EXPECT_FALSE(
      server.OnFrame(Frame(e.GetBufferPointer(), e.GetBufferPointer() + e.GetSize())).ok());
}

TEST(HandshakeTest, GarbageAndOversizeFramesAreProtocolErrors) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) {
    Handshake server(Handshake::Role::kServer, Params("tcp", "", 2));
    Frame junk(rng() % 200);
    for (auto& x : junk) x = static_cast<uint8_t>(rng());
    Status s = server.OnFrame(junk);
    ASSERT_FALSE(s.ok()) << "random frame " << i << " accepted";
    ASSERT_EQ(s.code(), Code::kProtocol) << s.ToString();
    EXPECT_TRUE(server.peer().regions.empty());
  }
  Handshake server(Handshake::Role::kServer, Params("tcp", "", 2));
  Frame huge = HelloFrame(kMagic, kProtocolVersion, "tcp", std::vector<uint8_t>(16, 1));
  huge.resize(kMaxHandshakeFrame + 1, 0);
  Status s = server.OnFrame(huge);
  EXPECT_EQ(s.code(), Code::kProtocol);
  std::optional<Frame> reply = server.TakeOutgoing();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(BodyOf(*reply), wire::Body::Reject);
}

// Bit flips in every frame of a real exchange: the handshake must end in an error or in a state
// where every value either side accepted came from the genuine peer frames (flips in value bytes
// like limits may go through; flips in proofs may not).
TEST(HandshakeTest, BitFlippedFramesNeverCrash) {
  HelloParams cp = Params("tcp", "s3cret", 1), sp = Params("tcp", "s3cret", 2);
  Handshake c0(Handshake::Role::kClient, cp), s0(Handshake::Role::kServer, sp);
  Exchange good = Pump(c0, s0);
  ASSERT_TRUE(good.client_status.ok() && good.server_status.ok());
  const Frame& welcome = good.client_sent[1];
  size_t refused = 0;
  for (size_t bit = 0; bit < welcome.size() * 8; bit += 3) {
    // Replay the genuine Hello exchange with a fresh server, then a flipped Welcome. The proof
    // is bound to the server nonce, so the replayed Welcome is refused as a whole; what matters
    // is that no flip crashes or gets regions accepted.
    Handshake server(Handshake::Role::kServer, sp);
    ASSERT_TRUE(server.OnFrame(good.client_sent[0]).ok());
    Frame flipped = welcome;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    Status s = server.OnFrame(flipped);
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(server.peer().regions.empty());
    refused += !s.ok();
  }
  EXPECT_GT(refused, 0u);
}

}  // namespace
}  // namespace ferry
