// --local: a single command that starts its own server on this host.
//
// LocalServer::Spawn starts the running binary (/proc/self/exe) again with posix_spawn and `args`
// (which must make it a server that prints "FERRY_LISTEN <host:port>" as its first stdout line,
// e.g. --port 0 --report-port) and reads that line. The child dies with the parent: Spawn sets
// FERRY_LOCAL_PARENT=<pid> and the child arranges PR_SET_PDEATHSIG before main (local.cc).
// Blocking: up to `timeout` for the child to report. Thread-safety: none needed (one per tool).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::bench {

inline constexpr const char* kListenBanner = "FERRY_LISTEN ";

class LocalServer {
 public:
  static Result<LocalServer> Spawn(const std::vector<std::string>& args, Millis timeout);
  LocalServer(LocalServer&& other) noexcept;
  LocalServer& operator=(LocalServer&&) = delete;
  LocalServer(const LocalServer&) = delete;
  ~LocalServer();  // kills the child if it is still running

  const std::string& address() const { return address_; }
  // Waits for the child to exit; an error if it exited non-zero, died, or outlived `timeout`
  // (then it is killed).
  Status Wait(Millis timeout);

 private:
  LocalServer() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
};

}  // namespace ferry::bench
