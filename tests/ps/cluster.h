// In-process parameter-server jobs for tests: every rank of a job runs as a thread of the test
// process (rank 0 starts the coordinator and publishes its address in a temporary file, the
// others read it, as under ferry-launch), over a real transport configuration.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ps/node.h"
#include "tests/common/backends.h"

namespace ferry::ps::testing {

// A small job over `config`: one table "t" of width `dim` (Adagrad, zero init) unless the
// caller replaces job.tables; sizes small enough for many jobs per test binary.
JobSpec SmallJob(const ferry::testing::BackendConfig& config, uint32_t servers, uint32_t workers,
                 uint32_t dim = 4);

struct RankOutcome {
  Status start;  // Node::Start
  Status body;   // the test's code on this rank (only if started)
  Status join;   // Node::Join
  bool ok() const { return start.ok() && body.ok() && join.ok(); }
  std::string ToString() const;
};

// Runs every rank of `job`; body(node) runs on each rank after Start (on every rank, whatever
// its roles: check node.worker()). With FERRY_TEST_SERVER_THREADS=T in the environment every
// job that leaves JobSpec::server_threads at 1 runs with T (the ps suites run with 1 and 2:
// meson.build). A rank
// whose body returns an error still joins. Aborts the process with a message if the job is not over
// within `deadline` (a hang is a failure).
// `before_start`, when set, runs on each rank's thread before its Node::Start (a join slot's rank
// waits there until the test lets it join the running job).
std::vector<RankOutcome> RunJob(const JobSpec& job, const std::function<Status(Node&)>& body,
                                Millis deadline = Millis(120000),
                                const std::function<void(int rank)>& before_start = nullptr);

// The server_threads RunJob gives every job (FERRY_TEST_SERVER_THREADS, else 1).
uint32_t TestServerThreads();

// Ok if every rank succeeded, else the first failure with its rank.
Status AllOk(const std::vector<RankOutcome>& outcomes);

}  // namespace ferry::ps::testing
