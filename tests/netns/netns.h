// Network namespaces for the reliability tests: a pair of namespaces joined by a veth pair, each
// end holding an address from 198.18.0.0/15 (RFC 2544 benchmarking space) that exists only inside
// that namespace, plus the knobs the scenarios turn (nftables drops, tbf rate limits, link down).
//
//   ns "ferry-<pid>-<n>-a"                    ns "ferry-<pid>-<n>-b"
//   +-----------------------+   veth pair    +-----------------------+
//   | fy<pid>a<n>           |<-------------->| fy<pid>b<n>           |
//   | 198.18.<n>.1/30  + lo |                | 198.18.<n>.2/30  + lo |
//   +-----------------------+                +-----------------------+
//
// The test process enters namespace A on its main thread (NetnsEnter) for the whole test body, so
// every socket its transports and proxies open lives there (threads started meanwhile inherit
// it); the peer process is started inside B with `ip netns exec`.
//
// Cleanup: NetnsPair's destructor deletes both namespaces (and with them the veth pair). Every
// namespace is also registered in a fixed table that EmergencyCleanup() walks with
// async-signal-safe calls only (umount2 + unlink of /run/netns/<name>), which the watchdog and
// the SIGTERM/SIGINT handlers call before the process dies. SweepStaleNamespaces() removes
// namespaces left by earlier runs whose process no longer exists (e.g. after SIGKILL).
//
// Thread-safety: none; a test drives its pair from one thread. Requires root, `ip` and `nft`.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/status.h"

namespace ferry::netns {

// Empty when this process can run the suite; otherwise why not (for GTEST_SKIP).
std::string MissingRequirements();

// Runs argv[0] (absolute path or found in the sbin/bin directories) with a bounded wait; a
// non-zero exit or a timeout becomes an error carrying the command line and its output.
// `output`, when given, receives stdout+stderr (first 4 KiB).
Status Run(const std::vector<std::string>& argv,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
           std::string* output = nullptr);

// Async-signal-safe: unmounts and unlinks every namespace this process created and has not yet
// deleted.
void EmergencyCleanup();
// Installs SIGTERM/SIGINT/SIGHUP/SIGABRT handlers that write the crash line (if set), run
// EmergencyCleanup() and then re-raise with the default action.
void InstallCleanupHandlers();
// A line the signal handlers write to stdout and to $FERRY_RELIABILITY_RESULTS (read when the
// handlers are installed) before the process dies. Empty clears it.
void SetCrashLine(const std::string& line);
// Deletes /run/netns/ferry-<pid>-* whose <pid> is no longer a running process.
void SweepStaleNamespaces();

enum class Side { kA, kB };

class NetnsPair {
 public:
  // Creates the namespaces, the veth pair and the addresses; on any failure everything created so
  // far is deleted again. `index` (0..255) picks the /30 and makes names unique in this process.
  static Result<std::unique_ptr<NetnsPair>> Create(int index);
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  const std::string& ns(Side s) const { return s == Side::kA ? ns_a_ : ns_b_; }
  const std::string& ifname(Side s) const { return s == Side::kA ? if_a_ : if_b_; }
  const std::string& addr(Side s) const { return s == Side::kA ? addr_a_ : addr_b_; }
  int fd_a() const { return fd_a_; }

  // Drops `percent` % of the packets leaving each namespace (nftables numgen), so both directions
  // lose that share.
  Status RandomLoss(int percent);
  // Drops everything between the two addresses, in both directions, from now on.
  Status BlackHole();
  // Token-bucket rate limit on both veth ends ("10mbit").
  Status RateLimit(const std::string& rate);
  // `ip link set <veth in A> down`.
  Status LinkDown();
  // argv run inside namespace `s` via `ip netns exec`.
  std::vector<std::string> ExecIn(Side s, const std::vector<std::string>& argv) const;

 private:
  NetnsPair() = default;
  Status Nft(Side s, const std::string& script);
  Status EnsureTable(Side s);

  std::string ns_a_, ns_b_, if_a_, if_b_, addr_a_, addr_b_;
  bool table_[2] = {false, false};
  bool created_a_ = false, created_b_ = false;
  int fd_a_ = -1;
};

// Moves the calling thread into a network namespace for its lifetime, then back. Like
// `ip netns exec`, it also gives the thread a private mount namespace with a sysfs mounted from
// inside the network namespace: UCX lists network devices from /sys/class/net, and the host's
// sysfs would show the host's devices (UCX then finds only `lo` and cannot reach the peer).
// Threads started meanwhile inherit both namespaces; they must have ended before the destructor
// runs, or the thread cannot return to the original mount namespace (reported on stderr).
class NetnsEnter {
 public:
  static Result<std::unique_ptr<NetnsEnter>> Enter(int ns_fd);
  ~NetnsEnter();
  NetnsEnter(const NetnsEnter&) = delete;
  NetnsEnter& operator=(const NetnsEnter&) = delete;

 private:
  NetnsEnter(int saved_net, int saved_mnt) : saved_net_(saved_net), saved_mnt_(saved_mnt) {}
  int saved_net_;
  int saved_mnt_;
};

}  // namespace ferry::netns
