// ferry-ps-bench's flags, their resolution into BenchOptions, and the run (see cli.h).
#include "tools/ps/cli.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <sstream>

#include "tools/common/command.h"
#include "tools/common/output.h"

namespace ferry::psbench {
namespace {

std::string g_who = "ferry-ps-bench";  // "ferry-ps-bench (rank R)" once the rank is known

// "<who>: error: <msg>" (and the --help hint when `usage`, for code 2); returns `code`.
int Error(const std::string& msg, int code, bool usage = true) {
  if (!usage) {
    std::fprintf(stderr, "%s: error: %s\n", g_who.c_str(), msg.c_str());
    return code;
  }
  return tools::ReportError(g_who, msg, code);
}

Result<std::vector<BenchOp>> ParseOps(const std::string& text) {
  std::vector<BenchOp> ops;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "all") {
      for (BenchOp op : {BenchOp::kPull, BenchOp::kPush, BenchOp::kPushPull}) ops.push_back(op);
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(BenchOp op, ParseBenchOp(item));
    ops.push_back(op);
  }
  if (ops.empty()) return InvalidArgument("--op names no operation");
  return ops;
}

}  // namespace

void AddFlags(CLI::App& app, CliOptions& c) {
  app.add_option("--op", c.ops, "pull, push, push-pull or all (comma-separated list)")
      ->capture_default_str();
  app.add_flag("--latency", c.direct.latency,
               "single-key synchronous ops (perftest latency columns); --keys defaults to 1");
  app.add_option("-k,--keys", c.keys, "keys per op (default 100000; 1 with --latency)");
  app.add_option("--dim", c.direct.dim, "floats per row")->capture_default_str();
  app.add_option("-n,--iters", c.iters,
                 "timed ops per worker and op type (default 100; 2000 with --latency)");
  app.add_option("--warmup", c.warmup, "untimed ops first (default 10; 200 with --latency)")
      ->each([&c](const std::string&) { c.warmup_set = true; });
  app.add_option("--pipeline", c.direct.pipeline, "ops in flight per worker (throughput mode)")
      ->capture_default_str();
  app.add_flag("--unique", c.unique,
               "distinct keys per op, passed with keys_unique (no dedupe): the default");
  app.add_option("--zipf", c.zipf,
                 "keys i.i.d. Zipf(S) over the key space instead (S = 0: uniform; repeats)");
  app.add_flag("--dedupe", c.direct.dedupe, "unique keys, but let the worker dedupe them anyway");
  app.add_option("--key-space", c.key_space, "keys in the table (default max(1000000, keys))");
  app.add_option("--optimizer", c.optimizer, "sgd, adagrad, ftrl, adam or none")
      ->capture_default_str();
  app.add_option("--lr", c.learning_rate, "learning rate")->capture_default_str();
  app.add_flag("--populate,!--no-populate", c.direct.populate,
               "insert the key space first, so pulls measure lookups (the default; --no-populate: "
               "first touches insert rows)");
  app.add_flag("--check,!--no-check", c.direct.check,
               "run the untimed checked pass before the timed ones (the default)");
  app.add_flag("--one-sided", c.direct.one_sided,
               "pulls read the rows of keys with known slots straight out of the servers' rows "
               "(PullOptions::one_sided; docs/ps.md)");
  app.add_flag("--fp16-pull", c.direct.fp16_pull,
               "the table keeps an fp16 mirror of its weights and pulls ship it: 2 bytes per "
               "weight, still straight out of the rows (TableSpec::fp16_pull)");
  app.add_flag("--fp16-push", c.direct.fp16_push,
               "pushes ship gradients as fp16 (JobSpec::fp16_push)");
  app.add_option("--push-filter", c.direct.push_filter,
                 "significance filter: pushes drop gradient rows whose largest |g| is below this "
                 "(0: off; timed gradients are uniform in [-0.05, 0.05])")
      ->capture_default_str();
  app.add_option("--seed", c.direct.seed, "seed of keys and of the table initializer")
      ->capture_default_str();
  app.add_option("--servers", c.servers, "servers (default: FERRY_SERVERS, else from the ranks)");
  app.add_option("--workers", c.workers, "workers (default: FERRY_WORKERS, else from the ranks)");
  app.add_option("--server-threads", c.server_threads,
                 "shard servers per server rank, each on its own thread with its own share of "
                 "the keys (default: FERRY_SERVER_THREADS, else 1)")
      ->check(CLI::Range(1, 64));
  app.add_option("--replicas", c.direct.replicas,
                 "copies of each server's shard (chain replication: pushes are acknowledged by "
                 "the chain's tail)")
      ->capture_default_str();
  app.add_option("--shards", c.direct.shards,
                 "parts the keys are cut into, spread over the shard servers (0: one per shard "
                 "server; more splits a pull into a request per shard)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--role-rule", c.role_rule, "auto, servers-first or colocated")
      ->capture_default_str();
  app.add_option("--transport", c.transport,
                 "auto, verbs, ucx or tcp (default: FERRY_TRANSPORT, else auto)");
  app.add_option("--param", c.params,
                 "transport parameter KEY=VALUE (repeatable), e.g. UCX_TLS=shm,self");
  app.add_option("--timeout", c.timeout_s, "seconds before a silent peer counts as failed")
      ->capture_default_str();
  app.add_option("--json", c.json_path, "write the report as JSON to FILE (no FILE or -: stdout)")
      ->expected(0, 1)
      ->default_str("-");
  app.add_option("--csv", c.csv_path, "write the results as CSV to FILE (- for stdout)");
}

namespace {

// The job's shape, field by field: the flags, then the launcher's variables, then the rank count
// (cli.h). Fills o->servers, workers, server_threads, role_rule and transport.
Status ResolveShape(const CliOptions& c, const ps::LaunchEnv& env,
                    const ps::LaunchShape& launch_shape, BenchOptions* o) {
  ps::LaunchShape shape = launch_shape;
  if (c.servers != 0) shape.servers = -1;
  if (c.workers != 0) shape.workers = -1;
  if (!c.transport.empty()) shape.transport.clear();
  if (c.role_rule != "auto") shape.role_rule.clear();
  ps::JobSpec job;  // only the shape fields matter here
  job.transport = c.transport.empty() ? "auto" : c.transport;
  job.servers = c.servers != 0 ? c.servers : static_cast<uint32_t>(std::max(shape.servers, 0));
  job.workers = c.workers != 0 ? c.workers : static_cast<uint32_t>(std::max(shape.workers, 0));
  const uint32_t size = static_cast<uint32_t>(env.size);
  if (job.servers == 0 && job.workers == 0) {
    job.servers = size == 1 ? 1 : size / 2;
    job.workers = size == 1 ? 1 : size - job.servers;
  }
  if (c.role_rule != "auto") {
    FERRY_ASSIGN_OR_RETURN(job.role_rule, ps::ParseRoleRule(c.role_rule));
  } else if (shape.role_rule.empty()) {
    const bool colocated = job.servers != 0 && job.workers != 0 &&
                           std::max(job.servers, job.workers) == size &&
                           job.servers + job.workers != size;
    job.role_rule = colocated ? ps::RoleRule::kColocated : ps::RoleRule::kServersFirst;
  }
  Status s = ps::ApplyLaunchShape(shape, env, &job);  // derives a missing count, checks the fit
  if (!s.ok()) return s.Annotate("pass --servers/--workers that fit the launch");
  o->servers = job.servers;
  o->workers = job.workers;
  o->server_threads = c.server_threads != 0 ? c.server_threads
                      : launch_shape.server_threads > 0
                          ? static_cast<uint32_t>(launch_shape.server_threads)
                          : 1;
  o->role_rule = job.role_rule;
  o->transport = job.transport;
  return Status::Ok();
}

}  // namespace

Result<BenchOptions> Resolve(const CliOptions& c, const ps::LaunchEnv& env,
                             const ps::LaunchShape& launch_shape) {
  BenchOptions o = c.direct;
  FERRY_ASSIGN_OR_RETURN(o.ops, ParseOps(c.ops));
  o.keys = c.keys != 0 ? c.keys : (o.latency ? 1 : 100000);
  o.iters = c.iters != 0 ? c.iters : (o.latency ? 2000 : 100);
  o.warmup = c.warmup_set ? c.warmup : (o.latency ? 200 : 10);
  if (c.unique && c.zipf >= 0) return InvalidArgument("--unique and --zipf exclude each other");
  if (c.zipf >= 0) {
    o.key_spec.dist = KeySpec::Dist::kZipf;
    o.key_spec.zipf_s = c.zipf;
  }
  o.key_spec.space = c.key_space != 0 ? c.key_space : std::max<uint64_t>(1000000, o.keys);
  FERRY_ASSIGN_OR_RETURN(o.optimizer.kind, ps::ParseOptimizer(c.optimizer));
  o.optimizer.learning_rate = c.learning_rate;
  if (!(o.push_filter >= 0.0f && o.push_filter < 1e30f)) {
    return InvalidArgument("--push-filter must be a finite number >= 0");
  }
  if (o.push_filter > 0 && c.ops == "all") {
    // The library refuses filtered push-pulls (ps/job/job.h): "all" means pull and push here.
    std::erase(o.ops, BenchOp::kPushPull);
  }
  if (!(c.timeout_s > 0 && c.timeout_s <= 3600)) {
    return InvalidArgument("--timeout must be in (0, 3600]");
  }
  o.timeout = Millis(static_cast<int64_t>(c.timeout_s * 1000));
  for (const std::string& kv : c.params) {
    FERRY_ASSIGN_OR_RETURN(auto param, tools::SplitKeyValue("--param", kv));
    o.transport_params.insert_or_assign(std::move(param.first), std::move(param.second));
  }
  FERRY_RETURN_IF_ERROR(ResolveShape(c, env, launch_shape, &o));
  FERRY_RETURN_IF_ERROR(ValidateOptions(o));
  return o;
}

namespace {

// Worker 0's report: text, then --json and --csv. Returns the exit code so far.
int PrintReport(const BenchReport& r, const std::string& json_path, const std::string& csv_path) {
  int code = 0;
  FILE* text = (json_path == "-" || csv_path == "-") ? stderr : stdout;
  std::fputs(FormatText(r).c_str(), text);
  std::fflush(text);
  if (!json_path.empty()) {
    if (Status s = tools::WriteOutput(json_path, FormatJson(r)); !s.ok()) {
      code = Error(s.ToString(), 1);
    }
  }
  if (!csv_path.empty()) {
    if (Status s = tools::WriteOutput(csv_path, FormatCsv(r)); !s.ok()) {
      code = Error(s.ToString(), 1);
    }
  }
  return code;
}

}  // namespace

int Execute(const BenchOptions& o, const std::string& json_path, const std::string& csv_path) {
  auto node = ps::Node::Start(BuildJob(o));
  if (!node.ok()) return Error("join the job: " + node.status().ToString(), 1);
  g_who = "ferry-ps-bench (rank " + std::to_string((*node)->rank()) + ")";
  auto report = RunRank(**node, o);
  if (!report.ok()) {
    Error(report.status().ToString(), 1);
    // Leaving without Join tells the coordinator this rank failed, so the others stop waiting.
    node = Status(Code::kCancelled, "failed");
    return 1;
  }
  const int code = report->has_value() ? PrintReport(**report, json_path, csv_path) : 0;
  if (Status s = (*node)->Join(); !s.ok()) return Error("leave the job: " + s.ToString(), 1);
  return code;
}

int ParseAndExecute(CLI::App& app, CliOptions& c, int argc, char** argv) {
  if (std::optional<int> code = tools::ParseCommandLine(app, argc, argv)) return *code;
  auto env = ps::DetectLaunchEnv();
  if (!env.ok()) return Error(env.status().ToString(), 2, /*usage=*/false);
  g_who = "ferry-ps-bench (rank " + std::to_string(env->rank) + ")";
  auto shape = ps::ReadLaunchShape();
  if (!shape.ok()) return Error(shape.status().ToString(), 2, /*usage=*/false);
  if (c.json_path == "-" && c.csv_path == "-") {
    return Error("only one of --json and --csv can go to stdout", 2, /*usage=*/false);
  }
  auto o = Resolve(c, *env, *shape);
  if (!o.ok()) return Error(o.status().message(), 2);
  return Execute(*o, c.json_path, c.csv_path);
}

int Main(int argc, char** argv) {
  CLI::App app;
  CliOptions options;
  AddFlags(app, options);
  tools::SetUpCommand(
      app,
      {.name = "ferry-ps-bench",
       .summary = "parameter-server pull / push / push-pull throughput and latency",
       .description = "Run one process per rank under a launcher (ferry-launch, mpirun, srun); "
                      "worker 0 prints\nthe report. Without a launcher: one rank, a colocated "
                      "server and worker.",
       .examples = {"ferry-launch --servers 2 --workers 2 -- ferry-ps-bench --json",
                    "ferry-launch --servers 1 --workers 1 -- ferry-ps-bench --op pull --transport "
                    "ucx --param UCX_TLS=shm,self",
                    "ferry-launch --servers 1 --workers 1 -- ferry-ps-bench --latency --op pull",
                    "ferry-launch --servers 2 --workers 2 -- ferry-ps-bench --zipf 0.99 "
                    "--key-space 10000000"},
       .see_also = {"ferry-launch", "ferry-train", "docs/ps-bench.md"}});
  return ParseAndExecute(app, options, argc, argv);
}

}  // namespace ferry::psbench
