// Options checks and the JobSpec every rank of a ferry-ps-bench job builds (see ps_bench.h).
#include <algorithm>
#include <string>

#include "ps/store/array_hash_map.h"
#include "ps/wire/protocol.h"
#include "tools/ps/ps_bench.h"

namespace ferry::psbench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kMaxKeysPerRequest = 1u << 16;  // JobSpec's default

uint64_t RoundUpMiB(uint64_t bytes) {
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

// The largest batch any phase passes to one call: timed ops, check ops, populate chunks.
uint64_t MaxBatch(const BenchOptions& o) {
  return std::max<uint64_t>(
      {o.keys, o.populate ? PopulateChunk(o) : 0, o.check ? CheckBatch(o) : 0});
}

}  // namespace

std::string_view BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kPull:
      return "pull";
    case BenchOp::kPush:
      return "push";
    case BenchOp::kPushPull:
      return "push-pull";
  }
  return "?";
}

Result<BenchOp> ParseBenchOp(std::string_view name) {
  if (name == "pull") return BenchOp::kPull;
  if (name == "push") return BenchOp::kPush;
  if (name == "push-pull" || name == "pushpull" || name == "push_pull") return BenchOp::kPushPull;
  return InvalidArgument("unknown op '" + std::string(name) + "' (pull, push, push-pull or all)");
}

uint32_t PopulateChunk(const BenchOptions& o) {
  return static_cast<uint32_t>(std::min<uint64_t>(kMaxKeysPerRequest, o.key_spec.space));
}

uint32_t CheckBatch(const BenchOptions& o) {
  return std::max(o.keys, static_cast<uint32_t>(std::min<uint64_t>(1024, o.key_spec.space)));
}

bool KeysUniqueHint(const BenchOptions& o) {
  return o.key_spec.dist == KeySpec::Dist::kUnique && !o.dedupe;
}

size_t TableInitialRows(const BenchOptions& o) {
  // Consistent hashing with 128 virtual nodes leaves shards within a few percent of N / S;
  // 25% slack keeps populate free of table growth.
  const uint64_t shards = uint64_t{o.servers} * o.server_threads;
  const uint64_t share = (o.key_spec.space + shards - 1) / shards;
  return static_cast<size_t>(share + share / 4 + 1024);
}

uint32_t ServerRowStride(const BenchOptions& o) {
  return ps::RowLayout::For(o.dim, ps::StateFloats(o.optimizer, o.dim), /*metadata=*/true).stride;
}

Status ValidateOptions(const BenchOptions& o) {
  if (o.ops.empty()) return InvalidArgument("--op names no operation");
  if (o.keys == 0 || o.keys > (1u << 24)) return InvalidArgument("--keys must be 1..16777216");
  if (o.dim == 0 || o.dim > 4096) return InvalidArgument("--dim must be 1..4096");
  if (o.iters == 0) return InvalidArgument("--iters must be >= 1");
  if (o.pipeline == 0 || o.pipeline > 64) return InvalidArgument("--pipeline must be 1..64");
  if (o.replicas == 0 || o.replicas > o.servers) {
    return InvalidArgument("--replicas must be 1.." + std::to_string(o.servers) +
                           " (the number of servers)");
  }
  if (o.shards != 0 && o.one_sided) {
    return InvalidArgument(
        "--one-sided cannot be combined with --shards (a server's rows are in one table per "
        "shard; one-sided reads address one)");
  }
  if (o.replicas > 1 && o.one_sided) {
    return InvalidArgument(
        "--one-sided cannot be combined with --replicas (replicated jobs pull "
        "through the shard's head)");
  }
  if (o.dedupe && o.key_spec.dist != KeySpec::Dist::kUnique) {
    return InvalidArgument("--dedupe applies to --unique keys (Zipf keys are always deduped)");
  }
  if (o.push_filter > 0 &&
      std::find(o.ops.begin(), o.ops.end(), BenchOp::kPushPull) != o.ops.end()) {
    return InvalidArgument(
        "--push-filter cannot be combined with push-pull (the library refuses "
        "filtered push-pulls)");
  }
  Status s = ValidateKeySpec(o.key_spec, o.keys);
  if (!s.ok()) return s;
  s = ps::ValidateOptimizer(o.optimizer);
  if (!s.ok()) return s.Annotate("--optimizer/--lr");
  if (o.servers == 0 || o.workers == 0)
    return InvalidArgument("--servers and --workers must be >= 1");
  if (o.timeout.count() <= 0) return InvalidArgument("--timeout must be > 0");
  return ps::ValidateJob(BuildJob(o));
}

ps::JobSpec BuildJob(const BenchOptions& o) {
  ps::JobSpec job;
  ps::TableSpec t;
  t.name = "bench";
  t.dim = o.dim;
  t.optimizer = o.optimizer;
  // A seeded initializer: the checked pass recomputes every pulled row with ps::InitWeights.
  t.init.kind = ps::InitializerSpec::Kind::kUniform;
  t.init.a = -0.5f;
  t.init.b = 0.5f;
  t.init.seed = o.seed;
  t.initial_rows = TableInitialRows(o);
  t.fp16_pull = o.fp16_pull;
  job.tables.push_back(t);
  job.consistency = ps::ConsistencySpec{ps::Consistency::kAsp, 0};
  job.servers = o.servers;
  job.workers = o.workers;
  job.replicas = o.replicas;
  job.shards = o.shards;
  job.server_threads = o.server_threads;
  job.role_rule = o.role_rule;
  job.transport = o.transport;
  job.transport_params = o.transport_params;
  job.peer_timeout = o.timeout;
  job.startup_timeout = std::max(Millis(60000), o.timeout * 4);
  job.max_keys_per_request = kMaxKeysPerRequest;
  job.fp16_push = o.fp16_push;
  job.push_filter = o.push_filter;
  // Data-path sizes: room for every op in flight (twice, so that space freed late never stalls a
  // pipeline), never below the JobSpec defaults.
  const uint64_t batch = MaxBatch(o);
  const uint64_t inflight = o.latency ? 1 : o.pipeline;
  const uint64_t row = ps::RowWireBytes(o.dim, false);
  const uint64_t slots = ps::ReplySlotsBytes(job.shard_servers(), job.max_outstanding);
  // One-sided pulls: each arena row carries the key word and metadata (24 B), and a request that
  // teaches slots gets 4 B per key back.
  const uint64_t arena_row = row + (o.one_sided ? 32 : 0);
  job.arena_bytes = std::max<uint64_t>(
      job.arena_bytes, RoundUpMiB(slots + 2 * inflight * batch * arena_row + 4 * kMiB));
  // Keys, gradients and request headers of a push-pull.
  const uint64_t per_op =
      batch * (8 + row) + (batch / kMaxKeysPerRequest + job.shard_servers()) * 64;
  // A filtered or fp16 push also holds its copy of the keys and gradients while it is made.
  const uint64_t copies = (o.fp16_push || o.push_filter > 0) ? 2 : 1;
  job.send_bytes =
      std::max<uint64_t>(job.send_bytes, RoundUpMiB(2 * copies * inflight * per_op + 4 * kMiB));
  // One server may own a whole batch (skew); requests are 64-byte aligned.
  const uint32_t req_keys = static_cast<uint32_t>(std::min<uint64_t>(batch, kMaxKeysPerRequest));
  const uint64_t biggest = ps::RequestRingBytes(ps::RequestType::kPushPull, 0, req_keys, o.dim);
  job.staging_bytes = std::max<uint64_t>(
      {job.staging_bytes, RoundUpMiB(inflight * per_op * 5 / 4 + kMiB), RoundUpMiB(2 * biggest)});
  return job;
}

}  // namespace ferry::psbench
