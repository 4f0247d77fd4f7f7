// ferry-launch: runs a parameter-server job on this host, one process per rank, the way
// `mpirun -np N` would; the rank environment, failure and signal rules are
// ps/launch/local_cluster.h's.
//
//   ferry-launch --servers 2 --workers 2 -- ferry-train --data train.svm
//   ferry-launch -s 4 -w 4 --rule colocated --tag-output --timeout 600 -- ./my_job --steps 100
//
// Exit codes: the job's (0 when every rank exited 0; the failing rank's status or 128+signal;
// 128+signal when ferry-launch itself was signalled; 124 on --timeout), 2 bad command line,
// 126 PROGRAM not executable, 127 PROGRAM not found, 1 any other launcher failure.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ps/launch/local_cluster.h"
#include "tools/common/command.h"

namespace {

constexpr const char* kUsage = "ferry-launch --servers S --workers W [options] -- PROGRAM ARGS...";

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "ferry-launch: error: %s\n", message.c_str());
  if (code == 2) std::fprintf(stderr, "Run with --help for usage.\n");
  return code;
}

ferry::Millis Ms(double seconds) {
  return ferry::Millis(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app,
      {.name = "ferry-launch",
       .summary = "run a parameter-server job on this host, one process per rank",
       .description =
           "Rank 0 starts first and publishes the coordinator's address; then the other ranks "
           "start.\nThe first rank to fail stops the job; signals to ferry-launch are forwarded "
           "to every rank.\nEvery rank gets FERRY_RANK, FERRY_SIZE, FERRY_LOCAL_RANK, "
           "FERRY_LOCAL_SIZE, FERRY_SERVERS,\nFERRY_WORKERS, FERRY_TRANSPORT, FERRY_ROLE_RULE and "
           "the --env variables; rank 0\nFERRY_COORDINATOR_FILE, the others FERRY_COORDINATOR "
           "(docs/launchers.md).",
       .synopsis = kUsage,
       .examples = {"ferry-launch --servers 2 --workers 2 -- ferry-train --data train.svm",
                    "ferry-launch -s 4 -w 4 --rule colocated --tag-output -- ./my_job --steps 100",
                    "ferry-launch -s 1 -w 3 --transport tcp --timeout 600 --env "
                    "UCX_TLS=shm,self -- ./my_job"},
       .exit_status = "The job's: 0 if every rank exited 0, else the first failing rank's status "
                      "or 128+signal;\n128+signal if ferry-launch was signalled; 124 after "
                      "--timeout; 2 bad command line;\n126 PROGRAM not executable; 127 PROGRAM not "
                      "found; 1 other launcher failures.",
       .see_also = {"mpirun(1)", "srun(1)", "ferry-train", "docs/launchers.md"}});
  // Everything from PROGRAM on (or after "--") is the command, not ferry-launch's flags.
  app.prefix_command();

  ferry::ps::LocalClusterOptions o;
  std::string rule = "servers-first";
  double timeout_s = 0, startup_timeout_s = 120, kill_grace_s = 5;
  std::vector<std::string> env;
  app.add_option("-s,--servers", o.servers, "parameter servers")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("-w,--workers", o.workers, "workers")->required()->check(CLI::Range(1, 65535));
  app.add_option("--rule", rule,
                 "rank -> role rule: servers-first (ranks 0..S-1 servers, then W workers) or\n"
                 "colocated (max(S,W) ranks; rank r is server r if r<S and worker r if r<W)")
      ->capture_default_str()
      ->check(CLI::IsMember({"servers-first", "colocated"}));
  app.add_option("--replicas", o.replicas,
                 "the job's replicas (the program's own flag sets them): with 2 or more, a\n"
                 "rank that is only a server (not rank 0) may die without stopping the job")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--transport", o.transport, "data transport: auto, verbs, ucx or tcp")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "verbs", "ucx", "tcp"}));
  app.add_option("--timeout", timeout_s,
                 "seconds; stop every rank and exit 124 if the job runs longer (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--startup-timeout", startup_timeout_s,
                 "seconds rank 0 has to publish the coordinator address (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--kill-grace", kill_grace_s,
                 "seconds between SIGTERM and SIGKILL when the job is stopped")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--tag-output", o.tag_output,
               "prefix every line a rank prints with \"[rank R] \" (stdout and stderr kept apart)");
  app.add_option("--env", env, "KEY=VALUE for every rank (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  // ferry-launch's flags end at the first "--" or at PROGRAM (prefix_command: the first argument
  // that is neither a flag nor a flag's value; CLI11 leaves it and what follows in remaining()).
  int flags_end = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      flags_end = i;
      break;
    }
  }
  try {
    app.parse(flags_end, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  o.argv = app.remaining();
  if (!o.argv.empty() && o.argv.front().size() > 1 && o.argv.front()[0] == '-') {
    return Fail("unknown option '" + o.argv.front() + "'", 2);
  }
  if (flags_end < argc && !o.argv.empty()) o.argv.emplace_back("--");  // PROGRAM's own "--"
  for (int i = flags_end + 1; i < argc; ++i) o.argv.emplace_back(argv[i]);
  if (o.argv.empty()) return Fail(std::string("no PROGRAM to run; usage: ") + kUsage, 2);
  o.role_rule =
      rule == "colocated" ? ferry::ps::RoleRule::kColocated : ferry::ps::RoleRule::kServersFirst;
  o.timeout = Ms(timeout_s);
  o.startup_timeout = Ms(startup_timeout_s);
  o.kill_grace = Ms(kill_grace_s);
  for (const std::string& kv : env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Fail("--env '" + kv + "' is not KEY=VALUE", 2);
    o.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }

  ferry::Result<int> code = ferry::ps::RunLocalCluster(o);
  if (code.ok()) return *code;
  switch (code.status().code()) {
    case ferry::Code::kInvalidArgument:
      return Fail(code.status().message(), 2);
    case ferry::Code::kPermissionDenied:
      return Fail(code.status().message(), 126);
    case ferry::Code::kNotFound:
      return Fail(code.status().message(), 127);
    default:
      return Fail(code.status().ToString(), 1);
  }
}
