// The local launcher (see local_cluster.h): spawning with a parent-death signal, signal
// forwarding, the supervision loop and the tagged-output relay.
#include "ps/launch/local_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "ps/launch/launch_env.h"
#include "ps/launch/spawn.h"

namespace ferry::ps {

// ---------------------------------------------------------------------------------------------
// Pure pieces.

std::string RolesText(const RankRoles& roles) {
  std::string s;
  if (roles.server >= 0) s = "server " + std::to_string(roles.server);
  if (roles.join >= 0) s = "join slot " + std::to_string(roles.join);
  if (roles.worker >= 0) {
    if (!s.empty()) s += ", ";
    s += "worker " + std::to_string(roles.worker) + (roles.worker_join ? " (join slot)" : "");
  }
  return s.empty() ? "no role" : s;
}

namespace {

// "1.5", "30": a duration in seconds for messages.
std::string Seconds(Millis ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

std::string DescribeWaitStatus(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    return "was killed by signal " + std::to_string(sig) + " (" + SignalName(sig) + ")" +
           (WCOREDUMP(wstatus) ? ", core dumped" : "");
  }
  return "ended with wait status " + std::to_string(wstatus);
}

int ExitCodeOf(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

void LinePrefixer::Feed(std::string_view data, std::string* out) {
  // A line is cut only when it grows past max_line_, so the pieces are the same however the
  // stream was chunked: "[rank 0] <max_line bytes>\n" ... "[rank 0] <the rest>\n".
  auto emit = [&](std::string_view piece) {
    out->append(prefix_);
    out->append(piece);
    out->push_back('\n');
  };
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    partial_.append(data.substr(0, nl));
    while (partial_.size() > max_line_) {
      emit(std::string_view(partial_).substr(0, max_line_));
      partial_.erase(0, max_line_);
    }
    if (nl == std::string_view::npos) return;
    emit(partial_);
    partial_.clear();
    data.remove_prefix(nl + 1);
  }
}

void LinePrefixer::Finish(std::string* out) {
  if (partial_.empty()) return;
  out->append(prefix_);
  out->append(partial_);
  out->push_back('\n');
  partial_.clear();
}

namespace {

using Clock = std::chrono::steady_clock;
using process::AboveStdio;
using process::Fd;
using process::MakePipe;
using process::ResolveProgram;
using process::SignalScope;
using process::Spawn;
using process::SpawnRequest;
using process::WriteAll;

std::atomic<bool> g_active{false};  // one local cluster per process at a time

// ---------------------------------------------------------------------------------------------
// Options.

// The variables the launcher sets on every rank (options.env may not set them).
constexpr const char* kLauncherVars[] = {
    "FERRY_RANK", "FERRY_SIZE",  "FERRY_LOCAL_RANK", "FERRY_LOCAL_SIZE", kEnvServers,
    kEnvWorkers,  kEnvTransport, kEnvRoleRule,       kEnvServerThreads,  "FERRY_COORDINATOR_FILE"};
constexpr const char* kCoordinatorVar = "FERRY_COORDINATOR";

Status CheckOptions(const LocalClusterOptions& o) {
  if (o.argv.empty()) return InvalidArgument("no program to run");
  if (!o.worker_stdin.empty() && o.worker_stdin.size() != o.workers) {
    return InvalidArgument("worker_stdin has " + std::to_string(o.worker_stdin.size()) +
                           " descriptors for " + std::to_string(o.workers) + " workers");
  }
  if (o.servers < 1 || o.servers > 4096) {
    return InvalidArgument("servers " + std::to_string(o.servers) + " must be 1..4096");
  }
  if (o.server_threads > 64) {
    return InvalidArgument("server_threads " + std::to_string(o.server_threads) +
                           " must be 1..64 (0: the program's own)");
  }
  if (o.workers < 1 || o.workers > 65535) {
    return InvalidArgument("workers " + std::to_string(o.workers) + " must be 1..65535");
  }
  if (o.transport != "auto" && o.transport != "verbs" && o.transport != "ucx" &&
      o.transport != "tcp") {
    return InvalidArgument("transport '" + o.transport + "' is not auto, verbs, ucx or tcp");
  }
  if (o.timeout.count() < 0 || o.kill_grace.count() < 0 || o.startup_timeout.count() < 0) {
    return InvalidArgument("timeout, kill_grace and startup_timeout must be >= 0");
  }
  for (const auto& [key, value] : o.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return InvalidArgument("environment variable name '" + key + "' is empty or has a '='");
    }
    for (const char* own : kLauncherVars) {
      if (key == own) {
        return InvalidArgument(key + " is set by the launcher itself (from the rank and the " +
                               "job shape); it cannot be given as an extra variable");
      }
    }
  }
  return Status::Ok();
}

// The mkdtemp folder of the coordinator file; removed with whatever rank 0 left in it.
class TempDir {
 public:
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  Status Create() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ferry-launch.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) return IoError("mkdtemp " + templ, errno);
    path_ = templ;
    return Status::Ok();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---------------------------------------------------------------------------------------------
// The supervision loop.

class Launch {
 public:
  Launch(const LocalClusterOptions& o, std::string program, const SignalScope& signals)
      : o_(o), program_(std::move(program)), signals_(signals) {}

  Status Prepare();
  Result<int> Run();

 private:
  struct Stream {
    Fd fd;         // read end; closed at EOF
    int sink = 1;  // our fd it is relayed to
    LinePrefixer prefixer{""};
  };
  struct Rank {
    int rank = 0;
    RankRoles roles;
    pid_t pid = -1;  // -1: not started
    Fd pidfd;        // readable once the process exited; invalid where pidfd_open is missing
    bool reaped = false;
    Stream out, err;
  };

  std::string Who(const Rank& r) const {
    return "rank " + std::to_string(r.rank) + " (" + RolesText(r.roles) + ")";
  }
  void Report(const std::string& line) {
    std::string text = o_.name + ": " + line + "\n";
    WriteAll(2, text, &broken_[2]);
  }
  bool Running(const Rank& r) const { return r.pid > 0 && !r.reaped; }
  int RunningCount() const {
    return static_cast<int>(
        std::count_if(ranks_.begin(), ranks_.end(), [&](const Rank& r) { return Running(r); }));
  }

  Status StartRank(Rank& r);
  void Signal(Rank& r, int sig) {
    if (!Running(r)) return;
    // The rank's whole group (it leads one); the pid alone if that failed.
    if (kill(-r.pid, sig) != 0) kill(r.pid, sig);
  }
  // Sets the cause of the job's end (the first one wins) and stops the running ranks with `sig`.
  void Fail(const std::string& report, const std::string& consequence, int exit_code, int sig);
  void OnSignal(int sig);
  // may_hold: a rank that exited with a failure status may be held back as the cause (held_).
  void OnExit(Rank& r, int wstatus, bool may_hold = true);
  void CheckCoordinatorFile();
  void CheckDeadlines(Clock::time_point now);
  void Relay(Stream& s);
  void PollOnce(Clock::time_point now);
  bool Done(Clock::time_point now);

  const LocalClusterOptions& o_;
  const std::string program_;
  const SignalScope& signals_;
  int size_ = 0;
  std::vector<Rank> ranks_;
  std::vector<std::string> base_env_;  // inherited, minus what the launcher sets
  std::string coordinator_;            // "host:port" once known
  TempDir dir_;
  std::string coordinator_file_;
  Fd dev_null_;
  bool broken_[3] = {false, false, false};  // our stdout/stderr lost their reader

  Clock::time_point start_;
  bool cause_set_ = false;
  // Ranks that exited with a failure status while others ran, held back as the job's cause for
  // up to kCauseGrace after the first (or until no rank runs): a rank killed by a signal
  // meanwhile is named instead, else the first held. A rank killed with SIGKILL takes longer to
  // be reaped (its memory is torn down first; longer on a loaded host) than the peers that saw
  // its connections close and exited, and naming one of them would blame the wrong rank.
  struct HeldExit {
    Rank* rank = nullptr;
    int wstatus = 0;
  };
  static constexpr std::chrono::milliseconds kCauseGrace{2000};
  std::vector<HeldExit> held_;
  std::optional<Clock::time_point> held_until_;
  // Hands the held exits to OnExit in order: the first is the cause unless one is set already.
  void ReleaseHeld();
  bool intercepted_ = false;  // intercept_signal had its one call
  std::string consequence_;   // "rank 3 failed", for "stopped after ..."
  int exit_code_ = 0;
  Status launch_error_;  // a spawn that failed mid-run
  std::optional<Clock::time_point> kill_at_, give_up_at_, drain_until_;
  bool abandoned_ = false;
};

Status Launch::Prepare() {
  JobSpec shape;
  shape.servers = o_.servers;
  shape.workers = o_.workers;
  shape.role_rule = o_.role_rule;
  shape.spares = o_.spares;
  shape.join_slots = o_.join_slots;
  shape.worker_join_slots = o_.worker_join_slots;
  size_ = RanksNeeded(shape);
  if (o_.join >= static_cast<int>(o_.join_slots)) {
    return InvalidArgument("join slot " + std::to_string(o_.join) +
                           " is out of range: the job has " + std::to_string(o_.join_slots) +
                           " (--join-slots)");
  }
  if (o_.join_worker >= static_cast<int>(o_.worker_join_slots)) {
    return InvalidArgument("worker join slot " + std::to_string(o_.join_worker) +
                           " is out of range: the job has " + std::to_string(o_.worker_join_slots) +
                           " (--worker-join-slots)");
  }
  if (o_.join >= 0 && o_.join_worker >= 0) {
    return InvalidArgument("one join slot at a time: --join or --join-worker, not both");
  }
  // The ranks this launch starts: all but the join slots (worker join slots last, server join
  // slots before them), or the one join slot that joins.
  const int worker_joins_at = size_ - static_cast<int>(o_.worker_join_slots);
  const int joins_at = worker_joins_at - static_cast<int>(o_.join_slots);
  const int first = o_.join >= 0          ? joins_at + o_.join
                    : o_.join_worker >= 0 ? worker_joins_at + o_.join_worker
                                          : 0;
  const int end = o_.join >= 0 || o_.join_worker >= 0 ? first + 1 : joins_at;
  ranks_.resize(static_cast<size_t>(end - first));
  for (int r = first; r < end; ++r) {
    Rank& rank = ranks_[static_cast<size_t>(r - first)];
    rank.rank = r;
    FERRY_ASSIGN_OR_RETURN(rank.roles, RolesOf(shape, r, size_));
  }
  // The environment every rank starts from: ours without the launcher's own variables and
  // without those options.env replaces.
  std::set<std::string> drop(std::begin(kLauncherVars), std::end(kLauncherVars));
  drop.insert(kCoordinatorVar);
  for (const auto& kv : o_.env) drop.insert(kv.first);
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string key = eq != nullptr ? std::string(*e, static_cast<size_t>(eq - *e)) : *e;
    if (key == kCoordinatorVar && eq != nullptr) coordinator_ = eq + 1;
    if (drop.count(key) == 0) base_env_.emplace_back(*e);
  }
  for (const auto& [key, value] : o_.env) {
    if (key == kCoordinatorVar) coordinator_ = value;
  }
  if (coordinator_.empty() && (o_.join >= 0 || o_.join_worker >= 0)) {
    return InvalidArgument(
        "joining a running job needs its coordinator's address: set FERRY_COORDINATOR=host:port "
        "(the job's own launch names it when it has join slots)");
  }
  if (coordinator_.empty()) {
    FERRY_RETURN_IF_ERROR(dir_.Create());
    coordinator_file_ = dir_.path() + "/coordinator";
  }
  FERRY_ASSIGN_OR_RETURN(dev_null_,
                         AboveStdio(open("/dev/null", O_RDONLY | O_CLOEXEC), "open /dev/null"));
  return Status::Ok();
}

Status Launch::StartRank(Rank& r) {
  std::vector<std::string> env = base_env_;
  const std::string n = std::to_string(size_);
  const std::string rank = std::to_string(r.rank);
  env.push_back("FERRY_RANK=" + rank);
  env.push_back("FERRY_SIZE=" + n);
  env.push_back("FERRY_LOCAL_RANK=" + rank);
  env.push_back("FERRY_LOCAL_SIZE=" + n);
  env.push_back(std::string(kEnvServers) + "=" + std::to_string(o_.servers));
  env.push_back(std::string(kEnvWorkers) + "=" + std::to_string(o_.workers));
  // Only a transport the user chose: "auto" must not override a program's own --transport.
  if (o_.transport != "auto") env.push_back(std::string(kEnvTransport) + "=" + o_.transport);
  env.push_back(std::string(kEnvRoleRule) + "=" + std::string(RoleRuleName(o_.role_rule)));
  if (o_.server_threads != 0) {
    env.push_back(std::string(kEnvServerThreads) + "=" + std::to_string(o_.server_threads));
  }
  if (!coordinator_.empty()) {
    env.push_back(std::string(kCoordinatorVar) + "=" + coordinator_);
  } else {
    env.push_back("FERRY_COORDINATOR_FILE=" + coordinator_file_);  // rank 0 only, by the loop
  }
  for (const auto& [key, value] : o_.env) {
    if (key != kCoordinatorVar) env.push_back(key + "=" + value);
  }
  std::vector<char*> cenv, cargv;
  for (std::string& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::vector<std::string> argv = o_.argv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  SpawnRequest req;
  req.path = program_.c_str();
  req.argv = cargv.data();
  req.envp = cenv.data();
  req.signals = &signals_.child();
  req.stdio[0] = r.roles.worker >= 0 && !o_.worker_stdin.empty()
                     ? o_.worker_stdin[static_cast<size_t>(r.roles.worker)]
                 : r.rank == 0 && o_.rank0_stdin >= 0 ? o_.rank0_stdin
                                                      : dev_null_.get();
  Fd out_w, err_w;
  if (o_.tag_output) {
    FERRY_RETURN_IF_ERROR(MakePipe(&r.out.fd, &out_w, /*nonblocking_read=*/true));
    FERRY_RETURN_IF_ERROR(MakePipe(&r.err.fd, &err_w, /*nonblocking_read=*/true));
    r.out.sink = 1;
    r.err.sink = 2;
    r.out.prefixer = LinePrefixer("[rank " + rank + "] ");
    r.err.prefixer = LinePrefixer("[rank " + rank + "] ");
    req.stdio[1] = out_w.get();
    req.stdio[2] = err_w.get();
  }
  FERRY_ASSIGN_OR_RETURN(r.pid, Spawn(&req));
  // out_w/err_w close here: the rank holds the only write ends, so EOF means it (and whatever
  // inherited them) is done.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, r.pid, 0));
  if (pidfd >= 0) r.pidfd = Fd(pidfd);
  return Status::Ok();
}

void Launch::Fail(const std::string& report, const std::string& consequence, int exit_code,
                  int sig) {
  if (cause_set_) return;
  cause_set_ = true;
  consequence_ = consequence;
  exit_code_ = exit_code;
  Report(report);
  for (Rank& r : ranks_) Signal(r, sig);
  kill_at_ = Clock::now() + o_.kill_grace;
}

void Launch::OnSignal(int sig) {
  if (!intercepted_ && !cause_set_ && o_.intercept_signal) {
    intercepted_ = true;
    if (o_.intercept_signal(sig)) {
      Report("received " + SignalName(sig) + "; ending the job (a second one stops the ranks)");
      return;
    }
  }
  if (!intercepted_ && !cause_set_ && o_.signal_rank0_first) {
    intercepted_ = true;
    for (Rank& r : ranks_) {
      if (r.rank == 0 && Running(r)) {
        Report("received " + SignalName(sig) +
               "; forwarding it to rank 0, which ends the job (a second one stops the ranks)");
        Signal(r, sig);
        return;
      }
    }
  }
  const int running = RunningCount();
  if (!cause_set_) {
    Fail("received " + SignalName(sig) + "; forwarding it to " + std::to_string(running) + " rank" +
             (running == 1 ? "" : "s"),
         SignalName(sig), 128 + sig, sig);
    return;
  }
  Report("received " + SignalName(sig) + "; forwarding it");
  for (Rank& r : ranks_) Signal(r, sig);
}

void Launch::OnExit(Rank& r, int wstatus, bool may_hold) {
  r.reaped = true;
  r.pidfd.Reset();
  // Rank 0 may have written the file and exited since the loop last looked.
  if (r.rank == 0) CheckCoordinatorFile();
  const bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  const bool before_address = r.rank == 0 && coordinator_.empty();
  if (cause_set_) {
    if (!ok)
      Report(Who(r) + " stopped after " + consequence_ + " (" + DescribeWaitStatus(wstatus) + ")");
    return;
  }
  if (ok && !(before_address && size_ > 1)) return;
  std::string what = Who(r) + " " + DescribeWaitStatus(wstatus);
  if (o_.replicas > 1 && (r.roles.server >= 0 || r.roles.spare >= 0) && r.roles.worker < 0 &&
      !before_address && (r.rank != 0 || size_ > 1)) {
    // A replicated server: the job decides whether it survives (ps/job/chain.h); its ranks say so.
    // Rank 0 runs the coordinator too, and rank 1 its standby (ps/coordinator/coordinator.h).
    Report(what + "; the job goes on without it (replicas " + std::to_string(o_.replicas) +
           (r.rank == 0 ? "; rank 1 takes over as the coordinator)" : ")"));
    return;
  }
  if (before_address && size_ > 1) {
    what += " before writing its coordinator address to FERRY_COORDINATOR_FILE";
    if (ok) {
      what += "; the program must find the coordinator (ps/launch/rendezvous.h) on every rank";
    }
  }
  if (may_hold && !ok && WIFEXITED(wstatus) && !before_address &&
      (RunningCount() > 0 || !held_.empty())) {
    if (held_.empty()) held_until_ = Clock::now() + kCauseGrace;
    held_.push_back(HeldExit{&r, wstatus});
    if (RunningCount() == 0) ReleaseHeld();  // nobody left to die of a signal
    return;
  }
  Fail(what, "rank " + std::to_string(r.rank) + " failed", ok ? 1 : ExitCodeOf(wstatus), SIGTERM);
  ReleaseHeld();  // a rank killed by a signal came while some were held: they are consequences
}

void Launch::ReleaseHeld() {
  std::vector<HeldExit> held;
  held.swap(held_);
  held_until_.reset();
  for (const HeldExit& h : held) OnExit(*h.rank, h.wstatus, /*may_hold=*/false);
}

void Launch::CheckCoordinatorFile() {
  if (!coordinator_.empty() || cause_set_) return;
  Fd fd(open(coordinator_file_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return;  // not yet (rank 0 renames a complete file into place)
  char buf[512];
  const ssize_t n = read(fd.get(), buf, sizeof buf - 1);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  // Complete once it ends the line (ps/launch/rendezvous.cc renames a finished file into place;
  // this also copes with a rank 0 that writes in place).
  if (text.empty() || text.back() != '\n') return;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (text.empty() || text.find(':') == std::string::npos ||
      text.find_first_of(" \n\t") != std::string::npos) {
    Fail("rank 0 wrote '" + text + "' to FERRY_COORDINATOR_FILE, not a host:port", "rank 0 failed",
         1, SIGTERM);
    return;
  }
  coordinator_ = text;
  if (o_.join_slots > 0 || o_.worker_join_slots > 0) {
    Report("the job's coordinator is at " + coordinator_ + ": a join slot joins with " +
           kCoordinatorVar + "=" + coordinator_ + " and " + (o_.join_slots > 0 ? "--join J" : "") +
           (o_.join_slots > 0 && o_.worker_join_slots > 0 ? " (a server) or " : "") +
           (o_.worker_join_slots > 0 ? "--join-worker J" : ""));
  }
  for (Rank& r : ranks_) {
    if (r.rank == 0) continue;
    Status s = StartRank(r);
    if (!s.ok()) {
      launch_error_ = s.Annotate("start rank " + std::to_string(r.rank));
      Fail("could not start rank " + std::to_string(r.rank) + ": " + s.ToString(),
           "the launch failed", 1, SIGTERM);
      return;
    }
  }
}

void Launch::CheckDeadlines(Clock::time_point now) {
  if (!held_.empty() && (now >= *held_until_ || RunningCount() == 0 || cause_set_)) {
    // No rank died of a signal meanwhile (or the cause came another way): the first held is it.
    ReleaseHeld();
  }
  if (!cause_set_ && o_.timeout.count() > 0 && now >= start_ + o_.timeout) {
    Fail("the job is still running after the timeout of " + Seconds(o_.timeout) + " s; stopping it",
         "the timeout", 124, SIGTERM);
  }
  if (!cause_set_ && coordinator_.empty() && o_.startup_timeout.count() > 0 &&
      now >= start_ + o_.startup_timeout) {
    Fail(Who(ranks_[0]) + " did not write its coordinator address to FERRY_COORDINATOR_FILE " +
             "within " + Seconds(o_.startup_timeout) + " s (the startup timeout); stopping it",
         "rank 0 failed", 1, SIGTERM);
  }
  if (kill_at_ && now >= *kill_at_ && !give_up_at_) {
    for (Rank& r : ranks_) {
      if (!Running(r)) continue;
      Report(Who(r) + " is still running " + Seconds(o_.kill_grace) +
             " s after it was told to stop; sending SIGKILL");
      Signal(r, SIGKILL);
    }
    give_up_at_ = now + std::chrono::seconds(10);
  }
  if (give_up_at_ && now >= *give_up_at_ && RunningCount() > 0) {
    for (Rank& r : ranks_) {
      if (Running(r)) Report(Who(r) + " (pid " + std::to_string(r.pid) + ") survived SIGKILL");
    }
    abandoned_ = true;
  }
}

void Launch::Relay(Stream& s) {
  char buf[64 * 1024];
  while (s.fd.valid()) {
    const ssize_t n = read(s.fd.get(), buf, sizeof buf);
    std::string out;
    if (n > 0) {
      s.prefixer.Feed(std::string_view(buf, static_cast<size_t>(n)), &out);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {  // EOF (or an error, treated alike)
      s.prefixer.Finish(&out);
      s.fd.Reset();
    }
    WriteAll(s.sink, out, &broken_[s.sink]);
    if (n > 0 && static_cast<size_t>(n) < sizeof buf) return;  // drained for now
  }
}

void Launch::PollOnce(Clock::time_point now) {
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, Stream*>> streams;  // index in fds
  fds.push_back({signals_.read_fd(), POLLIN, 0});
  const bool file_tick = coordinator_.empty() && !cause_set_;  // polling for the file
  bool reap_tick = false;
  for (Rank& r : ranks_) {
    if (Running(r)) {
      if (r.pidfd.valid()) {
        fds.push_back({r.pidfd.get(), POLLIN, 0});
      } else {
        reap_tick = true;
      }
    }
    for (Stream* s : {&r.out, &r.err}) {
      if (!s->fd.valid()) continue;
      streams.emplace_back(fds.size(), s);
      fds.push_back({s->fd.get(), POLLIN, 0});
    }
  }
  Clock::time_point wake = Clock::time_point::max();
  if (file_tick) wake = now + std::chrono::milliseconds(10);
  if (reap_tick) wake = std::min(wake, now + std::chrono::milliseconds(20));
  if (!cause_set_ && o_.timeout.count() > 0) wake = std::min(wake, start_ + o_.timeout);
  if (!cause_set_ && coordinator_.empty() && o_.startup_timeout.count() > 0) {
    wake = std::min(wake, start_ + o_.startup_timeout);
  }
  for (const auto& t : {kill_at_, give_up_at_, drain_until_}) {
    if (t) wake = std::min(wake, *t);
  }
  if (held_until_) wake = std::min(wake, *held_until_);
  int timeout_ms = -1;
  if (wake != Clock::time_point::max()) {
    timeout_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1, 0, 60000));
  }
  const int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return;
  if (fds[0].revents != 0) {
    unsigned char sigs[64];
    const ssize_t got = read(signals_.read_fd(), sigs, sizeof sigs);
    for (ssize_t i = 0; i < got; ++i) OnSignal(sigs[i]);
  }
  for (auto [at, s] : streams) {
    if (fds[at].revents != 0) Relay(*s);
  }
}

bool Launch::Done(Clock::time_point now) {
  if (abandoned_) return true;
  if (RunningCount() > 0 || !held_.empty()) return false;
  // Everyone that will run has run: rank 0 alone when it failed before the others started.
  // Then drain the pipes to EOF, bounded: a rank's own child may still hold them open.
  if (!drain_until_) drain_until_ = now + std::chrono::seconds(2);
  for (const Rank& r : ranks_) {
    if ((r.out.fd.valid() || r.err.fd.valid()) && now < *drain_until_) return false;
  }
  return true;
}

Result<int> Launch::Run() {
  start_ = Clock::now();
  if (coordinator_.empty()) {
    FERRY_RETURN_IF_ERROR(StartRank(ranks_[0]).Annotate("start rank 0"));
  } else {
    for (Rank& r : ranks_) {
      Status s = StartRank(r);
      if (!s.ok()) {
        if (r.rank == 0) return s.Annotate("start rank 0");
        launch_error_ = s.Annotate("start rank " + std::to_string(r.rank));
        Fail("could not start rank " + std::to_string(r.rank) + ": " + s.ToString(),
             "the launch failed", 1, SIGTERM);
        break;
      }
    }
  }
  while (true) {
    const auto now = Clock::now();
    if (Done(now)) break;
    PollOnce(now);
    CheckCoordinatorFile();  // before reaping: a fast rank 0 may write the file and exit
    for (Rank& r : ranks_) {
      if (!Running(r)) continue;
      int ws = 0;
      const pid_t got = waitpid(r.pid, &ws, WNOHANG);
      if (got == r.pid) OnExit(r, ws);
      // Reaped behind our back (another thread's waitpid(-1)): how it ended is lost.
      if (got < 0 && errno == ECHILD) OnExit(r, 0);
    }
    CheckDeadlines(Clock::now());
  }
  for (Rank& r : ranks_) {
    for (Stream* s : {&r.out, &r.err}) {
      std::string out;
      s->prefixer.Finish(&out);
      WriteAll(s->sink, out, &broken_[s->sink]);
    }
  }
  if (!launch_error_.ok()) return launch_error_;
  return exit_code_;
}

}  // namespace

Result<int> RunLocalCluster(const LocalClusterOptions& options) {
  FERRY_RETURN_IF_ERROR(CheckOptions(options));
  FERRY_ASSIGN_OR_RETURN(std::string program, ResolveProgram(options.argv[0]));
  if (g_active.exchange(true)) {
    return InvalidArgument("RunLocalCluster is already running in this process");
  }
  struct Release {
    ~Release() { g_active.store(false); }
  } release;
  SignalScope signals;
  FERRY_RETURN_IF_ERROR(signals.Install());
  Launch launch(options, std::move(program), signals);
  FERRY_RETURN_IF_ERROR(launch.Prepare());
  return launch.Run();
}

}  // namespace ferry::ps
