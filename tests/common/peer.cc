#include "tests/common/peer.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

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
  // Everything the child needs is built before fork(): after it only async-signal-safe calls.
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return IoError("fork", errno);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    execv(cargv[0], cargv.data());
    _exit(127);
  }
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
