// ferry_test_peer: the far side of multi-process conformance cases (see tests/common/peer.h).
// Exit codes: 0 after its lifetime, 2 on bad arguments, 3 when setup or connect fails.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/pattern.h"
#include "transport/transport.h"

namespace {

using ferry::Millis;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string backend;
  std::map<std::string, std::string> params;
  std::string connect;
  uint64_t region_bytes = 1 << 20;
  uint64_t seed = 1;
  long peer_timeout_ms = 5000;
  std::string mode = "serve";
  long lifetime_ms = 120000;
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend") {
      a->backend = v;
    } else if (k == "--param") {
      size_t eq = v.find('=');
      if (eq == std::string::npos) return false;
      a->params[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (k == "--connect") {
      a->connect = v;
    } else if (k == "--region-bytes") {
      a->region_bytes = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--seed") {
      a->seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--peer-timeout-ms") {
      a->peer_timeout_ms = std::strtol(v.c_str(), nullptr, 10);
    } else if (k == "--mode") {
      a->mode = v;
    } else if (k == "--lifetime-ms") {
      a->lifetime_ms = std::strtol(v.c_str(), nullptr, 10);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && !a->backend.empty() && !a->connect.empty() && a->region_bytes > 0 &&
         (a->mode == "serve" || a->mode == "write");
}

int Fail(const std::string& what, const ferry::Status& s) {
  std::fprintf(stderr, "ferry_test_peer: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: ferry_test_peer --backend NAME [--param K=V]... --connect HOST:PORT "
                 "[--region-bytes N] [--seed S] [--peer-timeout-ms T] [--mode serve|write] "
                 "[--lifetime-ms L]\n");
    return 2;
  }
  ferry::TransportOptions opts;
  opts.params = a.params;
  opts.peer_timeout = Millis(a.peer_timeout_ms);
  opts.progress_thread = true;
  auto transport = ferry::CreateTransport(a.backend, opts);
  if (!transport.ok()) return Fail("create " + a.backend, transport.status());
  ferry::Transport& t = **transport;
  ferry::testing::Buffer buf(a.region_bytes);
  ferry::testing::FillPattern(buf.data(), buf.size(), a.seed);
  auto region = t.RegisterMemory(buf.data(), buf.size(), ferry::kAccessRemote);
  if (!region.ok()) return Fail("register", region.status());
  t.Advertise({(*region)->descriptor()});
  auto ep = t.Connect(a.connect, Millis(30000));
  if (!ep.ok()) return Fail("connect " + a.connect, ep.status());

  std::unique_ptr<ferry::RemoteKey> key;
  if (a.mode == "write" && !(*ep)->peer_regions().empty()) {
    auto k = (*ep)->Import((*ep)->peer_regions().front());
    if (!k.ok()) return Fail("import", k.status());
    key = std::move(*k);
  }
  const uint64_t chunk =
      key ? std::min<uint64_t>({uint64_t{4} << 20, key->region().length, buf.size()}) : 0;
  const auto deadline = Clock::now() + Millis(a.lifetime_ms);
  int in_flight = 0;
  bool writing = key != nullptr && t.capabilities().write && chunk > 0;
  std::vector<ferry::Completion> done(16);
  while (Clock::now() < deadline) {
    while (writing && in_flight < 4) {
      ferry::Op op;
      op.type = ferry::OpType::kWrite;
      op.ep = ep->get();
      op.local = region->get();
      op.length = chunk;
      op.remote = key.get();
      if (!t.Post({&op, 1}).ok()) {
        writing = false;
        break;
      }
      ++in_flight;
    }
    size_t n = t.Poll(done);
    for (size_t i = 0; i < n; ++i) {
      if (done[i].type != ferry::OpType::kWrite) continue;
      --in_flight;
      if (!done[i].ok()) writing = false;
    }
    if (n == 0 && !writing) (void)t.Wait(Millis(100));
  }
  key.reset();
  (*ep)->Close();
  ep->reset();
  region->reset();
  return 0;
}
