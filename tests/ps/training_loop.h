// A small deterministic training loop for the in-process job tests that inject faults
// (fault_test.cc, replica_test.cc): every worker pulls a fixed key set, pushes gradients that
// depend on what it pulled (or a constant), and ends its clock; then every worker pulls the
// final rows, worker 0's copy kept. Under BSP, or with constant gradients under any consistency,
// the final rows are a function of the job alone: a run with faults must end with the same bytes
// as a run without.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tests/ps/cluster.h"
#include "transport/fault/fault.h"

namespace ferry::ps::testing {

struct TrainingSpec {
  uint32_t dim = 4;
  int iterations = 12;
  size_t keys = 400;
  // Gradient = rows * 0.5 + (worker + iteration + d) * 0.01 (depends on the order of updates:
  // reproducible under BSP only); or, with `constant`, 1/64 everywhere (any order gives the same
  // rows: for ASP).
  bool constant = false;
  // Called on every worker after each of its clocks (iteration `it`), when set.
  std::function<Status(Worker&, int it)> after_clock;
};

struct TrainingRun {
  std::vector<RankOutcome> outcomes;
  std::chrono::steady_clock::time_point ended;
  std::vector<float> final_rows;
};

std::vector<uint64_t> TrainingKeys(const TrainingSpec& spec);
// The loop on one rank (a no-op on ranks without a worker).
Status TrainOnRank(Node& node, const TrainingSpec& spec, std::vector<float>* final_rows,
                   std::mutex* mu);
// Runs `job` with the loop on every rank.
TrainingRun RunTraining(const JobSpec& job, const TrainingSpec& spec = {});
// Every rank's outcome on one line each, for failure messages.
std::string DescribeOutcomes(const std::vector<RankOutcome>& out);

// What a FaultTransport injected, read when the role destroyed it (the node owns it; RunJob joins
// the rank threads before returning, so reading this afterwards is safe).
struct FaultReport {
  bool wrapped = false;
  FaultCounters counters;
};
// Wraps the data transport of `role` `index` of `job` in a FaultTransport running `plan` (other
// roles stay unwrapped; a second call adds to the first).
std::shared_ptr<FaultReport> InjectFaults(JobSpec* job, Role role, uint32_t index, FaultPlan plan);

}  // namespace ferry::ps::testing
