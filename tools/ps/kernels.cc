// A worker's phases: populate, the timed measurement of each op type, and RunRank tying them
// together with the checked pass (check.cc) and the gather (report.cc). See ps_bench.h.
#include <algorithm>
#include <string>

#include "tools/ps/pipeline.h"
#include "tools/ps/ps_bench.h"

namespace ferry::psbench {

// check.cc
Status RunCheck(ps::Worker& w, uint32_t table, const BenchOptions& o, uint64_t* rows_checked);

namespace {

// Phases seed their key batches apart (keys.h BatchSeed); the reference uses kPhaseMeasure + op.
constexpr uint32_t kPhaseMeasure = 16;

}  // namespace

uint64_t MeasureSeed(const BenchOptions& o, uint32_t worker, BenchOp op) {
  return BatchSeed(o.seed, worker, kPhaseMeasure + static_cast<uint32_t>(op));
}

std::vector<float> TimedGradients(uint32_t keys, uint32_t dim) {
  // The values do not change the work; they stay small so Adagrad's rows stay finite.
  std::vector<float> g(size_t{keys} * dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = GradientOf(i / dim, static_cast<uint32_t>(i % dim));
  return g;
}

namespace {

ps::Millis WaitLimit(const BenchOptions& o) {
  return std::max(ps::Millis(120000), o.timeout * 4);
}

Status Populate(ps::Worker& w, uint32_t table, const BenchOptions& o, WorkerResult* out) {
  const uint64_t n = o.key_spec.space;
  const uint64_t lo = n * w.index() / o.workers;
  const uint64_t hi = n * (w.index() + 1) / o.workers;
  const uint64_t chunk = PopulateChunk(o);
  const uint64_t ops = (hi - lo + chunk - 1) / chunk;
  // Pull copies the keys into its registered send buffer at the call: one buffer serves all.
  std::vector<uint64_t> keys(chunk);
  ps::PullOptions po;
  po.keys_unique = true;
  po.one_sided = o.one_sided;  // the servers tell each key's slot: timed pulls read them
  const SteadyClock::time_point start = SteadyClock::now();
  Status s = RunPipelined(
      w, ops, o.pipeline, WaitLimit(o),
      [&](uint64_t i) -> Result<ps::Ticket> {
        const uint64_t b = lo + i * chunk;
        const uint64_t e = std::min(hi, b + chunk);
        for (uint64_t k = b; k < e; ++k) keys[k - b] = KeyOf(k);
        return w.Pull(table, std::span<const uint64_t>(keys.data(), e - b), po);
      },
      [](uint64_t, double) {});
  if (!s.ok()) return s.Annotate("populate the key space");
  out->populate_seconds = MicrosBetween(start, SteadyClock::now()) / 1e6;
  out->populated_rows = hi - lo;
  return Status::Ok();
}

Result<OpResult> MeasureOp(ps::Worker& w, uint32_t table, const BenchOptions& o, BenchOp op) {
  OpResult r;
  r.op = op;
  r.keys_per_op = o.keys;
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  // Every batch is drawn before the clock starts (keys.h): the timed loop only calls the PS.
  FERRY_ASSIGN_OR_RETURN(
      KeyBatches batches,
      KeyBatches::Create(o.key_spec, o.keys, MeasureSeed(o, w.index(), op), total));
  std::vector<float> grads;
  if (op != BenchOp::kPull) grads = TimedGradients(o.keys, o.dim);
  ps::PullOptions po;
  po.keys_unique = KeysUniqueHint(o);
  po.one_sided = o.one_sided && op == BenchOp::kPull;
  po.fp16 = o.fp16_pull;
  ps::PushOptions pu;
  pu.keys_unique = po.keys_unique;
  auto issue = [&](uint64_t) -> Result<ps::Ticket> {
    const std::span<const uint64_t> keys = batches.Next();
    switch (op) {
      case BenchOp::kPull:
        return w.Pull(table, keys, po);
      case BenchOp::kPush:
        return w.Push(table, keys, grads, pu);
      case BenchOp::kPushPull:
        return w.PushPull(table, keys, grads, po);
    }
    return Internal("unreachable op");
  };
  const uint32_t depth = o.latency ? 1 : o.pipeline;
  Status s = RunPipelined(w, o.warmup, depth, WaitLimit(o), issue, [](uint64_t, double) {});
  if (!s.ok()) return s.Annotate(std::string(BenchOpName(op)) + " warmup");

  const ps::WorkerStats before = w.stats();
  r.op_usec.reserve(o.iters);
  const SteadyClock::time_point start = SteadyClock::now();
  SteadyClock::time_point end = start;
  s = RunPipelined(
      w, o.iters, depth, WaitLimit(o), issue,
      [&r](uint64_t, double usec) { r.op_usec.push_back(usec); }, &end);
  if (!s.ok()) return s.Annotate(std::string(BenchOpName(op)) + " (timed)");
  const ps::WorkerStats& after = w.stats();
  r.iterations = o.iters;
  r.seconds = MicrosBetween(start, end) / 1e6;
  r.keys = uint64_t{o.iters} * o.keys;
  r.unique_keys = op == BenchOp::kPush ? after.keys_pushed - before.keys_pushed
                                       : after.keys_pulled - before.keys_pulled;
  // Payload as shipped: fp16 halves a direction's rows (the filter's savings show in bytes_sent).
  const uint64_t row_in = uint64_t{o.dim} * (o.fp16_pull ? 2 : 4);
  const uint64_t row_out = uint64_t{o.dim} * (o.fp16_push ? 2 : 4);
  r.payload_bytes = r.keys * (op == BenchOp::kPull   ? row_in
                              : op == BenchOp::kPush ? row_out
                                                     : row_in + row_out);
  r.filtered_rows = after.filtered - before.filtered;
  r.requests = after.requests - before.requests;
  r.bytes_sent = after.bytes_sent - before.bytes_sent;
  return r;
}

Result<WorkerResult> RunWorker(ps::Worker& w, const BenchOptions& o) {
  WorkerResult res;
  res.worker = w.index();
  FERRY_ASSIGN_OR_RETURN(const uint32_t table, w.TableId("bench"));
  FERRY_RETURN_IF_ERROR(w.Barrier());
  if (o.populate) {
    FERRY_RETURN_IF_ERROR(Populate(w, table, o, &res));
    FERRY_RETURN_IF_ERROR(w.Barrier());
  }
  if (o.check) {
    Status s = RunCheck(w, table, o, &res.checked_rows);
    if (!s.ok()) return s.Annotate("worker " + std::to_string(w.index()) + ": checked pass");
    FERRY_RETURN_IF_ERROR(w.Barrier());
  }
  for (BenchOp op : o.ops) {
    FERRY_RETURN_IF_ERROR(w.Barrier());  // workers measure side by side
    FERRY_ASSIGN_OR_RETURN(OpResult r, MeasureOp(w, table, o, op));
    res.ops.push_back(std::move(r));
  }
  return res;
}

}  // namespace

Result<std::optional<BenchReport>> RunRank(ps::Node& node, const BenchOptions& o) {
  ps::Worker* w = node.worker();
  if (w == nullptr) return std::optional<BenchReport>();
  FERRY_ASSIGN_OR_RETURN(WorkerResult mine, RunWorker(*w, o));
  const std::vector<uint8_t> bytes = EncodeWorkerResult(mine);
  FERRY_ASSIGN_OR_RETURN(auto parts, w->GatherFromWorkers(bytes));
  if (w->index() != 0) return std::optional<BenchReport>();
  BenchReport r;
  r.options = o;
  FERRY_ASSIGN_OR_RETURN(r.transport, ps::ResolveTransportName(w->job()));
  r.launcher = std::string(ps::LauncherName(node.env().launcher));
  r.ranks = node.size();
  r.row_stride = ServerRowStride(o);
  for (size_t i = 0; i < parts.size(); ++i) {
    auto wr = DecodeWorkerResult(parts[i]);
    if (!wr.ok()) return wr.status().Annotate("result of worker " + std::to_string(i));
    r.populate_seconds = std::max(r.populate_seconds, wr->populate_seconds);
    r.populated_rows += wr->populated_rows;
    r.checked_rows += wr->checked_rows;
    r.workers.push_back(std::move(wr).value());
  }
  FERRY_ASSIGN_OR_RETURN(r.results, MergeResults(r.workers));
  return std::optional<BenchReport>(std::move(r));
}

}  // namespace ferry::psbench
