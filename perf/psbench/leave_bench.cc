// ps_leave_bench: what a server leaving a running elastic job costs (JobSpec::elastic,
// Worker::RetireServer), or with --join one joining it (JobSpec::join_slots), beside
// ps_restart_bench's checkpoint-stop-restore (the baseline; all in
// docs/perf/ps-elastic.md through perf/psbench/restart.sh).
//
// The job runs in this process (every rank a thread, tests/ps/cluster.h) over a real transport
// configuration: --from servers, 2 workers, ASP, one Adagrad table of --rows rows x --dim floats
// in --shards shards. The workers create every row (pulls), then push batches of 4096 random
// existing keys for --seconds; halfway worker 0 asks for the last server's leave, which moves
// its shards to the others while both workers go on pushing (worker 0 resumes once the server
// left). Columns: the rows the leave moved (the servers' copy counters) as a fraction of all rows,
// the leave (RetireServer's call), and worker 1's longest time without a completed push during
// the leave against its longest before it (the stall the move adds: a shard's pushes wait for its
// drain; Adagrad state moves with the rows). After the leave worker 1 pulls the first batch and
// checks it is not fresh (the moved rows kept their pushes).
//
// --join: the job has --from servers and one join slot, whose rank starts (Node::Start, in this
// process) halfway; it registers, everyone connects to it, and it takes its share (PlanJoin)
// while both workers push on. The join's time runs from its rank's start until worker 0's chains
// show it heading its share (floor(shards / (from + 1)) shards).
//
// Usage: ps_leave_bench [--transport tcp|ucx-shm|ucx-tcp] [--rows N] [--dim D] [--shards Q]
//                       [--from S] [--seconds T] [--join] [--rounds N] [--header]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "perf/psbench/inprocess_main.h"
#include "tests/ps/cluster.h"

namespace ferry::ps::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Options : BenchTable {
  uint32_t from = 3;
  double seconds = 2.0;
  bool join = false;
};

struct Round {
  std::mutex mu;
  std::condition_variable cv;
  bool let_join = false;  // --join: the join slot's rank may start
  Clock::time_point leave_began{}, leave_ended{};
  std::atomic<bool> leaving{false}, left{false};
  size_t moves = 0;
  double gap_before_ms = 0, gap_during_ms = 0;
  uint64_t rows_moved = 0;
};

Status Body(Node& node, const Options& o, Round* r) {
  if (Worker* w = node.worker()) {
    const uint64_t first = o.rows * w->index() / 2, last = o.rows * (w->index() + 1) / 2;
    std::vector<uint64_t> keys;
    for (uint64_t i = first; i < last; i += o.keys) {
      keys.clear();
      for (uint64_t j = i; j < std::min(last, i + o.keys); ++j) keys.push_back(BenchKey(j));
      FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
      FERRY_RETURN_IF_ERROR(w->Wait(p));
      w->Release(p);
    }
    FERRY_RETURN_IF_ERROR(w->Barrier());
    std::mt19937_64 rng(w->index() + 1);
    std::vector<float> grads(size_t{o.keys} * o.dim, 0.5f);
    const auto start = Clock::now();
    const auto half = start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(o.seconds / 2));
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(o.seconds));
    keys.clear();
    for (uint64_t j = 0; j < o.keys; ++j) keys.push_back(BenchKey(j));  // checked after the leave
    auto last_push = Clock::now();
    double gap_before = 0, gap_during = 0;
    do {
      FERRY_ASSIGN_OR_RETURN(Ticket p,
                             w->Push(0, keys, std::span(grads).first(keys.size() * o.dim)));
      FERRY_RETURN_IF_ERROR(w->Wait(p));
      w->Release(p);
      const auto now = Clock::now();
      const double gap = MsOf(now - last_push);
      last_push = now;
      // A gap that overlaps the leave counts as during it.
      if (r->leaving) {
        gap_during = std::max(gap_during, gap);
      } else if (!r->left) {
        gap_before = std::max(gap_before, gap);
      }
      if (w->index() == 0 && now >= half && !r->left && !r->leaving) {
        r->leave_began = Clock::now();
        r->leaving = true;
        if (o.join) {
          std::lock_guard<std::mutex> lock(r->mu);
          r->let_join = true;
          r->cv.notify_all();
        } else {
          FERRY_ASSIGN_OR_RETURN(r->moves, w->RetireServer(o.from - 1));
        }
      }
      // A leave ends with its call; a join once the joining server heads its share.
      const uint32_t share = o.shards / (o.from + 1);
      if (w->index() == 0 && r->leaving &&
          (!o.join || w->ShardsHeadedBy(w->job().first_join_slot()) >= share)) {
        r->leave_ended = Clock::now();
        if (o.join) r->moves = share;
        r->leaving = false;
        r->left = true;
      }
      if (o.join && r->leaving && MsOf(Clock::now() - r->leave_began) > 60000) {
        return Timeout("the join did not finish within 60 s");
      }
      keys.clear();
      for (uint32_t i = 0; i < o.keys; ++i) keys.push_back(BenchKey(rng() % o.rows));
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    } while (Clock::now() < end || !r->left);
    FERRY_RETURN_IF_ERROR(w->Barrier());
    if (w->index() == 1) {
      std::lock_guard<std::mutex> lock(r->mu);
      r->gap_before_ms = gap_before;
      r->gap_during_ms = gap_during;
      keys.clear();
      for (uint64_t j = 0; j < o.keys; ++j) keys.push_back(BenchKey(j));
      FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
      FERRY_RETURN_IF_ERROR(w->Wait(p));
      FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(p));
      uint64_t fresh = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        for (uint32_t d = 0; d < rows.dim(); ++d) fresh += std::abs(rows[i][d]) <= 0.1f ? 1 : 0;
      }
      w->Release(p);
      if (fresh > 0) {
        return Internal("after the leave " + std::to_string(fresh) +
                        " weights of the pushed keys are within the initializer's range");
      }
    }
    FERRY_RETURN_IF_ERROR(w->Finish());
  }
  FERRY_RETURN_IF_ERROR(node.Join());
  for (size_t t = 0; t < node.num_shard_servers(); ++t) {
    std::lock_guard<std::mutex> lock(r->mu);
    r->rows_moved += node.shard_server(t)->stats().copy_rows_sent;
  }
  return Status::Ok();
}

int RunRound(const ferry::testing::BackendConfig& config, const Options& o) {
  Round r;
  // Room for a leaving server's share on top of a server's own.
  JobSpec job = o.Job(config, o.from, 2 * o.rows / o.from + o.rows / 8 + 1024);
  job.elastic = true;
  job.join_slots = o.join ? 1 : 0;
  const int join_rank = RanksNeeded(job) - 1;
  auto outcomes = RunJob(
      job, [&](Node& node) { return Body(node, o, &r); }, Millis(600000),
      [&](int rank) {
        if (!o.join || rank != join_rank) return;
        std::unique_lock<std::mutex> lock(r.mu);
        r.cv.wait_for(lock, std::chrono::seconds(300), [&] { return r.let_join; });
      });
  if (Status s = AllOk(outcomes); !s.ok()) {
    std::fprintf(stderr, "ps_leave_bench: the job failed: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("| %s | %" PRIu64 " x %u | %u | %u -> %u | %zu | %.3f | %.1f | %.1f | %.1f |\n",
              config.name.c_str(), o.rows, o.dim, o.shards, o.from,
              o.join ? o.from + 1 : o.from - 1, r.moves,
              static_cast<double>(r.rows_moved) / static_cast<double>(o.rows),
              MsOf(r.leave_ended - r.leave_began), r.gap_during_ms, r.gap_before_ms);
  std::fflush(stdout);
  return 0;
}

void PrintHeader(bool join) {
  std::printf(
      "| transport | rows x dim | shards | servers | shards moved | rows moved (fraction) | "
      "%s (ms) | longest push gap during it (ms) | longest push gap before (ms) |\n"
      "|---|---|---:|---|---:|---:|---:|---:|---:|\n",
      join ? "join" : "leave");
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"ps_leave_bench: a server leaving a running elastic job while workers push"};
  o.AddOptions(app);
  app.add_option("--from", o.from, "servers before the leave (the last one leaves)")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "seconds of pushes (the leave starts halfway)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--join", o.join, "a server joins halfway instead (a join slot's rank starts)");
  return RunRounds(
      app, argc, argv, "ps_leave_bench", o.transport, o.rounds, [&] { PrintHeader(o.join); },
      [&]() -> std::string { return o.shards < o.from ? "--shards must be at least --from" : ""; },
      [&](const ferry::testing::BackendConfig& config) { return RunRound(config, o); });
}

}  // namespace
}  // namespace ferry::ps::testing

int main(int argc, char** argv) {
  return ferry::ps::testing::Main(argc, argv);
}
