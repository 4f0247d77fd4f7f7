#include "tools/bench/local.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace ferry::bench {
namespace {

constexpr const char* kParentEnv = "FERRY_LOCAL_PARENT";

// In a server started by Spawn (FERRY_LOCAL_PARENT set): die with the client (SIGTERM on its
// death, PR_SET_PDEATHSIG) and exit at once if it is already gone (we were reparented). It runs
// as a static initializer because the server is this same binary re-executed and local.cc is
// linked into every tool that can be one; nothing here depends on other initializers.
bool GuardLocalParent() {
  const char* env = std::getenv(kParentEnv);
  if (env == nullptr || *env == '\0') return false;
  char* end = nullptr;
  const long expected = std::strtol(env, &end, 10);
  if (*end != '\0' || expected <= 0) return false;
  unsetenv(kParentEnv);  // not inherited by anything the server might start
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != static_cast<pid_t>(expected)) {
    _exit(127);
  }
  return true;
}

[[maybe_unused]] const bool kGuarded = GuardLocalParent();

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<LocalServer> LocalServer::Spawn(const std::vector<std::string>& args, Millis timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe", errno);
  std::vector<std::string> storage;
  storage.push_back("/proc/self/exe");
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  const size_t key_len = std::strlen(kParentEnv);
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, kParentEnv, key_len) == 0 && (*e)[key_len] == '=') continue;
    env_storage.emplace_back(*e);
  }
  env_storage.push_back(std::string(kParentEnv) + "=" + std::to_string(getpid()));
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  // posix_spawn (vfork semantics) rather than fork+exec: over verbs a forked child may lack the
  // pages registration marked MADV_DONTFORK, and crash before exec. The parent-death guard runs
  // in the child itself (GuardLocalParent, before main).
  posix_spawn_file_actions_t actions;
  if (const int rc = posix_spawn_file_actions_init(&actions); rc != 0) {
    close(fds[0]);
    close(fds[1]);
    return IoError("posix_spawn_file_actions_init", rc);
  }
  int rc = posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = -1;
  if (rc == 0)
    rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    close(fds[0]);
    close(fds[1]);
    return IoError("posix_spawn /proc/self/exe", rc);
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
      return Status(Code::kPeerFailure,
                    "the local server exited before listening" +
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
