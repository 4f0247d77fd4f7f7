// Helpers for the UCX-specific tests: configurations, connected pairs, completion reaping.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tests/common/ops.h"
#include "transport/transport.h"

namespace ferry::ucx_test {

struct UcxConfig {
  const char* name;
  std::map<std::string, std::string> params;
};

// The configurations the conformance suite runs; these exact UCX_TLS strings must work.
inline std::vector<UcxConfig> Configs() {
  return {{"shm", {{"UCX_TLS", "shm,self"}}}, {"tcp", {{"UCX_TLS", "tcp,self"}}}};
}

inline void PrintTo(const UcxConfig& c, std::ostream* os) {
  *os << c.name;
}

inline TransportOptions Options(const UcxConfig& c, Millis peer_timeout = Millis(3000)) {
  TransportOptions o;
  o.params = c.params;
  o.peer_timeout = peer_timeout;
  return o;
}

// Polls every transport in `drive` (to make progress on both sides of an in-process pair)
// until `target` has produced `n` completions or `timeout` passes.
inline std::vector<Completion> Reap(Transport& target, size_t n, std::vector<Transport*> drive = {},
                                    Millis timeout = Millis(20000)) {
  std::vector<Completion> got;
  std::vector<Completion> buf(64);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    // Other transports only need progress (Wait(0) drives it once and keeps their
    // completions queued for their own Poll).
    for (Transport* t : drive) {
      if (t != &target) (void)t->Wait(Millis(0));
    }
    size_t k = target.Poll(std::span<Completion>(buf.data(), std::min(buf.size(), n - got.size())));
    for (size_t i = 0; i < k; ++i) got.push_back(std::move(buf[i]));
  }
  return got;
}

// A connected in-process pair: `server` accepted `server_ep`, `client` connected `client_ep`.
struct Pair {
  std::unique_ptr<Transport> server;
  std::unique_ptr<Transport> client;
  std::shared_ptr<Endpoint> server_ep;
  std::shared_ptr<Endpoint> client_ep;
};

inline Result<Pair> Connect(const TransportOptions& server_opts,
                            const TransportOptions& client_opts) {
  Pair p;
  FERRY_ASSIGN_OR_RETURN(p.server, CreateTransport("ucx", server_opts));
  FERRY_ASSIGN_OR_RETURN(p.client, CreateTransport("ucx", client_opts));
  FERRY_ASSIGN_OR_RETURN(std::string addr, p.server->Listen("127.0.0.1:0"));
  Transport* server = p.server.get();
  auto accepted =
      std::async(std::launch::async, [server] { return server->Accept(Millis(20000)); });
  auto c = p.client->Connect(addr, Millis(20000));
  auto s = accepted.get();
  if (!c.ok()) return c.status();
  if (!s.ok()) return s.status();
  p.client_ep = *c;
  p.server_ep = *s;
  return p;
}

}  // namespace ferry::ucx_test
