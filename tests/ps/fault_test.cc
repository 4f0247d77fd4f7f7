// The parameter server over the fault-injecting transport (transport/fault/fault.h), with one
// role's data transport wrapped through JobSpec::wrap_data_transport, over every transport
// configuration available here (tcp, ucx over shared memory, ucx over tcp).
//
// What the PS does with a failed data operation (it has no retries: a request, a reply or a
// notification is sent once):
//  - a worker's request write that fails fails its ticket; the worker's call returns that error,
//    and the job ends for every rank;
//  - a server whose completion (a request's notification or a reply write) fails declares that
//    worker's connection failed and the job ends, naming the worker;
//  - a slow completion is only slow: nothing is declared dead while the peer keeps answering.
// Every case bounds the whole job: a hang aborts the binary (RunJob's deadline) and the time from
// the first failure to the last rank's exit must stay within peer_timeout plus slack.
#include "transport/fault/fault.h"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

using ferry::testing::BackendConfig;
using Clock = std::chrono::steady_clock;

constexpr Millis kPeerTimeout{1500};
// Slack on top of peer_timeout for a loaded 2-core machine: the point is "no hang", and the
// coordinator and the roles each wait up to min(peer_timeout, 3 s) for the other's word.
constexpr Millis kSlack{15000};
constexpr uint32_t kDim = 4;
constexpr int kIterations = 12;

class PsFault : public ::testing::TestWithParam<BackendConfig> {
 protected:
  JobSpec Job() const {
    JobSpec job = SmallJob(GetParam(), 2, 2, kDim);
    job.consistency.kind = Consistency::kBsp;  // reproducible: pushes apply in worker order
    job.tables[0].optimizer.kind = Optimizer::kSgd;
    job.tables[0].optimizer.learning_rate = 0.1f;
    job.tables[0].init = UniformInit(3);
    job.peer_timeout = kPeerTimeout;
    return job;
  }

  // What the wrapper injected, read when the role destroyed it (the node owns it; RunJob joins
  // the rank threads before returning, so reading this afterwards is safe).
  struct Report {
    bool wrapped = false;
    FaultCounters counters;
  };

  // Wraps the data transport of `role` `index` in a FaultTransport running `plan` (the others
  // stay unwrapped).
  static std::shared_ptr<Report> Inject(JobSpec* job, Role role, uint32_t index, FaultPlan plan) {
    auto report = std::make_shared<Report>();
    job->wrap_data_transport = [=](std::unique_ptr<Transport> t, Role r,
                                   uint32_t i) -> std::unique_ptr<Transport> {
      if (r != role || i != index) return t;
      auto f = std::make_unique<FaultTransport>(std::move(t), plan);
      f->OnDestroy([report](const FaultCounters& c) {
        report->wrapped = true;
        report->counters = c;
      });
      return f;
    };
    return report;
  }
};

std::vector<uint64_t> Keys() {
  std::vector<uint64_t> keys(400);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 0x9e3779b97f4a7c15ull;
  return keys;
}

// A training loop: each iteration pulls every key, pushes a gradient that depends on the rows,
// the worker and the iteration, and ends its clock. Then every worker pulls the final rows into
// `final_rows` (worker 0's copy).
Status Train(Node& node, std::vector<float>* final_rows, std::mutex* mu) {
  Worker* w = node.worker();
  if (w == nullptr) return Status::Ok();
  const std::vector<uint64_t> keys = Keys();
  std::vector<float> grads(keys.size() * kDim);
  for (int it = 0; it < kIterations; ++it) {
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(p));
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t d = 0; d < kDim; ++d) {
        grads[i * kDim + d] = rows[i][d] * 0.5f + static_cast<float>(w->index() + it + d) * 0.01f;
      }
    }
    w->Release(p);
    FERRY_ASSIGN_OR_RETURN(Ticket q, w->Push(0, keys, grads));
    FERRY_RETURN_IF_ERROR(w->Wait(q));
    w->Release(q);
    FERRY_RETURN_IF_ERROR(w->Clock());
  }
  FERRY_RETURN_IF_ERROR(w->Barrier());
  FERRY_ASSIGN_OR_RETURN(Ticket r, w->Pull(0, keys));
  FERRY_RETURN_IF_ERROR(w->Wait(r));
  FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(r));
  if (w->index() == 0) {
    std::lock_guard<std::mutex> lock(*mu);
    final_rows->clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      final_rows->insert(final_rows->end(), rows[i], rows[i] + kDim);
    }
  }
  w->Release(r);
  return w->Finish();
}

// Every rank's outcome on one line each, for failure messages.
std::string Describe(const std::vector<RankOutcome>& out) {
  std::string s;
  for (size_t r = 0; r < out.size(); ++r) {
    s += "\n  rank " + std::to_string(r) + ": " + out[r].ToString();
  }
  return s;
}

// Runs `job` with the training body; returns the outcomes, when the job ended and worker 0's
// final rows.
struct TrainingRun {
  std::vector<RankOutcome> outcomes;
  Clock::time_point ended;
  std::vector<float> final_rows;
};

TrainingRun RunTraining(const JobSpec& job) {
  TrainingRun run;
  std::mutex mu;
  run.outcomes = RunJob(job, [&](Node& node) { return Train(node, &run.final_rows, &mu); });
  run.ended = Clock::now();
  return run;
}

// From the first injected fault to the end of the whole job.
Millis Noticed(const TrainingRun& run, const FaultCounters& c) {
  return std::chrono::duration_cast<Millis>(run.ended - c.first_injection);
}

bool Mentions(const RankOutcome& o, std::string_view text) {
  return o.ToString().find(text) != std::string::npos;
}

TEST_P(PsFault, WorkerWhoseTransportBreaksFailsTheJobForEveryRank) {
  JobSpec job = Job();
  FaultPlan plan;
  // Enough for the start and a few iterations; the break comes in the middle of the training.
  plan.fail_after_ops = 20;
  plan.fail_code = Code::kPeerFailure;
  auto report = Inject(&job, Role::kWorker, 1, plan);
  TrainingRun run = RunTraining(job);
  const std::string all = Describe(run.outcomes);
  ASSERT_TRUE(report->wrapped);
  ASSERT_GT(report->counters.ops_failed_injected, 0u) << "the job ended before the break:" << all;
  // The ranks are servers 0-1 (ranks 0-1) and workers 0-1 (ranks 2-3).
  ASSERT_EQ(run.outcomes.size(), 4u);
  const RankOutcome& broken = run.outcomes[3];
  EXPECT_FALSE(broken.body.ok()) << all;
  EXPECT_TRUE(Mentions(broken, "injected failure")) << "worker 1 does not name the cause:" << all;
  for (size_t r = 0; r < run.outcomes.size(); ++r) {
    EXPECT_FALSE(run.outcomes[r].ok()) << "rank " << r << " missed the failure:" << all;
    EXPECT_TRUE(Mentions(run.outcomes[r], "worker 1")) << "rank " << r << ":" << all;
  }
  const Millis noticed = Noticed(run, report->counters);
  EXPECT_LE(noticed, kPeerTimeout + kSlack) << all;
  std::printf("[ info     ] %s: job over %lld ms after the first injected failure (%llu ops)\n",
              GetParam().name.c_str(), static_cast<long long>(noticed.count()),
              static_cast<unsigned long long>(report->counters.ops_failed_injected));
}

TEST_P(PsFault, SlowWorkerIsNotDeclaredDeadAndChangesNothing) {
  TrainingRun clean = RunTraining(Job());
  ASSERT_TRUE(AllOk(clean.outcomes).ok()) << Describe(clean.outcomes);
  JobSpec job = Job();
  FaultPlan plan;
  plan.delay = Millis(20);
  auto report = Inject(&job, Role::kWorker, 1, plan);
  TrainingRun slow = RunTraining(job);
  ASSERT_TRUE(AllOk(slow.outcomes).ok()) << Describe(slow.outcomes);
  ASSERT_TRUE(report->wrapped);
  EXPECT_GT(report->counters.completions_delayed, 0u);
  ASSERT_EQ(slow.final_rows.size(), Keys().size() * kDim);
  // BSP applies pushes in worker order at clock boundaries: the same run, bit for bit.
  EXPECT_EQ(slow.final_rows, clean.final_rows);
}

TEST_P(PsFault, ServerCompletionErrorsFailTheJobCleanly) {
  JobSpec job = Job();
  FaultPlan plan;
  plan.error_rate = 0.05;
  plan.seed = 11;
  auto report = Inject(&job, Role::kServer, 0, plan);
  TrainingRun run = RunTraining(job);
  const std::string all = Describe(run.outcomes);
  ASSERT_TRUE(report->wrapped);
  ASSERT_GT(report->counters.completions_corrupted, 0u) << all;
  for (size_t r = 0; r < run.outcomes.size(); ++r) {
    EXPECT_FALSE(run.outcomes[r].ok()) << "rank " << r << " missed the failure:" << all;
    EXPECT_TRUE(Mentions(run.outcomes[r], "injected error completion"))
        << "rank " << r << " does not name the cause:" << all;
  }
  const Millis noticed = Noticed(run, report->counters);
  EXPECT_LE(noticed, kPeerTimeout + kSlack) << all;
  std::printf("[ info     ] %s: job over %lld ms after the first injected error (%llu)\n",
              GetParam().name.c_str(), static_cast<long long>(noticed.count()),
              static_cast<unsigned long long>(report->counters.completions_corrupted));
}

INSTANTIATE_TEST_SUITE_P(Backends, PsFault, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsFault);

}  // namespace
}  // namespace ferry::ps::testing
