// Failure detection of a parameter-server job, one process per rank (ps_rank, ps_rank_main.cc).
//
// The rule (docs/ps.md "Failures"): a dead or silent server, worker or coordinator surfaces to
// EVERY survivor as an error naming it, within the transport's peer_timeout; never a hang.
//
// Each case starts a 2-server 2-worker job itself (servers-first: ranks 0, 1 are servers 0, 1 and
// rank 0 hosts the coordinator; ranks 2, 3 are workers 0, 1), the way a launcher does (rank 0
// writes its coordinator address to FERRY_COORDINATOR_FILE, the others get FERRY_COORDINATOR:
// docs/launchers.md rule b), but without ferry-launch, which would stop the survivors itself. One
// rank kills itself 1 s after the start barrier (SIGKILL, or SIGSTOP: a silent, hung process) and
// the test checks that every other rank exits by itself with outcome=failed, an error naming the
// dead member, within peer_timeout (2000 ms) + 25 % (kSlack) of the death as the test saw it
// (waitpid: exit, signal or stop). A hard deadline kills everything and fails the case as a hang.
//
// Plus: a clean run (every rank ok), a slow-but-alive worker that computes for longer than
// peer_timeout per iteration without calling the PS (nobody may declare it dead; under BSP the
// other worker waits for it), and ferry-launch naming a killed worker.
//
// Each case prints one RELIABILITY line (the format tests/netns/harness.h describes, collected by
// scripts/reliability-report.sh), to stdout and appended to $FERRY_RELIABILITY_RESULTS:
//   RELIABILITY scenario=ps-worker-sigkill backend=tcp outcome=failed-in-bound ops=57 errors=3
//     bytes=- detect_ms=412 drain_ms=- elapsed_ms=3810 proxy_bytes=- note=reported_ms=380 error=...
// detect_ms: the worst survivor's exit after the death; note's reported_ms: the worst time the
// survivors themselves reported (their PS_RANK line, printed before their teardown).
//
// Environment: FERRY_PS_RANK / FERRY_LAUNCH override the binaries built with the test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/peer.h"
#include "tests/common/reliability.h"
#include "transport/transport.h"

extern char** environ;

namespace ferry::ps {
namespace {

// Shard servers per server rank for every job here: FERRY_TEST_SERVER_THREADS (the suites run
// with 1 and 2: meson.build), else 1.
std::string ServerThreads() {
  const char* v = std::getenv("FERRY_TEST_SERVER_THREADS");
  return v != nullptr && *v != '\0' ? v : "1";
}

// A RELIABILITY line's backend: "tcp", or "tcp/server-threads=2" in the T = 2 runs.
std::string BackendLabel(const std::string& backend) {
  return ServerThreads() == "1" ? backend : backend + "/server-threads=" + ServerThreads();
}

using Clock = std::chrono::steady_clock;

constexpr Millis kPeerTimeout{2000};
// What the documented bound (docs/ps.md "Failures") leaves on top of peer_timeout: a silent peer
// is failed once nothing came from it for peer_timeout (checked every 100 ms), then the
// coordinator's notice reaches the other survivors and they exit. Measured from the death to the
// last survivor's exit (detect_ms): a stopped member 2.01-2.13 s over tcp and ucx (shm) here,
// 2.15 s under ASan+UBSan (its stage runs this binary as is) and over verbs in the VM; a killed
// one 5-165 ms. A quarter of peer_timeout is 350 ms above the worst of those; a detection that
// took twice peer_timeout fails (tried: ranks given 4 s, a stopped server took 4.08 s: late).
constexpr Millis kSlack = kPeerTimeout / 4;
constexpr int64_t kDieAfterMs = 1000;
constexpr int kServers = 2, kWorkers = 2, kRanks = kServers + kWorkers;

std::string PathFromEnv(const char* var, const char* built) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? v : built;
}
std::string PsRankPath() {
  return PathFromEnv("FERRY_PS_RANK", FERRY_PS_RANK_PATH);
}
std::string FerryLaunchPath() {
  return PathFromEnv("FERRY_LAUNCH", FERRY_LAUNCH_PATH);
}

int64_t MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.empty() ? "-" : s;
}

// A temporary folder for the coordinator file and the ranks' output; removed unless the test
// failed (then its path is printed, to read the ranks' stderr).
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ferry-ps-failure.XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    if (::testing::Test::HasFailure()) {
      std::printf("ranks' output kept in %s\n", path_.c_str());
      return;
    }
    std::string cmd = "rm -rf '" + path_ + "'";
    if (std::system(cmd.c_str()) != 0) std::printf("could not remove %s\n", path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One child process (a rank, or ferry-launch) with stdout and stderr in files. SIGKILLed and
// reaped on destruction if still there (stopped included). Spawned with posix_spawn (see
// tests/common/peer.h for why not fork); a rank gets FERRY_TEST_PEER_PARENT, so it dies with us
// (not ferry-launch: its ranks are its children, guarded by ferry-launch itself).
class Child {
 public:
  static Result<std::unique_ptr<Child>> Spawn(const std::vector<std::string>& argv,
                                              const std::vector<std::string>& extra_env,
                                              const std::string& out_path,
                                              const std::string& err_path, bool guard = true) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      // The launcher variables are ours to set; inherited ones would confuse the rank.
      if (std::strncmp(*e, "FERRY_", 6) == 0) {
        continue;
      }
      env.emplace_back(*e);
    }
    if (guard) {
      env.push_back(std::string(testing::kPeerParentEnv) + "=" + std::to_string(getpid()));
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> cargv, cenv;
    std::vector<std::string> args = argv;
    for (std::string& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (std::string& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return IoError("posix_spawn " + argv[0], rc);
    std::unique_ptr<Child> c(new Child());
    c->pid_ = pid;
    c->out_ = out_path;
    c->err_ = err_path;
    return c;
  }
  ~Child() { Kill(); }

  // Reaps an exit, notes a stop (once). Returns true when something changed.
  bool Check() {
    if (reaped_) return false;
    int ws = 0;
    const pid_t r = waitpid(pid_, &ws, WNOHANG | WUNTRACED);
    if (r != pid_) return false;
    if (WIFSTOPPED(ws)) {
      if (stopped_) return false;
      stopped_ = true;
      stopped_at_ = Clock::now();
      return true;
    }
    reaped_ = true;
    wstatus_ = ws;
    ended_at_ = Clock::now();
    return true;
  }
  void Kill() {
    if (reaped_) return;
    kill(pid_, SIGKILL);
    int ws = 0;
    while (true) {
      const pid_t r = waitpid(pid_, &ws, 0);
      if (r == pid_ && !WIFSTOPPED(ws)) break;
      if (r < 0 && errno != EINTR) break;
    }
    reaped_ = true;
    wstatus_ = ws;
    ended_at_ = Clock::now();
  }

  bool reaped() const { return reaped_; }
  bool stopped() const { return stopped_; }
  bool gone_or_stopped() const { return reaped_ || stopped_; }
  Clock::time_point ended_at() const { return ended_at_; }
  Clock::time_point stopped_at() const { return stopped_at_; }
  int wstatus() const { return wstatus_; }
  std::string Describe() const {
    if (!reaped_) return stopped_ ? "stopped" : "running";
    if (WIFEXITED(wstatus_)) return "exit " + std::to_string(WEXITSTATUS(wstatus_));
    if (WIFSIGNALED(wstatus_)) return "signal " + std::to_string(WTERMSIG(wstatus_));
    return "status " + std::to_string(wstatus_);
  }
  std::string out() const { return ReadFile(out_); }
  std::string err() const { return ReadFile(err_); }

 private:
  Child() = default;
  pid_t pid_ = -1;
  bool reaped_ = false, stopped_ = false;
  int wstatus_ = 0;
  Clock::time_point ended_at_{}, stopped_at_{};
  std::string out_, err_;
};

// A rank's PS_RANK line, parsed.
struct RankLine {
  bool found = false;
  std::string outcome, roles, error;
  int64_t elapsed_ms = 0;
  uint64_t iterations = 0;
};

RankLine ParseRankLine(const std::string& out) {
  RankLine r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PS_RANK ", 0) != 0) continue;
    r.found = true;
    const size_t e = line.find(" error=");
    if (e != std::string::npos) {
      r.error = line.substr(e + 7);
      line = line.substr(0, e);
    }
    std::istringstream kv(line.substr(8));
    std::string f;
    while (kv >> f) {
      const size_t eq = f.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = f.substr(0, eq), v = f.substr(eq + 1);
      if (k == "outcome") r.outcome = v;
      if (k == "roles") r.roles = v;
      if (k == "elapsed_ms") r.elapsed_ms = std::strtoll(v.c_str(), nullptr, 10);
      if (k == "iterations") r.iterations = std::strtoull(v.c_str(), nullptr, 10);
    }
  }
  return r;
}

std::string Word(std::string s) {
  return ferry::testing::ReliabilityWord(std::move(s));
}

void ReportLine(const std::string& line) {
  ferry::testing::WriteReliabilityLine(line);
}

struct TransportConfig {
  std::string name;  // the RELIABILITY backend: "tcp", "ucx-shm"
  std::string backend;
  std::map<std::string, std::string> params;
};

const TransportConfig kTcp{"tcp", "tcp", {}};
const TransportConfig kUcxShm{"ucx-shm", "ucx", {{"UCX_TLS", "shm,self"}}};
// Only where an RDMA device is (the soft-RoCE VM: tests/ps/vm-ps.sh, FERRY_DATA_HOST set).
const TransportConfig kVerbs{"verbs", "verbs", {}};

// Empty when the backend can run here, else why not.
std::string Unavailable(const TransportConfig& t) {
  for (const BackendInfo& b : ListBackends()) {
    if (b.name == t.backend) return b.available ? "" : t.backend + " unavailable: " + b.reason;
  }
  return t.backend + " is not compiled in";
}

struct JobOptions {
  TransportConfig transport = kTcp;
  std::string consistency = "bsp";
  uint32_t replicas = 1;
  double seconds = 10;
  int die_rank = -1;
  std::string die_how = "kill";
  int slow_worker = -1;
  int64_t slow_ms = 0;
  uint32_t shards = 0;  // > 0: an elastic job of that many shards
};

struct RankResult {
  int rank = 0;
  std::string exit;  // "exit 1", "signal 9", "stopped", "running"
  int exit_code = -1;
  Clock::time_point ended{};
  RankLine line;
  std::string stderr_tail;
};

struct JobResult {
  std::string setup_error;  // the job could not be started
  bool hung = false;        // the hard deadline passed with ranks still running
  Clock::time_point started{};
  Clock::time_point death{};  // when the test saw the dying rank die (exit, signal or stop)
  bool died = false;
  std::string death_how;
  std::vector<RankResult> ranks;
};

std::string Tail(const std::string& s, size_t n = 1500) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

// Starts the 4 ranks as a launcher would (rule b, then a), waits until every survivor exited and
// the dying rank died, or until `deadline` (then every rank is killed and the job is a hang).
JobResult RunJob(const JobOptions& o, const TempDir& dir, Millis deadline) {
  JobResult res;
  std::vector<std::string> argv = {PsRankPath()};
  auto add = [&](const std::string& flag, const std::string& value) {
    argv.push_back(flag);
    argv.push_back(value);
  };
  add("--transport", o.transport.backend);
  add("--consistency", o.consistency);
  add("--seconds", std::to_string(o.seconds));
  add("--peer-timeout-ms", std::to_string(kPeerTimeout.count()));
  add("--startup-timeout-ms", "20000");
  add("--hard-timeout-s", "60");
  add("--replicas", std::to_string(o.replicas));
  for (const auto& [k, v] : o.transport.params) add("--param", k + "=" + v);
  if (o.die_rank >= 0) {
    add("--die-rank", std::to_string(o.die_rank));
    add("--die-after-ms", std::to_string(kDieAfterMs));
    add("--die-how", o.die_how);
  }
  if (o.slow_worker >= 0) {
    add("--slow-worker", std::to_string(o.slow_worker));
    add("--slow-ms", std::to_string(o.slow_ms));
  }
  if (o.shards > 0) {
    add("--elastic", "1");
    add("--shards", std::to_string(o.shards));
  }
  auto env_of = [&](int r) {
    return std::vector<std::string>{
        "FERRY_RANK=" + std::to_string(r),           "FERRY_SIZE=" + std::to_string(kRanks),
        "FERRY_LOCAL_RANK=" + std::to_string(r),     "FERRY_LOCAL_SIZE=" + std::to_string(kRanks),
        "FERRY_SERVERS=" + std::to_string(kServers), "FERRY_WORKERS=" + std::to_string(kWorkers),
        "FERRY_TRANSPORT=" + o.transport.backend,    "FERRY_ROLE_RULE=servers-first",
        "FERRY_SERVER_THREADS=" + ServerThreads()};
  };
  std::vector<std::unique_ptr<Child>> kids(kRanks);
  auto spawn = [&](int r, std::vector<std::string> env) -> Status {
    const std::string base = dir.path() + "/rank" + std::to_string(r);
    FERRY_ASSIGN_OR_RETURN(kids[r], Child::Spawn(argv, env, base + ".out", base + ".err"));
    return Status::Ok();
  };
  res.started = Clock::now();
  const auto hard = res.started + deadline;
  const std::string file = dir.path() + "/coordinator";
  std::vector<std::string> env0 = env_of(0);
  env0.push_back("FERRY_COORDINATOR_FILE=" + file);
  if (Status s = spawn(0, env0); !s.ok()) {
    res.setup_error = s.ToString();
    return res;
  }
  std::string address;
  while (address.empty()) {
    const std::string text = ReadFile(file);
    if (!text.empty() && text.back() == '\n') {
      address = text.substr(0, text.size() - 1);
      break;
    }
    kids[0]->Check();
    if (kids[0]->reaped() || Clock::now() > res.started + Millis(20000)) {
      res.setup_error =
          "rank 0 (" + kids[0]->Describe() +
          ") did not write its coordinator address; its stderr: " + Tail(kids[0]->err());
      return res;
    }
    std::this_thread::sleep_for(Millis(5));
  }
  for (int r = 1; r < kRanks; ++r) {
    std::vector<std::string> env = env_of(r);
    env.push_back("FERRY_COORDINATOR=" + address);
    if (Status s = spawn(r, env); !s.ok()) {
      res.setup_error = s.ToString();
      return res;
    }
  }
  while (true) {
    for (int r = 0; r < kRanks; ++r) {
      if (kids[r]->Check() && r == o.die_rank && !res.died) {
        res.died = true;
        res.death = kids[r]->stopped() ? kids[r]->stopped_at() : kids[r]->ended_at();
        res.death_how = kids[r]->Describe();
      }
    }
    bool done = true;
    for (int r = 0; r < kRanks; ++r) {
      if (r == o.die_rank ? !kids[r]->gone_or_stopped() : !kids[r]->reaped()) done = false;
    }
    if (done) break;
    if (Clock::now() > hard) {
      res.hung = true;
      break;
    }
    std::this_thread::sleep_for(Millis(5));
  }
  for (int r = 0; r < kRanks; ++r) {
    RankResult rr;
    rr.rank = r;
    rr.exit = kids[r]->Describe();
    if (kids[r]->reaped() && WIFEXITED(kids[r]->wstatus())) {
      rr.exit_code = WEXITSTATUS(kids[r]->wstatus());
    }
    rr.ended = kids[r]->ended_at();
    kids[r]->Kill();  // a hung or stopped rank
    rr.line = ParseRankLine(kids[r]->out());
    rr.stderr_tail = Tail(kids[r]->err());
    res.ranks.push_back(std::move(rr));
  }
  return res;
}

std::string RoleOfRank(int r) {
  return r < kServers ? "server " + std::to_string(r) : "worker " + std::to_string(r - kServers);
}

// ---- the kill matrix ---------------------------------------------------------------------------

struct KillCase {
  std::string victim;  // "server" (rank 1), "worker" (rank 3), "coordinator" (rank 0)
  TransportConfig transport;
  std::string how;  // "kill" | "stop"
};

void PrintTo(const KillCase& c, std::ostream* os) {
  *os << c.victim << " " << c.how << " over " << c.transport.name;
}

int VictimRank(const std::string& victim) {
  if (victim == "coordinator") return 0;
  if (victim == "server") return 1;
  return 3;  // worker 1
}

// What a survivor's error must contain: the dead member's role and index, or its rank; for rank 0
// also "coordinator" (it hosts it).
// (No std::regex: gcc 12's <regex> trips -Wmaybe-uninitialized at -O1 under ASan.)
bool HasWord(const std::string& text, const std::string& word) {
  auto is_word = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !is_word(text[at - 1])) && (end == text.size() || !is_word(text[end]))) {
      return true;
    }
  }
  return false;
}

bool NamesVictim(const std::string& error, const std::string& victim) {
  if (victim == "coordinator") {
    return error.find("coordinator") != std::string::npos || HasWord(error, "server 0") ||
           HasWord(error, "rank 0");
  }
  if (victim == "server") return HasWord(error, "server 1") || HasWord(error, "rank 1");
  return HasWord(error, "worker 1") || HasWord(error, "rank 3");
}

class PsFailure : public ::testing::TestWithParam<KillCase> {};

TEST_P(PsFailure, EverySurvivorFailsNamingTheDeadRankInBound) {
  const KillCase& c = GetParam();
  if (std::string why = Unavailable(c.transport); !why.empty()) GTEST_SKIP() << why;
  const std::string scenario = "ps-" + c.victim + "-" + (c.how == "kill" ? "sigkill" : "sigstop");
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  JobOptions o;
  o.transport = c.transport;
  o.die_rank = VictimRank(c.victim);
  o.die_how = c.how;
  o.seconds = 30;  // the survivors must end long before: by failing
  JobResult res = RunJob(o, dir, Millis(45000));
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;

  const int64_t bound = (kPeerTimeout + kSlack).count();
  std::string outcome = "failed-in-bound", first_error, problems;
  int64_t worst_exit = -1;
  std::optional<int64_t> worst_reported;  // may be < 0: a rank's clock started a little later
  uint64_t failed = 0;
  auto demote = [&](const std::string& to, const std::string& why) {
    static const std::vector<std::string> order = {"failed-in-bound", "unclear-error", "late",
                                                   "undetected", "hang"};
    auto rank_of = [&](const std::string& s) {
      return std::find(order.begin(), order.end(), s) - order.begin();
    };
    if (rank_of(to) > rank_of(outcome)) outcome = to;
    problems += why + "; ";
  };
  if (!res.died) {
    demote("undetected", "rank " + std::to_string(o.die_rank) + " never died (" +
                             res.ranks[o.die_rank].exit + ")");
  }
  for (const RankResult& r : res.ranks) {
    if (r.rank == o.die_rank) continue;
    const std::string who = "rank " + std::to_string(r.rank) + " (" + RoleOfRank(r.rank) + ")";
    if (r.exit == "running" || r.exit == "stopped" || res.hung) {
      if (r.exit == "running") demote("hang", who + " still running at the hard deadline");
      continue;
    }
    if (r.line.found) {
      worst_reported =
          std::max(worst_reported.value_or(std::numeric_limits<int64_t>::min()), r.line.elapsed_ms);
      if (first_error.empty() && !r.line.error.empty()) first_error = r.line.error;
    }
    if (res.died) worst_exit = std::max(worst_exit, MsBetween(res.death, r.ended));
    if (r.exit_code != 1 || !r.line.found || r.line.outcome != "failed") {
      demote("undetected", who + " ended with " + r.exit + ", line: " +
                               (r.line.found ? "outcome=" + r.line.outcome : "(none)") +
                               "; stderr: " + r.stderr_tail);
      continue;
    }
    ++failed;
    if (!NamesVictim(r.line.error, c.victim)) {
      demote("unclear-error",
             who + "'s error does not name the dead " + c.victim + ": " + r.line.error);
    }
    if (res.died && MsBetween(res.death, r.ended) > bound) {
      demote("late", who + " exited " + std::to_string(MsBetween(res.death, r.ended)) +
                         " ms after the death (bound " + std::to_string(bound) + " ms)");
    }
  }
  const int64_t elapsed = MsBetween(res.started, Clock::now());
  uint64_t ops = 0;
  for (const RankResult& r : res.ranks) ops += r.line.iterations;
  ReportLine("RELIABILITY scenario=" + scenario + " backend=" + BackendLabel(c.transport.name) +
             " outcome=" + outcome + " ops=" + std::to_string(ops) +
             " errors=" + std::to_string(failed) +
             " bytes=- detect_ms=" + (worst_exit < 0 ? "-" : std::to_string(worst_exit)) +
             " drain_ms=- elapsed_ms=" + std::to_string(elapsed) +
             " proxy_bytes=- note=victim=rank" + std::to_string(o.die_rank) +
             ",reported_ms=" + (worst_reported ? std::to_string(*worst_reported) : "-") +
             ",died=" + Word(res.death_how) + " error=" + OneLine(first_error) + "\n");
  for (const RankResult& r : res.ranks) {
    std::printf("  rank %d (%s): %s, exit +%lld ms, line: outcome=%s elapsed_ms=%lld error=%s\n",
                r.rank, RoleOfRank(r.rank).c_str(), r.exit.c_str(),
                res.died ? static_cast<long long>(MsBetween(res.death, r.ended)) : -1LL,
                r.line.outcome.c_str(), static_cast<long long>(r.line.elapsed_ms),
                r.line.error.c_str());
  }
  EXPECT_EQ(outcome, "failed-in-bound") << problems;
}

std::vector<KillCase> KillCases(const TransportConfig& t) {
  std::vector<KillCase> out;
  for (const char* victim : {"server", "worker", "coordinator"}) {
    for (const char* how : {"kill", "stop"}) out.push_back(KillCase{victim, t, how});
  }
  return out;
}

std::string KillCaseName(const ::testing::TestParamInfo<KillCase>& info) {
  std::string t = info.param.transport.name;
  std::replace(t.begin(), t.end(), '-', '_');
  return info.param.victim + "_" + (info.param.how == "kill" ? "sigkill" : "sigstop") + "_" + t;
}

INSTANTIATE_TEST_SUITE_P(Tcp, PsFailure, ::testing::ValuesIn(KillCases(kTcp)), KillCaseName);
INSTANTIATE_TEST_SUITE_P(UcxShm, PsFailure, ::testing::ValuesIn(KillCases(kUcxShm)), KillCaseName);
INSTANTIATE_TEST_SUITE_P(Verbs, PsFailure, ::testing::ValuesIn(KillCases(kVerbs)), KillCaseName);

// ---- the coordinator's rank dies, a standby takes over ------------------------------------------

// With --replicas 2 (each shard on both servers) rank 1 runs a standby coordinator
// (ps/coordinator/coordinator.h). Rank 0 (the coordinator and server 0) is killed, or stopped (a
// silent rank 0: the members notice within peer_timeout), 1 s after the start: every other rank
// must end ok (server 0's shards fail over to server 1), and rank 1 says it took over.
class PsStandby : public ::testing::TestWithParam<KillCase> {};

TEST_P(PsStandby, EveryOtherRankFinishesWhenRankZeroDies) {
  const KillCase& c = GetParam();
  if (std::string why = Unavailable(c.transport); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  JobOptions o;
  o.transport = c.transport;
  o.replicas = 2;
  o.die_rank = 0;
  o.die_how = c.how;
  // Past the death (1 s) and its detection (at once when killed; peer_timeout, 2 s, when stopped).
  o.seconds = c.how == "kill" ? 3 : 4;
  JobResult res = RunJob(o, dir, Millis(45000));
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  std::string outcome = res.died ? "completed" : "not-killed", problems;
  uint64_t ops = 0, errors = 0;
  for (const RankResult& r : res.ranks) {
    if (r.rank == 0) continue;
    ops += r.line.iterations;
    if (r.exit_code != 0 || !r.line.found || r.line.outcome != "ok") {
      ++errors;
      outcome = res.hung ? "hang" : "failed";
      problems += "rank " + std::to_string(r.rank) + " (" + RoleOfRank(r.rank) + "): " + r.exit +
                  ", error=" + r.line.error + "; stderr: " + r.stderr_tail + "\n";
    }
  }
  // "ferry coordinator (rank 1) took over from rank 0: 3 of 4 members rejoined within N ms; ..."
  const std::string err1 = ReadFile(dir.path() + "/rank1.err");
  const std::string took = "took over from rank 0: ";
  const size_t at = err1.find(took);
  std::string takeover_ms = "-";
  if (const size_t w = err1.find("within ", at);
      at != std::string::npos && w != std::string::npos) {
    takeover_ms = err1.substr(w + 7, err1.find(' ', w + 7) - (w + 7));
  }
  ReportLine("RELIABILITY scenario=ps-coordinator-" +
             std::string(c.how == "kill" ? "sigkill" : "sigstop") +
             "-standby backend=" + BackendLabel(c.transport.name) + " outcome=" + outcome +
             " ops=" + std::to_string(ops) + " errors=" + std::to_string(errors) +
             " bytes=- detect_ms=- drain_ms=- elapsed_ms=" +
             std::to_string(MsBetween(res.started, Clock::now())) +
             " proxy_bytes=- note=replicas=2,takeover_ms=" + takeover_ms + " error=-\n");
  EXPECT_EQ(outcome, "completed") << problems;
  EXPECT_NE(at, std::string::npos) << "rank 1 did not take over; its stderr: " << Tail(err1);
  // The survivors kept training after the death (they ran --seconds from the start).
  for (const RankResult& r : res.ranks) {
    if (r.rank >= kServers) {
      EXPECT_GT(r.line.iterations, 0u) << "rank " << r.rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tcp, PsStandby,
                         ::testing::Values(KillCase{"coordinator", kTcp, "kill"},
                                           KillCase{"coordinator", kTcp, "stop"}),
                         KillCaseName);
INSTANTIATE_TEST_SUITE_P(UcxShm, PsStandby,
                         ::testing::Values(KillCase{"coordinator", kUcxShm, "kill"}), KillCaseName);
INSTANTIATE_TEST_SUITE_P(Verbs, PsStandby,
                         ::testing::Values(KillCase{"coordinator", kVerbs, "kill"},
                                           KillCase{"coordinator", kVerbs, "stop"}),
                         KillCaseName);

// ---- runs that must complete -------------------------------------------------------------------

struct RunCase {
  std::string scenario;
  TransportConfig transport;
  int slow_worker = -1;
  int64_t slow_ms = 0;
  int leave_rank = -1;  // an elastic job whose server rank gets SIGTERM: a graceful leave
};

void PrintTo(const RunCase& c, std::ostream* os) {
  *os << c.scenario << " over " << c.transport.name;
}

class PsRun : public ::testing::TestWithParam<RunCase> {};

// Every rank ends ok; with a slow worker (computing longer than peer_timeout per iteration),
// nobody declares it dead and, under BSP, the other worker keeps pace with it. With a leaving
// server (an elastic job of 4 shards; SIGTERM on server rank 1 a second into the run), its shards
// move to server 0 while the workers train on, it leaves the job, and every rank, it too, ends
// ok.
TEST_P(PsRun, EveryRankEndsOk) {
  const RunCase& c = GetParam();
  if (std::string why = Unavailable(c.transport); !why.empty()) GTEST_SKIP() << why;
  if (c.leave_rank >= 0 && ServerThreads() != "1") {
    GTEST_SKIP() << "elastic jobs take one shard server a rank";
  }
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  JobOptions o;
  o.transport = c.transport;
  o.slow_worker = c.slow_worker;
  o.slow_ms = c.slow_ms;
  o.seconds = c.slow_worker >= 0 ? 4 : 2;
  if (c.leave_rank >= 0) {
    o.shards = 4;
    o.die_rank = c.leave_rank;
    o.die_how = "term";
  }
  JobResult res = RunJob(o, dir, Millis(40000));
  ASSERT_TRUE(res.setup_error.empty()) << res.setup_error;
  std::string outcome = "completed", problems, first_error;
  uint64_t ops = 0, errors = 0;
  for (const RankResult& r : res.ranks) {
    ops += r.line.iterations;
    if (r.exit_code != 0 || !r.line.found || r.line.outcome != "ok") {
      ++errors;
      outcome = res.hung ? "hang" : "failed";
      if (first_error.empty()) first_error = r.line.found ? r.line.error : r.exit;
      problems += "rank " + std::to_string(r.rank) + " (" + RoleOfRank(r.rank) + "): " + r.exit +
                  ", outcome=" + r.line.outcome + ", error=" + r.line.error +
                  "; stderr: " + r.stderr_tail + "\n";
    }
  }
  std::string note = "-";
  if (c.leave_rank >= 0) {
    const RankResult& left = res.ranks[c.leave_rank];
    EXPECT_NE(left.stderr_tail.find("leaves the job"), std::string::npos)
        << "server rank " << c.leave_rank << " did not leave gracefully: " << left.stderr_tail;
    note = "left_after_ms=" + std::to_string(MsBetween(res.started, left.ended));
  }
  if (c.slow_worker >= 0) {
    const RankLine& slow = res.ranks[kServers + c.slow_worker].line;
    const RankLine& other = res.ranks[kServers + 1 - c.slow_worker].line;
    note = "slow_ms=" + std::to_string(c.slow_ms) +
           ",slow_iters=" + std::to_string(slow.iterations) +
           ",other_iters=" + std::to_string(other.iterations);
    if (outcome == "completed") {
      // BSP: the other worker may run at most one clock ahead before it waits, plus the
      // iterations it makes after the slow one finished (at most one: its time is up too).
      EXPECT_GE(slow.iterations, 1u) << note;
      EXPECT_LE(other.iterations, slow.iterations + 2) << "the fast worker did not wait: " << note;
    }
  }
  ReportLine("RELIABILITY scenario=" + c.scenario + " backend=" + BackendLabel(c.transport.name) +
             " outcome=" + outcome + " ops=" + std::to_string(ops) +
             " errors=" + std::to_string(errors) + " bytes=- detect_ms=- drain_ms=- elapsed_ms=" +
             std::to_string(MsBetween(res.started, Clock::now())) + " proxy_bytes=- note=" + note +
             " error=" + OneLine(first_error) + "\n");
  EXPECT_EQ(outcome, "completed") << problems;
}

INSTANTIATE_TEST_SUITE_P(
    Runs, PsRun,
    ::testing::Values(RunCase{"ps-clean", kTcp}, RunCase{"ps-clean", kUcxShm},
                      RunCase{"ps-server-leaves", kTcp, -1, 0, 1},
                      RunCase{"ps-server-leaves", kUcxShm, -1, 0, 1},
                      RunCase{"ps-slow-worker", kTcp, 1, kPeerTimeout.count() * 5 / 4},
                      RunCase{"ps-slow-worker", kUcxShm, 1, kPeerTimeout.count() * 5 / 4}),
    [](const ::testing::TestParamInfo<RunCase>& info) {
      std::string n = info.param.scenario + "_" + info.param.transport.name;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// ---- ferry-launch ------------------------------------------------------------------------------

// A killed worker: ferry-launch exits non-zero (128 + 9), names that rank and its role as the
// cause, and stops the others itself.
TEST(PsFailureLaunch, FerryLaunchNamesTheKilledWorker) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  std::vector<std::string> argv = {FerryLaunchPath(),
                                   "--servers",
                                   "2",
                                   "--workers",
                                   "2",
                                   "--transport",
                                   "tcp",
                                   "--timeout",
                                   "40",
                                   "--kill-grace",
                                   "2",
                                   "--server-threads",
                                   ServerThreads(),
                                   "--",
                                   PsRankPath(),
                                   "--transport",
                                   "tcp",
                                   "--consistency",
                                   "bsp",
                                   "--seconds",
                                   "30",
                                   "--peer-timeout-ms",
                                   std::to_string(kPeerTimeout.count()),
                                   "--die-rank",
                                   "3",
                                   "--die-after-ms",
                                   std::to_string(kDieAfterMs),
                                   "--die-how",
                                   "kill"};
  const auto start = Clock::now();
  auto child = Child::Spawn(argv, {}, dir.path() + "/launch.out", dir.path() + "/launch.err",
                            /*guard=*/false);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Child& c = **child;
  while (!c.reaped() && Clock::now() < start + Millis(45000)) {
    c.Check();
    std::this_thread::sleep_for(Millis(10));
  }
  const bool hung = !c.reaped();
  c.Kill();
  const std::string err = c.err();
  const int64_t elapsed = MsBetween(start, c.ended_at());
  const bool named = err.find("rank 3 (worker 1) was killed by signal 9") != std::string::npos;
  const bool code = WIFEXITED(c.wstatus()) && WEXITSTATUS(c.wstatus()) == 128 + SIGKILL;
  const std::string outcome = hung ? "hang" : (named && code ? "failed-in-bound" : "unclear-error");
  std::string first;
  {
    std::istringstream in(err);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("ferry-launch: rank", 0) == 0) {
        first = line;
        break;
      }
    }
  }
  ReportLine("RELIABILITY scenario=ps-launch-worker-sigkill backend=" + BackendLabel("tcp") +
             " outcome=" + outcome + " ops=- errors=- bytes=- detect_ms=- drain_ms=- elapsed_ms=" +
             std::to_string(elapsed) + " proxy_bytes=- note=exit=" + Word(c.Describe()) +
             " error=" + OneLine(first) + "\n");
  EXPECT_FALSE(hung) << "ferry-launch still running after 45 s";
  EXPECT_TRUE(code) << "ferry-launch " << c.Describe() << "; stderr:\n" << Tail(err, 4000);
  EXPECT_TRUE(named) << "stderr:\n" << Tail(err, 4000);
}

}  // namespace
}  // namespace ferry::ps
