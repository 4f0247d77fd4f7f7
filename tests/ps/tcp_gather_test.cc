// A pull over the real tcp backend: the server gathers the rows of a key list into Segments and
// ships them with ONE sparse write straight from the registered rows buffer (no packing). Then
// the rows buffer grows: the old descriptor's epoch is refused with kStale by the store, and a
// one-sided read through the old key is refused by the transport instead of returning bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "ps/store/array_hash_map.h"
#include "transport/transport.h"

namespace ferry::ps {
namespace {

using namespace std::chrono_literals;

Result<Completion> WaitOne(Transport& t) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  Completion c;
  while (std::chrono::steady_clock::now() < deadline) {
    if (t.Poll(std::span<Completion>(&c, 1)) == 1) return c;
    Status s = t.Wait(Millis(100));
    if (!s.ok() && s.code() != Code::kTimeout) return s;
  }
  return Timeout("no completion within 20 s");
}

TEST(TcpGather, SparseWritePullAndStaleDescriptor) {
  TransportOptions opts;
  opts.progress_thread = true;
  auto server_t = CreateTransport("tcp", opts);
  if (!server_t.ok()) {
    GTEST_SKIP() << "tcp backend unavailable in this build: " << server_t.status().ToString();
  }
  auto client_t = CreateTransport("tcp", opts);
  ASSERT_TRUE(client_t.ok()) << client_t.status().ToString();
  Transport& server = **server_t;
  Transport& client = **client_t;

  TableOptions o;
  o.dim = 8;
  o.initial_rows = 64;
  auto table = std::move(ArrayHashMap::Create(o).value());
  ASSERT_TRUE(table->AttachTransport(&server, kAccessRemoteRead).ok());
  for (uint64_t k = 0; k < 1000; ++k) {
    auto r = table->Insert(k * 101);
    ASSERT_TRUE(r.ok());
    for (uint32_t d = 0; d < 8; ++d) table->Embedding(r->row)[d] = static_cast<float>(k * 8 + d);
    ArrayHashMap::MarkUpdated(r->row);
  }
  const uint64_t epoch = table->epoch();

  // The client (a worker) owns a dense receive buffer and advertises it.
  constexpr size_t kKeys = 300;
  const uint64_t slot_bytes = 8 * 4 + 4;  // version + embedding
  std::vector<uint8_t> recv(kKeys * slot_bytes, 0xee);
  auto recv_mr = client.RegisterMemory(recv.data(), recv.size(), kAccessRemoteWrite);
  ASSERT_TRUE(recv_mr.ok()) << recv_mr.status().ToString();
  client.Advertise({(*recv_mr)->descriptor()});
  server.Advertise({table->descriptor()});
  auto addr = client.Listen("127.0.0.1:0");
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  auto ep = server.Connect(*addr, Millis(10000));
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  auto client_ep = client.Accept(Millis(10000));
  ASSERT_TRUE(client_ep.ok()) << client_ep.status().ToString();
  ASSERT_EQ((*ep)->peer_regions().size(), 1u);
  auto remote = (*ep)->Import((*ep)->peer_regions()[0]);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();

  // Pull: the request carries the epoch the worker knows; the server checks it, then gathers.
  ASSERT_TRUE(table->CheckEpoch(epoch).ok());
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < kKeys; ++i) keys.push_back(((i * 7) % 1000) * 101);
  keys[5] = 999999;  // absent: no segment, destination left untouched
  std::vector<Segment> segs;
  std::vector<size_t> missing;
  ASSERT_TRUE(
      table->RowSegments(keys, RowField::kVersionedEmbedding, 0, slot_bytes, &segs, &missing).ok());
  ASSERT_EQ(missing, std::vector<size_t>{5});
  Op op;
  op.type = OpType::kSparseWrite;
  op.ep = ep->get();
  op.local = table->region();
  op.remote = remote->get();
  op.segments = segs.data();
  op.num_segments = segs.size();
  op.context = 7;
  ASSERT_TRUE(server.Post(std::span<const Op>(&op, 1)).ok());
  auto done = WaitOne(server);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_TRUE(done->ok()) << done->error;
  EXPECT_EQ(done->bytes, (kKeys - 1) * slot_bytes);
  for (size_t i = 0; i < kKeys; ++i) {
    const uint8_t* at = recv.data() + i * slot_bytes;
    if (i == 5) {
      EXPECT_EQ(at[0], 0xee);
      continue;
    }
    uint32_t version;
    std::memcpy(&version, at, 4);
    ASSERT_EQ(version, 1u) << i;
    float first;
    std::memcpy(&first, at + 4, 4);
    ASSERT_EQ(first, static_cast<float>(((i * 7) % 1000) * 8)) << i;
  }

  // The worker also imported the rows region (the server advertised it) for one-sided reads.
  ASSERT_EQ((*client_ep)->peer_regions().size(), 1u);
  const RemoteRegion old_desc = (*client_ep)->peer_regions()[0];
  EXPECT_EQ(old_desc.epoch, epoch) << "the epoch travels in the advertised descriptor";
  auto old_key = (*client_ep)->Import(table->descriptor());
  ASSERT_TRUE(old_key.ok()) << old_key.status().ToString();

  // Growth: the rows move and are registered again under a new epoch.
  for (uint64_t k = 0; k < 5000; ++k) ASSERT_TRUE(table->Insert((1ull << 50) + k).ok());
  ASSERT_GT(table->epoch(), epoch);
  Status stale = table->CheckEpoch(epoch);
  EXPECT_EQ(stale.code(), Code::kStale) << stale.ToString();
  if (client.capabilities().target_checks) {
    Op read;
    read.type = OpType::kRead;
    read.ep = client_ep->get();
    read.local = recv_mr->get();
    read.length = 16;
    read.remote = old_key->get();
    read.remote_offset = 0;
    ASSERT_TRUE(client.Post(std::span<const Op>(&read, 1)).ok());
    auto c = WaitOne(client);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE(c->ok()) << "a read through a deregistered key must fail, not return bytes";
  }
  (*ep)->Close();
  (*client_ep)->Close();
  remote->reset();
  old_key->reset();
  recv_mr->reset();
  table->DetachTransport();
}

}  // namespace
}  // namespace ferry::ps
