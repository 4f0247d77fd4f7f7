#include "tests/common/peer.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ferry::testing {

std::string TestPeerPath() {
  if (const char* env = std::getenv("FERRY_TEST_PEER"); env != nullptr && *env != '\0') return env;
  return FERRY_TEST_PEER_PATH;
}

std::vector<std::string> PeerCommandLine(const BackendConfig& config, const PeerOptions& o) {
  std::vector<std::string> argv = {TestPeerPath(), "--backend", config.backend};
  for (const auto& [k, v] : config.params) {
    argv.push_back("--param");
    argv.push_back(k + "=" + v);
  }
  argv.insert(argv.end(),
              {"--connect", o.connect, "--region-bytes", std::to_string(o.region_bytes), "--seed",
               std::to_string(o.seed), "--peer-timeout-ms", std::to_string(o.peer_timeout.count()),
               "--mode", o.mode, "--lifetime-ms", std::to_string(o.lifetime.count())});
  return argv;
}

Result<std::unique_ptr<PeerProcess>> PeerProcess::Spawn(const std::vector<std::string>& argv) {
  if (argv.empty()) return InvalidArgument("empty peer command line");
  if (access(argv[0].c_str(), X_OK) != 0) return IoError("peer binary " + argv[0], errno);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  // The child's environment: ours plus the parent pid it must die with (see peer.h).
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, kPeerParentEnv, std::strlen(kPeerParentEnv)) == 0 &&
        (*e)[std::strlen(kPeerParentEnv)] == '=') {
      continue;
    }
    env_storage.emplace_back(*e);
  }
  env_storage.push_back(std::string(kPeerParentEnv) + "=" + std::to_string(getpid()));
  std::vector<char*> cenv;
  for (std::string& e : env_storage) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  // posix_spawn, not fork+exec: glibc starts the child with vfork semantics (shared address
  // space until exec), so the child never depends on a copy of our heap. With fork, pages that
  // RDMA registration marked MADV_DONTFORK (libibverbs fork support, which UCX's IB transports
  // can turn on) are missing in the child, and reading argv from them between fork and exec
  // crashed the child with SIGSEGV. The parent-death guard moved into the peer binary.
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, cargv[0], nullptr, nullptr, cargv.data(), cenv.data());
  if (rc != 0) return IoError("posix_spawn " + argv[0], rc);
  return std::unique_ptr<PeerProcess>(new PeerProcess(pid));
}

PeerProcess::~PeerProcess() {
  Kill();
}

void PeerProcess::Describe(int wstatus) {
  reaped_ = true;
  if (WIFEXITED(wstatus)) {
    exit_ = "exit " + std::to_string(WEXITSTATUS(wstatus));
  } else if (WIFSIGNALED(wstatus)) {
    exit_ = "signal " + std::to_string(WTERMSIG(wstatus));
  } else {
    exit_ = "status " + std::to_string(wstatus);
  }
}

void PeerProcess::Kill() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  Describe(wstatus);
}

bool PeerProcess::Running() {
  if (reaped_) return false;
  int wstatus = 0;
  pid_t r = waitpid(pid_, &wstatus, WNOHANG);
  if (r == pid_) {
    Describe(wstatus);
    return false;
  }
  return true;
}

}  // namespace ferry::testing
