// Worker results on the wire, their merge on worker 0, and the text / JSON / CSV output (see
// ps_bench.h).
//
// WorkerResult travels through Worker::GatherFromWorkers in this byte layout (host byte order: the
// ranks of a job share an architecture, as ps/wire/protocol.h assumes):
//
//   struct Encoded {
//     uint32_t magic;              // "PSB1"
//     uint32_t worker;
//     double   populate_seconds;
//     uint64_t populated_rows, checked_rows;
//     uint32_t num_ops;
//     struct Op {
//       uint8_t  op;               // BenchOp
//       uint32_t keys_per_op;
//       uint64_t iterations;
//       double   seconds;
//       uint64_t keys, unique_keys, payload_bytes, requests, bytes_sent, filtered_rows;
//       uint64_t num_samples;
//       double   op_usec[num_samples];
//     } ops[num_ops];              // packed, no padding
//   };
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ferry_config.h"
#include "tools/common/output.h"
#include "tools/ps/ps_bench.h"

namespace ferry::psbench {

using tools::Finite;
using tools::kReportRule;
using tools::Printf;
using tools::ReportLine;

namespace {

constexpr uint32_t kMagic = 0x31425350;  // "PSB1"

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof v);
    std::memcpy(out_.data() + at, &v, sizeof v);
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() - pos_ < sizeof *v) return false;
    std::memcpy(v, in_.data() + pos_, sizeof *v);
    pos_ += sizeof *v;
    return true;
  }
  size_t left() const { return in_.size() - pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

std::string Params(const std::map<std::string, std::string>& params) {
  std::string out;
  for (const auto& [k, v] : params) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

std::string Distribution(const BenchOptions& o) {
  if (o.key_spec.dist == KeySpec::Dist::kZipf) {
    return o.key_spec.zipf_s == 0
               ? "uniform i.i.d. (repeats; deduped by the worker)"
               : Printf("Zipf s=%g (repeats; deduped by the worker)", o.key_spec.zipf_s);
  }
  return o.dedupe ? "unique, deduped by the worker anyway (--dedupe)"
                  : "unique (PullOptions::keys_unique: no dedupe)";
}

nlohmann::json LatencyJson(const OpSummary& s) {
  return {{"count", s.usec.count},       {"min", Finite(s.usec.min)},
          {"max", Finite(s.usec.max)},   {"typical", Finite(s.usec.typical)},
          {"avg", Finite(s.usec.avg)},   {"stdev", Finite(s.usec.stdev)},
          {"p50", Finite(s.p50_usec)},   {"p99", Finite(s.usec.p99)},
          {"p99_9", Finite(s.usec.p999)}};
}

}  // namespace

std::vector<uint8_t> EncodeWorkerResult(const WorkerResult& r) {
  Writer w;
  w.Put(kMagic);
  w.Put(r.worker);
  w.Put(r.populate_seconds);
  w.Put(r.populated_rows);
  w.Put(r.checked_rows);
  w.Put(static_cast<uint32_t>(r.ops.size()));
  for (const OpResult& op : r.ops) {
    w.Put(static_cast<uint8_t>(op.op));
    w.Put(op.keys_per_op);
    w.Put(op.iterations);
    w.Put(op.seconds);
    w.Put(op.keys);
    w.Put(op.unique_keys);
    w.Put(op.payload_bytes);
    w.Put(op.requests);
    w.Put(op.bytes_sent);
    w.Put(op.filtered_rows);
    w.Put(static_cast<uint64_t>(op.op_usec.size()));
    for (double v : op.op_usec) w.Put(v);
  }
  return w.Take();
}

Result<WorkerResult> DecodeWorkerResult(std::span<const uint8_t> bytes) {
  Reader in(bytes);
  WorkerResult r;
  uint32_t magic = 0, num_ops = 0;
  auto bad = [](const char* what) {
    return ProtocolError(std::string("malformed worker result: ") + what);
  };
  if (!in.Get(&magic) || magic != kMagic) return bad("bad magic");
  if (!in.Get(&r.worker) || !in.Get(&r.populate_seconds) || !in.Get(&r.populated_rows) ||
      !in.Get(&r.checked_rows) || !in.Get(&num_ops)) {
    return bad("truncated header");
  }
  if (num_ops > 16) return bad("too many op types");
  for (uint32_t i = 0; i < num_ops; ++i) {
    OpResult op;
    uint8_t kind = 0;
    uint64_t samples = 0;
    if (!in.Get(&kind) || !in.Get(&op.keys_per_op) || !in.Get(&op.iterations) ||
        !in.Get(&op.seconds) || !in.Get(&op.keys) || !in.Get(&op.unique_keys) ||
        !in.Get(&op.payload_bytes) || !in.Get(&op.requests) || !in.Get(&op.bytes_sent) ||
        !in.Get(&op.filtered_rows) || !in.Get(&samples)) {
      return bad("truncated op");
    }
    if (kind > static_cast<uint8_t>(BenchOp::kPushPull)) return bad("unknown op type");
    if (samples > in.left() / sizeof(double)) return bad("sample count past the end");
    op.op = static_cast<BenchOp>(kind);
    op.op_usec.resize(samples);
    for (double& v : op.op_usec) in.Get(&v);
    r.ops.push_back(std::move(op));
  }
  if (in.left() != 0) return bad("trailing bytes");
  return r;
}

Result<std::vector<OpSummary>> MergeResults(const std::vector<WorkerResult>& workers) {
  std::vector<OpSummary> out;
  if (workers.empty()) return out;
  const size_t n = workers[0].ops.size();
  for (const WorkerResult& w : workers) {
    if (w.ops.size() != n) {
      return ProtocolError("worker " + std::to_string(w.worker) + " reported " +
                           std::to_string(w.ops.size()) + " op types, worker 0 " +
                           std::to_string(n));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    OpSummary s;
    s.op = workers[0].ops[i].op;
    s.keys_per_op = workers[0].ops[i].keys_per_op;
    std::vector<double> samples;
    uint64_t unique = 0, requests = 0;
    for (const WorkerResult& w : workers) {
      const OpResult& r = w.ops[i];
      if (r.op != s.op) return ProtocolError("workers measured op types in different orders");
      s.iterations += r.iterations;
      unique += r.unique_keys;
      requests += r.requests;
      const double kps = r.seconds > 0 ? static_cast<double>(r.keys) / r.seconds : 0;
      s.worker_keys_per_sec.push_back(kps);
      s.keys_per_sec += kps;
      if (r.seconds > 0) {
        s.gb_per_sec += static_cast<double>(r.payload_bytes) / r.seconds / 1e9;
        s.ops_per_sec += static_cast<double>(r.iterations) / r.seconds;
      }
      samples.insert(samples.end(), r.op_usec.begin(), r.op_usec.end());
    }
    if (s.iterations > 0) {
      s.unique_keys_per_op = static_cast<double>(unique) / static_cast<double>(s.iterations);
      s.requests_per_op = static_cast<double>(requests) / static_cast<double>(s.iterations);
    }
    s.usec = bench::SummarizeLatency(samples);  // sorts
    s.p50_usec = bench::Percentile(samples, 50.0);
    out.push_back(std::move(s));
  }
  return out;
}

std::string FormatText(const BenchReport& r) {
  const BenchOptions& o = r.options;
  std::string out = kReportRule;
  out += Printf(
      "%*s%s\n", 16, "",
      o.latency ? "Ferry parameter-server latency test" : "Ferry parameter-server throughput test");
  const std::string params = Params(o.transport_params);
  out += ReportLine("Transport", r.transport + (params.empty() ? "" : " (" + params + ")"));
  out += ReportLine(
      "Job", Printf("%u server%s%s, %u worker%s (%s, %d rank%s, launcher %s), asp", o.servers,
                    o.servers == 1 ? "" : "s",
                    o.server_threads == 1 ? "" : Printf(" x %u threads", o.server_threads).c_str(),
                    o.workers, o.workers == 1 ? "" : "s",
                    std::string(ps::RoleRuleName(o.role_rule)).c_str(), r.ranks,
                    r.ranks == 1 ? "" : "s", r.launcher.c_str()));
  out +=
      ReportLine("Table", Printf("%u floats per row (%u B of payload, %u B stride on a server), %s",
                                 o.dim, o.dim * 4, r.row_stride,
                                 std::string(ps::OptimizerName(o.optimizer.kind)).c_str()));
  std::string space = std::to_string(o.key_spec.space) + " keys";
  if (o.populate) {
    space += Printf(", populated in %.3f s (%.2f M rows/s)", r.populate_seconds,
                    r.populate_seconds > 0
                        ? static_cast<double>(r.populated_rows) / r.populate_seconds / 1e6
                        : 0.0);
  } else {
    space += ", not populated (first touches insert rows)";
  }
  out += ReportLine("Key space", space);
  out += ReportLine("Keys per op", std::to_string(o.keys) + ", " + Distribution(o));
  if (o.one_sided) {
    out += ReportLine("Pulls",
                      "one-sided where slots are known (--one-sided); requests/op counts the "
                      "request path only");
  }
  if (o.fp16_pull || o.fp16_push || o.push_filter > 0) {
    std::string wire;
    if (o.fp16_pull) wire += "pulls fp16 (--fp16-pull); ";
    if (o.fp16_push) wire += "pushes fp16 (--fp16-push); ";
    if (o.push_filter > 0) wire += Printf("push filter |g| < %g dropped", o.push_filter);
    out += ReportLine("Wire", wire);
  }
  if (o.shards != 0) {
    out += ReportLine("Shards",
                      Printf("%u over %u shard servers", o.shards, o.servers * o.server_threads));
  }
  if (o.replicas > 1) {
    out += ReportLine("Replicas", Printf("%u (each push is applied on %u servers before it is "
                                         "acknowledged)",
                                         o.replicas, o.replicas));
  }
  out += ReportLine("In flight", o.latency ? std::string("1 op per worker (synchronous)")
                                           : std::to_string(o.pipeline) + " ops per worker");
  out += ReportLine("Iterations", Printf("%u per worker and op (+%u warmup)", o.iters, o.warmup));
  out += ReportLine("Check", o.check ? Printf("ON (untimed pass: %llu rows verified)",
                                              static_cast<unsigned long long>(r.checked_rows))
                                     : std::string("OFF"));
  out += kReportRule;
  if (o.latency) {
    out +=
        " #op        #keys    #iterations  t_min[usec]  t_max[usec]  t_typical[usec]"
        "  t_avg[usec]  t_stdev[usec]  99% percentile[usec]  99.9% percentile[usec]\n";
    for (const OpSummary& s : r.results) {
      out += Printf(" %-10s %-8u %-12llu %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-21.2f %-.2f\n",
                    std::string(BenchOpName(s.op)).c_str(), s.keys_per_op,
                    static_cast<unsigned long long>(s.iterations), s.usec.min, s.usec.max,
                    s.usec.typical, s.usec.avg, s.usec.stdev, s.usec.p99, s.usec.p999);
    }
  } else {
    out +=
        " #op        #keys    #iterations  Keys/s[M]   GB/s      Ops/s       t_typical[usec]"
        "  99% percentile[usec]\n";
    for (const OpSummary& s : r.results) {
      out += Printf(" %-10s %-8u %-12llu %-11.3f %-9.3f %-11.1f %-16.1f %-.1f\n",
                    std::string(BenchOpName(s.op)).c_str(), s.keys_per_op,
                    static_cast<unsigned long long>(s.iterations), s.keys_per_sec / 1e6,
                    s.gb_per_sec, s.ops_per_sec, s.usec.typical, s.usec.p99);
    }
  }
  return out + kReportRule;
}

namespace {

// "results": one object per op type, merged over the workers.
nlohmann::json ResultsJson(const BenchReport& r) {
  nlohmann::json results = nlohmann::json::array();
  for (const OpSummary& s : r.results) {
    nlohmann::json per_worker = nlohmann::json::array();
    for (double v : s.worker_keys_per_sec) per_worker.push_back(Finite(v));
    results.push_back({{"op", BenchOpName(s.op)},
                       {"keys_per_op", s.keys_per_op},
                       {"iterations", s.iterations},
                       {"unique_keys_per_op", Finite(s.unique_keys_per_op)},
                       {"requests_per_op", Finite(s.requests_per_op)},
                       {"keys_per_sec", Finite(s.keys_per_sec)},
                       {"gb_per_sec", Finite(s.gb_per_sec)},
                       {"ops_per_sec", Finite(s.ops_per_sec)},
                       {"latency_usec", LatencyJson(s)},
                       {"worker_keys_per_sec", per_worker}});
  }
  return results;
}

// "workers": each worker's raw counts per op type.
nlohmann::json WorkersJson(const BenchReport& r) {
  nlohmann::json workers = nlohmann::json::array();
  for (const WorkerResult& w : r.workers) {
    nlohmann::json wops = nlohmann::json::array();
    for (const OpResult& op : w.ops) {
      wops.push_back({{"op", BenchOpName(op.op)},
                      {"iterations", op.iterations},
                      {"seconds", Finite(op.seconds)},
                      {"keys", op.keys},
                      {"unique_keys", op.unique_keys},
                      {"payload_bytes", op.payload_bytes},
                      {"requests", op.requests},
                      {"bytes_sent", op.bytes_sent},
                      {"filtered_rows", op.filtered_rows},
                      {"keys_per_sec",
                       Finite(op.seconds > 0 ? static_cast<double>(op.keys) / op.seconds : 0)}});
    }
    workers.push_back({{"worker", w.worker},
                       {"populate_seconds", Finite(w.populate_seconds)},
                       {"populated_rows", w.populated_rows},
                       {"checked_rows", w.checked_rows},
                       {"ops", wops}});
  }
  return workers;
}

// "config": the options the run measured with.
nlohmann::json ConfigJson(const BenchReport& r) {
  const BenchOptions& o = r.options;
  nlohmann::json ops = nlohmann::json::array();
  for (BenchOp op : o.ops) ops.push_back(BenchOpName(op));
  const bool zipf = o.key_spec.dist == KeySpec::Dist::kZipf;
  return {{"ops", ops},
          {"keys_per_op", o.keys},
          {"dim", o.dim},
          {"iterations", o.iters},
          {"warmup", o.warmup},
          {"pipeline", o.latency ? 1u : o.pipeline},
          {"key_distribution", zipf ? "zipf" : "unique"},
          {"zipf_s", zipf ? Finite(o.key_spec.zipf_s) : 0.0},
          {"key_space", o.key_spec.space},
          {"keys_unique_hint", KeysUniqueHint(o)},
          {"optimizer", ps::OptimizerName(o.optimizer.kind)},
          {"learning_rate", Finite(o.optimizer.learning_rate)},
          {"populate", o.populate},
          {"one_sided", o.one_sided},
          {"fp16_pull", o.fp16_pull},
          {"fp16_push", o.fp16_push},
          {"replicas", o.replicas},
          {"shards", o.shards},
          {"push_filter", Finite(o.push_filter)},
          {"check", o.check},
          {"seed", o.seed},
          {"row_bytes", o.dim * 4},
          {"row_stride", r.row_stride},
          {"timeout_ms", o.timeout.count()}};
}

}  // namespace

// The report as one JSON object, field by field (the nested tables are the functions above).
std::string FormatJson(const BenchReport& r) {
  const BenchOptions& o = r.options;
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, v] : o.transport_params) params[k] = v;
  nlohmann::json j = {
      {"tool", "ferry-ps-bench"},
      {"version", FERRY_VERSION},
      {"mode", o.latency ? "latency" : "throughput"},
      {"transport", r.transport},
      {"transport_params", params},
      {"job",
       {{"servers", o.servers},
        {"server_threads", o.server_threads},
        {"workers", o.workers},
        {"ranks", r.ranks},
        {"role_rule", ps::RoleRuleName(o.role_rule)},
        {"launcher", r.launcher},
        {"consistency", "asp"}}},
      {"config", ConfigJson(r)},
      {"populate",
       {{"rows", r.populated_rows},
        {"seconds", Finite(r.populate_seconds)},
        {"rows_per_sec",
         Finite(r.populate_seconds > 0 ? static_cast<double>(r.populated_rows) / r.populate_seconds
                                       : 0)}}},
      {"check", {{"enabled", o.check}, {"rows_checked", r.checked_rows}, {"passed", true}}},
      {"results", ResultsJson(r)},
      {"workers", WorkersJson(r)},
  };
  // Invalid UTF-8 (a --param value, say) is replaced rather than thrown about.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string FormatCsv(const BenchReport& r) {
  std::string out =
      "transport,mode,servers,workers,op,keys_per_op,dim,iterations,keys_per_sec,gb_per_sec,"
      "ops_per_sec,t_min_usec,t_max_usec,t_typical_usec,t_avg_usec,t_stdev_usec,p50_usec,"
      "p99_usec,p99_9_usec\n";
  for (const OpSummary& s : r.results) {
    // transport and op names are [a-z-] only: no quoting needed.
    out += Printf(
        "%s,%s,%u,%u,%s,%u,%u,%llu,%.3f,%.6f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
        "%.3f\n",
        r.transport.c_str(), r.options.latency ? "latency" : "throughput", r.options.servers,
        r.options.workers, std::string(BenchOpName(s.op)).c_str(), s.keys_per_op, r.options.dim,
        static_cast<unsigned long long>(s.iterations), Finite(s.keys_per_sec), Finite(s.gb_per_sec),
        Finite(s.ops_per_sec), Finite(s.usec.min), Finite(s.usec.max), Finite(s.usec.typical),
        Finite(s.usec.avg), Finite(s.usec.stdev), Finite(s.p50_usec), Finite(s.usec.p99),
        Finite(s.usec.p999));
  }
  return out;
}

}  // namespace ferry::psbench
