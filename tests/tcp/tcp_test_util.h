// Helpers for the tcp backend's own tests: connected transport pairs, a completion driver that
// progresses several transports at once, and a raw-socket peer that speaks the handshake by hand
// (to play a hostile or silent peer).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/ops.h"
#include "transport/handshake.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace ferry::tcp::testing {

using Clock = std::chrono::steady_clock;

// The value of a Result that the test expects to be ok.
template <typename T>
T Take(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

inline std::unique_ptr<Transport> MakeTcp(TransportOptions o = {}) {
  auto t = CreateTransport("tcp", o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

struct Pair {
  std::unique_ptr<Transport> a;  // client
  std::unique_ptr<Transport> b;  // server
  std::shared_ptr<Endpoint> ab;  // a's endpoint to b
  std::shared_ptr<Endpoint> ba;  // b's endpoint to a
};

// Connects a fresh client `a` to a fresh listening server `b` over 127.0.0.1.
inline Pair ConnectPair(TransportOptions oa = {}, TransportOptions ob = {}) {
  Pair p;
  p.a = MakeTcp(oa);
  p.b = MakeTcp(ob);
  auto addr = p.b->Listen("127.0.0.1:0");
  EXPECT_TRUE(addr.ok()) << addr.status().ToString();
  auto accepted = std::async(std::launch::async, [&] { return p.b->Accept(Millis(10000)); });
  auto ep = p.a->Connect(*addr, Millis(10000));
  auto server_ep = accepted.get();
  EXPECT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(server_ep.ok()) << server_ep.status().ToString();
  if (ep.ok()) p.ab = *ep;
  if (server_ep.ok()) p.ba = *server_ep;
  return p;
}

// Progresses every transport it knows and keeps each one's completions in its own inbox.
class Driver {
 public:
  explicit Driver(std::vector<Transport*> ts) : ts_(std::move(ts)), inbox_(ts_.size()) {}

  void PollAll() {
    Completion buf[64];
    for (size_t i = 0; i < ts_.size(); ++i) {
      size_t n = ts_[i]->Poll(buf);
      for (size_t k = 0; k < n; ++k) inbox_[i].push_back(std::move(buf[k]));
    }
  }
  // The next completion of transport `which`, or nullopt after `timeout`.
  std::optional<Completion> Next(size_t which, Millis timeout = Millis(20000)) {
    const auto deadline = Clock::now() + timeout;
    while (inbox_[which].empty()) {
      if (Clock::now() > deadline) return std::nullopt;
      PollAll();
    }
    Completion c = std::move(inbox_[which].front());
    inbox_[which].pop_front();
    return c;
  }
  std::deque<Completion>& inbox(size_t which) { return inbox_[which]; }

 private:
  std::vector<Transport*> ts_;
  std::vector<std::deque<Completion>> inbox_;
};

// A blocking raw socket that connects to a tcp transport and can run the handshake by hand.
class RawPeer {
 public:
  ~RawPeer() {
    if (fd_ >= 0) close(fd_);
  }
  bool Connect(const std::string& address) {
    const size_t colon = address.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  }
  bool SendAll(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      ssize_t w = send(fd_, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  // Reads exactly n bytes; false on EOF/error/timeout.
  bool RecvAll(void* data, size_t n, Millis timeout = Millis(10000)) {
    auto* p = static_cast<uint8_t*>(data);
    const auto deadline = Clock::now() + timeout;
    while (n > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
      if (left <= 0 || poll(&pfd, 1, static_cast<int>(left)) <= 0) return false;
      ssize_t r = recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  // True once the transport has closed its side (EOF or reset) within the timeout.
  bool SeesClose(Millis timeout = Millis(10000)) {
    const auto deadline = Clock::now() + timeout;
    uint8_t buf[4096];
    while (Clock::now() < deadline) {
      pollfd pfd{fd_, POLLIN, 0};
      if (poll(&pfd, 1, 50) <= 0) continue;
      ssize_t r = recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0) return true;
    }
    return false;
  }
  // Runs the client side of the handshake; the peer's Welcome is kept in peer().
  Status Handshake(HelloParams params) {
    params.backend = "tcp";
    ferry::Handshake hs(ferry::Handshake::Role::kClient, std::move(params));
    for (;;) {
      while (auto f = hs.TakeOutgoing()) {
        uint32_t len = static_cast<uint32_t>(f->size());
        if (!SendAll(&len, 4) || !SendAll(f->data(), f->size())) {
          return PeerFailure("raw send failed");
        }
      }
      if (hs.done()) {
        peer_ = hs.peer();
        return Status::Ok();
      }
      uint32_t len = 0;
      if (!RecvAll(&len, 4)) return PeerFailure("raw recv failed");
      std::vector<uint8_t> frame(len);
      if (!RecvAll(frame.data(), len)) return PeerFailure("raw recv failed");
      FERRY_RETURN_IF_ERROR(hs.OnFrame(frame));
    }
  }
  bool SendHeader(const FrameHeader& h) {
    uint8_t buf[kHeaderSize];
    EncodeHeader(h, buf);
    return SendAll(buf, sizeof(buf));
  }
  bool RecvHeader(FrameHeader* h, Millis timeout = Millis(10000)) {
    uint8_t buf[kHeaderSize];
    if (!RecvAll(buf, sizeof(buf), timeout)) return false;
    *h = DecodeHeader(buf);
    return true;
  }
  const PeerHello& peer() const { return peer_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  PeerHello peer_;
};

// Client-side handshake parameters that a real tcp transport accepts.
inline HelloParams RawHello(std::vector<RemoteRegion> regions = {}) {
  HelloParams p;
  p.backend = "tcp";
  p.regions = std::move(regions);
  p.max_message_size = 1ull << 30;
  p.max_segments = 1u << 20;
  return p;
}

using ferry::testing::MakeOp;  // tests/common/ops.h

}  // namespace ferry::tcp::testing
