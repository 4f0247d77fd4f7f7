#include "tools/bench/local.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace ferry::bench {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<LocalServer> LocalServer::Spawn(const std::vector<std::string>& args, Millis timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe", errno);
  // Build argv before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> storage;
  storage.push_back("/proc/self/exe");
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return IoError("fork", err);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  LocalServer server;
  server.pid_ = pid;
  server.stdout_fd_ = fds[0];
  // Read the banner line.
  std::string line;
  const int64_t deadline = NowMs() + timeout.count();
  while (line.find('\n') == std::string::npos) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) return Timeout("the local server did not report its address in time");
    pollfd p{server.stdout_fd_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) return IoError("poll", errno);
    if (r <= 0) continue;
    char buf[256];
    const ssize_t n = read(server.stdout_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status exited = server.Wait(Millis(2000));
      return Status(Code::kPeerFailure, "the local server exited before listening" +
                                            (exited.ok() ? std::string() : ": " + exited.message()));
    }
    line.append(buf, static_cast<size_t>(n));
    if (line.size() > 4096) return ProtocolError("the local server printed an overlong banner");
  }
  line.resize(line.find('\n'));
  const std::string banner = kListenBanner;
  if (line.compare(0, banner.size(), banner) != 0) {
    return ProtocolError("unexpected first line from the local server: '" + line + "'");
  }
  server.address_ = line.substr(banner.size());
  return server;
}

LocalServer::LocalServer(LocalServer&& other) noexcept
    : pid_(other.pid_), stdout_fd_(other.stdout_fd_), address_(std::move(other.address_)) {
  other.pid_ = -1;
  other.stdout_fd_ = -1;
}

Status LocalServer::Wait(Millis timeout) {
  if (pid_ < 0) return Status::Ok();
  const int64_t deadline = NowMs() + timeout.count();
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
      if (WIFEXITED(status)) {
        return Status(Code::kPeerFailure,
                      "the local server exited with status " + std::to_string(WEXITSTATUS(status)));
      }
      return Status(Code::kPeerFailure,
                    "the local server died from signal " + std::to_string(WTERMSIG(status)));
    }
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return IoError("waitpid", errno);
    }
    if (NowMs() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return Timeout("the local server did not exit in time and was killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

LocalServer::~LocalServer() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

}  // namespace ferry::bench
