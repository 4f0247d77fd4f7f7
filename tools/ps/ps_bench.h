// ferry-ps-bench's kernels: pull, push and push-pull of K keys x D floats through a real
// parameter-server job (ps/node.h), as throughput (keys/s, GB/s of row payload, per-op latency)
// or as single-key synchronous latency (perftest's latency columns). Shared by the tool
// (ferry_ps_bench.cc), the in-process smoke test (perf/psbench/smoke_test.cc) and, for keys.h, the
// in-process reference (perf/psbench/ps_reference.cc).
//
//   BenchOptions o = ...;                              // the same on every rank (same flags)
//   auto node = ferry::ps::Node::Start(BuildJob(o));   // joins the job
//   auto report = RunRank(**node, o);                  // workers measure; a server-only rank
//   if (!report.ok()) ... (destroy the node: the job fails everywhere)  returns nullopt at once
//   if (*report) print FormatText(**report) or FormatJson(**report);    // worker 0 only
//   (*node)->Join();                                   // servers serve until every worker is done
//
// What a worker does in RunRank, with a Barrier between phases so that workers measure side by
// side (servers just serve):
//   populate  (BenchOptions::populate) worker w pulls its slice [w N / W, (w+1) N / W) of the key
//             space once, in index order, so that rows exist and pulls measure lookups;
//   check     (BenchOptions::check; untimed, never inside a timed loop) pulled rows compared with
//             ps::InitWeights (nothing has been pushed yet), then pushes and push-pulls on keys no
//             other worker touches, their rows compared with ps::ApplyUpdate run here;
//   measure   per op type: `warmup` ops, then `iters` timed ops with up to `pipeline` in flight
//             (latency mode: one at a time). An op is Pull / Push / PushPull + Wait + Release;
//             its latency runs from the call to the return of Wait;
//   gather    every worker's WorkerResult goes to worker 0 (Worker::GatherFromWorkers),
//             which merges them.
//
// Figures: keys/s and GB/s are summed over workers (each worker's own keys over its own timed
// interval; the intervals overlap because of the barriers). Payload bytes per key: pull D*4 (rows
// in), push D*4 (gradients out), push-pull 2*D*4. GB = 1e9 bytes. Latencies are merged over all
// workers' samples.
//
// Errors: Status / Result; a failed check is kProtocol ("verification failed: ...") naming the key,
// coordinate and values. Threading: RunRank on the thread that drives the node's worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ps/job/job.h"
#include "ps/node.h"
#include "ps/store/optimizer.h"
#include "tools/bench/stats.h"
#include "tools/ps/keys.h"
#include "transport/status.h"

namespace ferry::psbench {

using ps::Millis;

enum class BenchOp : uint8_t { kPull, kPush, kPushPull };
std::string_view BenchOpName(BenchOp op);  // "pull", "push", "push-pull"
Result<BenchOp> ParseBenchOp(std::string_view name);

struct BenchOptions {
  // What to measure.
  std::vector<BenchOp> ops = {BenchOp::kPull, BenchOp::kPush, BenchOp::kPushPull};
  bool latency = false;    // single-key (or --keys) synchronous ops, one in flight
  uint32_t keys = 100000;  // keys per op
  uint32_t dim = 16;       // floats per row
  uint32_t iters = 100;    // timed ops per worker and op type
  uint32_t warmup = 10;    // untimed ops before them
  uint32_t pipeline = 2;   // ops in flight per worker (throughput mode)
  KeySpec key_spec{KeySpec::Dist::kUnique, 0, 1000000};
  bool dedupe = false;  // unique keys, but without PullOptions::keys_unique (measures dedupe)
  bool populate = true;
  bool check = true;
  // Pulls with PullOptions::one_sided (populate and the checked pass too, so slots are learned
  // before the timed pulls); push-pull and push take the request path as always.
  bool one_sided = false;
  // Wire formats (both off by default, as in the library): pulls ship the table's fp16 mirror
  // (TableSpec::fp16_pull, PullOptions::fp16), pushes ship fp16 gradients (JobSpec::fp16_push),
  // and pushes drop gradient rows whose largest |g| is below push_filter (JobSpec::push_filter).
  bool fp16_pull = false;
  bool fp16_push = false;
  float push_filter = 0.0f;
  uint64_t seed = 1;
  ps::OptimizerSpec optimizer;  // Adagrad by default
  // The job (every rank must agree: BuildJob is a function of these fields only).
  uint32_t servers = 1;
  uint32_t workers = 1;
  uint32_t replicas = 1;        // JobSpec::replicas: pushes pay for the chain
  uint32_t shards = 0;          // JobSpec::shards: 0 = one per shard server
  uint32_t server_threads = 1;  // JobSpec::server_threads: shard servers per server rank
  ps::RoleRule role_rule = ps::RoleRule::kServersFirst;
  std::string transport = "auto";
  std::map<std::string, std::string> transport_params;
  Millis timeout{30000};  // peer timeout; startup gets 4x
};

// Ranges and combinations (names the flag at fault).
Status ValidateOptions(const BenchOptions& o);
// The job every rank builds: one table "bench" of `dim` floats, the optimizer, a seeded uniform
// initializer (what the check compares against), ASP, rings/arenas sized for `pipeline` ops of
// `keys` keys.
ps::JobSpec BuildJob(const BenchOptions& o);
// Rows each server's table starts with (the key space's share plus slack): the reference builds
// its ArrayHashMap with the same count so both tables have the same layout.
size_t TableInitialRows(const BenchOptions& o);
// Keys per populate op.
uint32_t PopulateChunk(const BenchOptions& o);
// Keys per op of the checked pass: the run's batch, but at least 1024 (or the key space), so that
// a single-key latency run still checks a useful number of rows.
uint32_t CheckBatch(const BenchOptions& o);
// Unique keys are passed with PullOptions::keys_unique (no dedupe on the worker).
bool KeysUniqueHint(const BenchOptions& o);
// The seed of worker `worker`'s timed batches of `op` (keys.h KeyBatches); the reference uses
// worker 0's, so it works on the very batches worker 0 pulls or pushes.
uint64_t MeasureSeed(const BenchOptions& o, uint32_t worker, BenchOp op);
// The gradients a timed push sends for a batch of `keys` keys: row i is GradientOf(i, d).
std::vector<float> TimedGradients(uint32_t keys, uint32_t dim);

// One worker's measurement of one op type.
struct OpResult {
  BenchOp op = BenchOp::kPull;
  uint32_t keys_per_op = 0;
  uint64_t iterations = 0;
  double seconds = 0;           // first timed call .. last timed Wait
  uint64_t keys = 0;            // keys passed to the calls (repeats included)
  uint64_t unique_keys = 0;     // keys sent after the worker's dedupe
  uint64_t payload_bytes = 0;   // see the header comment
  uint64_t requests = 0;        // requests posted (WorkerStats)
  uint64_t bytes_sent = 0;      // data-path bytes this worker sent (WorkerStats)
  uint64_t filtered_rows = 0;   // gradient rows the significance filter dropped (WorkerStats)
  std::vector<double> op_usec;  // per-op latency samples
};

struct WorkerResult {
  uint32_t worker = 0;
  double populate_seconds = 0;
  uint64_t populated_rows = 0;
  uint64_t checked_rows = 0;
  std::vector<OpResult> ops;
};

struct OpSummary {
  BenchOp op = BenchOp::kPull;
  uint32_t keys_per_op = 0;
  uint64_t iterations = 0;        // over all workers
  double unique_keys_per_op = 0;  // mean over workers' ops
  double keys_per_sec = 0;        // sum over workers
  double gb_per_sec = 0;          // sum over workers, GB = 1e9 B
  double ops_per_sec = 0;         // sum over workers
  double requests_per_op = 0;
  bench::LatencySummary usec;  // merged samples of every worker
  double p50_usec = 0;         // nearest-rank 50th percentile (t_typical is the median)
  std::vector<double> worker_keys_per_sec;
};

struct BenchReport {
  BenchOptions options;
  std::string transport;  // resolved ("auto" -> the backend used)
  std::string launcher;   // ps::LauncherName of rank 0's environment
  int ranks = 0;
  uint32_t row_stride = 0;      // bytes per row in a server's table
  double populate_seconds = 0;  // slowest worker
  uint64_t populated_rows = 0;
  uint64_t checked_rows = 0;
  std::vector<OpSummary> results;
  std::vector<WorkerResult> workers;
};

// Runs this rank's part (see the header comment). Worker 0 returns the report; every other rank
// returns nullopt once its part is done.
Result<std::optional<BenchReport>> RunRank(ps::Node& node, const BenchOptions& o);

// The row stride of the bench table on a server (ArrayHashMap layout with metadata).
uint32_t ServerRowStride(const BenchOptions& o);

// ---- Results on the wire (Worker::GatherFromWorkers) and merged (report.cc) ----
std::vector<uint8_t> EncodeWorkerResult(const WorkerResult& r);
Result<WorkerResult> DecodeWorkerResult(std::span<const uint8_t> bytes);
// Sums and merges per op type; every worker must report the same op types in the same order.
Result<std::vector<OpSummary>> MergeResults(const std::vector<WorkerResult>& workers);

// ---- Output (report.cc) ----
// perftest-like: a header block and one line per op type. Throughput columns:
//   #op #keys #iterations Keys/s[M] GB/s Ops/s t_typical[usec] 99% percentile[usec]
// latency columns (perftest's): #op #keys #iterations t_min t_max t_typical t_avg t_stdev
//   99% percentile 99.9% percentile (usec).
std::string FormatText(const BenchReport& r);
// One strictly valid JSON object with every figure (no NaN or infinity).
std::string FormatJson(const BenchReport& r);
// One header line and one line per op type.
std::string FormatCsv(const BenchReport& r);

}  // namespace ferry::psbench
