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
#include "tests/ps/training_loop.h"

namespace ferry::ps::testing {
namespace {

using ferry::testing::BackendConfig;
using Clock = std::chrono::steady_clock;

constexpr Millis kPeerTimeout{1500};
// Slack on top of peer_timeout for a loaded 2-core machine: the point is "no hang", and the
// coordinator and the roles each wait up to min(peer_timeout, 3 s) for the other's word.
constexpr Millis kSlack{15000};
constexpr uint32_t kDim = 4;

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
};

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
  auto report = InjectFaults(&job, Role::kWorker, 1, plan);
  TrainingRun run = RunTraining(job);
  const std::string all = DescribeOutcomes(run.outcomes);
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
  ASSERT_TRUE(AllOk(clean.outcomes).ok()) << DescribeOutcomes(clean.outcomes);
  JobSpec job = Job();
  FaultPlan plan;
  plan.delay = Millis(20);
  auto report = InjectFaults(&job, Role::kWorker, 1, plan);
  TrainingRun slow = RunTraining(job);
  ASSERT_TRUE(AllOk(slow.outcomes).ok()) << DescribeOutcomes(slow.outcomes);
  ASSERT_TRUE(report->wrapped);
  EXPECT_GT(report->counters.completions_delayed, 0u);
  ASSERT_EQ(slow.final_rows.size(), TrainingSpec().keys * kDim);
  // BSP applies pushes in worker order at clock boundaries: the same run, bit for bit.
  EXPECT_EQ(slow.final_rows, clean.final_rows);
}

// The requests of one Poll batch are answered with one Post (server_replies.cc): with the
// server's completions held back 5 ms, a worker's 16 pipelined pulls reach the server together
// and their 16 replies leave in few Posts (answered one Post each, they would take 16).
TEST_P(PsFault, ServerAnswersABatchOfRequestsWithOnePost) {
  JobSpec job = SmallJob(GetParam(), 1, 1, kDim);
  job.peer_timeout = kPeerTimeout;
  FaultPlan plan;
  plan.delay = Millis(5);
  auto report = InjectFaults(&job, Role::kServer, 0, plan);
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<Ticket> tickets;
    for (int round = 0; round < 10; ++round) {
      tickets.clear();
      for (uint64_t i = 0; i < 16; ++i) {
        const std::vector<uint64_t> keys = {i * 8 + 1, i * 8 + 2};
        FERRY_ASSIGN_OR_RETURN(Ticket t, w->Pull(0, keys));
        tickets.push_back(t);
      }
      for (Ticket t : tickets) {
        FERRY_RETURN_IF_ERROR(w->Wait(t));
        w->Release(t);
      }
    }
    return Status::Ok();
  });
  ASSERT_TRUE(AllOk(outcomes).ok()) << DescribeOutcomes(outcomes);
  ASSERT_TRUE(report->wrapped);
  EXPECT_GE(report->counters.largest_post, 4u);
  EXPECT_GE(report->counters.ops_posted, 80u);  // a reply per pull (of this shard server)
  EXPECT_LT(report->counters.posts * 2, report->counters.ops_posted)
      << report->counters.posts << " Posts for " << report->counters.ops_posted << " ops";
}

TEST_P(PsFault, ServerCompletionErrorsFailTheJobCleanly) {
  JobSpec job = Job();
  FaultPlan plan;
  plan.error_rate = 0.05;
  plan.seed = 11;
  auto report = InjectFaults(&job, Role::kServer, 0, plan);
  TrainingRun run = RunTraining(job);
  const std::string all = DescribeOutcomes(run.outcomes);
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
