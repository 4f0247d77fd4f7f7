// ferry-launch's flags, their resolution into LocalClusterOptions, and the run (see cli.h).
#include "tools/launch/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>

#include "tools/common/command.h"

namespace ferry::launch {
namespace {

Millis Ms(double seconds) {
  return Millis(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace

void AddFlags(CLI::App& app, LaunchFlags& f) {
  // Everything from PROGRAM on (or after "--") is the command, not ferry-launch's flags.
  app.prefix_command();
  ps::LocalClusterOptions& o = f.direct;
  app.add_option("-s,--servers", o.servers, "parameter servers")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("-w,--workers", o.workers, "workers")->required()->check(CLI::Range(1, 65535));
  app.add_option("--rule", f.rule,
                 "rank -> role rule: servers-first (ranks 0..S-1 servers, then W workers) or\n"
                 "colocated (max(S,W) ranks; rank r is server r if r<S and worker r if r<W)")
      ->capture_default_str()
      ->check(CLI::IsMember({"servers-first", "colocated"}));
  app.add_option("--replicas", o.replicas,
                 "the job's replicas (the program's own flag sets them): with 2 or more, a\n"
                 "rank that is only a server (not rank 0) may die without stopping the job")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--spares", o.spares,
                 "the job's spares (the program's own flag sets them): server ranks after all\n"
                 "others that adopt a dead server's shards; they may die without stopping the job")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--join-slots", o.join_slots,
                 "the job's join slots (the program's own flag sets them): server ranks after\n"
                 "all others that this launch does not start; each joins the running job later")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--join", o.join,
                 "start only join slot J's rank, into the running job whose coordinator\n"
                 "FERRY_COORDINATOR names (the job's launch prints it)")
      ->check(CLI::Range(0, 63));
  app.add_option("--worker-join-slots", o.worker_join_slots,
                 "the job's worker join slots (the program's own flag sets them): worker ranks\n"
                 "after all others that this launch does not start; each joins the running job\n"
                 "later")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--join-worker", o.join_worker,
                 "start only worker join slot J's rank, into the running job whose coordinator\n"
                 "FERRY_COORDINATOR names")
      ->check(CLI::Range(0, 63));
  app.add_option("--server-threads", o.server_threads,
                 "shard servers per server rank, each on its own thread with its own share of\n"
                 "the keys (FERRY_SERVER_THREADS; default: the program's own flag)")
      ->check(CLI::Range(1, 64));
  app.add_option("--transport", o.transport, "data transport: auto, verbs, ucx or tcp")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "verbs", "ucx", "tcp"}));
  app.add_option("--timeout", f.timeout_s,
                 "seconds; stop every rank and exit 124 if the job runs longer (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--startup-timeout", f.startup_timeout_s,
                 "seconds rank 0 has to publish the coordinator address (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  app.add_option("--kill-grace", f.kill_grace_s,
                 "seconds between SIGTERM and SIGKILL when the job is stopped")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--tag-output", o.tag_output,
               "prefix every line a rank prints with \"[rank R] \" (stdout and stderr kept apart)");
  app.add_option("--env", f.env, "KEY=VALUE for every rank (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

int FlagsEnd(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") return i;
  }
  return argc;
}

Result<ps::LocalClusterOptions> Resolve(const LaunchFlags& f, std::vector<std::string> remaining,
                                        bool had_separator, const std::vector<std::string>& after) {
  ps::LocalClusterOptions o = f.direct;
  o.argv = std::move(remaining);
  if (!o.argv.empty() && o.argv.front().size() > 1 && o.argv.front()[0] == '-') {
    return InvalidArgument("unknown option '" + o.argv.front() + "'");
  }
  if (had_separator && !o.argv.empty()) o.argv.emplace_back("--");  // PROGRAM's own "--"
  o.argv.insert(o.argv.end(), after.begin(), after.end());
  if (o.argv.empty()) return InvalidArgument(std::string("no PROGRAM to run; usage: ") + kUsage);
  o.role_rule = f.rule == "colocated" ? ps::RoleRule::kColocated : ps::RoleRule::kServersFirst;
  o.timeout = Ms(f.timeout_s);
  o.startup_timeout = Ms(f.startup_timeout_s);
  o.kill_grace = Ms(f.kill_grace_s);
  for (const std::string& kv : f.env) {
    FERRY_ASSIGN_OR_RETURN(auto var, tools::SplitKeyValue("--env", kv));
    o.env.emplace_back(std::move(var));
  }
  return o;
}

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case Code::kInvalidArgument:
      return 2;
    case Code::kPermissionDenied:
      return 126;
    case Code::kNotFound:
      return 127;
    default:
      return 1;
  }
}

int ParseAndExecute(CLI::App& app, LaunchFlags& f, int argc, char** argv) {
  // ferry-launch's flags end at the first "--" or at PROGRAM (prefix_command: the first argument
  // that is neither a flag nor a flag's value; CLI11 leaves it and what follows in remaining()).
  const int flags_end = FlagsEnd(argc, argv);
  if (std::optional<int> code = tools::ParseCommandLine(app, flags_end, argv)) return *code;
  const std::vector<std::string> after(argv + std::min(flags_end + 1, argc), argv + argc);
  auto o = Resolve(f, app.remaining(), flags_end < argc, after);
  if (!o.ok()) return tools::ReportError("ferry-launch", o.status().message(), 2);
  Result<int> code = ps::RunLocalCluster(*o);
  if (code.ok()) return *code;
  // Usage, not-executable and not-found say what to fix; any other failure names its code too.
  const int exit_code = ExitCodeFor(code.status());
  const Status& s = code.status();
  return tools::ReportError("ferry-launch", exit_code == 1 ? s.ToString() : s.message(), exit_code);
}

int Main(int argc, char** argv) {
  CLI::App app;
  tools::SetUpCommand(
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
  LaunchFlags flags;
  AddFlags(app, flags);
  return ParseAndExecute(app, flags, argc, argv);
}

}  // namespace ferry::launch
