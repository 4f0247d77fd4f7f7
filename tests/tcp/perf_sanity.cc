// Throughput and latency sanity run of the tcp backend over 127.0.0.1, printed next to a plain
// socket baseline measured the same way in the same process (an iperf3/sockperf stand-in).
// Asserts correctness only, never a time: the machine is shared and noisy.
#include <atomic>
#include <thread>

#include "tests/tcp/tcp_test_util.h"

namespace ferry::tcp::testing {
namespace {

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Plain blocking sockets: one stream of 1 MiB send()s, and an 8-byte ping-pong.
struct Baseline {
  double gbps = 0;
  double rtt_us = 0;
};

Baseline MeasureSockets(size_t bytes, int pings) {
  Baseline b;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  socklen_t len = sizeof(sa);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
  listen(lfd, 1);
  std::thread server([&] {
    int fd = accept(lfd, nullptr, nullptr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::vector<uint8_t> buf(1 << 20);
    size_t got = 0;
    while (got < bytes) {
      ssize_t r = recv(fd, buf.data(), buf.size(), 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    uint8_t ack = 1;
    send(fd, &ack, 1, 0);
    uint8_t ping[8];
    for (int i = 0; i < pings; ++i) {
      if (recv(fd, ping, 8, MSG_WAITALL) != 8) break;
      send(fd, ping, 8, 0);
    }
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  std::vector<uint8_t> buf(1 << 20, 1);
  auto start = Clock::now();
  for (size_t sent = 0; sent < bytes; sent += buf.size()) send(fd, buf.data(), buf.size(), 0);
  uint8_t ack;
  recv(fd, &ack, 1, MSG_WAITALL);
  b.gbps = static_cast<double>(bytes) / Seconds(Clock::now() - start) / 1e9;
  uint8_t ping[8] = {};
  start = Clock::now();
  for (int i = 0; i < pings; ++i) {
    send(fd, ping, 8, 0);
    recv(fd, ping, 8, MSG_WAITALL);
  }
  b.rtt_us = Seconds(Clock::now() - start) / pings * 1e6;
  close(fd);
  server.join();
  close(lfd);
  return b;
}

TEST(TcpPerfSanity, WriteBandwidthAndPingPongLatency) {
  constexpr size_t kMsg = 1 << 20;
  constexpr int kWrites = 1024;  // 1 GiB
  constexpr int kWindow = 16;
  constexpr int kPings = 10000;
  TransportOptions o;
  if (const char* b = std::getenv("FERRY_TCP_BUF")) o.params = {{"sndbuf", b}, {"rcvbuf", b}};
  Pair p = ConnectPair(o, o);
  ASSERT_NE(p.ab, nullptr);
  // Like iperf3, every write reuses one 1 MiB buffer on each side (same cache footprint as the
  // socket baseline); the window keeps kWindow writes in flight.
  std::vector<uint8_t> src(kMsg), dst(kMsg, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + i / 4096);
  auto src_mr = Take(p.a->RegisterMemory(src.data(), src.size(), kAccessLocal));
  auto dst_mr = Take(p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemote));
  auto key = Take(p.ab->Import(dst_mr->descriptor()));

  // The server side only drives progress (and echoes pings in the second phase).
  std::atomic<bool> stop{false};
  std::vector<uint8_t> pong(8), ping(8);
  auto pong_mr = Take(p.b->RegisterMemory(pong.data(), 8, kAccessLocal));
  auto ping_mr = Take(p.a->RegisterMemory(ping.data(), 8, kAccessLocal));
  std::thread server([&] {
    Op recv = MakeOp(OpType::kRecv, p.ba.get(), pong_mr.get(), 0, 8, 1);
    EXPECT_TRUE(p.b->Post({&recv, 1}).ok());
    Completion c[16];
    while (!stop.load(std::memory_order_relaxed)) {
      (void)p.b->Wait(Millis(50));  // blocks in epoll_wait: the machine may be oversubscribed
      size_t n = p.b->Poll(c);
      for (size_t k = 0; k < n; ++k) {
        if (c[k].type != OpType::kRecv) continue;
        Op ops[2] = {MakeOp(OpType::kSend, p.ba.get(), pong_mr.get(), 0, 8, 2),
                     MakeOp(OpType::kRecv, p.ba.get(), pong_mr.get(), 0, 8, 1)};
        EXPECT_TRUE(p.b->Post(ops).ok());
      }
    }
  });

  int posted = 0, completed = 0;
  Completion c[64];
  auto start = Clock::now();
  while (completed < kWrites) {
    while (posted < kWrites && posted - completed < kWindow) {
      const uint64_t off = 0;
      Op w = MakeOp(OpType::kWrite, p.ab.get(), src_mr.get(), off, kMsg, posted, key.get(), off);
      ASSERT_TRUE(p.a->Post({&w, 1}).ok());
      ++posted;
    }
    (void)p.a->Wait(Millis(50));
    size_t n = p.a->Poll(c);
    for (size_t k = 0; k < n; ++k) ASSERT_TRUE(c[k].ok()) << c[k].error;
    completed += static_cast<int>(n);
  }
  const double gbps = static_cast<double>(kWrites) * kMsg / Seconds(Clock::now() - start) / 1e9;
  EXPECT_TRUE(dst == src);

  start = Clock::now();
  for (int i = 0; i < kPings; ++i) {
    Op ops[2] = {MakeOp(OpType::kRecv, p.ab.get(), ping_mr.get(), 0, 8, 3),
                 MakeOp(OpType::kSend, p.ab.get(), ping_mr.get(), 0, 8, 4)};
    ASSERT_TRUE(p.a->Post(ops).ok());
    bool got = false;
    while (!got) {
      (void)p.a->Wait(Millis(50));
      size_t n = p.a->Poll(c);
      for (size_t k = 0; k < n; ++k) {
        ASSERT_TRUE(c[k].ok()) << c[k].error;
        got = got || c[k].type == OpType::kRecv;
      }
    }
  }
  const double rtt_us = Seconds(Clock::now() - start) / kPings * 1e6;
  stop = true;
  server.join();

  Baseline base = MeasureSockets(static_cast<size_t>(kWrites) * kMsg, kPings);
  std::printf("tcp backend: 1 MiB writes %.2f GB/s (sockets %.2f GB/s, ratio %.2f)\n", gbps,
              base.gbps, gbps / base.gbps);
  std::printf(
      "tcp backend: 8 B ping-pong RTT %.1f us, half %.1f us (sockets RTT %.1f us, "
      "ratio %.2f)\n",
      rtt_us, rtt_us / 2, base.rtt_us, rtt_us / base.rtt_us);
  RecordProperty("write_gbps", std::to_string(gbps));
  RecordProperty("pingpong_rtt_us", std::to_string(rtt_us));
}

}  // namespace
}  // namespace ferry::tcp::testing
