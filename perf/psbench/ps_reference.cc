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
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ferry_config.h"
#include "perf/psbench/reference.h"
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
