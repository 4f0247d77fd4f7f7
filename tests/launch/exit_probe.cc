// exit_probe: a rank that fails on request, for the ferry-launch tests (ferry-launch-test.sh).
//
//   exit_probe [--fail-rank R (--exit-code N | --signal NUM)] [--fail-after-ms T]
//              [--before-rendezvous] [--sleep-s S] [--ignore-term] [--print-env]
//              [--lines N] [--partial]
//
// Every rank reads its launcher environment and finds the coordinator like a real rank
// (ps/launch/rendezvous.h: rank 0 writes FERRY_COORDINATOR_FILE; it starts no real coordinator, the
// address it publishes is its bind address with port 9 for port 0: 127.0.0.1:9), then prints
//   exit_probe rank R pid P ready coordinator=ADDR
// and, with --print-env, one line "exit_probe rank R env KEY=VALUE" per FERRY_* variable (sorted);
// with --lines N, N lines "exit_probe rank R stdout I" on stdout and "... stderr I" on stderr,
// and with --partial a last stdout line without its '\n'.
// Then rank R (--fail-rank) waits T ms (default 200) and exits with N or raises signal NUM; the
// others sleep S seconds (default 60) and exit 0. --before-rendezvous makes rank R fail before
// finding the coordinator (for rank 0: before writing the file). --ignore-term ignores SIGTERM
// (to test the SIGKILL that follows the grace period).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ps/launch/launch_env.h"
#include "ps/launch/rendezvous.h"

extern char** environ;

namespace {

struct Args {
  int fail_rank = -1;
  int exit_code = 1;
  int signal = 0;
  int fail_after_ms = 200;
  bool before_rendezvous = false;
  double sleep_s = 60;
  bool ignore_term = false;
  bool print_env = false;
  int lines = 0;
  bool partial = false;
};

[[noreturn]] void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--fail-rank R (--exit-code N | --signal NUM)] [--fail-after-ms T] "
               "[--before-rendezvous] [--sleep-s S] [--ignore-term] [--print-env] [--lines N] "
               "[--partial]\n",
               argv0);
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage(argv[0]);
      return argv[++i];
    };
    if (arg == "--fail-rank") {
      a.fail_rank = std::atoi(value());
    } else if (arg == "--exit-code") {
      a.exit_code = std::atoi(value());
    } else if (arg == "--signal") {
      a.signal = std::atoi(value());
    } else if (arg == "--fail-after-ms") {
      a.fail_after_ms = std::atoi(value());
    } else if (arg == "--before-rendezvous") {
      a.before_rendezvous = true;
    } else if (arg == "--sleep-s") {
      a.sleep_s = std::atof(value());
    } else if (arg == "--ignore-term") {
      a.ignore_term = true;
    } else if (arg == "--print-env") {
      a.print_env = true;
    } else if (arg == "--lines") {
      a.lines = std::atoi(value());
    } else if (arg == "--partial") {
      a.partial = true;
    } else {
      Usage(argv[0]);
    }
  }
  return a;
}

[[noreturn]] void FailNow(const Args& a, int rank) {
  std::fprintf(stderr, "exit_probe rank %d: failing on purpose\n", rank);
  std::fflush(nullptr);
  if (a.signal > 0) {
    signal(a.signal, SIG_DFL);
    raise(a.signal);
  }
  std::exit(a.exit_code);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  if (a.ignore_term) signal(SIGTERM, SIG_IGN);
  auto env = ferry::ps::DetectLaunchEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "exit_probe: %s\n", env.status().ToString().c_str());
    return 1;
  }
  const int rank = env->rank;
  if (rank == a.fail_rank && a.before_rendezvous) FailNow(a, rank);

  // A "coordinator" that binds nothing: the bind address as given, port 0 replaced by 9.
  auto start = [](const std::string& bind) -> ferry::Result<std::string> {
    if (bind.size() > 2 && bind.compare(bind.size() - 2, 2, ":0") == 0) {
      return bind.substr(0, bind.size() - 1) + "9";
    }
    return bind;
  };
  auto coordinator = ferry::ps::FindCoordinator(*env, start, ferry::Millis(20000));
  if (!coordinator.ok()) {
    std::fprintf(stderr, "exit_probe rank %d: %s\n", rank, coordinator.status().ToString().c_str());
    return 1;
  }
  std::printf("exit_probe rank %d pid %d ready coordinator=%s\n", rank, static_cast<int>(getpid()),
              coordinator->c_str());
  if (a.print_env) {
    std::vector<std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "FERRY_", 6) == 0) vars.emplace_back(*e);
    }
    std::sort(vars.begin(), vars.end());
    for (const std::string& v : vars) std::printf("exit_probe rank %d env %s\n", rank, v.c_str());
  }
  for (int i = 0; i < a.lines; ++i) {
    std::printf("exit_probe rank %d stdout %d\n", rank, i);
    std::fflush(stdout);
    std::fprintf(stderr, "exit_probe rank %d stderr %d\n", rank, i);
  }
  if (a.partial) std::printf("exit_probe rank %d partial", rank);
  std::fflush(stdout);

  if (rank == a.fail_rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(a.fail_after_ms));
    FailNow(a, rank);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(a.sleep_s));
  return 0;
}
