// ferry_test_peer: the far side of multi-process conformance cases (see tests/common/peer.h).
// Exit codes: 0 after its lifetime, 2 on bad arguments, 3 when setup or connect fails, 4 when
// the process that spawned it (FERRY_TEST_PEER_PARENT) is already gone.
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/pattern.h"
#include "tests/common/peer.h"
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

ferry::Status GuardPeerParent() {
  const char* env = std::getenv(ferry::testing::kPeerParentEnv);
  if (env == nullptr || *env == '\0') return ferry::Status::Ok();
  char* end = nullptr;
  const long expected = std::strtol(env, &end, 10);
  if (*end != '\0' || expected <= 0) {
    return ferry::InvalidArgument(std::string(ferry::testing::kPeerParentEnv) + " is not a pid: '" +
                                  env + "'");
  }
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    return ferry::IoError("prctl(PR_SET_PDEATHSIG)", errno);
  }
  // The parent may have died before prctl took effect: we were then reparented.
  if (getppid() != static_cast<pid_t>(expected)) {
    return ferry::PeerFailure("the spawning process " + std::string(env) + " is gone");
  }
  return ferry::Status::Ok();
}

int Fail(const std::string& what, const ferry::Status& s) {
  std::fprintf(stderr, "ferry_test_peer: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  // First: the guard that used to run between fork and exec in the spawning process.
  if (ferry::Status g = GuardPeerParent(); !g.ok()) {
    std::fprintf(stderr, "ferry_test_peer: %s\n", g.ToString().c_str());
    return 4;
  }
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
  // 1 MiB writes inside the soft-RoCE VM, as the conformance peer-kill case posts there
  // (tests/conformance/failure_test.cc says why).
  const uint64_t most = uint64_t{std::getenv("FERRY_VM") != nullptr ? 1u : 4u} << 20;
  const uint64_t chunk = key ? std::min<uint64_t>({most, key->region().length, buf.size()}) : 0;
  const auto connected_at = Clock::now();
  const auto deadline = connected_at + Millis(a.lifetime_ms);
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
      if (ferry::Status s = t.Post({&op, 1}); !s.ok()) {
        std::fprintf(stderr, "ferry_test_peer: post failed: %s\n", s.ToString().c_str());
        writing = false;
        break;
      }
      ++in_flight;
    }
    size_t n = t.Poll(done);
    for (size_t i = 0; i < n; ++i) {
      if (done[i].type != ferry::OpType::kWrite) continue;
      --in_flight;
      if (!done[i].ok() && writing) {
        // The test only sees the connection drop; say here, on its stderr, why it dropped.
        writing = false;
        std::fprintf(stderr, "ferry_test_peer: write failed %lld ms after connect: %s %s\n",
                     static_cast<long long>(
                         std::chrono::duration_cast<Millis>(Clock::now() - connected_at).count()),
                     std::string(ferry::CodeName(done[i].code)).c_str(), done[i].error.c_str());
      }
    }
    if (n == 0 && !writing) (void)t.Wait(Millis(100));
  }
  key.reset();
  (*ep)->Close();
  ep->reset();
  region->reset();
  return 0;
}
