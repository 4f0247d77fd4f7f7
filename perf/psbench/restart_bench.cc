// ps_restart_bench: what changing a job's server count costs today, by the only way there is
// (the elastic-jobs issue's baseline): checkpoint the tables, stop the job, start it again at the
// new size restoring the checkpoint (JobSpec::restore_dir re-cuts the rows to the new servers).
// docs/perf/ps-elastic.md is its output (perf/psbench/restart.sh); a join or a leave of a running
// job is measured against these columns.
//
// The jobs run in this process (every rank a thread, tests/ps/cluster.h) over a real transport
// configuration: --from servers, 2 workers, ASP, one Adagrad table of --rows rows x --dim floats
// in --shards shards. The workers create every row (pulls), push --seconds of batches of random
// existing keys (optimizer state on every row they touch), meet at a barrier, and worker 0 has the
// job checkpoint (Worker::Checkpoint: every server writes its shards, the coordinator the
// manifest); then the job stops. A job of --to servers starts from the checkpoint; its workers
// pull one batch and check it holds the rows the first job pushed (not fresh rows).
// Columns: checkpoint (Worker::Checkpoint's call), stop (the barrier after it to every rank
// joined), start and restore (RunJob's start to the workers' first instruction: connections,
// registration, every server reading its shards), first pull, their sum (what a running job pays
// between its last push at the old size and its first at the new one), and the checkpoint's size.
// Processes are threads here: a restart across machines also pays process start-up (exec,
// libraries, transport init) and re-reading its input to the checkpoint's position.
//
// Usage: ps_restart_bench [--transport tcp|ucx-shm|ucx-tcp] [--rows N] [--dim D] [--shards Q]
//                         [--from S] [--to S'] [--seconds T] [--rounds N] [--header]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "perf/psbench/inprocess_main.h"
#include "tests/ps/cluster.h"

namespace ferry::ps::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Options : BenchTable {
  uint32_t from = 2;
  uint32_t to = 3;
  double seconds = 1.0;
};

struct Round {
  Clock::time_point checkpoint_done{}, stopped{}, started{}, first_pull{};
  double checkpoint_ms = 0;
};

// The first job: create, push, checkpoint into `dir`.
Status FirstBody(Node& node, const Options& o, const std::string& dir, Round* r) {
  Worker* w = node.worker();
  if (w == nullptr) return Status::Ok();
  const uint64_t first = o.rows * w->index() / 2, last = o.rows * (w->index() + 1) / 2;
  std::vector<uint64_t> keys;
  for (uint64_t i = first; i < last; i += o.keys) {
    keys.clear();
    for (uint64_t j = i; j < std::min(last, i + o.keys); ++j) keys.push_back(BenchKey(j));
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    w->Release(p);
  }
  std::mt19937_64 rng(w->index() + 1);
  std::vector<float> grads(size_t{o.keys} * o.dim, 0.5f);
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.seconds));
  // The first batch of keys is pushed every time: the second job checks it.
  keys.clear();
  for (uint64_t j = 0; j < o.keys; ++j) keys.push_back(BenchKey(j));
  do {
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Push(0, keys, std::span(grads).first(keys.size() * o.dim)));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    w->Release(p);
    keys.clear();
    for (uint32_t i = 0; i < o.keys; ++i) keys.push_back(BenchKey(rng() % o.rows));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  } while (Clock::now() < end);
  FERRY_RETURN_IF_ERROR(w->Barrier());
  if (w->index() == 0) {
    const auto t0 = Clock::now();
    FERRY_RETURN_IF_ERROR(w->Checkpoint(dir));
    r->checkpoint_done = Clock::now();
    r->checkpoint_ms = MsOf(r->checkpoint_done - t0);
  }
  FERRY_RETURN_IF_ERROR(w->Barrier());
  return w->Finish();
}

// The second job: its workers' first pull holds the pushed rows (both workers pushed the first
// batch at least once: Adagrad at step 1 moved each of its weights by more than 0.5, off the
// initializer's range [-0.1, 0.1]).
Status SecondBody(Node& node, const Options& o, Round* r) {
  Worker* w = node.worker();
  if (w == nullptr) return Status::Ok();
  if (w->index() == 0) {
    r->started = Clock::now();
  }
  std::vector<uint64_t> keys;
  for (uint64_t j = 0; j < o.keys; ++j) keys.push_back(BenchKey(j));
  FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
  FERRY_RETURN_IF_ERROR(w->Wait(p));
  if (w->index() == 0) r->first_pull = Clock::now();
  FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(p));
  uint64_t fresh = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (uint32_t d = 0; d < rows.dim(); ++d) fresh += std::abs(rows[i][d]) <= 0.1f ? 1 : 0;
  }
  w->Release(p);
  if (fresh > 0) {
    return Internal("the restored job's rows look fresh: " + std::to_string(fresh) +
                    " weights of the pushed keys within the initializer's range");
  }
  FERRY_RETURN_IF_ERROR(w->Barrier());
  return w->Finish();
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes;
}

int RunRound(const ferry::testing::BackendConfig& config, const Options& o) {
  Round r;
  const std::string dir =
      std::filesystem::temp_directory_path() / ("ps_restart_bench." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto first = RunJob(
      o.Job(config, o.from, o.rows / o.from + o.rows / 8 + 1024),
      [&](Node& node) -> Status { return FirstBody(node, o, dir, &r); }, Millis(600000));
  r.stopped = Clock::now();
  if (Status s = AllOk(first); !s.ok()) {
    std::fprintf(stderr, "ps_restart_bench: the first job failed: %s\n", s.ToString().c_str());
    return 1;
  }
  const uint64_t bytes = DirBytes(dir);
  JobSpec second = o.Job(config, o.to, o.rows / o.to + o.rows / 8 + 1024);
  second.restore_dir = dir;
  const auto t0 = Clock::now();
  auto outcomes = RunJob(
      second, [&](Node& node) -> Status { return SecondBody(node, o, &r); }, Millis(600000));
  std::filesystem::remove_all(dir);
  if (Status s = AllOk(outcomes); !s.ok()) {
    std::fprintf(stderr, "ps_restart_bench: the restored job failed: %s\n", s.ToString().c_str());
    return 1;
  }
  const double stop = MsOf(r.stopped - r.checkpoint_done);
  const double start = MsOf(r.started - t0);
  const double pull = MsOf(r.first_pull - r.started);
  std::printf("| %s | %" PRIu64
              " x %u | %u | %u -> %u | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
              config.name.c_str(), o.rows, o.dim, o.shards, o.from, o.to, r.checkpoint_ms, stop,
              start, pull, r.checkpoint_ms + stop + start + pull, static_cast<double>(bytes) / 1e6);
  std::fflush(stdout);
  return 0;
}

void PrintHeader() {
  std::printf(
      "| transport | rows x dim | shards | servers | checkpoint (ms) | stop (ms) | start and "
      "restore (ms) | first pull (ms) | total (ms) | checkpoint MB |\n"
      "|---|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"ps_restart_bench: a job's server count changed by checkpoint, stop and restore"};
  o.AddOptions(app);
  app.add_option("--from", o.from, "servers of the first job")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--to", o.to, "servers of the restored job")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "seconds of pushes before the checkpoint")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return RunRounds(
      app, argc, argv, "ps_restart_bench", o.transport, o.rounds, PrintHeader,
      [&]() -> std::string {
        return o.shards < std::max(o.from, o.to) ? "--shards must be at least --from and --to" : "";
      },
      [&](const ferry::testing::BackendConfig& config) { return RunRound(config, o); });
}

}  // namespace
}  // namespace ferry::ps::testing

int main(int argc, char** argv) {
  return ferry::ps::testing::Main(argc, argv);
}
