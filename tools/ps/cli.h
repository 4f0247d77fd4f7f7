// ferry-ps-bench's command line and run logic: the tool's main calls Main (the man page,
// AddFlags, ParseAndExecute). Only cli.cc compiles CLI11.
//
// The job shape comes, field by field, from the flags (--servers, --workers, --role-rule,
// --transport), else from the launcher's variables (FERRY_SERVERS, FERRY_WORKERS,
// FERRY_ROLE_RULE, FERRY_TRANSPORT: ps::ReadLaunchShape), else from the number of ranks (1 rank:
// one colocated server and worker; N ranks: N/2 servers, the rest workers). A missing count is
// derived by ps::ApplyLaunchShape, which also checks that the shape fills the launch. The flags
// come first because ferry-launch always exports FERRY_TRANSPORT (auto unless told otherwise): an
// explicit --transport of the program must not be overridden by that default. Role rule "auto"
// (no flag, no FERRY_ROLE_RULE): servers-first, or colocated when max(servers, workers) == ranks
// != servers + workers.
//
// Output: worker 0 prints the report; other ranks print only errors. Text goes to stdout unless
// --json or --csv claims stdout ("-" or --json without a file), then to stderr.
//
// Exit codes: 0 success, 1 runtime failure (including a failed check), 2 bad usage. Never throws.
#pragma once

#include <string>
#include <vector>

#include "ps/launch/launch_env.h"
#include "tools/ps/ps_bench.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>: only the .cc files that build the flags include it
}  // namespace CLI

namespace ferry::psbench {

struct CliOptions {
  // The flags that are BenchOptions fields as they stand (--latency, --dim, --pipeline, --dedupe,
  // --populate, --check, --one-sided, --fp16-pull, --fp16-push, --replicas, --shards,
  // --push-filter, --seed); Resolve starts from these and fills in the rest.
  BenchOptions direct;
  // Raw flag values; Resolve turns them into the other BenchOptions fields.
  std::string ops = "all";
  uint32_t keys = 0, iters = 0, warmup = 0;  // 0: the mode's default
  bool warmup_set = false;
  bool unique = false;
  double zipf = -1;        // < 0: not given
  uint64_t key_space = 0;  // 0: max(1000000, keys)
  std::string optimizer = "adagrad";
  float learning_rate = 0.05f;
  uint32_t servers = 0, workers = 0;  // 0: from the launcher or the rank count
  uint32_t server_threads = 0;        // 0: FERRY_SERVER_THREADS, else 1
  std::string role_rule = "auto";
  std::string transport;  // empty: FERRY_TRANSPORT, else auto
  std::vector<std::string> params;
  double timeout_s = 30;
  std::string json_path, csv_path;
};

void AddFlags(CLI::App& app, CliOptions& c);

// Validated options for this rank (every rank computes the same from the same flags and env).
Result<BenchOptions> Resolve(const CliOptions& c, const ps::LaunchEnv& env,
                             const ps::LaunchShape& shape);

// Joins the job, runs this rank's part, prints (worker 0) and leaves. Returns the exit code.
int Execute(const BenchOptions& o, const std::string& json_path, const std::string& csv_path);

int ParseAndExecute(CLI::App& app, CliOptions& c, int argc, char** argv);

// ferry-ps-bench's main (the man page, the flags and the run); returns the exit code.
int Main(int argc, char** argv);

}  // namespace ferry::psbench
