// Scale and concurrency: hundreds of endpoints in one process, two threads posting and polling
// on one transport at once, and capability flags checked against behaviour.
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "tests/conformance/harness.h"

namespace ferry::testing {
namespace {

TEST_P(Conformance, ManyEndpointsEachExchangeAMessage) {
  constexpr size_t kEndpoints = 256;
  std::unique_ptr<Transport> a, b;
  ASSERT_OK_AND_ASSIGN(a, MakeTransport(config(), TransportOptions()));
  ASSERT_OK_AND_ASSIGN(b, MakeTransport(config(), TransportOptions()));
  FERRY_REQUIRE_CAP(a->capabilities(), send_recv);
  Buffer abuf(kEndpoints * 64), bbuf(kEndpoints * 64);
  std::unique_ptr<MemoryRegion> amr, bmr;
  ASSERT_OK_AND_ASSIGN(amr, a->RegisterMemory(abuf.data(), abuf.size(), kAccessLocal));
  ASSERT_OK_AND_ASSIGN(bmr, b->RegisterMemory(bbuf.data(), bbuf.size(), kAccessLocal));
  std::string address;
  ASSERT_OK_AND_ASSIGN(address, b->Listen("127.0.0.1:0"));

  std::vector<std::shared_ptr<Endpoint>> clients, servers;
  Status accept_status;
  std::thread acceptor([&] {
    for (size_t i = 0; i < kEndpoints; ++i) {
      auto ep = b->Accept(kConnectTimeout);
      if (!ep.ok()) {
        accept_status = ep.status().Annotate("accept #" + std::to_string(i));
        return;
      }
      servers.push_back(std::move(ep).value());
    }
  });
  Status connect_status;
  for (size_t i = 0; i < kEndpoints && connect_status.ok(); ++i) {
    auto ep = a->Connect(address, kConnectTimeout);
    if (!ep.ok()) {
      connect_status = ep.status().Annotate("connect #" + std::to_string(i));
      break;
    }
    clients.push_back(std::move(ep).value());
  }
  acceptor.join();
  ASSERT_OK(connect_status);
  ASSERT_OK(accept_status);
  ASSERT_EQ(servers.size(), kEndpoints);
  std::set<uint64_t> ids;
  for (const auto& ep : clients) ids.insert(ep->id());
  EXPECT_EQ(ids.size(), kEndpoints) << "endpoint ids are not unique";

  // Every client sends its number; every server endpoint echoes what it got (+1000) back.
  std::vector<Op> ops;
  for (size_t i = 0; i < kEndpoints; ++i) {
    ops.push_back(RecvOp(servers[i].get(), bmr.get(), i * 64, 32, i));
  }
  ASSERT_OK(b->Post(ops));
  ops.clear();
  for (size_t i = 0; i < kEndpoints; ++i) {
    ops.push_back(RecvOp(clients[i].get(), amr.get(), i * 64 + 32, 32, 10000 + i));
  }
  ASSERT_OK(a->Post(ops));
  ops.clear();
  for (size_t i = 0; i < kEndpoints; ++i) {
    uint64_t v = i;
    std::memcpy(abuf.data() + i * 64, &v, 8);
    ops.push_back(SendOp(clients[i].get(), amr.get(), i * 64, 8, 20000 + i));
  }
  ASSERT_OK(a->Post(ops));
  Poller poller({a.get(), b.get()});
  for (size_t i = 0; i < kEndpoints; ++i) {
    Completion c;
    ASSERT_TRUE(poller.Await(b.get(), i, &c));
    ASSERT_TRUE(c.ok()) << "server endpoint " << i << ": " << c.error;
    ASSERT_EQ(c.bytes, 8u);
    uint64_t v = 0;
    std::memcpy(&v, bbuf.data() + i * 64, 8);
    ASSERT_LT(v, kEndpoints);
    v += 1000;
    std::memcpy(bbuf.data() + i * 64 + 8, &v, 8);
    Op echo = SendOp(servers[i].get(), bmr.get(), i * 64 + 8, 8, 30000 + i);
    ASSERT_OK(b->Post({&echo, 1}));
  }
  for (size_t i = 0; i < kEndpoints; ++i) {
    Completion c;
    ASSERT_TRUE(poller.Await(a.get(), 10000 + i, &c));
    ASSERT_TRUE(c.ok()) << "client endpoint " << i << ": " << c.error;
    uint64_t v = 0;
    std::memcpy(&v, abuf.data() + i * 64 + 32, 8);
    EXPECT_EQ(v, i + 1000) << "client " << i << " got another endpoint's reply";
    ASSERT_TRUE(poller.Await(a.get(), 20000 + i, &c));
    EXPECT_TRUE(c.ok()) << c.error;
    ASSERT_TRUE(poller.Await(b.get(), 30000 + i, &c));
    EXPECT_TRUE(c.ok()) << c.error;
  }
  for (auto& ep : clients) ep->Close();
}

// Two threads post and poll on the same transport at once; completions go to whichever thread
// polls, so they are accounted in one shared table.
TEST_P(Conformance, TwoThreadsPostAndPollOneTransport) {
  Pair p;
  PairOptions po;
  constexpr uint64_t kOps = 300, kLen = 16384 + 3;
  po.a_bytes = 2 * kOps * kLen;
  po.b_bytes = 2 * kOps * kLen;
  po.b_progress_thread = true;
  ASSERT_NO_FATAL_FAILURE(MakePair(&p, po));
  const Capabilities& caps = p.a->capabilities();
  FERRY_REQUIRE_CAP(caps, write);
  FERRY_REQUIRE_CAP(caps, read);
  FillPattern(p.a_mem(), kOps * kLen, 21);                             // thread 0 writes this
  FillPattern(p.b_mem() + kOps * kLen, kOps * kLen, 22, kOps * kLen);  // thread 1 reads this

  std::mutex mu;
  std::vector<int> done(2 * kOps, 0);
  std::atomic<uint64_t> completed{0}, errors{0};
  std::atomic<bool> stop{false};
  std::string first_error;
  auto worker = [&](int id) {
    uint64_t posted = 0;
    Completion out[16];
    const auto deadline = Clock::now() + kOpTimeout;
    while (completed.load() < 2 * kOps && !stop.load()) {
      // Up to 8 of this thread's ops in flight (approximately: completions may be reaped by the
      // other thread).
      if (posted < kOps && posted < completed.load() / 2 + 8) {
        const uint64_t off = (id * kOps + posted) * kLen;
        Op op =
            id == 0
                ? WriteOp(p.a_ep(), p.a_mr.get(), off, p.b_key.get(), off, kLen, id * kOps + posted)
                : ReadOp(p.a_ep(), p.a_mr.get(), off, p.b_key.get(), off, kLen, id * kOps + posted);
        Status s = p.a->Post({&op, 1});
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.empty()) first_error = "post: " + s.ToString();
          stop = true;
          return;
        }
        ++posted;
      }
      size_t n = p.a->Poll(out);
      for (size_t i = 0; i < n; ++i) {
        std::lock_guard<std::mutex> lock(mu);
        if (out[i].context < done.size()) ++done[out[i].context];
        if (!out[i].ok()) {
          ++errors;
          if (first_error.empty()) first_error = out[i].error;
        }
        ++completed;
      }
      if (Clock::now() > deadline) {
        stop = true;
        return;
      }
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(completed.load(), 2 * kOps) << first_error;
  EXPECT_EQ(errors.load(), 0u) << first_error;
  for (size_t i = 0; i < done.size(); ++i) {
    ASSERT_EQ(done[i], 1) << "op " << i << " completed " << done[i] << " times";
  }
  EXPECT_TRUE(SameBytes("written by thread 0", p.b_mem(), p.a_mem(), kOps * kLen));
  EXPECT_TRUE(CheckPattern(p.a_mem() + kOps * kLen, kOps * kLen, 22, kOps * kLen))
      << "read by thread 1";
}

// Every capability flag either works (a minimal op succeeds) or is refused at Post with
// kUnsupported; limits in TransportOptions are enforced.
TEST_P(Conformance, CapabilitiesMatchBehaviour) {
  Pair p;
  PairOptions po;
  po.a_options.max_segments = 16;
  po.b_options.max_segments = 16;
  ASSERT_NO_FATAL_FAILURE(MakePair(&p, po));
  const Capabilities caps = p.a->capabilities();
  EXPECT_GT(caps.max_message_size, 0u);
  if (caps.sparse_write || caps.sparse_read) {
    EXPECT_GT(caps.max_segments, 0u);
  }
  Poller poller = PollerFor(p);
  Segment seg{0, 0, 8};
  auto run = [&](const char* what, bool capable, const Op& op, Transport* t) {
    Status s = t->Post({&op, 1});
    if (!capable) {
      EXPECT_EQ(s.code(), Code::kUnsupported) << what << " is not a capability: " << s.ToString();
      return;
    }
    ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
    Completion c;
    ASSERT_TRUE(poller.Await(t, op.context, &c));
    EXPECT_TRUE(c.ok()) << what << ": " << c.error;
  };
  if (caps.send_recv) ASSERT_OK(p.b->Post({{RecvOp(p.b_ep(), p.b_mr.get(), 0, 8, 1)}}));
  run("send", caps.send_recv, SendOp(p.a_ep(), p.a_mr.get(), 0, 8, 2), p.a.get());
  if (caps.send_recv) {
    Completion c;
    ASSERT_TRUE(poller.Await(p.b.get(), 1, &c));
  }
  run("write", caps.write, WriteOp(p.a_ep(), p.a_mr.get(), 0, p.b_key.get(), 0, 8, 3), p.a.get());
  run("read", caps.read, ReadOp(p.a_ep(), p.a_mr.get(), 0, p.b_key.get(), 0, 8, 4), p.a.get());
  run("sparse write", caps.sparse_write,
      SparseOp(OpType::kSparseWrite, p.a_ep(), p.a_mr.get(), p.b_key.get(), &seg, 1, 5), p.a.get());
  run("sparse read", caps.sparse_read,
      SparseOp(OpType::kSparseRead, p.a_ep(), p.a_mr.get(), p.b_key.get(), &seg, 1, 6), p.a.get());
  if (caps.write) {
    Op n = WriteOp(p.a_ep(), p.a_mr.get(), 0, p.b_key.get(), 0, 8, 7);
    n.flags = kOpNotify;
    run("write with notify", caps.notify, n, p.a.get());
    if (caps.notify) {
      Completion c;
      ASSERT_TRUE(poller.AwaitNotify(p.b.get(), &c));
    }
  }
  if (caps.send_recv) {
    Op shared = RecvOp(nullptr, p.b_mr.get(), 0, 8, 8);
    Status s = p.b->Post({&shared, 1});
    if (caps.shared_recv) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (s.ok()) {
        ASSERT_OK(p.a->Post({{SendOp(p.a_ep(), p.a_mr.get(), 0, 8, 9)}}));
        Completion c;
        ASSERT_TRUE(poller.Await(p.b.get(), 8, &c));
        EXPECT_TRUE(c.ok()) << c.error;
        EXPECT_EQ(c.ep, p.b_ep());
      }
    } else {
      EXPECT_FALSE(s.ok()) << "shared receive posted without the capability";
    }
  }
  Op notify_op = WriteOp(p.a_ep(), p.a_mr.get(), 0, p.b_key.get(), 0, 8, 10);
  notify_op.type = OpType::kNotify;
  EXPECT_EQ(p.a->Post({&notify_op, 1}).code(), Code::kInvalidArgument);

  // max_segments = 16 in the options: 17 segments fail, at Post or on completion.
  if (caps.sparse_write) {
    std::vector<Segment> segs(17);
    for (size_t i = 0; i < segs.size(); ++i) segs[i] = {i * 8, i * 8, 8};
    Op op =
        SparseOp(OpType::kSparseWrite, p.a_ep(), p.a_mr.get(), p.b_key.get(), segs.data(), 16, 11);
    run("16 segments", true, op, p.a.get());
    op.num_segments = 17;
    op.context = 12;
    Status s = p.a->Post({&op, 1});
    if (s.ok()) {
      Completion c;
      ASSERT_TRUE(poller.Await(p.a.get(), 12, &c));
      EXPECT_FALSE(c.ok()) << "17 segments accepted with max_segments = 16";
    } else {
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    }
  }
}

}  // namespace
}  // namespace ferry::testing
