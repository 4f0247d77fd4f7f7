// Two-sided messages: integrity and ordering over many sizes in both directions, the shared
// receive queue, and a message larger than the posted buffer.
#include <algorithm>
#include <cstring>

#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

constexpr uint8_t kFill = 0xEE;

std::vector<uint64_t> MessageSizes(uint64_t max) {
  static constexpr uint64_t kSizes[] = {
      0,      1,    2,    3,    7,    8,     9,     63,    64,    65,     511,
      1000,   4095, 4096, 4097, 8191, 65535, 65536, 65537, 99999, 262144, (1 << 20) - 1,
      1 << 20};
  std::vector<uint64_t> sizes;
  for (uint64_t s : kSizes) {
    if (s <= max) sizes.push_back(s);
  }
  return sizes;
}

// Slot i of a message area: each message gets its own range plus 3 bytes of slack that must stay
// untouched, at an odd offset.
std::vector<uint64_t> SlotOffsets(const std::vector<uint64_t>& sizes, uint64_t* total) {
  std::vector<uint64_t> offs;
  uint64_t off = 1;
  for (uint64_t s : sizes) {
    offs.push_back(off);
    off += s + 3 + 2;
  }
  *total = off;
  return offs;
}

TEST_P(Conformance, MessagesKeepOrderAndIntegrityBothWays) {
  Pair p;
  PairOptions po;
  po.a_bytes = 8u << 20;
  po.b_bytes = 8u << 20;
  ASSERT_NO_FATAL_FAILURE(MakePair(&p, po));
  FERRY_REQUIRE_CAP(p.a->capabilities(), send_recv);
  const std::vector<uint64_t> sizes = MessageSizes(p.a->capabilities().max_message_size);
  uint64_t area = 0;
  const std::vector<uint64_t> offs = SlotOffsets(sizes, &area);
  ASSERT_LE(2 * area, po.a_bytes);
  // Layout on each side: [0, area) receive slots, [area, 2*area) send slots.
  std::memset(p.a_mem(), kFill, area);
  std::memset(p.b_mem(), kFill, area);
  auto seed = [](int dir, size_t i) { return uint64_t(dir) * 1000 + i + 17; };
  std::vector<Op> a_ops, b_ops;
  for (size_t i = 0; i < sizes.size(); ++i) {
    // Capacity: exact for even slots, with 3 bytes to spare for odd ones.
    const uint64_t cap = sizes[i] + (i % 2 ? 3 : 0);
    a_ops.push_back(RecvOp(p.a_ep(), p.a_mr.get(), offs[i], cap, 1000 + i));
    b_ops.push_back(RecvOp(p.b_ep(), p.b_mr.get(), offs[i], cap, 1000 + i));
  }
  ASSERT_OK(p.a->Post(a_ops));
  ASSERT_OK(p.b->Post(b_ops));
  a_ops.clear();
  b_ops.clear();
  for (size_t i = 0; i < sizes.size(); ++i) {
    FillPattern(p.a_mem() + area + offs[i], sizes[i], seed(0, i));  // A -> B
    FillPattern(p.b_mem() + area + offs[i], sizes[i], seed(1, i));  // B -> A
    a_ops.push_back(SendOp(p.a_ep(), p.a_mr.get(), area + offs[i], sizes[i], 2000 + i));
    b_ops.push_back(SendOp(p.b_ep(), p.b_mr.get(), area + offs[i], sizes[i], 2000 + i));
  }
  ASSERT_OK(p.a->Post(a_ops));
  ASSERT_OK(p.b->Post(b_ops));
  Poller poller = PollerFor(p);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " bytes");
    for (int dir = 0; dir < 2; ++dir) {
      Transport* sender = dir == 0 ? p.a.get() : p.b.get();
      Transport* receiver = dir == 0 ? p.b.get() : p.a.get();
      uint8_t* rmem = dir == 0 ? p.b_mem() : p.a_mem();
      Endpoint* from = dir == 0 ? p.b_ep() : p.a_ep();
      Completion c;
      ASSERT_TRUE(poller.Await(sender, 2000 + i, &c));
      EXPECT_TRUE(c.ok()) << c.error;
      EXPECT_EQ(c.type, OpType::kSend);
      ASSERT_TRUE(poller.Await(receiver, 1000 + i, &c));
      ASSERT_TRUE(c.ok()) << CodeName(c.code) << ": " << c.error;
      EXPECT_EQ(c.type, OpType::kRecv);
      EXPECT_EQ(c.bytes, sizes[i]);
      EXPECT_EQ(c.ep, from);
      // The i-th receive holds the i-th message: order and content in one check.
      EXPECT_TRUE(CheckPattern(rmem + offs[i], sizes[i], seed(dir, i)));
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(rmem[offs[i] + sizes[i] + k], kFill) << "byte after the message overwritten";
      }
    }
  }
}

// Many small messages in flight at once still arrive in posting order.
TEST_P(Conformance, ManySmallMessagesArriveInOrder) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(&p));
  FERRY_REQUIRE_CAP(p.a->capabilities(), send_recv);
  constexpr size_t kCount = 2000, kSize = 24;
  std::vector<Op> recvs, sends;
  for (size_t i = 0; i < kCount; ++i) {
    recvs.push_back(RecvOp(p.b_ep(), p.b_mr.get(), i * kSize, kSize, i));
    FillPattern(p.a_mem() + i * kSize, kSize, 5000 + i);
    sends.push_back(SendOp(p.a_ep(), p.a_mr.get(), i * kSize, kSize, i));
  }
  ASSERT_OK(p.b->Post(recvs));
  // Posted in batches of varying length to exercise batching.
  for (size_t i = 0; i < kCount;) {
    size_t n = std::min<size_t>(1 + i % 37, kCount - i);
    ASSERT_OK(p.a->Post({sends.data() + i, n}));
    i += n;
  }
  Poller poller = PollerFor(p);
  for (size_t i = 0; i < kCount; ++i) {
    Completion c;
    ASSERT_TRUE(poller.Await(p.b.get(), i, &c));
    ASSERT_TRUE(c.ok()) << c.error;
    ASSERT_EQ(c.bytes, kSize);
    ASSERT_TRUE(CheckPattern(p.b_mem() + i * kSize, kSize, 5000 + i)) << "receive " << i;
    ASSERT_TRUE(poller.Await(p.a.get(), i, &c));
    ASSERT_TRUE(c.ok()) << c.error;
  }
}

TEST_P(Conformance, SharedReceiveQueueNamesTheSender) {
  std::unique_ptr<Transport> a, b;
  ASSERT_OK_AND_ASSIGN(a, MakeTransport(config(), TransportOptions()));
  ASSERT_OK_AND_ASSIGN(b, MakeTransport(config(), TransportOptions()));
  FERRY_REQUIRE_CAP(b->capabilities(), shared_recv);
  FERRY_REQUIRE_CAP(b->capabilities(), send_recv);
  Buffer abuf(1 << 16), bbuf(1 << 16);
  std::unique_ptr<MemoryRegion> amr, bmr;
  ASSERT_OK_AND_ASSIGN(amr, a->RegisterMemory(abuf.data(), abuf.size(), kAccessLocal));
  ASSERT_OK_AND_ASSIGN(bmr, b->RegisterMemory(bbuf.data(), bbuf.size(), kAccessLocal));
  std::string address;
  ASSERT_OK_AND_ASSIGN(address, b->Listen("127.0.0.1:0"));
  constexpr size_t kConns = 3, kPerConn = 4, kSize = 100;
  std::vector<Connection> conns(kConns);
  for (size_t i = 0; i < kConns; ++i) {
    ASSERT_OK_AND_ASSIGN(conns[i], ConnectPair(*a, *b, address));
  }
  std::vector<Op> recvs;
  for (size_t i = 0; i < kConns * kPerConn; ++i) {
    recvs.push_back(RecvOp(nullptr, bmr.get(), i * 128, 128, 100 + i));
  }
  ASSERT_OK(b->Post(recvs));
  // Message (conn c, number k) carries pattern seed 10*c + k, its first byte overwritten with c.
  std::vector<Op> sends;
  for (size_t c = 0; c < kConns; ++c) {
    for (size_t k = 0; k < kPerConn; ++k) {
      uint64_t off = (c * kPerConn + k) * 128;
      FillPattern(abuf.data() + off, kSize, 10 * c + k);
      abuf.data()[off] = static_cast<uint8_t>(c);
      sends.push_back(SendOp(conns[c].client.get(), amr.get(), off, kSize, off));
    }
  }
  ASSERT_OK(a->Post(sends));
  Poller poller({a.get(), b.get()});
  std::vector<size_t> next(kConns, 0);
  for (size_t i = 0; i < kConns * kPerConn; ++i) {
    Completion c;
    ASSERT_TRUE(poller.Await(b.get(), 100 + i, &c));
    ASSERT_TRUE(c.ok()) << c.error;
    ASSERT_EQ(c.bytes, kSize);
    const uint8_t* msg = bbuf.data() + i * 128;
    const size_t conn = msg[0];
    ASSERT_LT(conn, kConns);
    EXPECT_EQ(c.ep, conns[conn].server.get()) << "completion names the wrong sender";
    // Per sender, messages keep their order even through the shared queue.
    const size_t k = next[conn]++;
    EXPECT_TRUE(CheckPattern(msg + 1, kSize - 1, 10 * conn + k, 1)) << "conn " << conn;
  }
  for (const Op& s : sends) {
    Completion c;
    ASSERT_TRUE(poller.Await(a.get(), s.context, &c));
    EXPECT_TRUE(c.ok()) << c.error;
  }
}

TEST_P(Conformance, MessageLargerThanReceiveBufferIsOutOfRange) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(&p));
  FERRY_REQUIRE_CAP(p.a->capabilities(), send_recv);
  std::memset(p.b_mem(), kFill, 4096);
  ASSERT_OK(p.b->Post({{RecvOp(p.b_ep(), p.b_mr.get(), 0, 100, 1)}}));
  FillPattern(p.a_mem(), 200, 9);
  ASSERT_OK(p.a->Post({{SendOp(p.a_ep(), p.a_mr.get(), 0, 200, 2)}}));
  Poller poller = PollerFor(p);
  Completion c;
  ASSERT_TRUE(poller.Await(p.b.get(), 1, &c));
  EXPECT_EQ(c.code, Code::kOutOfRange) << c.error;
  EXPECT_FALSE(c.error.empty());
  for (size_t k = 100; k < 4096; ++k) {
    ASSERT_EQ(p.b_mem()[k], kFill) << "byte " << k << " past the receive buffer was written";
  }
  ASSERT_TRUE(poller.Await(p.a.get(), 2, &c));  // completes, successfully or not
}

}  // namespace
}  // namespace ferry::testing
