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
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/ps/job_util.h"
#include "tests/ps/training_loop.h"

namespace ferry::ps::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kServers = 3, kWorkers = 2, kDim = 4;
// Ranks under servers-first: servers 0..2 are ranks 0..2 (rank 0 hosts the coordinator), workers
// 0..1 are ranks 3..4.
constexpr int kServerRank1 = 1;

// The shard servers of a job with kServers server ranks (RunJob sets server_threads).
uint32_t ShardServers() {
  return kServers * TestServerThreads();
}

// Severs every shard server of server rank `victim` after `after` operations each, as a killed
// process loses all of them; the reports in thread order.
std::vector<std::shared_ptr<FaultReport>> SeverServerRank(JobSpec* job, uint32_t victim,
                                                          uint64_t after) {
  std::vector<std::shared_ptr<FaultReport>> reports;
  for (uint32_t t = 0; t < TestServerThreads(); ++t) {
    FaultPlan plan;
    plan.sever_after_ops = after;
    reports.push_back(InjectFaults(job, Role::kServer, t * kServers + victim, plan));
  }
  return reports;
}

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
    plain.spares = 0;
    plain.wrap_data_transport = nullptr;
    TrainingRun run = RunTraining(plain, spec);
    EXPECT_TRUE(AllOk(run.outcomes).ok()) << DescribeOutcomes(run.outcomes);
    EXPECT_EQ(run.final_rows.size(), spec.keys * spec.dim);
    return run.final_rows;
  }

  // Runs `job` with server rank `victim` severed after `after` operations (each of its shard
  // servers): the victim's rank must fail naming its removal, every other rank end ok, and the
  // rows equal `want`.
  void RunSevered(JobSpec job, const TrainingSpec& spec, uint32_t victim, uint64_t after,
                  const std::vector<float>& want) {
    auto reports = SeverServerRank(&job, victim, after);
    const FaultReport* report = reports.front().get();
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
  // An idle spare (connected to by every worker and server, holding nothing) changes nothing
  // (spares take one shard server a rank).
  if (TestServerThreads() > 1) return;
  JobSpec spared = Job(Consistency::kBsp, 2);
  spared.spares = 1;
  TrainingRun run = RunTraining(spared, spec);
  ASSERT_TRUE(AllOk(run.outcomes).ok()) << "a spare" << DescribeOutcomes(run.outcomes);
  EXPECT_EQ(run.final_rows, want) << "a spare";
}

// More shards than shard servers (JobSpec::shards, chain.h): each server hosts several shards
// (and with replicas their copies), requests go to each shard's head, and the rows are those
// of one shard a server, with and without replicas, and after a failover.
TEST_P(PsReplica, MoreShardsThanServersKeepEveryRow) {
  const TrainingSpec spec = Spec(false);
  const std::vector<float> want = Reference(Job(Consistency::kBsp, 1), spec);
  // Elastic (JobSpec::elastic, one shard server a rank): every server connected to every other
  // one and pushes through the chain machinery even with replicas 1; no move here, no change.
  for (bool elastic : {false, true}) {
    if (elastic && TestServerThreads() > 1) break;
    for (uint32_t replicas : {1u, 2u}) {
      JobSpec job = Job(Consistency::kBsp, replicas);
      job.shards = 4 * ShardServers() + 1;  // uneven: some servers start with one more
      job.elastic = elastic;
      TrainingRun run = RunTraining(job, spec);
      const std::string what =
          "replicas " + std::to_string(replicas) + (elastic ? ", elastic" : "");
      ASSERT_TRUE(AllOk(run.outcomes).ok()) << what << DescribeOutcomes(run.outcomes);
      EXPECT_EQ(run.final_rows, want) << what;
    }
  }
  JobSpec job = Job(Consistency::kBsp, 2);
  job.shards = 3 * ShardServers();
  RunSevered(job, spec, kServerRank1, 40, want);
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

// Repair (JobSpec::spares): server 1 (shards 1 and 0) is severed, spare 3 adopts its slots and
// joins both chains with copies from their tails (server 2 for shard 1, server 0 for shard 0);
// then server 0 is severed too, which leaves shard 0 only on the spare: the job goes on and ends
// with the rows of a run without faults.
TEST_P(PsReplica, ASpareRepairsAChainBeforeItsSecondFailure) {
  if (TestServerThreads() > 1) GTEST_SKIP() << "spares take one shard server a rank";
  JobSpec job = Job(Consistency::kBsp, 2);
  job.spares = 1;
  TrainingSpec spec = Spec(false);
  spec.iterations = 48;
  const std::vector<float> want = Reference(job, spec);
  auto first = SeverServerRank(&job, kServerRank1, 30);
  auto second = SeverServerRank(&job, 0, 150);
  TrainingRun run = RunTraining(job, spec);
  const std::string all = DescribeOutcomes(run.outcomes);
  ASSERT_GT(first.front()->counters.connections_severed, 0u) << all;
  ASSERT_GT(second.front()->counters.connections_severed, 0u)
      << "the job ended before server 0 was severed:" << all;
  for (size_t r = 0; r < run.outcomes.size(); ++r) {
    if (r == 0 || r == kServerRank1) {
      EXPECT_TRUE(Mentions(run.outcomes[r], "removed from the job")) << all;
    } else {
      EXPECT_TRUE(run.outcomes[r].ok()) << "rank " << r << " did not survive:" << all;
    }
  }
  EXPECT_EQ(run.final_rows, want) << "rows differ after the repair and the second failure";
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

// ---- Admission and eviction with replicas (server_records.cc): the head decides, the chain
// follows. A sliding window of keys (each worker its own, overlapping) makes rows come and go:
// keys enter late (admission), leave (tick eviction once unseen, or the max_rows bound). At the
// end every server's copy of every shard is compared, key by key and byte by byte (weights and
// optimizer state), with the head's: every live member of a chain must hold the same rows.

// One server's copy of one table of one shard: key -> bytes from the weights to the row's end.
using RowsCopy = std::map<uint64_t, std::vector<uint8_t>>;

struct Copies {
  std::mutex mu;
  std::map<uint32_t, std::map<uint32_t, RowsCopy>> of_shard;  // shard -> server -> rows
  uint64_t records_applied = 0;
  uint64_t rows_created = 0;  // on every server, evicted or not
};

RowsCopy CopyRows(const ArrayHashMap& m) {
  RowsCopy out;
  const RowLayout& l = m.layout();
  m.ForEach([&](uint32_t, const uint8_t* row) {
    uint64_t key;
    std::memcpy(&key, row, 8);
    out[key].assign(row + l.embedding_offset, row + l.stride);
  });
  return out;
}

struct WindowSpec {
  int iterations = 14;
  uint32_t width = 96;  // keys per pull and push
  uint32_t step = 24;   // the window's move per iteration
  Millis pause{0};      // between iterations (lets ticks pass)
  uint32_t shards = 0;  // JobSpec::num_shards() of the job (0: one per shard server)
};

// A worker's window at `it`: keys [it * step + w * step / 2, + width), spread by a hash.
std::vector<uint64_t> WindowKeys(const WindowSpec& spec, uint32_t w, int it) {
  std::vector<uint64_t> keys(spec.width);
  const uint64_t first = uint64_t(it) * spec.step + w * (spec.step / 2);
  for (uint32_t i = 0; i < spec.width; ++i) keys[i] = (first + i) * 0x9e3779b97f4a7c15ull + 1;
  return keys;
}

Status TrainWindow(Node& node, const WindowSpec& spec, uint32_t dim, Copies* copies) {
  if (Worker* w = node.worker()) {
    for (int it = 0; it < spec.iterations; ++it) {
      const std::vector<uint64_t> keys = WindowKeys(spec, w->index(), it);
      FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
      FERRY_RETURN_IF_ERROR(w->Wait(p));
      FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(p));
      std::vector<float> grads(keys.size() * dim);
      for (size_t i = 0; i < keys.size(); ++i) {
        for (uint32_t d = 0; d < dim; ++d) {
          grads[i * dim + d] = rows[i][d] * 0.5f + static_cast<float>(w->index() + it + d) * 0.01f;
        }
      }
      w->Release(p);
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, grads));
      FERRY_RETURN_IF_ERROR(w->Clock());
      if (spec.pause.count() > 0) std::this_thread::sleep_for(spec.pause);
    }
    FERRY_RETURN_IF_ERROR(w->Barrier());
    FERRY_RETURN_IF_ERROR(w->Finish());
  }
  // The tables may be read once the server stopped serving (Node::server()).
  FERRY_RETURN_IF_ERROR(node.Join());
  for (size_t t = 0; t < node.num_shard_servers(); ++t) {
    Server* s = node.shard_server(t);
    std::lock_guard<std::mutex> lock(copies->mu);
    copies->records_applied += s->stats().records_applied;
    copies->rows_created += s->stats().rows_created;
    for (uint32_t shard = 0; shard < (spec.shards != 0 ? spec.shards : ShardServers()); ++shard) {
      if (const ArrayHashMap* m = s->HostedTable(shard, 0)) {
        copies->of_shard[shard][s->index()] = CopyRows(*m);
      }
    }
  }
  return Status::Ok();
}

// Every copy of a shard held by a server in `live` equals the others (at least `min_copies`).
void ExpectReplicasEqual(const Copies& copies, const std::vector<bool>& live, size_t min_copies,
                         uint32_t shards = 0) {
  ASSERT_EQ(copies.of_shard.size(), size_t{shards != 0 ? shards : ShardServers()});
  for (const auto& [shard, by_server] : copies.of_shard) {
    const RowsCopy* first = nullptr;
    uint32_t first_server = 0;
    size_t n = 0;
    for (const auto& [server, rows] : by_server) {
      if (!live[server]) continue;
      ++n;
      if (first == nullptr) {
        first = &rows;
        first_server = server;
        EXPECT_FALSE(rows.empty()) << "shard " << shard << " has no row on server " << server;
        continue;
      }
      EXPECT_EQ(rows.size(), first->size())
          << "shard " << shard << ": server " << server << " and server " << first_server;
      EXPECT_TRUE(rows == *first) << "shard " << shard << ": server " << server
                                  << " holds other rows than server " << first_server;
    }
    EXPECT_GE(n, min_copies) << "shard " << shard;
  }
}

struct DynamicRun {
  std::vector<RankOutcome> outcomes;
  std::unique_ptr<Copies> copies = std::make_unique<Copies>();
};

DynamicRun RunWindow(const JobSpec& job, const WindowSpec& spec) {
  DynamicRun run;
  Copies* c = run.copies.get();
  run.outcomes =
      RunJob(job, [&](Node& node) { return TrainWindow(node, spec, job.tables[0].dim, c); });
  return run;
}

class PsReplicaRows : public PsReplica {
 protected:
  // Job() with its table tracking sightings: Adagrad (state bytes to compare too).
  JobSpec Dynamic(Consistency c, uint32_t replicas) const {
    JobSpec job = Job(c, replicas);
    job.tables[0].optimizer.kind = Optimizer::kAdagrad;
    job.evict_tick = Millis(20);
    return job;
  }
  void ExpectAllEqual(const JobSpec& job, const WindowSpec& spec, const char* what) {
    SCOPED_TRACE(what);
    DynamicRun run = RunWindow(job, spec);
    ASSERT_TRUE(AllOk(run.outcomes).ok()) << DescribeOutcomes(run.outcomes);
    ExpectReplicasEqual(*run.copies, std::vector<bool>(ShardServers(), true), job.replicas,
                        spec.shards);
    EXPECT_GT(run.copies->records_applied, 0u) << "no row record reached a replica";
    if (TableEvicts(job.tables[0])) {
      size_t live = 0;
      for (const auto& [shard, by_server] : run.copies->of_shard) {
        for (const auto& [server, rows] : by_server) live += rows.size();
      }
      EXPECT_GT(run.copies->rows_created, live) << "no row was evicted";
    }
  }
};

TEST_P(PsReplicaRows, AdmissionByCountAndByCoinKeepsTheHeadsRows) {
  WindowSpec spec;
  JobSpec count = Dynamic(Consistency::kBsp, 3);
  count.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
  count.tables[0].admission.min_count = 3;
  ExpectAllEqual(count, spec, "min_count 3, BSP, 3 replicas");
  // Several shards a server (JobSpec::shards): each shard's head decides, per shard.
  spec.shards = count.shards = 2 * ShardServers() + 1;
  ExpectAllEqual(count, spec, "min_count 3, BSP, 3 replicas, 2S+1 shards");
  spec.shards = 0;
  JobSpec coin = Dynamic(Consistency::kAsp, 2);
  coin.tables[0].admission.kind = AdmissionOptions::Kind::kProbability;
  coin.tables[0].admission.probability = 0.4;
  ExpectAllEqual(coin, spec, "probability 0.4, ASP, 2 replicas");
}

TEST_P(PsReplicaRows, TickEvictionAndTheRowBoundKeepTheHeadsRows) {
  WindowSpec spec;
  spec.pause = Millis(15);
  // Rows unseen for 10 ticks (200 ms) go: early windows' rows during the run (30 iterations of
  // at least 15 ms), while the last windows' rows outlast the job's shutdown. With 2 ticks
  // (40 ms) a slow shutdown (the soft-RoCE VM beside a build) left no row to compare.
  spec.iterations = 30;
  JobSpec tick = Dynamic(Consistency::kAsp, 2);
  tick.tables[0].evict_unseen_ticks = 10;
  tick.tables[0].evict_score = 0.5f;
  tick.tables[0].score_half_life = 10;
  ExpectAllEqual(tick, spec, "evict unseen and by score, ASP, 2 replicas");
  spec.iterations = WindowSpec{}.iterations;
  JobSpec bound = Dynamic(Consistency::kBsp, 2);
  bound.tables[0].max_rows = 60;
  bound.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
  bound.tables[0].admission.min_count = 2;
  ExpectAllEqual(bound, spec, "max_rows 60 and min_count 2, BSP, 2 replicas");
}

// Server 1 heads shard 1 and follows shard 0 (chain 0 -> 1): severed mid-run, server 2 takes
// shard 1 over with its own decisions; the survivors of every chain still hold the same rows.
TEST_P(PsReplicaRows, SurvivorsOfAFailoverKeepTheSameRows) {
  WindowSpec spec;
  spec.pause = Millis(10);
  // BSP with 2 replicas (server 2 takes shard 1 over), ASP with 3 (server 1 is also
  // the middle of chain 0 -> 1 -> 2: server 0 forwards to 2).
  for (auto [c, replicas] : {std::pair{Consistency::kBsp, 2u}, std::pair{Consistency::kAsp, 3u}}) {
    JobSpec job = Dynamic(c, replicas);
    job.tables[0].max_rows = 80;
    job.tables[0].evict_unseen_ticks = 3;
    job.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
    job.tables[0].admission.min_count = 2;
    auto reports = SeverServerRank(&job, kServerRank1, 60);
    const FaultReport* report = reports.front().get();
    DynamicRun run = RunWindow(job, spec);
    const std::string all = DescribeOutcomes(run.outcomes);
    SCOPED_TRACE(std::string(c == Consistency::kBsp ? "BSP" : "ASP") + ", replicas " +
                 std::to_string(replicas));
    ASSERT_GT(report->counters.connections_severed, 0u) << all;
    std::vector<bool> live(ShardServers(), true);
    for (size_t t = 0; t < reports.size(); ++t) {
      if (reports[t]->counters.connections_severed > 0) live[t * kServers + kServerRank1] = false;
    }
    for (size_t r = 0; r < run.outcomes.size(); ++r) {
      if (r != size_t{kServerRank1}) {
        EXPECT_TRUE(run.outcomes[r].ok()) << "rank " << r << all;
      }
    }
    ExpectReplicasEqual(*run.copies, live, replicas - 1);
  }
}

// A spare with row records: server 1 is severed, spare 3 copies shards 1 and 0 (rows, the last
// record op_id applied, the head's last finished clock) and follows their heads' decisions from
// then on. At the end every live copy of every shard, the spare's included, holds the head's
// rows, and every shard has its 2 copies again.
TEST_P(PsReplicaRows, ASpareCopiesTheHeadsRowsAndFollowsItsDecisions) {
  if (TestServerThreads() > 1) GTEST_SKIP() << "spares take one shard server a rank";
  WindowSpec spec;
  spec.pause = Millis(10);
  spec.iterations = 24;
  for (Consistency c : {Consistency::kBsp, Consistency::kAsp}) {
    JobSpec job = Dynamic(c, 2);
    job.spares = 1;
    job.tables[0].max_rows = 80;
    job.tables[0].evict_unseen_ticks = 10;  // 200 ms: rows outlast a slow shutdown
    job.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
    job.tables[0].admission.min_count = 2;
    auto reports = SeverServerRank(&job, kServerRank1, 60);
    DynamicRun run = RunWindow(job, spec);
    const std::string all = DescribeOutcomes(run.outcomes);
    SCOPED_TRACE(c == Consistency::kBsp ? "BSP" : "ASP");
    ASSERT_GT(reports.front()->counters.connections_severed, 0u) << all;
    for (size_t r = 0; r < run.outcomes.size(); ++r) {
      if (r != size_t{kServerRank1}) {
        EXPECT_TRUE(run.outcomes[r].ok()) << "rank " << r << all;
      }
    }
    std::vector<bool> live(job.server_members(), true);
    live[kServerRank1] = false;
    for (uint32_t shard : {0u, 1u}) {
      EXPECT_TRUE(run.copies->of_shard[shard].count(kServers))
          << "the spare holds no copy of shard " << shard << all;
    }
    ExpectReplicasEqual(*run.copies, live, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PsReplicaRows, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsReplicaRows);

INSTANTIATE_TEST_SUITE_P(Backends, PsReplica, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsReplica);

TEST(PsReplicaSpec, RefusesReplicasBeyondTheServersAndTakesDynamicTables) {
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
  // Admission, a row bound and tick eviction: the head decides, the chain follows.
  job.tables[0].max_rows = 1000;
  job.tables[0].evict_unseen_ticks = 3;
  job.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
  job.tables[0].admission.min_count = 2;
  EXPECT_TRUE(ValidateJob(job).ok());
  // Elastic: moves plan whole server ranks; a spare's repair is another way to change chains.
  job.elastic = true;
  EXPECT_TRUE(ValidateJob(job).ok());
  const uint64_t fingerprint = job.Fingerprint();
  job.spares = 1;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.spares = 0;
  job.server_threads = 2;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.server_threads = 1;
  job.elastic = false;
  EXPECT_NE(job.Fingerprint(), fingerprint);
}

// Server threads: shard server t of server rank r is t * S + r, so the R <= S members of a chain
// (s, s+1, ..., s+R-1 over S*T shard servers) sit on R distinct ranks; a table's row counts are
// split over a rank's shard servers; T is 1..64.
TEST(PsReplicaSpec, ShardServersOfARankNeverHoldTwoCopiesOfAShard) {
  JobSpec job;
  TableSpec t;
  t.name = "t";
  t.initial_rows = 1000;
  t.max_rows = 301;
  job.tables.push_back(t);
  job.servers = 3;
  job.server_threads = 4;
  job.replicas = 3;
  ASSERT_TRUE(ValidateJob(job).ok());
  EXPECT_EQ(job.shard_servers(), 12u);
  for (uint32_t r = 0; r < job.servers; ++r) {
    for (uint32_t th = 0; th < job.server_threads; ++th) {
      EXPECT_EQ(ServerRankOf(job, ShardServerOf(job, r, th)), r);
    }
  }
  const ChainMap chain(job.shard_servers(), job.replicas);
  for (uint32_t shard = 0; shard < job.shard_servers(); ++shard) {
    std::set<uint32_t> ranks;
    for (uint32_t k = 0; k < job.replicas; ++k)
      ranks.insert(ServerRankOf(job, chain.Member(shard, k)));
    EXPECT_EQ(ranks.size(), size_t{job.replicas}) << "shard " << shard;
  }
  const TableSpec each = ShardServerTable(t, job.server_threads);
  EXPECT_EQ(each.initial_rows, 250u);
  EXPECT_EQ(each.max_rows, 76u);  // rounded up: 4 x 76 >= 301
  EXPECT_EQ(ShardServerTable(t, 1).max_rows, 301u);
  job.server_threads = 0;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.server_threads = 65;
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
  job.server_threads = 2;
  job.replicas = 4;  // more than the 3 server ranks, though there are 6 shard servers
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
}

// Row records (protocol.h "Row records") parse like forwards: checked, never read outside.
TEST(PsReplicaSpec, RowRecordsParseAndBadOnesAreProtocolErrors) {
  const TableShape tables[] = {{4, false}, {8, false}};
  const ForwardLimits limits{4096, 16, 2, 3};
  auto good = [] {
    ForwardHeader h;
    h.flags = kForwardRecord | kForwardApplyStaged;
    h.table = 1;
    h.num_keys = 3;
    h.worker = 1;
    h.shard = 2;
    h.push_id = 9;
    h.op_id = 4;
    h.payload_bytes = static_cast<uint32_t>(RecordPayloadBytes(3));
    return h;
  };
  auto ring_of = [](const ForwardHeader& h, size_t bytes = 4096) {
    std::vector<uint8_t> ring(bytes, 0);
    std::memcpy(ring.data(), &h, sizeof h);
    for (size_t i = 0; i < 3 && 64 + 24 + i < bytes; ++i) ring[64 + 24 + i] = 1 + i % 2;
    return ring;
  };
  std::vector<uint8_t> ring = ring_of(good());
  ForwardView v;
  ASSERT_TRUE(ParseForward(ring, 0, tables, limits, &v).ok());
  EXPECT_EQ(v.push.keys, reinterpret_cast<const uint64_t*>(ring.data() + 64));
  EXPECT_EQ(v.ops, ring.data() + 64 + 24);
  EXPECT_EQ(v.header.op_id, 4u);
  auto refused = [&](const ForwardHeader& h, size_t bytes = 4096, int bad_op = -1) {
    std::vector<uint8_t> r = ring_of(h, bytes);
    if (bad_op >= 0) r[64 + 24 + 1] = static_cast<uint8_t>(bad_op);
    ForwardView fv;
    return ParseForward(r, 0, tables, limits, &fv).code() == Code::kProtocol;
  };
  EXPECT_TRUE(refused(good(), 64 + 24));  // ops past the end of the ring
  EXPECT_TRUE(refused(good(), 4096, 0));  // unknown row operations
  EXPECT_TRUE(refused(good(), 4096, 3));
  ForwardHeader h = good();
  h.op_id = 0;
  EXPECT_TRUE(refused(h));
  h = good();
  h.flags |= kFlagFp16Grads;
  EXPECT_TRUE(refused(h));
  h = good();
  h.payload_bytes += 1;
  EXPECT_TRUE(refused(h));
  h = good();
  h.num_keys = 17;
  h.payload_bytes = static_cast<uint32_t>(RecordPayloadBytes(17));
  EXPECT_TRUE(refused(h));
  h = good();
  h.worker = 2;
  EXPECT_TRUE(refused(h));
  h = good();
  h.table = 2;
  EXPECT_TRUE(refused(h));
  h = good();
  h.flags = kForwardRecord | kForwardClockDone;  // no push named: worker and push_id unchecked
  h.num_keys = 0;
  h.payload_bytes = 0;
  h.worker = 7;
  EXPECT_TRUE(ParseForward(ring_of(h), 0, tables, limits, &v).ok());
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

// Shards beyond the servers (JobSpec::shards): shard q starts on q mod S and the next R-1;
// slots by distance, then by shard; one shard a server lays them out as ever.
TEST(ChainMap, MoreShardsThanServersSpreadOverThem) {
  ChainMap c(3, 2, 0, 7);  // shards 0..6 over servers 0..2
  EXPECT_EQ(c.shards(), 7u);
  EXPECT_EQ(std::vector<uint32_t>(c.Chain(4).begin(), c.Chain(4).end()),
            (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(std::vector<uint32_t>(c.Chain(5).begin(), c.Chain(5).end()),
            (std::vector<uint32_t>{2, 0}));
  // Server 0 heads 0, 3, 6 and follows 2, 5 (which start on server 2).
  EXPECT_EQ(std::vector<uint32_t>(c.Hosted(0).begin(), c.Hosted(0).end()),
            (std::vector<uint32_t>{0, 3, 6, 2, 5}));
  EXPECT_EQ(c.Hosted(1).size(), 5u);  // 1, 4 and 0, 3, 6
  EXPECT_EQ(c.Hosted(2).size(), 4u);  // 2, 5 and 1, 4
  EXPECT_EQ(c.Slot(0, 5), 4);
  EXPECT_EQ(c.Slot(1, 5), -1);
  EXPECT_EQ(c.Head(7), -1);  // no such shard
  c.MarkDead(2);
  EXPECT_EQ(c.Head(5), 0);
  EXPECT_EQ(c.Successor(4, 1), -1);
  EXPECT_TRUE(c.AllShardsLive());
  EXPECT_FALSE(c.AllShardsLive(0));  // shards 2 and 5 (2 -> 0) would have nobody
  ChainMap same(4, 2, 0, 4), plain(4, 2);
  for (uint32_t s = 0; s < 4; ++s) {
    EXPECT_EQ(std::vector<uint32_t>(same.Hosted(s).begin(), same.Hosted(s).end()),
              std::vector<uint32_t>(plain.Hosted(s).begin(), plain.Hosted(s).end()));
  }
}

// Moves (chain.h, rebalance.h): the target joins one shard's chain at the tail as a copy in
// progress (forwarded to, heads nothing, keeps nothing alive); at the finish it takes the
// source's place (heads when the source headed) and the source keeps a slot that names no shard.
TEST(ChainMap, AMoveCopiesAtTheTailThenTheSourceLeaves) {
  ChainMap c(3, 2, 0, 6);              // shard 4: 1 -> 2
  EXPECT_FALSE(c.BeginMove(4, 1, 2));  // already a member
  EXPECT_FALSE(c.BeginMove(4, 0, 1));  // 0 holds no copy
  const size_t slots = c.Hosted(0).size();
  ASSERT_TRUE(c.BeginMove(4, 1, 0));
  EXPECT_TRUE(c.copying(4, 0));
  EXPECT_EQ(c.Slot(0, 4), static_cast<int>(slots));  // a new slot at the end
  EXPECT_EQ(c.Successor(4, 2), 0);                   // the tail forwards to it
  EXPECT_EQ(c.Tail(4), 2);                           // ... and still answers
  EXPECT_EQ(c.Head(4), 1);
  EXPECT_EQ(c.Head(3), 0);  // it heads its own shards as before
  c.MarkDead(2);
  EXPECT_TRUE(c.AllShardsLive());    // shard 4 lives on 1
  EXPECT_FALSE(c.AllShardsLive(1));  // not on the copy in progress
  ChainMap d(3, 2, 0, 6);
  ASSERT_TRUE(d.BeginMove(4, 1, 0));
  EXPECT_FALSE(d.FinishMove(4, 1, 2));  // 2 is not copying it
  const uint32_t version = d.version();
  ASSERT_TRUE(d.FinishMove(4, 1, 0));
  EXPECT_EQ(d.version(), version + 1);
  EXPECT_EQ(std::vector<uint32_t>(d.Chain(4).begin(), d.Chain(4).end()),
            (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(d.Head(4), 0);  // in the source's place
  EXPECT_EQ(d.Tail(4), 2);
  EXPECT_EQ(d.Successor(4, 0), 2);
  EXPECT_EQ(d.Slot(1, 4), -1);
  EXPECT_EQ(d.HostedShard(1, 1), ChainMap::kLeft);  // shard 4 was server 1's slot 1
  EXPECT_TRUE(d.AllShardsLive(2));
  EXPECT_FALSE(d.copying(4, 0));
  EXPECT_FALSE(d.FinishMove(4, 1, 0));  // done already
  // A move of a tail copy: the target stays at the tail.
  ASSERT_TRUE(d.BeginMove(4, 2, 1));
  ASSERT_TRUE(d.FinishMove(4, 2, 1));
  EXPECT_EQ(std::vector<uint32_t>(d.Chain(4).begin(), d.Chain(4).end()),
            (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(d.Slot(1, 4), 1);  // the slot its move away left, taken again
  // Server 2 left shard 4 too: it takes that slot back, its slot count stays.
  const size_t slots2 = d.Hosted(2).size();
  ASSERT_TRUE(d.BeginMove(4, 0, 2));
  EXPECT_EQ(d.Hosted(2).size(), slots2);
  EXPECT_GE(d.Slot(2, 4), 0);
}

// Repairs (chain.h): a spare adopts a dead server's slots at the tail of its chains, copies while
// joining (forwarded to, never a head, keeps nothing alive) and counts once Joined.
TEST(ChainMap, ASpareJoinsTheTailOfTheDeadServersChains) {
  ChainMap c(4, 2, 1);  // servers 0..3, spare 4
  EXPECT_EQ(c.members(), 5u);
  EXPECT_EQ(c.IdleSpare(), 4);
  EXPECT_EQ(c.live_servers(), 4u);  // an idle spare is not counted
  EXPECT_FALSE(c.Join(1, 4));       // server 1 is alive
  c.MarkDead(1);
  EXPECT_FALSE(c.Join(1, 2));  // not a spare
  ASSERT_TRUE(c.Join(1, 4));
  EXPECT_EQ(c.version(), 1u);
  EXPECT_FALSE(c.Join(1, 4));  // adopted already
  EXPECT_EQ(c.IdleSpare(), -1);
  EXPECT_EQ(std::vector<uint32_t>(c.Chain(1).begin(), c.Chain(1).end()),
            (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(std::vector<uint32_t>(c.Chain(0).begin(), c.Chain(0).end()),
            (std::vector<uint32_t>{0, 1, 4}));
  EXPECT_EQ(c.Slot(4, 1), 0);  // the dead server's slots, unchanged
  EXPECT_EQ(c.Slot(4, 0), 1);
  EXPECT_EQ(c.Slot(4, 2), -1);
  EXPECT_EQ(c.Position(0, 4), 2);
  EXPECT_TRUE(c.joining(4));
  EXPECT_EQ(c.Successor(1, 2), 4);  // the source forwards to it
  EXPECT_EQ(c.Successor(0, 0), 4);
  EXPECT_EQ(c.Tail(1), 2);  // ... but stays the tail that answers
  EXPECT_EQ(c.Head(1), 2);
  EXPECT_FALSE(c.AllShardsLive(2));  // shard 1 would only have a copy in progress
  c.Joined(4);
  EXPECT_EQ(c.Tail(1), 4);
  EXPECT_TRUE(c.AllShardsLive(2));
  EXPECT_TRUE(c.AllShardsLive(4));
  EXPECT_TRUE(c.AllShardsLive(0));  // the spare keeps shard 0 alive now
  EXPECT_EQ(c.live_servers(), 4u);
  c.MarkDead(2);  // the other replica of shard 1
  EXPECT_EQ(c.Head(1), 4);
  EXPECT_EQ(c.Successor(1, 4), -1);
  EXPECT_TRUE(c.AllShardsLive());
}

}  // namespace
}  // namespace ferry::ps::testing
