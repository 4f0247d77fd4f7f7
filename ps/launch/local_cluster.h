// The local launcher: runs a parameter-server job as one process per rank on this host. It is
// the engine of ferry-launch (tools/launch/) and of any program that wants to re-run itself as a
// local cluster when no launcher started it.
//
//   LocalClusterOptions o;
//   o.argv = {"ferry-train", "--data", "train.svm"};
//   o.servers = 2;
//   o.workers = 2;
//   FERRY_ASSIGN_OR_RETURN(int exit_code, RunLocalCluster(o));  // blocks until the job is over
//
// What a run does:
//   1. ranks = RanksNeeded(servers, workers, role_rule) (servers + workers, or the larger of the
//      two when colocated; then spares and join slots); ps/job/job.h RolesOf gives each rank its
//      roles. Join slots are not started: a later launch with options.join starts one of them
//      (alone, with FERRY_COORDINATOR naming the running job's coordinator), which joins the job.
//   2. Every rank gets the launcher's environment plus
//        FERRY_RANK=r FERRY_SIZE=n FERRY_LOCAL_RANK=r FERRY_LOCAL_SIZE=n
//        FERRY_SERVERS=S FERRY_WORKERS=W FERRY_TRANSPORT=t FERRY_ROLE_RULE=servers-first|colocated
//        (and FERRY_SERVER_THREADS=T when options.server_threads is set)
//      then options.env (which may not set those nine, nor FERRY_COORDINATOR_FILE). Inherited
//      values of these variables are replaced. stdin is /dev/null (every rank, unless
//      worker_stdin or rank0_stdin say otherwise), stdout and stderr are the launcher's, or
//      pipes relayed line by line with tag_output.
//   3. Rank 0 starts first with FERRY_COORDINATOR_FILE=<mkdtemp dir>/coordinator; once it has
//      written its address there (ps/launch/rendezvous.h rule b), ranks 1..n-1 start with
//      FERRY_COORDINATOR=<address> (rule a). If rank 0 exits, or has not written the file within
//      startup_timeout, that is the job's failure (naming rank 0). When FERRY_COORDINATOR is set
//      (in options.env, else inherited) every rank starts at once and uses it.
//   4. The first rank to exit non-zero or by a signal is the cause of the failure, reported on
//      stderr:  "ferry-launch: rank 3 (worker 1) exited with status 2"
//               "ferry-launch: rank 1 (server 1) was killed by signal 9 (SIGKILL)"
//      The other ranks get SIGTERM, and SIGKILL after kill_grace; those that then exit non-zero
//      are reported as consequences, one line each:
//               "ferry-launch: rank 0 (server 0) stopped after rank 3 failed (was killed by ...)"
//      Ranks that exit 0 are not reported.
//      With options.replicas > 1 (the job's JobSpec::replicas) a rank that holds only a server
//      and is not rank 0 may end without ending the job: its shards fail over to their replicas
//      while the others run on. It is reported and nothing is stopped:
//               "ferry-launch: rank 1 (server 1) was killed by signal 9 (SIGKILL); the job goes
//                on without it (replicas 2)"
//      and the job's result is the other ranks' (the job itself fails, and they exit non-zero,
//      when a shard has no replica left).
//   5. SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to every running rank (each
//      time they arrive); SIGKILL follows kill_grace after the first. With intercept_signal, the
//      first one goes to it instead (and is forwarded only if it returns false); with
//      signal_rank0_first, to rank 0 alone. A signal ignored
//      when RunLocalCluster starts (nohup, a background job of a script) stays ignored, in the
//      launcher and in the ranks.
//   6. options.timeout > 0: once it has passed since the start, every rank is stopped as in 4.
//
// Result: the exit code the launcher should exit with:
//   0            every rank exited 0
//   N / 128+S    the cause rank's exit status / 128 + the signal that killed it
//   128+S        the launcher received signal S (forwarded; whatever the ranks then did)
//   124          options.timeout expired (as timeout(1))
//   1            rank 0 exited 0, hung or wrote garbage instead of its coordinator address
// A Status error means the launcher itself could not run the job: bad options (kInvalidArgument),
// the program not found (kNotFound) or not executable (kPermissionDenied), all reported before
// anything starts; a failed spawn or pipe later (kIoError), after the started ranks were stopped.
//
// Process model, and why:
//   - Spawning. Ranks are started the way glibc's posix_spawn starts a process, with one more
//     step: clone(CLONE_VM | CLONE_VFORK) on a private stack, then, in the child, signal handlers
//     reset, prctl(PR_SET_PDEATHSIG, SIGKILL), setpgid, stdio, execve. The address space is never
//     copied (the reason tests/common/peer.h uses posix_spawn instead of fork: pages that RDMA
//     registration marked MADV_DONTFORK are missing in a forked child), and the child is
//     guaranteed to die with the launcher. posix_spawn itself cannot set the parent-death signal.
//   - No orphans. If the launcher is SIGKILLed, the kernel SIGKILLs every rank (parent-death
//     signal; a rank that finds the launcher already gone before exec exits 127). This needs no
//     cooperation from the rank's program, no watcher process and no polling, which a pipe or a
//     subreaper scheme would. Limits: the ranks' own children are not covered (they are
//     signalled with their rank's process group when the launcher stops the job), and the kernel
//     clears the parent-death signal when a rank execs a set-user-ID or file-capability binary.
//     A SIGKILLed launcher leaves its coordinator folder ($TMPDIR/ferry-launch.*) behind.
//   - Process groups. Each rank leads its own process group, and every signal the launcher sends
//     goes to the whole group, so a rank's helper processes stop with it. A terminal's Ctrl-C
//     reaches only the launcher (the foreground group), which forwards it once; ranks in the
//     launcher's group would get it twice. (This is also why stdin is /dev/null: a background
//     group that reads the terminal is stopped by SIGTTIN.) Ctrl-Z stops only the launcher.
//   - Exits are noticed through a pidfd per rank (a 20 ms poll where pidfd_open is missing); the
//     launcher reaps only its own children (waitpid by pid), never waitpid(-1).
//
// Contract: blocking; one call at a time per process (a second concurrent call fails with
// kInvalidArgument). While it runs it installs handlers for SIGINT, SIGTERM and SIGHUP, ignores
// SIGPIPE and un-ignores SIGCHLD, process-wide, restoring the previous dispositions before it
// returns; another thread must not waitpid(-1) meanwhile. The calling thread spawns the ranks
// (the parent-death signal follows the spawning thread, which lives until the call returns).
// Ranks get an empty signal mask and default dispositions (except those ignored at entry). The
// launcher's own messages go to stderr and start with options.name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ps/job/job.h"
#include "transport/status.h"

namespace ferry::ps {

struct LocalClusterOptions {
  std::vector<std::string> argv;  // PROGRAM ARGS...; argv[0] is searched in PATH if it has no '/'
  uint32_t servers = 2, workers = 2;
  RoleRule role_rule = RoleRule::kServersFirst;
  std::string transport = "auto";                        // auto | verbs | ucx | tcp
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every rank
  Millis timeout{0};        // 0 = none; else stop every rank and fail (124) after it
  Millis kill_grace{5000};  // SIGTERM -> SIGKILL grace for the ranks still running
  // Rank 0 must publish the coordinator address within it; 0 = for as long as rank 0 runs.
  Millis startup_timeout{120000};
  uint32_t replicas = 1;  // the job's JobSpec::replicas (see 4)
  uint32_t spares = 0;    // the job's JobSpec::spares: ranks after all others (see 4)
  // The job's JobSpec::join_slots: ranks after all others that this launch does not start; each
  // joins the running job when a launch with `join` = j starts it (elastic jobs).
  uint32_t join_slots = 0;
  // >= 0: start only join slot `join`'s rank, into the running job whose coordinator
  // FERRY_COORDINATOR names (in `env`, else inherited; required). -1: start the job.
  int join = -1;
  // The job's JobSpec::worker_join_slots: worker ranks after all others (the server join slots
  // included) that this launch does not start; `join_worker` = j starts worker join slot j's
  // rank alone, as `join` does a server's.
  uint32_t worker_join_slots = 0;
  int join_worker = -1;
  // Shard servers per server rank (JobSpec::server_threads), passed as FERRY_SERVER_THREADS;
  // 0: not set (the program's own flag decides).
  uint32_t server_threads = 0;
  bool tag_output = false;            // prefix each line of a rank's stdout/stderr with "[rank R] "
  std::string name = "ferry-launch";  // how the launcher's own messages start
  // Empty, or one descriptor per worker: the standard input of the rank that holds worker w is
  // worker_stdin[w] instead of /dev/null (a program feeding its workers, e.g. ferry-train's
  // stream dealer). The caller keeps ownership; the ranks get duplicates.
  std::vector<int> worker_stdin;
  // Called on the launcher's thread with SIGINT, SIGTERM or SIGHUP the first time one arrives:
  // true means the program ends the job its own way (the ranks are then expected to finish by
  // themselves), and the signal is not forwarded; a second signal is forwarded as in 5.
  std::function<bool(int)> intercept_signal;
  // >= 0: the standard input of rank 0 (when it holds no worker of worker_stdin) instead of
  // /dev/null: a program whose rank 0 reads what the launcher reads (ferry-train's stream, dealt
  // by rank 0 to workers that may join and leave). The caller keeps ownership.
  int rank0_stdin = -1;
  // The first SIGINT, SIGTERM or SIGHUP goes to rank 0 alone (a rank 0 that ends the job its own
  // way: ferry-train's rank 0 ends the stream it deals); later ones as in 5. After
  // intercept_signal, when both are set.
  bool signal_rank0_first = false;
};

// Runs the job; see the top of this file. Never throws.
Result<int> RunLocalCluster(const LocalClusterOptions& options);

// Building blocks, pure, exposed for tests and for launchers' messages.

// "server 0", "worker 1", "server 2, worker 2" (colocated), from ps/job/job.h RolesOf.
std::string RolesText(const RankRoles& roles);

// How a process ended, from a waitpid status: "exited with status 2",
// "was killed by signal 9 (SIGKILL)".
std::string DescribeWaitStatus(int wstatus);

// The exit code a launcher reports for a rank's waitpid status: the status, or 128 + signal.
int ExitCodeOf(int wstatus);

// Splits a byte stream into lines and prefixes each one: tag_output's relay. Lines keep their
// order; a line longer than max_line is cut into pieces of max_line bytes, each prefixed (so a
// rank that never writes '\n' cannot grow the launcher's memory). Not thread-safe.
class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix, size_t max_line = 64 * 1024)
      : prefix_(std::move(prefix)), max_line_(max_line) {}

  // Appends every line of `data` completed so far to *out, each prefixed and '\n'-terminated;
  // keeps the unfinished last line for the next call.
  void Feed(std::string_view data, std::string* out);
  // End of the stream: appends the unfinished line, if any, prefixed and '\n'-terminated.
  void Finish(std::string* out);

 private:
  std::string prefix_;
  size_t max_line_;
  std::string partial_;
};

}  // namespace ferry::ps
