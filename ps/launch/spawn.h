// Process plumbing for the local launcher (ps/launch/local_cluster.cc): owned file descriptors,
// pipes, the launcher's signal handling, and spawning a rank with a parent-death signal.
// Internal to ps/; not part of the public API.
//
// Thread-safety: SignalScope is process-wide state (one at a time); the rest is per object.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/status.h"

namespace ferry::ps::process {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Moves `fd` to a number >= 3 (close-on-exec), so that the child's dup2 onto 0, 1 and 2 can never
// overwrite another of the fds it still has to dup (possible if the caller closed its stdio).
Result<Fd> AboveStdio(int fd, const char* what);
// A close-on-exec pipe whose ends are above stdio.
Status MakePipe(Fd* read_end, Fd* write_end, bool nonblocking_read);
// Writes everything to one of the launcher's own streams; a closed reader (EPIPE: `| head`)
// sets *broken and drops the rest silently so the ranks never block on a full pipe.
void WriteAll(int fd, std::string_view text, bool* broken);

// What a rank's child process does with each signal before exec (read by the child, which
// shares our memory until then).
struct ChildSignals {
  bool changed[NSIG] = {};  // we changed it: restore SIG_IGN if ignore[], else SIG_DFL
  bool ignore[NSIG] = {};
};

// Installs the forwarding handlers, ignores SIGPIPE and un-ignores SIGCHLD for the lifetime of
// the object.
class SignalScope {
 public:
  SignalScope() = default;
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  // Installs the handlers (call once).
  Status Install();

  int read_fd() const { return read_.get(); }
  const ChildSignals& child() const { return child_; }

 private:
  Fd read_, write_;  // the pipe; write_ closes after the handlers are restored (members die
                     // after the destructor body)
  std::vector<std::pair<int, struct sigaction>> saved_;
  ChildSignals child_;
};

// Spawning. posix_spawn's mechanism (glibc: clone with CLONE_VM | CLONE_VFORK on a separate
// stack; the caller is suspended until the child execs or exits) plus the parent-death signal,
// which posix_spawn has no attribute for. The child runs on the caller's memory: it may only make
// system calls and write its failure into the request.
struct SpawnRequest {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdio[3] = {-1, -1, -1};  // dup2'd onto 0, 1, 2; -1 keeps ours
  const ChildSignals* signals = nullptr;
  pid_t parent = 0;
  // Written by the child when a step fails (it then exits 127).
  int error = 0;
  const char* step = nullptr;
};

// Starts r->path; the pid, or the step that failed in the child with its errno.
Result<pid_t> Spawn(SpawnRequest* r);

// argv[0] as execve needs it: a path as given, or the first executable match in PATH.
Result<std::string> ResolveProgram(const std::string& name);

}  // namespace ferry::ps::process
