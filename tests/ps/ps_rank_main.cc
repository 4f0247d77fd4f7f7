// ps_rank: one rank of a small parameter-server job, for the failure tests (failure_test.cc) and
// for trying failures by hand under a launcher:
//
//   ferry-launch --servers 2 --workers 2 --transport tcp --
//       ps_rank --consistency bsp --seconds 10 --die-rank 3 --die-after-ms 1000 --die-how kill
//
// Every rank calls ps::Node::Start with the same JobSpec: one table, small rings, the cluster
// shape from the launcher's environment (FERRY_SERVERS/FERRY_WORKERS/FERRY_TRANSPORT/
// FERRY_ROLE_RULE, as ferry-ps-bench reads it: ps::ReadLaunchShape/ApplyLaunchShape), else from
// --servers/--workers or half the ranks. Workers loop pull -> (compute) -> push -> Clock() until
// --seconds have passed since the start barrier, then Finish(); servers serve until the job ends.
//
// Faults:
//   --die-rank R --die-after-ms T --die-how kill|exit|stop
//       rank R, whatever its roles (rank 0 hosts the coordinator), raises SIGKILL, calls _exit(42)
//       or raises SIGSTOP (a silent, hung process) T ms after the start barrier; or, with
//       --die-how term, raises SIGTERM (with --elastic 1 a server rank's graceful leave: its
//       shards move to the other servers and it ends ok).
//   --elastic 1 --shards Q: an elastic job (JobSpec::elastic) of Q shards.
//   With --replicas 2 every shard has two copies and rank 1 runs a standby coordinator: killing
//   rank 0 (the coordinator and server 0) must leave every other rank ending ok.
//   --slow-worker W --slow-ms M
//       worker W computes for M ms per iteration between its pull and its push without calling
//       the PS (slow but alive: it must NOT be declared dead, even when M > peer_timeout).
//
// Every rank that gets to the end prints one line on stdout, then exits 0 (ok) or 1 (failed):
//   PS_RANK rank=2 roles=worker-0 outcome=failed elapsed_ms=2214 iterations=57 error=...
// elapsed_ms counts from the scheduled death (start barrier + T) when --die-rank is given, else
// from the start barrier; negative when the rank ended before it. `error` is last and runs to the
// end of the line ("-" when ok). The line is printed before the rank tears its Node down, so a
// driver can tell detection from teardown. Exit 2: bad command line.
//
// When FERRY_TEST_PEER_PARENT names our parent (tests/common/peer.h), the rank dies with it
// (PR_SET_PDEATHSIG). --hard-timeout-s (default 120) ends a rank that is still running after it
// with outcome=hang and exit 3: a safety net for runs by hand; the tests have their own deadline.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ps/launch/launch_env.h"
#include "ps/node.h"
#include "tests/common/peer.h"

namespace {

using ferry::Code;
using ferry::Status;
using ferry::ps::Millis;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string transport = "tcp";
  std::map<std::string, std::string> params;
  std::string consistency = "bsp";
  double seconds = 3;
  int64_t peer_timeout_ms = 2000;
  int64_t startup_timeout_ms = 20000;
  uint32_t servers = 0, workers = 0;
  uint32_t replicas = 1;
  uint32_t keys = 64;
  int die_rank = -1;
  int64_t die_after_ms = 1000;
  std::string die_how = "kill";
  bool elastic = false;
  uint32_t shards = 0;
  int slow_worker = -1;
  int64_t slow_ms = 0;
  int64_t hard_timeout_s = 120;
};

void Usage() {
  std::fprintf(stderr,
               "usage: ps_rank [--transport tcp|ucx|verbs|auto] [--param K=V]... "
               "[--consistency asp|bsp|ssp:S] [--seconds S] [--peer-timeout-ms MS] "
               "[--startup-timeout-ms MS] [--servers S] [--workers W] [--replicas R] [--keys K] "
               "[--die-rank R --die-after-ms T [--die-how kill|exit|stop|term]] "
               "[--elastic 0|1] [--shards Q] "
               "[--slow-worker W --slow-ms M] [--hard-timeout-s S]\n");
}

bool ToInt(const std::string& s, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    int64_t n = 0;
    const bool num = ToInt(v, &n);
    if (k == "--transport") {
      a->transport = v;
    } else if (k == "--param") {
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) return false;
      a->params[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (k == "--consistency") {
      a->consistency = v;
    } else if (k == "--seconds") {
      char* end = nullptr;
      a->seconds = std::strtod(v.c_str(), &end);
      if (*end != '\0' || !(a->seconds >= 0)) return false;
    } else if (k == "--peer-timeout-ms" && num && n > 0) {
      a->peer_timeout_ms = n;
    } else if (k == "--startup-timeout-ms" && num && n > 0) {
      a->startup_timeout_ms = n;
    } else if (k == "--servers" && num && n > 0) {
      a->servers = static_cast<uint32_t>(n);
    } else if (k == "--workers" && num && n > 0) {
      a->workers = static_cast<uint32_t>(n);
    } else if (k == "--replicas" && num && n > 0) {
      a->replicas = static_cast<uint32_t>(n);
    } else if (k == "--keys" && num && n > 0 && n <= 4096) {
      a->keys = static_cast<uint32_t>(n);
    } else if (k == "--die-rank" && num && n >= 0) {
      a->die_rank = static_cast<int>(n);
    } else if (k == "--die-after-ms" && num && n >= 0) {
      a->die_after_ms = n;
    } else if (k == "--die-how" && (v == "kill" || v == "exit" || v == "stop" || v == "term")) {
      a->die_how = v;
    } else if (k == "--elastic" && (v == "0" || v == "1")) {
      a->elastic = v == "1";
    } else if (k == "--shards" && num && n >= 0 && n <= 65535) {
      a->shards = static_cast<uint32_t>(n);
    } else if (k == "--slow-worker" && num && n >= 0) {
      a->slow_worker = static_cast<int>(n);
    } else if (k == "--slow-ms" && num && n >= 0) {
      a->slow_ms = n;
    } else if (k == "--hard-timeout-s" && num && n >= 0) {
      a->hard_timeout_s = n;
    } else {
      return false;
    }
  }
  return true;
}

// The ps_rank dies with the test that spawned it (see tests/common/peer.h).
Status GuardParent() {
  const char* env = std::getenv(ferry::testing::kPeerParentEnv);
  if (env == nullptr || *env == '\0') return Status::Ok();
  const long expected = std::strtol(env, nullptr, 10);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    return ferry::IoError("prctl(PR_SET_PDEATHSIG)", errno);
  if (getppid() != static_cast<pid_t>(expected)) {
    return ferry::PeerFailure("the spawning process " + std::string(env) + " is gone");
  }
  return Status::Ok();
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.empty() ? "-" : s;
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// The one result line; printed once (the hard-timeout thread and main may race for it).
std::atomic<bool> g_reported{false};
void Report(int rank, const std::string& roles, const char* outcome, int64_t elapsed_ms,
            uint64_t iterations, const std::string& error) {
  if (g_reported.exchange(true)) return;
  std::printf("PS_RANK rank=%d roles=%s outcome=%s elapsed_ms=%lld iterations=%llu error=%s\n",
              rank, roles.c_str(), outcome, static_cast<long long>(elapsed_ms),
              static_cast<unsigned long long>(iterations), OneLine(error).c_str());
  std::fflush(stdout);
}

std::string RolesWord(const ferry::ps::RankRoles& r) {
  std::string s;
  if (r.server >= 0) s += "server-" + std::to_string(r.server);
  if (r.worker >= 0) s += std::string(s.empty() ? "" : ",") + "worker-" + std::to_string(r.worker);
  return s.empty() ? "none" : s;
}

// One worker's loop: pull, compute (slow worker: sleep), push, clock; then Finish.
Status RunWorker(ferry::ps::Worker& w, const Args& a, Clock::time_point start,
                 std::atomic<uint64_t>* iterations) {
  FERRY_ASSIGN_OR_RETURN(uint32_t table, w.TableId("emb"));
  std::mt19937_64 rng(1234 + w.index());
  std::vector<uint64_t> keys(a.keys);
  const bool slow = a.slow_worker >= 0 && static_cast<uint32_t>(a.slow_worker) == w.index();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  while (Clock::now() < end) {
    for (uint64_t& k : keys) k = rng() % 4096;
    FERRY_ASSIGN_OR_RETURN(ferry::ps::Ticket pull, w.Pull(table, keys));
    FERRY_RETURN_IF_ERROR(w.Wait(pull));
    FERRY_ASSIGN_OR_RETURN(ferry::ps::GradRows grads, w.Gradients(pull));
    for (size_t i = 0; i < grads.size(); ++i) grads[i][0] += 0.01f;
    // Computing: the PS is not called meanwhile, so nothing drives this worker's transport.
    if (slow && a.slow_ms > 0) std::this_thread::sleep_for(Millis(a.slow_ms));
    FERRY_ASSIGN_OR_RETURN(ferry::ps::Ticket push, w.PushGradients(pull));
    w.Release(pull);
    FERRY_RETURN_IF_ERROR(w.Wait(push));
    w.Release(push);
    FERRY_RETURN_IF_ERROR(w.Clock());
    ++*iterations;
  }
  return w.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (Status g = GuardParent(); !g.ok()) {
    std::fprintf(stderr, "ps_rank: %s\n", g.ToString().c_str());
    return 4;
  }
  Args a;
  if (!Parse(argc, argv, &a)) {
    Usage();
    return 2;
  }
  auto env = ferry::ps::DetectLaunchEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "ps_rank: %s\n", env.status().ToString().c_str());
    return 2;
  }
  auto shape = ferry::ps::ReadLaunchShape();
  if (!shape.ok()) {
    std::fprintf(stderr, "ps_rank: %s\n", shape.status().ToString().c_str());
    return 2;
  }
  ferry::ps::JobSpec job;
  ferry::ps::TableSpec t;
  t.name = "emb";
  t.dim = 8;
  t.initial_rows = 4096;
  job.tables.push_back(t);
  auto consistency = ferry::ps::ParseConsistency(a.consistency);
  if (!consistency.ok()) {
    std::fprintf(stderr, "ps_rank: %s\n", consistency.status().ToString().c_str());
    return 2;
  }
  job.consistency = *consistency;
  job.transport = a.transport;
  job.transport_params = a.params;
  job.peer_timeout = Millis(a.peer_timeout_ms);
  job.startup_timeout = Millis(a.startup_timeout_ms);
  job.staging_bytes = 1u << 20;
  job.arena_bytes = 4u << 20;
  job.send_bytes = 4u << 20;
  job.max_keys_per_request = 4096;
  job.max_outstanding = 16;
  job.servers = a.servers;
  job.workers = a.workers;
  job.replicas = a.replicas;
  job.elastic = a.elastic;
  job.shards = a.shards;
  if (job.servers == 0 && job.workers == 0 && shape->servers < 0 && shape->workers < 0) {
    job.servers = env->size == 1 ? 1 : static_cast<uint32_t>(env->size / 2);
  }
  if (Status s = ferry::ps::ApplyLaunchShape(*shape, *env, &job); !s.ok()) {
    std::fprintf(stderr, "ps_rank: %s\n", s.ToString().c_str());
    return 2;
  }
  const int rank = env->rank;
  std::string roles = "?";
  if (auto r = ferry::ps::RolesOf(job, rank, env->size); r.ok()) roles = RolesWord(*r);

  // The safety net: a rank still running after --hard-timeout-s reports a hang and leaves.
  const auto launched = Clock::now();
  if (a.hard_timeout_s > 0) {
    std::thread([rank, roles, launched, limit = a.hard_timeout_s] {
      std::this_thread::sleep_for(std::chrono::seconds(limit));
      Report(rank, roles, "hang", MsSince(launched), 0,
             "still running after --hard-timeout-s " + std::to_string(limit));
      std::_Exit(3);
    }).detach();
  }

  auto node = ferry::ps::Node::Start(job, *env);
  if (!node.ok()) {
    Report(rank, roles, "failed", -1, 0, "start: " + node.status().ToString());
    return 1;
  }
  const auto start = Clock::now();
  const auto death = start + Millis(a.die_rank >= 0 ? a.die_after_ms : 0);
  if (a.die_rank == rank) {
    std::thread([death, how = a.die_how] {
      std::this_thread::sleep_until(death);
      if (how == "exit") std::_Exit(42);
      raise(how == "stop" ? SIGSTOP : how == "term" ? SIGTERM : SIGKILL);
    }).detach();
  }

  std::atomic<uint64_t> iterations{0};
  Status result;
  if (ferry::ps::Worker* w = (*node)->worker()) result = RunWorker(*w, a, start, &iterations);
  // Join also ends this rank's server and, on rank 0, the coordinator; after a worker's failure
  // leaving without Join is what tells the others (the Node's destructor closes the connections).
  if (result.ok()) result = (*node)->Join();
  const int64_t elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - death).count();
  Report(rank, roles, result.ok() ? "ok" : "failed", elapsed, iterations.load(),
         result.ok() ? "" : result.ToString());
  node->reset();
  return result.ok() ? 0 : 1;
}
