// Connection establishment: listen on port 0, handshake contents, shared secrets, timeouts.
#include <future>

#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

TEST_P(Conformance, ConnectAcceptShowsRegionsAndInfo) {
  TransportOptions ao, bo;
  ao.hello_info = {'c', 'l', 'i', 'e', 'n', 't', 0, 255};
  bo.hello_info = {'s', 'e', 'r', 'v', 'e', 'r'};
  std::unique_ptr<Transport> a, b;
  ASSERT_OK_AND_ASSIGN(a, MakeTransport(config(), ao));
  ASSERT_OK_AND_ASSIGN(b, MakeTransport(config(), bo));
  EXPECT_EQ(a->name(), config().backend);
  Buffer abuf(8192), bbuf(3 * 4096);
  std::unique_ptr<MemoryRegion> amr, bmr1, bmr2;
  ASSERT_OK_AND_ASSIGN(amr, a->RegisterMemory(abuf.data(), 8192, kAccessRemoteRead));
  ASSERT_OK_AND_ASSIGN(bmr1, b->RegisterMemory(bbuf.data() + 1, 4096, kAccessRemote));
  ASSERT_OK_AND_ASSIGN(bmr2, b->RegisterMemory(bbuf.data() + 8192, 100, kAccessRemoteWrite));
  EXPECT_EQ(bmr1->data(), bbuf.data() + 1);
  EXPECT_EQ(bmr1->size(), 4096u);
  EXPECT_EQ(bmr1->descriptor().length, 4096u);
  EXPECT_EQ(bmr1->descriptor().access & kAccessRemote, uint32_t{kAccessRemote});
  EXPECT_EQ(bmr2->descriptor().access & kAccessRemote, uint32_t{kAccessRemoteWrite});
  a->Advertise({amr->descriptor()});
  b->Advertise({bmr1->descriptor(), bmr2->descriptor()});

  std::string address;
  ASSERT_OK_AND_ASSIGN(address, b->Listen("127.0.0.1:0"));
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(address, "127.0.0.1:0") << "Listen must return the port it bound";
  Connection c;
  ASSERT_OK_AND_ASSIGN(c, ConnectPair(*a, *b, address));
  EXPECT_TRUE(c.client->status().ok()) << c.client->status().ToString();
  EXPECT_TRUE(c.server->status().ok()) << c.server->status().ToString();
  EXPECT_FALSE(c.client->peer_address().empty());
  EXPECT_FALSE(c.server->peer_address().empty());
  ASSERT_EQ(c.client->peer_regions().size(), 2u);
  EXPECT_EQ(c.client->peer_regions()[0], bmr1->descriptor());
  EXPECT_EQ(c.client->peer_regions()[1], bmr2->descriptor());
  ASSERT_EQ(c.server->peer_regions().size(), 1u);
  EXPECT_EQ(c.server->peer_regions()[0], amr->descriptor());
  EXPECT_EQ(c.client->peer_info(), bo.hello_info);
  EXPECT_EQ(c.server->peer_info(), ao.hello_info);
  // Descriptors survive the encoding peers would use to pass them around.
  auto decoded = DecodeRemoteRegion(EncodeRemoteRegion(c.client->peer_regions()[0]));
  ASSERT_OK(decoded);
  EXPECT_EQ(*decoded, bmr1->descriptor());

  // Advertise() changes what later peers see; existing endpoints keep their list.
  b->Advertise({bmr2->descriptor()});
  Connection c2;
  ASSERT_OK_AND_ASSIGN(c2, ConnectPair(*a, *b, address));
  ASSERT_EQ(c2.client->peer_regions().size(), 1u);
  EXPECT_EQ(c2.client->peer_regions()[0], bmr2->descriptor());
  EXPECT_EQ(c.client->peer_regions().size(), 2u);
  EXPECT_NE(c.client->id(), c2.client->id());
  EXPECT_NE(c.server->id(), c2.server->id());
  c2.client->Close();
  c2.client->Close();  // idempotent
  c.client->Close();
}

// Runs one connection attempt with the given secrets; returns the client's and server's results.
struct Attempt {
  Result<std::shared_ptr<Endpoint>> client = Status(Code::kInternal, "not run");
  Result<std::shared_ptr<Endpoint>> server = Status(Code::kInternal, "not run");
};

Attempt TryConnect(Transport& a, Transport& b, const std::string& address, Millis accept_timeout) {
  Attempt at;
  auto accepted =
      std::async(std::launch::async, [&b, accept_timeout] { return b.Accept(accept_timeout); });
  at.client = a.Connect(address, Millis(10000));
  at.server = accepted.get();
  return at;
}

TEST_P(Conformance, SharedSecret) {
  TransportOptions with;
  with.secret = "correct horse battery staple";
  std::unique_ptr<Transport> server, good, bad, none;
  ASSERT_OK_AND_ASSIGN(server, MakeTransport(config(), with));
  ASSERT_OK_AND_ASSIGN(good, MakeTransport(config(), with));
  TransportOptions wrong;
  wrong.secret = "correct horse battery stapler";
  ASSERT_OK_AND_ASSIGN(bad, MakeTransport(config(), wrong));
  ASSERT_OK_AND_ASSIGN(none, MakeTransport(config(), TransportOptions()));
  Buffer buf(4096);
  std::unique_ptr<MemoryRegion> mr;
  ASSERT_OK_AND_ASSIGN(mr, server->RegisterMemory(buf.data(), 4096, kAccessRemote));
  server->Advertise({mr->descriptor()});
  std::string address;
  ASSERT_OK_AND_ASSIGN(address, server->Listen("127.0.0.1:0"));

  for (Transport* intruder : {bad.get(), none.get()}) {
    SCOPED_TRACE(intruder == bad.get() ? "wrong secret" : "no secret");
    Attempt at = TryConnect(*intruder, *server, address, Millis(1500));
    ASSERT_FALSE(at.client.ok()) << "a client with the wrong secret connected and saw "
                                 << at.client.value()->peer_regions().size() << " regions";
    EXPECT_EQ(at.client.status().code(), Code::kPermissionDenied) << StatusText(at.client);
    EXPECT_FALSE(at.server.ok()) << "the server accepted a client with the wrong secret";
  }
  // A server without a secret is refused by a client that has one.
  {
    std::unique_ptr<Transport> open_server;
    ASSERT_OK_AND_ASSIGN(open_server, MakeTransport(config(), TransportOptions()));
    std::string open_address;
    ASSERT_OK_AND_ASSIGN(open_address, open_server->Listen("127.0.0.1:0"));
    Attempt at = TryConnect(*good, *open_server, open_address, Millis(1500));
    EXPECT_FALSE(at.client.ok()) << "client connected to a server that cannot prove the secret";
    if (!at.client.ok()) {
      EXPECT_EQ(at.client.status().code(), Code::kPermissionDenied) << StatusText(at.client);
    }
    EXPECT_FALSE(at.server.ok());
  }
  // The refusals left the server healthy: the right secret still connects.
  Attempt ok = TryConnect(*good, *server, address, kConnectTimeout);
  ASSERT_OK(ok.client);
  ASSERT_OK(ok.server);
  ASSERT_EQ(ok.client.value()->peer_regions().size(), 1u);
  EXPECT_EQ(ok.client.value()->peer_regions()[0], mr->descriptor());
}

TEST_P(Conformance, ConnectAndAcceptTimeOutCleanly) {
  std::unique_ptr<Transport> a, b;
  ASSERT_OK_AND_ASSIGN(a, MakeTransport(config(), TransportOptions()));
  ASSERT_OK_AND_ASSIGN(b, MakeTransport(config(), TransportOptions()));
  std::string address;
  ASSERT_OK_AND_ASSIGN(address, b->Listen("127.0.0.1:0"));
  auto none = b->Accept(Millis(200));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kTimeout) << StatusText(none);
  // Nothing listens on the port of a listener that was destroyed.
  std::string dead_address = address;
  b.reset();
  auto refused = a->Connect(dead_address, Millis(3000));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().code(), Code::kOk);
  auto malformed = a->Connect("127.0.0.1", Millis(1000));
  EXPECT_FALSE(malformed.ok());
  auto bad_listen = a->Listen("127.0.0.1:99999");
  EXPECT_FALSE(bad_listen.ok());
  // Wait() returns when nothing happens.
  Status w = a->Wait(Millis(50));
  EXPECT_TRUE(w.ok() || w.code() == Code::kTimeout) << w.ToString();
}

}  // namespace
}  // namespace ferry::testing
