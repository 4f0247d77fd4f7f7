// ps_reference: what ferry-ps-bench's figures are compared with — the same work done in ONE
// process with no transport, on a table built exactly like a server's.
//
//   table    an ArrayHashMap with the server's layout (dim floats, the optimizer's state floats,
//            metadata: the same row stride, see ps/server/server.cc Server::Init), the same initial
//            row count (TableInitialRows with one server), the key space inserted in index order
//            (what ferry-ps-bench's populate does with one worker) and every row initialised with
//            ps::InitWeights / ps::InitState (what a server does when it creates a row).
//   batches  the very batches worker 0 of ferry-ps-bench uses (tools/ps/keys.h, MeasureSeed):
//            fresh random unique keys per batch, not one batch again and again, so caches are not
//            flattered.
//   gather   per batch: FindBatch + memcpy of each row's embedding into a dense buffer — what a
//            server's pull does before the transport, and the in-process gather LIMIT of a pull;
//   memcpy   per batch: the memcpy gather alone, slots looked up beforehand (for every batch
//            before the first is timed, so the rows are not cache-warm from the lookup);
//   <opt>    per batch, in blocks of ps::kApplyBlock keys: FindBatch + MarkUpdated +
//            ps::ApplyUpdate on each row with the gradients
//            ferry-ps-bench pushes — what a server's push does without the transport (the SIMD
//            kernels, rows prefetched kApplyAhead keys ahead);
//   plain    (not in all) the same with the plain loops (ps::ApplyUpdateScalar) and no prefetch
//            ahead: the update as first written, beside the new one (`--op update,plain`).
// --threads T (T > 1) runs the update as T shard servers of one rank do (JobSpec::server_threads):
// the keys partitioned over T tables by ps::Partition (as over shard servers), each table owned
// and updated by its own thread, each batch's keys split by owner beforehand (a worker's job,
// untimed) and the threads in step batch by batch (a batch's time: until the last one is done).
// After the timed loops an untimed check compares a gathered batch with ps::InitWeights.
//
//   ps_reference --op all --keys 100000 --dim 16 --key-space 1000000 --iters 100 --json
//
// Output: perftest-like text, or one JSON object (--json [FILE]) in ferry-ps-bench's style.
// Exit codes: 0 ok, 1 failure (including the check), 2 bad usage.
#include <CLI/CLI.hpp>
#include <barrier>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "ferry_config.h"
#include "ps/job/partition.h"
#include "ps/store/array_hash_map.h"
#include "ps/store/optimizer.h"
#include "tools/bench/stats.h"
#include "tools/common/output.h"
#include "tools/ps/pipeline.h"
#include "tools/ps/ps_bench.h"

namespace ferry::psbench {
namespace {

using tools::Finite;
using tools::WriteOutput;

struct RefResult {
  std::string op;  // gather, memcpy, adagrad (the optimizer's name)
  uint64_t iterations = 0;
  double seconds = 0;
  uint64_t keys = 0;
  uint64_t payload_bytes = 0;
  std::vector<double> usec;
};

struct Table {
  std::unique_ptr<ps::ArrayHashMap> map;
  double populate_seconds = 0;
};

// The table of partition `part` of `parts` (every key when parts == 1).
Result<Table> BuildTable(const BenchOptions& o, const ps::Partition& partition, uint32_t part) {
  const uint32_t parts = partition.servers();
  ps::TableOptions to;
  to.dim = o.dim;
  to.state_floats = ps::StateFloats(o.optimizer, o.dim);
  to.metadata = true;
  to.initial_rows = std::max<size_t>(TableInitialRows(o) / parts, 64);
  Table t;
  FERRY_ASSIGN_OR_RETURN(t.map, ps::ArrayHashMap::Create(to));
  ps::ArrayHashMap& m = *t.map;
  if (m.layout().stride != ServerRowStride(o)) {
    return Internal("reference row stride " + std::to_string(m.layout().stride) +
                    " differs from a server's " + std::to_string(ServerRowStride(o)));
  }
  ps::InitializerSpec init = BuildJob(o).tables[0].init;
  const uint64_t chunk = PopulateChunk(o);
  std::vector<uint64_t> keys(chunk);
  std::vector<uint32_t> slots(chunk);
  const SteadyClock::time_point start = SteadyClock::now();
  for (uint64_t b = 0; b < o.key_spec.space; b += chunk) {
    uint64_t n = 0;
    for (uint64_t i = b; i < std::min(b + chunk, o.key_spec.space); ++i) {
      if (parts == 1 || partition.ServerOf(KeyOf(i)) == part) keys[n++] = KeyOf(i);
    }
    FERRY_RETURN_IF_ERROR(m.InsertBatch(std::span<const uint64_t>(keys.data(), n),
                                        std::span<uint32_t>(slots.data(), n)));
    for (uint64_t i = 0; i < n; ++i) {
      uint8_t* row = m.Row(slots[i]);
      ps::InitWeights(init, keys[i], o.dim, m.Embedding(row));
      ps::InitState(o.optimizer, o.dim, m.State(row));
    }
  }
  t.populate_seconds = MicrosBetween(start, SteadyClock::now()) / 1e6;
  return t;
}

Status CheckMissing(std::span<const uint32_t> slots) {
  for (uint32_t s : slots) {
    if (s == ps::ArrayHashMap::kNoSlot) return Internal("a batch key is missing from the table");
  }
  return Status::Ok();
}

// gather: FindBatch + memcpy per batch. Leaves the last batch's rows in `dense` for the check.
Result<RefResult> Gather(const ps::ArrayHashMap& m, const BenchOptions& o,
                         std::vector<float>* dense, std::vector<uint64_t>* last_keys) {
  RefResult r;
  r.op = "gather";
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(
      KeyBatches batches,
      KeyBatches::Create(o.key_spec, o.keys, MeasureSeed(o, 0, BenchOp::kPull), total));
  std::vector<uint32_t> slots(o.keys);
  dense->assign(size_t{o.keys} * o.dim, 0.0f);
  const size_t row = size_t{o.dim} * 4;
  const uint32_t off = m.layout().embedding_offset;
  SteadyClock::time_point t0 = SteadyClock::now();
  for (uint64_t it = 0; it < total; ++it) {
    const std::span<const uint64_t> keys = batches.Next();
    if (it == o.warmup) t0 = SteadyClock::now();
    const SteadyClock::time_point a = SteadyClock::now();
    FERRY_RETURN_IF_ERROR(m.FindBatch(keys, slots));
    float* out = dense->data();
    uint32_t missing = 0;
    for (uint32_t i = 0; i < o.keys; ++i) {
      // The server skips absent keys the same way (ReplyRows); here none may be absent.
      if (slots[i] == ps::ArrayHashMap::kNoSlot) {
        ++missing;
        continue;
      }
      std::memcpy(out + size_t{i} * o.dim, m.Row(slots[i]) + off, row);
    }
    const SteadyClock::time_point b = SteadyClock::now();
    if (missing != 0) return Internal(std::to_string(missing) + " batch keys are missing");
    if (it >= o.warmup) r.usec.push_back(MicrosBetween(a, b));
    if (it + 1 == total) {
      last_keys->assign(keys.begin(), keys.end());
      r.seconds = MicrosBetween(t0, b) / 1e6;
    }
  }
  r.iterations = o.iters;
  r.keys = uint64_t{o.iters} * o.keys;
  r.payload_bytes = r.keys * row;
  return r;
}

// memcpy: the same batches, slots resolved for all of them first.
Result<RefResult> MemcpyGather(const ps::ArrayHashMap& m, const BenchOptions& o) {
  RefResult r;
  r.op = "memcpy";
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(
      KeyBatches batches,
      KeyBatches::Create(o.key_spec, o.keys, MeasureSeed(o, 0, BenchOp::kPull), total));
  std::vector<uint32_t> slots(total * o.keys);
  for (uint64_t it = 0; it < total; ++it) {
    std::span<uint32_t> s(slots.data() + it * o.keys, o.keys);
    FERRY_RETURN_IF_ERROR(m.FindBatch(batches.Next(), s));
    FERRY_RETURN_IF_ERROR(CheckMissing(s));
  }
  std::vector<float> dense(size_t{o.keys} * o.dim);
  const size_t row = size_t{o.dim} * 4;
  const uint32_t off = m.layout().embedding_offset;
  SteadyClock::time_point t0 = SteadyClock::now(), b = t0;
  float sum = 0;
  for (uint64_t it = 0; it < total; ++it) {
    if (it == o.warmup) t0 = SteadyClock::now();
    const uint32_t* s = slots.data() + it * o.keys;
    const SteadyClock::time_point a = SteadyClock::now();
    for (uint32_t i = 0; i < o.keys; ++i) {
      std::memcpy(dense.data() + size_t{i} * o.dim, m.Row(s[i]) + off, row);
    }
    b = SteadyClock::now();
    if (it >= o.warmup) r.usec.push_back(MicrosBetween(a, b));
    sum += dense[it % dense.size()];  // the copies are used
  }
  if (!std::isfinite(sum)) return Internal("gathered rows are not finite");
  r.seconds = MicrosBetween(t0, b) / 1e6;
  r.iterations = o.iters;
  r.keys = uint64_t{o.iters} * o.keys;
  r.payload_bytes = r.keys * row;
  return r;
}

// One batch's update on `m`, as a server applies a push: in blocks of ps::kApplyBlock keys
// (rows still cached), FindBatch + MarkUpdated + the optimizer, the rows kApplyAhead keys on
// prefetched whole. plain: the update as first written, for comparison: one coordinate at a time
// (ps::ApplyUpdateScalar) and no rows prefetched ahead.
Status ApplyBatch(ps::ArrayHashMap& m, const BenchOptions& o, std::span<const uint64_t> keys,
                  const float* grads, bool plain, std::vector<uint32_t>* slots) {
  const uint32_t n = static_cast<uint32_t>(keys.size());
  slots->resize(std::min<uint32_t>(n, ps::kApplyBlock));
  const auto apply = plain ? ps::ApplyUpdateScalar : ps::ApplyUpdate;
  for (uint32_t i = 0; i < n; ++i) {
    if (i % ps::kApplyBlock == 0) {
      const uint32_t len = std::min<uint32_t>(ps::kApplyBlock, n - i);
      FERRY_RETURN_IF_ERROR(m.FindBatch(keys.subspan(i, len), std::span(slots->data(), len)));
    }
    const uint32_t block_end = std::min(ps::kApplyBlock, n - i / ps::kApplyBlock * ps::kApplyBlock);
    const uint32_t ahead = i % ps::kApplyBlock + ps::kApplyAhead;
    if (!plain && ahead < block_end && (*slots)[ahead] != ps::ArrayHashMap::kNoSlot) {
      m.PrefetchRowForUpdate((*slots)[ahead]);
    }
    const uint32_t slot = (*slots)[i % ps::kApplyBlock];
    if (slot == ps::ArrayHashMap::kNoSlot) continue;  // as the server skips refused keys
    uint8_t* row = m.Row(slot);
    ps::ArrayHashMap::MarkUpdated(row);
    apply(o.optimizer, o.dim, m.Embedding(row), m.State(row), grads + size_t{i} * o.dim,
          ps::ArrayHashMap::Meta(row)->update_count);
  }
  return Status::Ok();
}

// The optimizer applied in place, as a server applies a push.
Result<RefResult> Update(ps::ArrayHashMap& m, const BenchOptions& o, bool plain) {
  RefResult r;
  r.op = std::string(ps::OptimizerName(o.optimizer.kind)) + (plain ? "-plain" : "");
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(
      KeyBatches batches,
      KeyBatches::Create(o.key_spec, o.keys, MeasureSeed(o, 0, BenchOp::kPush), total));
  const std::vector<float> grads = TimedGradients(o.keys, o.dim);
  std::vector<uint32_t> slots;
  SteadyClock::time_point t0 = SteadyClock::now(), b = t0;
  for (uint64_t it = 0; it < total; ++it) {
    const std::span<const uint64_t> keys = batches.Next();
    if (it == o.warmup) t0 = SteadyClock::now();
    const SteadyClock::time_point a = SteadyClock::now();
    FERRY_RETURN_IF_ERROR(ApplyBatch(m, o, keys, grads.data(), plain, &slots));
    b = SteadyClock::now();
    if (it >= o.warmup) r.usec.push_back(MicrosBetween(a, b));
  }
  r.seconds = MicrosBetween(t0, b) / 1e6;
  r.iterations = o.iters;
  r.keys = uint64_t{o.iters} * o.keys;
  r.payload_bytes = r.keys * o.dim * 4;
  return r;
}

// The update with one thread per partition table (--threads): the same batches, each split by
// owner up front; per batch every thread applies its share to its own table, and the batch
// ends when the last one is done.
Result<RefResult> ThreadedUpdate(std::vector<Table>& tables, const ps::Partition& partition,
                                 const BenchOptions& o) {
  const uint32_t parts = static_cast<uint32_t>(tables.size());
  RefResult r;
  r.op = std::string(ps::OptimizerName(o.optimizer.kind)) + "-x" + std::to_string(parts);
  const uint64_t total = uint64_t{o.warmup} + o.iters;
  FERRY_ASSIGN_OR_RETURN(
      KeyBatches batches,
      KeyBatches::Create(o.key_spec, o.keys, MeasureSeed(o, 0, BenchOp::kPush), total));
  // share[it][p]: batch it's keys owned by partition p (a worker's split, untimed).
  std::vector<std::vector<std::vector<uint64_t>>> share(total,
                                                        std::vector<std::vector<uint64_t>>(parts));
  for (uint64_t it = 0; it < total; ++it) {
    for (uint64_t k : batches.Next()) share[it][partition.ServerOf(k)].push_back(k);
  }
  const std::vector<float> grads = TimedGradients(o.keys, o.dim);
  std::vector<SteadyClock::time_point> ends(total);
  std::vector<Status> status(parts);
  std::barrier step(static_cast<std::ptrdiff_t>(parts),
                    [&, it = uint64_t{0}]() mutable noexcept { ends[it++] = SteadyClock::now(); });
  const SteadyClock::time_point start = SteadyClock::now();
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < parts; ++p) {
    threads.emplace_back([&, p] {
      std::vector<uint32_t> slots;
      for (uint64_t it = 0; it < total; ++it) {
        if (status[p].ok()) {
          status[p] = ApplyBatch(*tables[p].map, o, share[it][p], grads.data(), false, &slots);
        }
        step.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& st : status) FERRY_RETURN_IF_ERROR(st);
  for (uint64_t it = o.warmup; it < total; ++it) {
    r.usec.push_back(MicrosBetween(it == 0 ? start : ends[it - 1], ends[it]));
  }
  r.seconds = MicrosBetween(o.warmup == 0 ? start : ends[o.warmup - 1], ends[total - 1]) / 1e6;
  r.iterations = o.iters;
  r.keys = uint64_t{o.iters} * o.keys;
  r.payload_bytes = r.keys * o.dim * 4;
  return r;
}

Status CheckGathered(const BenchOptions& o, const std::vector<float>& dense,
                     const std::vector<uint64_t>& keys) {
  const ps::InitializerSpec init = BuildJob(o).tables[0].init;
  std::vector<float> want(o.dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    ps::InitWeights(init, keys[i], o.dim, want.data());
    if (std::memcmp(want.data(), dense.data() + i * o.dim, size_t{o.dim} * 4) != 0) {
      return Status(Code::kProtocol,
                    "gathered row of key " + std::to_string(keys[i]) + " differs from InitWeights");
    }
  }
  return Status::Ok();
}

struct Figures {
  double keys_per_sec = 0, gb_per_sec = 0, p50 = 0;
  bench::LatencySummary usec;
};

Figures Summarize(const RefResult& r) {
  Figures f;
  std::vector<double> samples = r.usec;
  f.usec = bench::SummarizeLatency(samples);  // sorts
  f.p50 = bench::Percentile(samples, 50.0);
  if (r.seconds > 0) {
    f.keys_per_sec = static_cast<double>(r.keys) / r.seconds;
    f.gb_per_sec = static_cast<double>(r.payload_bytes) / r.seconds / 1e9;
  }
  return f;
}

nlohmann::json ResultJson(const RefResult& r, const Figures& f, uint32_t keys) {
  const bench::LatencySummary& s = f.usec;
  return {{"op", r.op},
          {"keys_per_op", keys},
          {"iterations", r.iterations},
          {"seconds", Finite(r.seconds)},
          {"keys_per_sec", Finite(f.keys_per_sec)},
          {"gb_per_sec", Finite(f.gb_per_sec)},
          {"latency_usec",
           {{"count", s.count},
            {"min", Finite(s.min)},
            {"max", Finite(s.max)},
            {"typical", Finite(s.typical)},
            {"avg", Finite(s.avg)},
            {"stdev", Finite(s.stdev)},
            {"p50", Finite(f.p50)},
            {"p99", Finite(s.p99)},
            {"p99_9", Finite(s.p999)}}}};
}

struct RefFlags {
  std::string ops = "all";
  uint32_t keys = 100000, dim = 16, iters = 100, warmup = 10;
  uint64_t key_space = 0, seed = 1;
  std::string optimizer = "adagrad";
  float lr = 0.05f;
  std::string json_path;
  uint32_t threads = 1;
};

int Run(const RefFlags& f) {
  BenchOptions o;  // only the table and key fields matter; one server, one worker
  o.keys = f.keys;
  o.dim = f.dim;
  o.iters = f.iters;
  o.warmup = f.warmup;
  o.key_spec.space = f.key_space != 0 ? f.key_space : std::max<uint64_t>(1000000, f.keys);
  o.seed = f.seed;
  o.pipeline = 1;
  auto opt = ps::ParseOptimizer(f.optimizer);
  if (!opt.ok()) {
    std::fprintf(stderr, "ps_reference: error: %s\n", opt.status().message().c_str());
    return 2;
  }
  o.optimizer.kind = *opt;
  o.optimizer.learning_rate = f.lr;
  bool do_gather = false, do_memcpy = false, do_update = false, do_plain = false;
  std::stringstream in(f.ops);
  for (std::string item; std::getline(in, item, ',');) {
    if (item == "all") {
      do_gather = do_memcpy = do_update = true;
    } else if (item == "gather") {
      do_gather = true;
    } else if (item == "memcpy") {
      do_memcpy = true;
    } else if (item == "update" || item == std::string(ps::OptimizerName(o.optimizer.kind))) {
      do_update = true;
    } else if (item == "plain") {
      do_plain = true;
    } else {
      std::fprintf(stderr,
                   "ps_reference: error: unknown --op '%s' (gather, memcpy, update, plain, all)\n",
                   item.c_str());
      return 2;
    }
  }
  if (Status s = ValidateOptions(o); !s.ok()) {
    std::fprintf(stderr, "ps_reference: error: %s\n", s.message().c_str());
    return 2;
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "ps_reference: error: %s\n", s.ToString().c_str());
    return 1;
  };
  if (f.threads == 0 || f.threads > 64) {
    std::fprintf(stderr, "ps_reference: error: --threads must be 1..64\n");
    return 2;
  }
  if (f.threads > 1 && (do_gather || do_memcpy || do_plain)) {
    std::fprintf(stderr, "ps_reference: error: --threads applies to --op update only\n");
    return 2;
  }
  auto partition = ps::Partition::Create(f.threads);
  if (!partition.ok()) return fail(partition.status());
  std::vector<Table> tables;
  for (uint32_t p = 0; p < f.threads; ++p) {
    auto t = BuildTable(o, *partition, p);
    if (!t.ok()) return fail(t.status());
    tables.push_back(std::move(t).value());
  }
  Table* table = &tables[0];
  double populate_seconds = 0;
  for (const Table& t : tables) populate_seconds += t.populate_seconds;
  table->populate_seconds = populate_seconds;
  ps::ArrayHashMap& m = *table->map;
  std::vector<RefResult> results;
  uint64_t checked = 0;
  if (do_gather) {
    std::vector<float> dense;
    std::vector<uint64_t> keys;
    auto r = Gather(m, o, &dense, &keys);
    if (!r.ok()) return fail(r.status());
    if (Status s = CheckGathered(o, dense, keys); !s.ok()) return fail(s);
    checked += keys.size();
    results.push_back(std::move(r).value());
  }
  if (do_memcpy) {
    auto r = MemcpyGather(m, o);
    if (!r.ok()) return fail(r.status());
    results.push_back(std::move(r).value());
  }
  for (bool plain : {false, true}) {  // last: they change the rows the gathers check
    if (!(plain ? do_plain : do_update)) continue;
    auto r = f.threads > 1 ? ThreadedUpdate(tables, *partition, o) : Update(m, o, plain);
    if (!r.ok()) return fail(r.status());
    results.push_back(std::move(r).value());
  }

  // Text (perftest-like), to stderr when the JSON takes stdout.
  FILE* text = f.json_path == "-" ? stderr : stdout;
  std::fprintf(
      text,
      "---------------------------------------------------------------------------------------\n"
      "                In-process reference (no transport, %u thread%s)\n"
      " Table           : %u floats per row, %u B stride, %s, %llu keys inserted in %.3f s\n"
      " Keys per op     : %u, unique, the batches of ferry-ps-bench's worker 0\n"
      " Iterations      : %u (+%u warmup)\n"
      " Check           : ON (untimed: %llu gathered rows vs InitWeights)\n"
      "---------------------------------------------------------------------------------------\n"
      " #op        #keys    #iterations  Keys/s[M]   GB/s      t_typical[usec]  99%% "
      "percentile[usec]\n",
      f.threads, f.threads == 1 ? "" : "s", o.dim, m.layout().stride,
      std::string(ps::OptimizerName(o.optimizer.kind)).c_str(),
      static_cast<unsigned long long>(o.key_spec.space), table->populate_seconds, o.keys, o.iters,
      o.warmup, static_cast<unsigned long long>(checked));
  nlohmann::json jr = nlohmann::json::array();
  for (const RefResult& r : results) {
    const Figures fig = Summarize(r);
    std::fprintf(text, " %-10s %-8u %-12llu %-11.3f %-9.3f %-16.1f %-.1f\n", r.op.c_str(), o.keys,
                 static_cast<unsigned long long>(r.iterations), fig.keys_per_sec / 1e6,
                 fig.gb_per_sec, fig.usec.typical, fig.usec.p99);
    jr.push_back(ResultJson(r, fig, o.keys));
  }
  std::fprintf(
      text,
      "---------------------------------------------------------------------------------------\n");
  std::fflush(text);
  if (!f.json_path.empty()) {
    nlohmann::json j = {{"tool", "ps_reference"},
                        {"version", FERRY_VERSION},
                        {"config",
                         {{"keys_per_op", o.keys},
                          {"dim", o.dim},
                          {"iterations", o.iters},
                          {"warmup", o.warmup},
                          {"key_space", o.key_spec.space},
                          {"key_distribution", "unique"},
                          {"optimizer", ps::OptimizerName(o.optimizer.kind)},
                          {"learning_rate", Finite(o.optimizer.learning_rate)},
                          {"seed", o.seed},
                          {"row_bytes", o.dim * 4},
                          {"row_stride", m.layout().stride},
                          {"threads", f.threads}}},
                        {"populate",
                         {{"rows", o.key_spec.space},
                          {"seconds", Finite(table->populate_seconds)},
                          {"rows_per_sec", Finite(table->populate_seconds > 0
                                                      ? static_cast<double>(o.key_spec.space) /
                                                            table->populate_seconds
                                                      : 0)}}},
                        {"check", {{"rows_checked", checked}, {"passed", true}}},
                        {"results", jr}};
    if (Status s = WriteOutput(
            f.json_path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
        !s.ok())
      return fail(s);
  }
  return 0;
}

}  // namespace
}  // namespace ferry::psbench

int main(int argc, char** argv) {
  CLI::App app{
      "ps_reference: ferry-ps-bench's in-process references (no transport, one thread):\n"
      "the memcpy gather limit of a pull and the optimizer rate of a push."};
  ferry::psbench::RefFlags f;
  app.add_option("--op", f.ops,
                 "gather, memcpy, update (the optimizer), plain (its plain loops) or all")
      ->capture_default_str();
  app.add_option("-k,--keys", f.keys, "keys per batch")->capture_default_str();
  app.add_option("--dim", f.dim, "floats per row")->capture_default_str();
  app.add_option("-n,--iters", f.iters, "timed batches")->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed batches first")->capture_default_str();
  app.add_option("--key-space", f.key_space, "keys in the table (default max(1000000, keys))");
  app.add_option("--optimizer", f.optimizer, "sgd, adagrad, ftrl, adam or none")
      ->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate")->capture_default_str();
  app.add_option("--seed", f.seed, "seed (as ferry-ps-bench's)")->capture_default_str();
  app.add_option("--threads", f.threads,
                 "update with T threads, each owning the table of one partition of the keys (as\n"
                 "T shard servers: --server-threads)")
      ->capture_default_str();
  app.add_option("--json", f.json_path, "write JSON to FILE (no FILE or -: stdout)")
      ->expected(0, 1)
      ->default_str("-");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return ferry::psbench::Run(f);
}
