// Chain-replicated shards (JobSpec::replicas; ps/job/chain.h, docs/ps.md "Replicas"), in-process
// over every transport configuration available here (FERRY_TEST_BACKENDS narrows it: verbs in the
// soft-RoCE VM through tests/ps/vm-ps.sh).
//
// The rule: replicas change no result, and losing a server while the job runs changes none
// either, as long as every shard keeps a live replica: no restart, no acknowledged update lost,
// none applied twice. The final rows of a run (worker 0's pull of every key after a barrier) are
// compared byte for byte with those of a run without replicas: under BSP with gradients that
// depend on the rows (any lost, repeated or reordered update changes them), and under ASP with
// constant gradients (the order cannot matter there, the count can).
//
// A server is "killed" in-process by a FaultTransport on its data transport that closes every
// connection it has after its N-th operation (sever_after_ops), as the kernel does for a dead
// process: its workers and neighbours see their connections end, report it, and the coordinator
// removes the server. The severed server itself learns it was removed and fails (its rank's
// outcome names the removal); every other rank must end ok. tests/train/replica_test.cc kills
// real processes with SIGKILL.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "tests/ps/job_util.h"
#include "tests/ps/training_loop.h"

namespace ferry::ps::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kServers = 3, kWorkers = 2, kDim = 4;
// Ranks under servers-first: servers 0..2 are ranks 0..2 (rank 0 hosts the coordinator), workers
// 0..1 are ranks 3..4.
constexpr int kServerRank1 = 1;

bool Mentions(const RankOutcome& o, std::string_view text) {
  return o.ToString().find(text) != std::string::npos;
}

class PsReplica : public ::testing::TestWithParam<BackendConfig> {
 protected:
  JobSpec Job(Consistency c, uint32_t replicas) const {
    JobSpec job = SmallJob(GetParam(), kServers, kWorkers, kDim);
    job.consistency.kind = c;
    job.replicas = replicas;
    job.tables[0].optimizer.kind = Optimizer::kSgd;
    job.tables[0].optimizer.learning_rate = 0.1f;
    job.tables[0].init = UniformInit(7);
    job.peer_timeout = Millis(3000);
    return job;
  }

  static TrainingSpec Spec(bool constant) {
    TrainingSpec spec;
    spec.dim = kDim;
    spec.constant = constant;
    spec.iterations = 16;
    return spec;
  }

  // The same job without replicas and without faults: the rows every other run must end with.
  static std::vector<float> Reference(const JobSpec& job, const TrainingSpec& spec) {
    JobSpec plain = job;
    plain.replicas = 1;
    plain.wrap_data_transport = nullptr;
    TrainingRun run = RunTraining(plain, spec);
    EXPECT_TRUE(AllOk(run.outcomes).ok()) << DescribeOutcomes(run.outcomes);
    EXPECT_EQ(run.final_rows.size(), spec.keys * spec.dim);
    return run.final_rows;
  }

  // Runs `job` with server `victim` severed after `after` operations: the victim's rank must
  // fail naming its removal, every other rank end ok, and the rows equal `want`.
  void RunSevered(JobSpec job, const TrainingSpec& spec, uint32_t victim, uint64_t after,
                  const std::vector<float>& want) {
    FaultPlan plan;
    plan.sever_after_ops = after;
    auto report = InjectFaults(&job, Role::kServer, victim, plan);
    TrainingRun run = RunTraining(job, spec);
    const std::string all = DescribeOutcomes(run.outcomes);
    ASSERT_TRUE(report->wrapped);
    ASSERT_GT(report->counters.connections_severed, 0u)
        << "the job ended before server " << victim << " was severed:" << all;
    for (size_t r = 0; r < run.outcomes.size(); ++r) {
      if (r == victim) {  // servers-first: server i is rank i
        EXPECT_FALSE(run.outcomes[r].ok()) << all;
        EXPECT_TRUE(Mentions(run.outcomes[r], "removed from the job")) << all;
      } else {
        EXPECT_TRUE(run.outcomes[r].ok()) << "rank " << r << " did not survive:" << all;
      }
    }
    EXPECT_EQ(run.final_rows, want) << "rows differ after the failover";
    const auto ms =
        std::chrono::duration_cast<Millis>(run.ended - report->counters.first_injection);
    std::printf("[ info     ] %s: server %u severed after %llu ops; job done %lld ms later\n",
                GetParam().name.c_str(), victim, static_cast<unsigned long long>(after),
                static_cast<long long>(ms.count()));
  }
};

TEST_P(PsReplica, ChainsChangeNoRowUnderBsp) {
  const TrainingSpec spec = Spec(false);
  const std::vector<float> want = Reference(Job(Consistency::kBsp, 1), spec);
  for (uint32_t replicas : {2u, 3u}) {
    TrainingRun run = RunTraining(Job(Consistency::kBsp, replicas), spec);
    ASSERT_TRUE(AllOk(run.outcomes).ok())
        << "replicas " << replicas << DescribeOutcomes(run.outcomes);
    EXPECT_EQ(run.final_rows, want) << "replicas " << replicas;
  }
}

TEST_P(PsReplica, ChainsCountEveryAspPushOnce) {
  const TrainingSpec spec = Spec(true);
  const std::vector<float> want = Reference(Job(Consistency::kAsp, 1), spec);
  TrainingRun run = RunTraining(Job(Consistency::kAsp, 2), spec);
  ASSERT_TRUE(AllOk(run.outcomes).ok()) << DescribeOutcomes(run.outcomes);
  EXPECT_EQ(run.final_rows, want);
}

// Server 1 heads shard 1 and is the tail of shard 0's chain (0 -> 1): both roles fail over.
TEST_P(PsReplica, SeveredServerFailsOverUnderBspWithTheSameRows) {
  const JobSpec job = Job(Consistency::kBsp, 2);
  const TrainingSpec spec = Spec(false);
  const std::vector<float> want = Reference(job, spec);
  for (uint64_t after : {30u, 75u}) RunSevered(job, spec, kServerRank1, after, want);
}

TEST_P(PsReplica, SeveredServerFailsOverUnderAspCountingEveryPushOnce) {
  const JobSpec job = Job(Consistency::kAsp, 2);
  const TrainingSpec spec = Spec(true);
  RunSevered(job, spec, kServerRank1, 50, Reference(job, spec));
}

// Three replicas: server 1 is the middle of chain 0 (0 -> 1 -> 2): server 0 must forward to 2.
TEST_P(PsReplica, SeveredMiddleOfAChainIsBridged) {
  const JobSpec job = Job(Consistency::kBsp, 3);
  const TrainingSpec spec = Spec(false);
  RunSevered(job, spec, kServerRank1, 60, Reference(job, spec));
}

TEST_P(PsReplica, LosingEveryReplicaOfAShardFailsTheJobNamingIt) {
  JobSpec job = Job(Consistency::kBsp, 2);
  FaultPlan first;
  first.sever_after_ops = 40;
  FaultPlan second = first;
  second.sever_after_ops = 90;
  // Chain of shard 1 is 1 -> 2: once both are gone, shard 1 has no replica left.
  auto r1 = InjectFaults(&job, Role::kServer, 1, first);
  auto r2 = InjectFaults(&job, Role::kServer, 2, second);
  const auto start = Clock::now();
  TrainingRun run = RunTraining(job, Spec(false));
  const std::string all = DescribeOutcomes(run.outcomes);
  ASSERT_GT(r1->counters.connections_severed, 0u) << all;
  if (r2->counters.connections_severed == 0) {
    GTEST_SKIP() << "the job finished before server 2's 90th operation" << all;
  }
  EXPECT_FALSE(AllOk(run.outcomes).ok()) << all;
  for (int r = kServers; r < static_cast<int>(run.outcomes.size()); ++r) {
    EXPECT_FALSE(run.outcomes[r].ok()) << "worker rank " << r << " missed the failure:" << all;
    EXPECT_TRUE(Mentions(run.outcomes[r], "no live replica")) << all;
  }
  EXPECT_LT(run.ended - start, Millis(60000)) << all;
}

INSTANTIATE_TEST_SUITE_P(Backends, PsReplica, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsReplica);

TEST(PsReplicaSpec, RefusesWhatReplicasCannotKeepConsistent) {
  JobSpec job;
  TableSpec t;
  t.name = "t";
  job.tables.push_back(t);
  job.servers = 2;
  job.replicas = 3;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.replicas = 0;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.replicas = 2;
  EXPECT_TRUE(ValidateJob(job).ok());
  job.tables[0].max_rows = 1000;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.tables[0].max_rows = 0;
  job.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
  job.tables[0].admission.min_count = 2;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
}

TEST(ChainMap, HeadsSuccessorsAndSurvival) {
  ChainMap c(4, 2);
  EXPECT_EQ(c.Member(3, 1), 0u);
  EXPECT_EQ(c.HostedShard(0, 1), 3u);
  EXPECT_EQ(c.Position(3, 0), 1);
  EXPECT_EQ(c.Position(3, 1), -1);
  EXPECT_EQ(c.Head(1), 1);
  EXPECT_EQ(c.Successor(1, 1), 2);
  EXPECT_EQ(c.Successor(1, 2), -1);
  EXPECT_TRUE(c.AllShardsLive(1));
  c.MarkDead(1);
  EXPECT_EQ(c.Head(1), 2);
  EXPECT_EQ(c.Successor(0, 0), -1);  // chain 0 -> 1: 0 is its tail now
  EXPECT_TRUE(c.AllShardsLive(3));   // 1 and 3 are not neighbours
  EXPECT_FALSE(c.AllShardsLive(2));  // shard 1 (1 -> 2) would have nobody
  ChainMap three(3, 3);
  three.MarkDead(1);
  EXPECT_EQ(three.Successor(0, 0), 2);  // the middle is bridged
  EXPECT_EQ(three.live_servers(), 2u);
}

}  // namespace
}  // namespace ferry::ps::testing
