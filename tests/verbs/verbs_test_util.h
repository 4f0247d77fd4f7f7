// Helpers shared by the verbs tests (verbs_test.cc, reg_cache_test.cc): the skip when no RDMA
// device is active, and two transports of this process connected to each other.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>

#include "transport/transport.h"

namespace ferry::verbs_test {

// Whether the verbs backend found an active device here.
inline bool HaveRdma() {
  auto b = ListBackends();
  return !b.empty() && b.front().name == "verbs" && b.front().available;
}

// Skips the calling test (gtest) unless HaveRdma().
#define REQUIRE_RDMA()                                                            \
  do {                                                                            \
    if (!::ferry::verbs_test::HaveRdma())                                         \
      GTEST_SKIP() << "no active RDMA device: run under tools/softroce/ferry-vm"; \
  } while (0)

struct TransportPair {
  std::unique_ptr<Transport> server, client;
  std::shared_ptr<Endpoint> s_ep, c_ep;
};

// Connects p->client to p->server listening on `host`:0 (Accept runs on a helper thread).
// Failures are recorded with EXPECT and leave the endpoints null; blocks up to ~20 s.
inline void ConnectTransports(TransportPair* p, const std::string& host) {
  auto addr = p->server->Listen(host + ":0");
  EXPECT_TRUE(addr.ok()) << addr.status().ToString();
  if (!addr.ok()) return;
  auto accepted = std::async(std::launch::async, [&] { return p->server->Accept(Millis(20000)); });
  auto ep = p->client->Connect(*addr, Millis(20000));
  auto sep = accepted.get();
  EXPECT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(sep.ok()) << sep.status().ToString();
  if (ep.ok()) p->c_ep = *ep;
  if (sep.ok()) p->s_ep = *sep;
}

}  // namespace ferry::verbs_test
