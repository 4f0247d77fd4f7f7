// A peer in another process: tests/common/peer_main.cc built as `ferry_test_peer`, started with
// posix_spawn so that the test can SIGKILL it in the middle of transfers. (Not fork+exec: a forked
// child of a process with RDMA registrations may lack the pages marked MADV_DONTFORK, its argv
// included; posix_spawn never copies the address space.)
//
// The peer creates a transport of the given configuration with a progress thread, registers a
// region filled with FillPattern(seed), advertises it, connects to the test's listener and then
// either serves its memory ("serve") or also writes its pattern into the first region the test
// advertised, keeping several large writes in flight ("write"). It exits by itself after
// `lifetime`, and dies with the test process, so it never lingers: Spawn passes its pid in
// FERRY_TEST_PEER_PARENT and the peer calls GuardPeerParent() first thing.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/backends.h"
#include "transport/status.h"

namespace ferry::testing {

struct PeerOptions {
  std::string connect;  // "127.0.0.1:port" of the test's listener
  uint64_t region_bytes = 1 << 20;
  uint64_t seed = 1;
  Millis peer_timeout{5000};
  std::string mode = "serve";  // "serve" or "write"
  Millis lifetime{120000};
};

// Path of the ferry_test_peer binary: $FERRY_TEST_PEER if set, else the one built with the tests.
std::string TestPeerPath();

// The command line ferry_test_peer understands.
std::vector<std::string> PeerCommandLine(const BackendConfig& config, const PeerOptions& options);

// Environment variable naming the pid of the process that spawned the peer.
inline constexpr const char* kPeerParentEnv = "FERRY_TEST_PEER_PARENT";

// ferry_test_peer, first thing in main: when FERRY_TEST_PEER_PARENT is set it arranges SIGKILL on
// the death of its spawner (PR_SET_PDEATHSIG) and exits with 4 if the spawner is already gone
// (it was reparented). Unset (the peer was started by hand): no guard.
class PeerProcess {
 public:
  // Starts argv[0] (a path, not searched in PATH) with our environment plus
  // FERRY_TEST_PEER_PARENT=<our pid>. Call it from a thread that outlives the child: the kernel
  // delivers PR_SET_PDEATHSIG when the spawning thread exits.
  static Result<std::unique_ptr<PeerProcess>> Spawn(const std::vector<std::string>& argv);
  ~PeerProcess();  // kills and reaps the child if still running
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // SIGKILL and reap. Idempotent.
  void Kill();
  // True while the child has not exited (reaps it if it has).
  bool Running();
  // Exit description once reaped ("exit 0", "signal 9"); empty while running.
  const std::string& exit_description() const { return exit_; }

 private:
  explicit PeerProcess(pid_t pid) : pid_(pid) {}
  void Describe(int wstatus);
  pid_t pid_;
  bool reaped_ = false;
  std::string exit_;
};

}  // namespace ferry::testing
