// ps_repair_bench: what a chain repair (JobSpec::spares, ps/job/chain.h "Repairs") costs the
// workers: push throughput before a server fails, between the failure and the repair's start
// (detection and failover), while the spare copies the shards it adopted, and after it joined,
// plus the repair time, the rows and bytes copied and the longest pause of a source (its
// snapshot of a shard). docs/perf/ps-repair.md is its output (perf/psbench/repair.sh).
//
// The job runs in this process (every rank a thread, tests/ps/cluster.h) over a real transport
// configuration: 3 servers, --replicas 2, 1 spare, 2 workers, ASP, one Adagrad table. Each worker
// first creates its half of the rows (pulls), then pushes batches of random existing keys, one in
// flight, for --seconds; --fail-at seconds into that, server 1's data connections are severed
// (a FaultTransport closes them, as the kernel does for a killed process). Every push's completion
// time is kept; the rates are keys completed in a window over the window's length.
//
// Usage: ps_repair_bench [--transport tcp|ucx-shm|ucx-tcp] [--rows N] [--dim D] [--keys K]
//                        [--seconds S] [--fail-at F] [--rounds N]
// Prints one markdown table row per round (the header first), with --header only the header.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "perf/psbench/inprocess_main.h"
#include "tests/ps/cluster.h"
#include "transport/fault/fault.h"

namespace ferry::ps::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string transport = "tcp";
  uint64_t rows = 600000;
  uint32_t dim = 16;
  uint32_t keys = 4096;
  double seconds = 6.0;
  double fail_at = 1.5;
  int rounds = 1;
};

struct Done {  // one push completed
  Clock::time_point at;
  uint32_t keys;
};

struct Round {
  std::mutex mu;
  std::vector<Done> done;
  Clock::time_point start{}, severed{};
  std::atomic<bool> started{false};
  // From the servers after Join.
  uint64_t join_ns = 0, joined_at_ns = 0, rows_received = 0;
  uint64_t rows_sent = 0, bytes_sent = 0, snapshot_ns = 0;
};

JobSpec MakeJob(const ferry::testing::BackendConfig& config, const Options& o) {
  JobSpec job = SmallJob(config, 3, 2, o.dim);
  job.replicas = 2;
  job.spares = 1;
  job.consistency.kind = Consistency::kAsp;
  TableSpec& t = job.tables[0];
  t.optimizer.kind = Optimizer::kAdagrad;
  t.init.kind = InitializerSpec::Kind::kUniform;
  t.init.a = -0.1f;
  t.init.b = 0.1f;
  // Each server hosts two shards (its own and its predecessor's) of about rows / 3 each.
  t.initial_rows = static_cast<uint32_t>(o.rows / 3 + o.rows / 8 + 1024);
  job.max_keys_per_request = 4096;
  const uint64_t batch = std::max<uint64_t>(o.keys, 4096) * (8 + 4 * o.dim) + (1u << 20);
  job.staging_bytes = 4 * batch;
  job.send_bytes = 4 * batch;
  job.arena_bytes = 4 * batch;
  job.peer_timeout = Millis(3000);
  return job;
}

Status WorkerBody(Node& node, const Options& o, Round* r) {
  Worker* w = node.worker();
  if (w == nullptr) return Status::Ok();
  // Populate: this worker's half of the rows.
  const uint64_t first = o.rows * w->index() / 2, last = o.rows * (w->index() + 1) / 2;
  std::vector<uint64_t> keys;
  for (uint64_t i = first; i < last; i += 4096) {
    keys.clear();
    for (uint64_t j = i; j < std::min(last, i + 4096); ++j) keys.push_back(BenchKey(j));
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    w->Release(p);
  }
  FERRY_RETURN_IF_ERROR(w->Barrier());
  if (w->index() == 0) {
    r->start = Clock::now();
    r->started = true;
  }
  while (!r->started) std::this_thread::yield();
  std::mt19937_64 rng(w->index() + 1);
  std::vector<float> grads(size_t{o.keys} * o.dim, 0.01f);
  std::vector<Done> mine;
  const auto end = r->start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(o.seconds));
  while (Clock::now() < end) {
    keys.clear();
    for (uint32_t i = 0; i < o.keys; ++i) keys.push_back(BenchKey(rng() % o.rows));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Push(0, keys, std::span(grads).first(keys.size() * o.dim)));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    w->Release(p);
    mine.push_back({Clock::now(), static_cast<uint32_t>(keys.size())});
  }
  {
    std::lock_guard<std::mutex> lock(r->mu);
    r->done.insert(r->done.end(), mine.begin(), mine.end());
  }
  FERRY_RETURN_IF_ERROR(w->Barrier());
  return w->Finish();
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Keys per second completed in [a, b).
double Rate(const std::vector<Done>& done, Clock::time_point a, Clock::time_point b) {
  if (b <= a) return 0;
  uint64_t keys = 0;
  for (const Done& d : done) keys += (d.at >= a && d.at < b) ? d.keys : 0;
  return static_cast<double>(keys) / Seconds(b - a);
}

int RunRound(const ferry::testing::BackendConfig& config, const Options& o) {
  Round r;
  JobSpec job = MakeJob(config, o);
  std::atomic<FaultTransport*> victim{nullptr};
  job.wrap_data_transport = [&](std::unique_ptr<Transport> t, Role role,
                                uint32_t index) -> std::unique_ptr<Transport> {
    if (role != Role::kServer || index != 1) return t;
    auto f = std::make_unique<FaultTransport>(std::move(t), FaultPlan{});
    victim = f.get();
    f->OnDestroy([&](const FaultCounters&) { victim = nullptr; });
    return f;
  };
  std::thread failer([&] {
    while (!r.started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_until(r.start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(o.fail_at)));
    FaultPlan sever;
    sever.sever_after_ops = 1;  // the next post closes every connection of server 1
    r.severed = Clock::now();
    if (FaultTransport* f = victim.load()) f->SetPlan(sever);
  });
  std::mutex stats_mu;
  auto outcomes = RunJob(
      job,
      [&](Node& node) -> Status {
        Status s = WorkerBody(node, o, &r);
        Status j = node.Join();
        std::lock_guard<std::mutex> lock(stats_mu);
        for (size_t t = 0; t < node.num_shard_servers(); ++t) {
          const ServerStats& st = node.shard_server(t)->stats();
          if (st.join_ns > 0) {
            r.join_ns = st.join_ns;
            r.joined_at_ns = st.joined_at_ns;
            r.rows_received = st.copy_rows_received;
          }
          r.rows_sent += st.copy_rows_sent;
          r.bytes_sent += st.copy_bytes_sent;
          r.snapshot_ns = std::max(r.snapshot_ns, st.copy_snapshot_ns);
        }
        return s.ok() ? j : s;
      },
      Millis(600000));
  r.started = true;  // a job that failed before its workers started
  failer.join();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (i != 1 && !outcomes[i].ok()) {
      std::fprintf(stderr, "ps_repair_bench: rank %zu failed: %s\n", i,
                   outcomes[i].ToString().c_str());
      return 1;
    }
  }
  if (r.join_ns == 0) {
    std::fprintf(stderr, "ps_repair_bench: the spare never joined (the run ended first?)\n");
    return 1;
  }
  const Clock::time_point joined{
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(r.joined_at_ns))};
  const Clock::time_point began = joined - std::chrono::nanoseconds(r.join_ns);
  const Clock::time_point end = r.start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(o.seconds));
  std::sort(r.done.begin(), r.done.end(), [](const Done& a, const Done& b) { return a.at < b.at; });
  // The longest time without a completed push, from the failure on.
  double gap = 0;
  Clock::time_point last = r.severed;
  for (const Done& d : r.done) {
    if (d.at < r.severed) continue;
    gap = std::max(gap, Seconds(d.at - last));
    last = d.at;
  }
  const double before = Rate(r.done, r.start + std::chrono::milliseconds(200), r.severed);
  const double during = Rate(r.done, began, joined);
  const double after = Rate(r.done, joined, end);
  std::printf("| %s | %" PRIu64
              " x %u | %.0f | %.1f | %.2f M | %.1f | %.2f M | %.2f | %.2f M | %.0f | "
              "%" PRIu64 " | %.1f | %.1f |\n",
              config.name.c_str(), o.rows, o.dim, Seconds(began - r.severed) * 1e3,
              static_cast<double>(r.join_ns) / 1e6, before / 1e6, gap * 1e3, during / 1e6,
              before > 0 ? during / before : 0.0, after / 1e6, after > 0 ? after / before * 100 : 0,
              r.rows_sent, static_cast<double>(r.bytes_sent) / 1e6,
              static_cast<double>(r.snapshot_ns) / 1e6);
  std::fflush(stdout);
  return 0;
}

void PrintHeader() {
  std::printf(
      "| transport | rows x dim | failure to repair start (ms) | repair (ms) | push keys/s before "
      "| longest gap (ms) | keys/s during repair | during / before | keys/s after | after / before "
      "(%%) | rows copied | MB copied | longest source pause (ms) |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"ps_repair_bench: push throughput through a chain repair (see the file's header)"};
  app.add_option("--transport", o.transport, "tcp, ucx-shm or ucx-tcp")->capture_default_str();
  app.add_option("--rows", o.rows, "rows created before the pushes")
      ->check(CLI::Range(uint64_t{3}, uint64_t{1} << 32))
      ->capture_default_str();
  app.add_option("--dim", o.dim, "floats per row")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--keys", o.keys, "random existing keys per push")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "seconds of pushes")->capture_default_str();
  app.add_option("--fail-at", o.fail_at, "seconds into the pushes when server 1 is severed")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "rounds, one table row each")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return RunRounds(
      app, argc, argv, "ps_repair_bench", o.transport, o.rounds, PrintHeader,
      [&]() -> std::string {
        return o.fail_at <= 0.2 || o.fail_at >= o.seconds ? "need 0.2 < --fail-at < --seconds" : "";
      },
      [&](const ferry::testing::BackendConfig& config) { return RunRound(config, o); });
}

}  // namespace
}  // namespace ferry::ps::testing

int main(int argc, char** argv) {
  return ferry::ps::testing::Main(argc, argv);
}
