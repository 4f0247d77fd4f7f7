// Process plumbing for the local launcher (see spawn.h).
#include "ps/launch/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <optional>

namespace ferry::ps::process {

Result<Fd> AboveStdio(int fd, const char* what) {
  if (fd < 0) return IoError(what, errno);
  if (fd > 2) return Fd(fd);
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  if (moved < 0) return IoError(what, err);
  return Fd(moved);
}

Status MakePipe(Fd* read_end, Fd* write_end, bool nonblocking_read) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe2", errno);
  FERRY_ASSIGN_OR_RETURN(*read_end, AboveStdio(fds[0], "pipe2"));
  FERRY_ASSIGN_OR_RETURN(*write_end, AboveStdio(fds[1], "pipe2"));
  if (nonblocking_read && fcntl(read_end->get(), F_SETFL, O_NONBLOCK) != 0) {
    return IoError("fcntl O_NONBLOCK", errno);
  }
  return Status::Ok();
}

// Writes everything to one of the launcher's own streams; a closed reader (EPIPE: `| head`)
// drops the rest silently so the ranks never block on a full pipe. Blocking otherwise: if the
// reader is slow, the relay (and so the ranks) slow down with it.
void WriteAll(int fd, std::string_view text, bool* broken) {
  while (!text.empty() && !*broken) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {  // someone made our stdout non-blocking
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      *broken = true;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Signals. Handlers only write the signal number into a pipe (the self-pipe trick); the loop reads
// it. The write end is global because a handler has no other way to find it.

namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_signal_pipe{-1};

extern "C" void OnLauncherSignal(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(sig);
    (void)!::write(fd, &b, 1);
  }
  errno = saved;
}

}  // namespace

SignalScope::~SignalScope() {
  for (const auto& [sig, old] : saved_) sigaction(sig, &old, nullptr);
  g_signal_pipe.store(-1);
}

Status SignalScope::Install() {
  FERRY_RETURN_IF_ERROR(MakePipe(&read_, &write_, /*nonblocking_read=*/true));
  if (fcntl(write_.get(), F_SETFL, O_NONBLOCK) != 0) return IoError("fcntl O_NONBLOCK", errno);
  g_signal_pipe.store(write_.get());
  for (int sig : kForwarded) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) return IoError("sigaction", errno);
    child_.changed[sig] = true;
    if (old.sa_handler == SIG_IGN) {  // nohup & co: stays ignored, here and in the ranks
      child_.ignore[sig] = true;
      continue;
    }
    struct sigaction sa {};
    sa.sa_handler = OnLauncherSignal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, nullptr) != 0) return IoError("sigaction", errno);
    saved_.emplace_back(sig, old);
  }
  // SIGPIPE ignored: a relay write to a closed stdout must not kill the launcher (the ranks
  // would die with it). SIGCHLD at its default: ignored, the kernel would reap the ranks
  // before waitpid could tell how they ended.
  for (auto [sig, handler] : {std::pair{SIGPIPE, SIG_IGN}, std::pair{SIGCHLD, SIG_DFL}}) {
    struct sigaction old {};
    struct sigaction sa {};
    sa.sa_handler = handler;
    if (sigaction(sig, &sa, &old) != 0) return IoError("sigaction", errno);
    saved_.emplace_back(sig, old);
    child_.changed[sig] = true;
    child_.ignore[sig] = old.sa_handler == SIG_IGN;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Spawning. posix_spawn's mechanism (glibc: clone with CLONE_VM | CLONE_VFORK on a separate
// stack; we are suspended until the child execs or exits) plus the parent-death signal, which
// posix_spawn has no attribute for. The child runs on our memory: it may only make system calls
// and write its failure into the request.

namespace {

int ChildMain(void* arg) {
  auto* r = static_cast<SpawnRequest*>(arg);
  // 1. No handler of ours may run in here: default dispositions (ignored ones stay ignored).
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa {};
    if (r->signals->changed[sig]) {
      sa.sa_handler = r->signals->ignore[sig] ? SIG_IGN : SIG_DFL;
    } else {
      struct sigaction cur {};
      if (sigaction(sig, nullptr, &cur) != 0) continue;  // glibc's reserved signals
      if (cur.sa_handler == SIG_IGN || cur.sa_handler == SIG_DFL) continue;
      sa.sa_handler = SIG_DFL;
    }
    sigaction(sig, &sa, nullptr);
  }
  // 2. Die with the launcher. If it died before this line, nobody would signal us: check.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    r->error = errno;
    r->step = "prctl(PR_SET_PDEATHSIG)";
    _exit(127);
  }
  if (getppid() != r->parent) _exit(127);
  // 3. A process group of our own (see the header), 4. stdio, 5. an empty signal mask.
  if (setpgid(0, 0) != 0) {
    r->error = errno;
    r->step = "setpgid";
    _exit(127);
  }
  for (int i = 0; i < 3; ++i) {
    if (r->stdio[i] >= 0 && dup2(r->stdio[i], i) < 0) {
      r->error = errno;
      r->step = "dup2";
      _exit(127);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(r->path, r->argv, r->envp);
  r->error = errno;
  r->step = "execve";
  _exit(127);
}

}  // namespace

Result<pid_t> Spawn(SpawnRequest* r) {
  // The child's stack: ChildMain's frame and the libc calls above need a few KiB; generous for
  // sanitizer builds.
  constexpr size_t kStack = 256 * 1024;
  void* stack =
      mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return IoError("mmap a stack for spawning", errno);
  // All signals blocked across clone, so no handler runs in the child before it resets them.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  r->parent = getpid();
  r->error = 0;
  const pid_t pid =
      clone(ChildMain, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, r);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  munmap(stack, kStack);
  if (pid < 0) return IoError("clone", clone_errno);
  if (r->error != 0) {  // the child failed before exec and exited
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    return IoError(std::string(r->step) + " " + r->path, r->error);
  }
  return pid;
}

// argv[0] as execve needs it: a path as given, or the first executable match in PATH.
Result<std::string> ResolveProgram(const std::string& name) {
  if (name.empty()) return InvalidArgument("the program name is empty");
  auto check = [](const std::string& path) -> Status {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      return errno == ENOENT ? NotFound("program '" + path + "' does not exist")
                             : IoError("stat " + path, errno);
    }
    if (S_ISDIR(st.st_mode)) return PermissionDenied("program '" + path + "' is a directory");
    if (access(path.c_str(), X_OK) != 0) {
      return PermissionDenied("program '" + path + "' is not executable");
    }
    return Status::Ok();
  };
  if (name.find('/') != std::string::npos) {
    FERRY_RETURN_IF_ERROR(check(name));
    return name;
  }
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::optional<Status> denied;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t colon = path.find(':', pos);
    if (colon == std::string::npos) colon = path.size();
    const std::string dir = colon == pos ? "." : path.substr(pos, colon - pos);
    const std::string candidate = dir + "/" + name;
    Status s = check(candidate);
    if (s.ok()) return candidate;
    if (s.code() == Code::kPermissionDenied && !denied) denied = s;
    pos = colon + 1;
  }
  if (denied) return *denied;
  return NotFound("program '" + name + "' not found in PATH (" + path + ")");
}

}  // namespace ferry::ps::process
