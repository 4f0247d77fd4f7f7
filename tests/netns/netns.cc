#include "tests/netns/netns.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace ferry::netns {
namespace {

using Clock = std::chrono::steady_clock;

// Registered namespace paths for EmergencyCleanup(): fixed storage, no allocation in the handler.
constexpr int kMaxNamespaces = 64;
constexpr int kPathMax = 96;
char g_paths[kMaxNamespaces][kPathMax];
volatile sig_atomic_t g_used[kMaxNamespaces];

void Register(const std::string& name) {
  std::string path = "/run/netns/" + name;
  for (int i = 0; i < kMaxNamespaces; ++i) {
    if (g_used[i]) continue;
    std::snprintf(g_paths[i], kPathMax, "%s", path.c_str());
    g_used[i] = 1;
    return;
  }
}

void Unregister(const std::string& name) {
  std::string path = "/run/netns/" + name;
  for (int i = 0; i < kMaxNamespaces; ++i) {
    if (g_used[i] && path == g_paths[i]) g_used[i] = 0;
  }
}

std::string Resolve(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin",
                          "/usr/local/bin"}) {
    std::string p = std::string(dir) + "/" + prog;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

char g_crash_line[512];
volatile sig_atomic_t g_crash_len = 0;
char g_results_path[512];

void OnSignal(int sig) {
  const int len = g_crash_len;
  if (len > 0) {
    ssize_t w = write(1, g_crash_line, static_cast<size_t>(len));
    if (g_results_path[0] != '\0') {
      int fd = open(g_results_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) {
        w = write(fd, g_crash_line, static_cast<size_t>(len));
        close(fd);
      }
    }
    (void)w;
  }
  EmergencyCleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

std::string MissingRequirements() {
  if (geteuid() != 0) return "needs root (network namespaces, veth, nftables); run as root";
  for (const char* prog : {"ip", "nft", "tc"}) {
    if (Resolve(prog).empty()) {
      return std::string("'") + prog + "' not found; apt-get install " +
             (std::string(prog) == "nft" ? "nftables" : "iproute2");
    }
  }
  return "";
}

Status Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
           std::string* output) {
  if (argv.empty()) return InvalidArgument("empty command");
  const std::string path = Resolve(argv[0]);
  if (path.empty()) return NotFound("command not found: " + argv[0]);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return IoError("pipe2", errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  std::vector<char*> cargv;
  cargv.push_back(const_cast<char*>(path.c_str()));
  for (size_t i = 1; i < argv.size(); ++i) cargv.push_back(const_cast<char*>(argv[i].c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, path.c_str(), &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return IoError("posix_spawn " + path, rc);
  }
  std::string out;
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[512];
    ssize_t r = read(pipefd[0], buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (out.size() < 4096) out.append(buf, static_cast<size_t>(r));
  }
  close(pipefd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (output != nullptr) *output = out;
  if (timed_out) {
    return Timeout("'" + Join(argv) + "' did not finish within " +
                   std::to_string(timeout.count()) + " ms");
  }
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    return Status(Code::kIoError, "'" + Join(argv) + "' failed (" +
                                      (WIFEXITED(ws) ? "exit " + std::to_string(WEXITSTATUS(ws))
                                                     : "signal " + std::to_string(WTERMSIG(ws))) +
                                      "): " + out);
  }
  return Status::Ok();
}

void EmergencyCleanup() {
  for (int i = 0; i < kMaxNamespaces; ++i) {
    if (!g_used[i]) continue;
    umount2(g_paths[i], MNT_DETACH);
    unlink(g_paths[i]);
    g_used[i] = 0;
  }
}

void InstallCleanupHandlers() {
  if (const char* p = std::getenv("FERRY_RELIABILITY_RESULTS"); p != nullptr) {
    std::snprintf(g_results_path, sizeof(g_results_path), "%s", p);
  }
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGABRT}) signal(sig, OnSignal);
}

void SetCrashLine(const std::string& line) {
  g_crash_len = 0;
  std::snprintf(g_crash_line, sizeof(g_crash_line), "%s", line.c_str());
  g_crash_len = static_cast<sig_atomic_t>(std::min(line.size(), sizeof(g_crash_line) - 1));
}

void SweepStaleNamespaces() {
  DIR* d = opendir("/run/netns");
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    int pid = 0;
    char rest[64];
    if (std::sscanf(e->d_name, "ferry-%d-%63s", &pid, rest) != 2 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) continue;  // still running
    stale.push_back(e->d_name);
  }
  closedir(d);
  for (const std::string& name : stale) {
    std::fprintf(stderr, "netns: removing stale namespace %s\n", name.c_str());
    (void)Run({"ip", "netns", "del", name});
  }
}

// ---- NetnsPair -------------------------------------------------------------------------------

Result<std::unique_ptr<NetnsPair>> NetnsPair::Create(int index) {
  if (index < 0 || index > 255) return InvalidArgument("netns index must be 0..255");
  std::unique_ptr<NetnsPair> p(new NetnsPair());
  const std::string pid = std::to_string(getpid());
  const std::string n = std::to_string(index);
  p->ns_a_ = "ferry-" + pid + "-" + n + "-a";
  p->ns_b_ = "ferry-" + pid + "-" + n + "-b";
  // Interface names are limited to 15 characters: "fy" + pid (<= 7 digits) + side + index.
  p->if_a_ = "fy" + pid + "a" + n;
  p->if_b_ = "fy" + pid + "b" + n;
  p->addr_a_ = "198.18." + n + ".1";
  p->addr_b_ = "198.18." + n + ".2";

  Register(p->ns_a_);
  FERRY_RETURN_IF_ERROR(Run({"ip", "netns", "add", p->ns_a_}));
  p->created_a_ = true;
  Register(p->ns_b_);
  FERRY_RETURN_IF_ERROR(Run({"ip", "netns", "add", p->ns_b_}));
  p->created_b_ = true;
  // The veth pair is created directly inside the namespaces, never in the caller's namespace.
  FERRY_RETURN_IF_ERROR(Run({"ip", "-n", p->ns_a_, "link", "add", p->if_a_, "type", "veth",
                             "peer", "name", p->if_b_, "netns", p->ns_b_}));
  FERRY_RETURN_IF_ERROR(
      Run({"ip", "-n", p->ns_a_, "addr", "add", p->addr_a_ + "/30", "dev", p->if_a_}));
  FERRY_RETURN_IF_ERROR(
      Run({"ip", "-n", p->ns_b_, "addr", "add", p->addr_b_ + "/30", "dev", p->if_b_}));
  for (Side s : {Side::kA, Side::kB}) {
    FERRY_RETURN_IF_ERROR(Run({"ip", "-n", p->ns(s), "link", "set", "lo", "up"}));
    FERRY_RETURN_IF_ERROR(Run({"ip", "-n", p->ns(s), "link", "set", p->ifname(s), "up"}));
  }
  // A veth end reports carrier (IFF_RUNNING) only after the kernel's link watcher has run, up to
  // a second after both ends are up. UCX skips interfaces that are not running, so wait for it.
  const auto carrier_deadline = Clock::now() + std::chrono::seconds(5);
  for (Side s : {Side::kA, Side::kB}) {
    for (;;) {
      std::string out;
      FERRY_RETURN_IF_ERROR(
          Run({"ip", "-n", p->ns(s), "-o", "link", "show", "dev", p->ifname(s)},
              std::chrono::milliseconds(5000), &out));
      const bool carrier = out.find("LOWER_UP") != std::string::npos &&
                           out.find("NO-CARRIER") == std::string::npos &&
                           out.find("state UP") != std::string::npos;
      if (carrier) {
        break;
      }
      if (Clock::now() > carrier_deadline) {
        return Timeout("veth " + p->ifname(s) + " has no carrier after 5 s: " + out);
      }
      usleep(20000);
    }
  }
  p->fd_a_ = open(("/run/netns/" + p->ns_a_).c_str(), O_RDONLY | O_CLOEXEC);
  if (p->fd_a_ < 0) return IoError("open /run/netns/" + p->ns_a_, errno);
  return p;
}

NetnsPair::~NetnsPair() {
  if (fd_a_ >= 0) close(fd_a_);
  if (created_a_) (void)Run({"ip", "-n", ns_a_, "link", "del", if_a_});
  for (const std::string* name : {&ns_a_, &ns_b_}) {
    if (name->empty()) continue;
    if ((name == &ns_a_ && created_a_) || (name == &ns_b_ && created_b_)) {
      Status s = Run({"ip", "netns", "del", *name});
      if (!s.ok()) std::fprintf(stderr, "netns: %s\n", s.ToString().c_str());
    }
    Unregister(*name);
  }
}

std::vector<std::string> NetnsPair::ExecIn(Side s, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {Resolve("ip"), "netns", "exec", ns(s)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Status NetnsPair::Nft(Side s, const std::string& script) {
  return Run({"ip", "netns", "exec", ns(s), Resolve("nft"), script});
}

Status NetnsPair::EnsureTable(Side s) {
  bool& made = table_[s == Side::kA ? 0 : 1];
  if (made) return Status::Ok();
  FERRY_RETURN_IF_ERROR(
      Nft(s, "add table inet ferry; "
             "add chain inet ferry out { type filter hook output priority 0; }; "
             "add chain inet ferry in { type filter hook input priority 0; }"));
  made = true;
  return Status::Ok();
}

Status NetnsPair::RandomLoss(int percent) {
  if (percent <= 0 || percent >= 100) return InvalidArgument("loss percent must be 1..99");
  for (Side s : {Side::kA, Side::kB}) {
    FERRY_RETURN_IF_ERROR(EnsureTable(s));
    FERRY_RETURN_IF_ERROR(Nft(s, "add rule inet ferry out oifname \"" + ifname(s) +
                                     "\" numgen random mod 100 < " + std::to_string(percent) +
                                     " drop"));
  }
  return Status::Ok();
}

Status NetnsPair::BlackHole() {
  FERRY_RETURN_IF_ERROR(EnsureTable(Side::kA));
  return Nft(Side::kA, "add rule inet ferry out ip daddr " + addr_b_ +
                           " drop; add rule inet ferry in ip saddr " + addr_b_ + " drop");
}

Status NetnsPair::RateLimit(const std::string& rate) {
  for (Side s : {Side::kA, Side::kB}) {
    FERRY_RETURN_IF_ERROR(Run({"tc", "-n", ns(s), "qdisc", "add", "dev", ifname(s), "root", "tbf",
                               "rate", rate, "burst", "32kbit", "latency", "400ms"}));
  }
  return Status::Ok();
}

Status NetnsPair::LinkDown() { return Run({"ip", "-n", ns_a_, "link", "set", if_a_, "down"}); }

// ---- NetnsEnter ------------------------------------------------------------------------------

Result<std::unique_ptr<NetnsEnter>> NetnsEnter::Enter(int ns_fd) {
  int saved_net = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved_net < 0) return IoError("open /proc/thread-self/ns/net", errno);
  int saved_mnt = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (saved_mnt < 0) {
    int err = errno;
    close(saved_net);
    return IoError("open /proc/thread-self/ns/mnt", err);
  }
  std::unique_ptr<NetnsEnter> guard(new NetnsEnter(saved_net, saved_mnt));
  if (setns(ns_fd, CLONE_NEWNET) != 0) return IoError("setns(CLONE_NEWNET)", errno);
  // A private mount namespace for this thread only (CLONE_NEWNS implies CLONE_FS: the thread
  // stops sharing its filesystem context with the other threads), so the sysfs below is seen
  // by nobody else. MS_SLAVE keeps the remount from propagating back to the host.
  if (unshare(CLONE_NEWNS) != 0) return IoError("unshare(CLONE_NEWNS)", errno);
  if (mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) {
    return IoError("mount --make-rslave /", errno);
  }
  umount2("/sys", MNT_DETACH);
  if (mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0) return IoError("mount sysfs /sys", errno);
  return guard;
}

NetnsEnter::~NetnsEnter() {
  if (setns(saved_mnt_, CLONE_NEWNS) != 0) {
    std::fprintf(stderr, "netns: cannot return to the original mount namespace: %s\n",
                 std::strerror(errno));
  }
  if (setns(saved_net_, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "netns: cannot return to the original network namespace: %s\n",
                 std::strerror(errno));
  }
  close(saved_mnt_);
  close(saved_net_);
}

}  // namespace ferry::netns
