// Checkpoints: every server's shard saved by Worker::Checkpoint, restored into a job with a
// different server count. Rows must move to their new owners with their optimizer state: pulls
// after the restore return the same bits, and further pushes give the same results as in a job
// that never stopped.
#include "ps/job/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

using ferry::testing::BackendConfig;

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = (i + 1) * 0x9e3779b97f4a7c15ull;
  return k;
}

std::vector<float> Grads(const std::vector<uint64_t>& keys, uint32_t dim, int round) {
  std::vector<float> g(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (uint32_t d = 0; d < dim; ++d) {
      g[i * dim + d] = static_cast<float>(((keys[i] >> 7) + d + round) % 13) * 0.1f - 0.6f;
    }
  }
  return g;
}

JobSpec Job(uint32_t servers) {
  BackendConfig tcp{"tcp", "tcp", {}, false};
  JobSpec job = SmallJob(tcp, servers, 2, 3);
  job.tables[0].optimizer.kind = Optimizer::kAdagrad;
  job.tables[0].init.kind = InitializerSpec::Kind::kNormal;
  job.tables[0].init.b = 0.1f;
  ps::TableSpec second;
  second.name = "bias";
  second.dim = 1;
  second.optimizer.kind = Optimizer::kFtrl;
  job.tables.push_back(second);
  return job;
}

// Worker `w` pushes round `round`'s gradients of `keys` to both tables.
Status PushRound(Worker* w, const JobSpec& job, const std::vector<uint64_t>& keys, int round) {
  for (uint32_t t = 0; t < 2; ++t) {
    auto g = Grads(keys, job.tables[t].dim, round + static_cast<int>(t));
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, t, keys, g));
  }
  return Status::Ok();
}

// Worker `w` pulls `keys` from both tables into *rows (key ^ table << 63 -> row).
Status PullAll(Worker* w, const JobSpec& job, const std::vector<uint64_t>& keys, std::mutex* mu,
               std::map<uint64_t, std::vector<float>>* rows) {
  for (uint32_t t = 0; t < 2; ++t) {
    FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(t, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(p));
    FERRY_ASSIGN_OR_RETURN(PulledRows r, w->Rows(p));
    std::lock_guard<std::mutex> lock(*mu);
    for (size_t i = 0; i < keys.size(); ++i) {
      (*rows)[keys[i] ^ (uint64_t{t} << 63)].assign(r[i], r[i] + job.tables[t].dim);
    }
    w->Release(p);
  }
  return Status::Ok();
}

// Runs `rounds` pushes from worker 0 (then worker 0 pulls everything); returns the rows
// worker 0 pulled at the end, and optionally checkpoints before that pull.
Status Train(const JobSpec& job, const std::vector<uint64_t>& keys, int first_round, int rounds,
             const std::string& checkpoint_dir, std::map<uint64_t, std::vector<float>>* rows) {
  std::mutex mu;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    if (w->index() == 0) {
      for (int r = first_round; r < first_round + rounds; ++r) {
        FERRY_RETURN_IF_ERROR(PushRound(w, job, keys, r));
      }
    }
    FERRY_RETURN_IF_ERROR(w->Barrier());
    if (w->index() == 0 && !checkpoint_dir.empty()) {
      FERRY_RETURN_IF_ERROR(w->Checkpoint(checkpoint_dir));
    }
    FERRY_RETURN_IF_ERROR(w->Barrier());
    if (w->index() != 0) return Status::Ok();
    return PullAll(w, job, keys, &mu, rows);
  });
  return AllOk(outcomes);
}

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ferry-ckpt-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(Checkpoints, RestoreIntoMoreAndFewerServersKeepsRowsAndOptimizerState) {
  const auto keys = Keys(2000);
  // Reference: one job of 2 servers doing rounds 0..5 without stopping.
  std::map<uint64_t, std::vector<float>> straight;
  ASSERT_TRUE(Train(Job(2), keys, 0, 6, "", &straight).ok());
  // Rounds 0..2, checkpoint.
  std::map<uint64_t, std::vector<float>> before;
  Status s = Train(Job(2), keys, 0, 3, dir_.string(), &before);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto manifest = ReadManifest(dir_.string());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->servers, 2u * TestServerThreads());  // one shard file per shard server
  ASSERT_EQ(manifest->tables.size(), 2u);
  // Into 3 and 1 server ranks, and into 2 ranks of 3 shard servers each (server_threads: the
  // checkpoint was written with 1, or 2 in the *_threads2 run).
  for (auto [servers, threads] : {std::pair{3u, 1u}, std::pair{1u, 1u}, std::pair{2u, 3u}}) {
    SCOPED_TRACE("restored into " + std::to_string(servers) + " servers x " +
                 std::to_string(threads) + " threads");
    // Restored: the same bits as pulled right after the checkpoint (zero more rounds)...
    JobSpec job = Job(servers);
    job.server_threads = threads;  // 1: RunJob's (FERRY_TEST_SERVER_THREADS)
    job.restore_dir = dir_.string();
    std::map<uint64_t, std::vector<float>> after;
    s = Train(job, keys, 3, 0, "", &after);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(after.size(), before.size());
    for (const auto& [k, v] : before) {
      ASSERT_EQ(std::memcmp(after[k].data(), v.data(), v.size() * 4), 0) << "key " << k;
    }
    // ... and rounds 3..5 on top give what the job that never stopped has: the optimizer state
    // (Adagrad's and FTRL's accumulators) moved with the rows.
    std::map<uint64_t, std::vector<float>> resumed;
    s = Train(job, keys, 3, 3, "", &resumed);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (const auto& [k, v] : straight) {
      ASSERT_EQ(std::memcmp(resumed[k].data(), v.data(), v.size() * 4), 0) << "key " << k;
    }
  }
}

// More shards than servers (JobSpec::shards): a checkpoint holds one file per shard, and restores
// into any count of shards and servers with the same bits; rounds on top give the rows of a job
// that never stopped.
TEST_F(Checkpoints, MoreShardsThanServersWriteAndRestoreAtAnyCount) {
  const auto keys = Keys(1000);
  std::map<uint64_t, std::vector<float>> straight;
  ASSERT_TRUE(Train(Job(2), keys, 0, 4, "", &straight).ok());
  JobSpec sharded = Job(2);
  sharded.shards = 5 * TestServerThreads() + 1;  // RunJob runs 1 or 2 shard servers a rank
  std::map<uint64_t, std::vector<float>> before;
  Status s = Train(sharded, keys, 0, 2, dir_.string(), &before);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto manifest = ReadManifest(dir_.string());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->servers, sharded.shards);  // one file per shard
  for (uint32_t shards : {0u, 4u * TestServerThreads()}) {
    SCOPED_TRACE("restored into 1 server and " + std::to_string(shards) + " shards");
    JobSpec job = Job(1);
    job.shards = shards;
    job.restore_dir = dir_.string();
    std::map<uint64_t, std::vector<float>> resumed;
    s = Train(job, keys, 2, 2, "", &resumed);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(resumed.size(), straight.size());
    for (const auto& [k, v] : straight) {
      ASSERT_EQ(std::memcmp(resumed[k].data(), v.data(), v.size() * 4), 0) << "key " << k;
    }
  }
}

// Worker::ClearTables empties every table on every server, replicas included: the rows pulled
// after it are the initial ones (those of a job that never pushed), and pushes after it build
// on them as in a fresh job.
TEST_F(Checkpoints, ClearTablesMakesEveryRowNewAgain) {
  const auto keys = Keys(400);
  for (uint32_t replicas : {1u, 2u}) {
    SCOPED_TRACE("replicas " + std::to_string(replicas));
    JobSpec job = Job(2);
    job.replicas = replicas;
    // Reference: a fresh job that only pushes round 7, then pulls.
    std::map<uint64_t, std::vector<float>> fresh;
    ASSERT_TRUE(Train(job, keys, 7, 1, "", &fresh).ok());
    std::map<uint64_t, std::vector<float>> cleared;
    std::mutex mu;
    Status s = AllOk(RunJob(job, [&](Node& node) -> Status {
      Worker* w = node.worker();
      if (w == nullptr) return Status::Ok();
      if (w->index() == 0) {
        for (int r = 0; r < 3; ++r) FERRY_RETURN_IF_ERROR(PushRound(w, job, keys, r));
      }
      FERRY_RETURN_IF_ERROR(w->Barrier());
      if (w->index() == 0) FERRY_RETURN_IF_ERROR(w->ClearTables());
      FERRY_RETURN_IF_ERROR(w->Barrier());
      if (w->index() != 0) return Status::Ok();
      FERRY_RETURN_IF_ERROR(PushRound(w, job, keys, 7));
      return PullAll(w, job, keys, &mu, &cleared);
    }));
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(cleared.size(), fresh.size());
    for (const auto& [k, v] : fresh) {
      ASSERT_EQ(std::memcmp(cleared[k].data(), v.data(), v.size() * 4), 0) << "key " << k;
    }
  }
}

TEST_F(Checkpoints, RestoreRefusesAMismatchedTable) {
  const auto keys = Keys(100);
  std::map<uint64_t, std::vector<float>> rows;
  ASSERT_TRUE(Train(Job(2), keys, 0, 1, dir_.string(), &rows).ok());
  JobSpec job = Job(2);
  job.tables[0].dim = 4;  // another width
  job.restore_dir = dir_.string();
  auto outcomes = RunJob(job, [](Node&) { return Status::Ok(); });
  Status s = AllOk(outcomes);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("table 't'"), std::string::npos) << s.ToString();
}

TEST_F(Checkpoints, RestoreFromNothingIsAClearError) {
  JobSpec job = Job(1);
  job.restore_dir = (dir_ / "absent").string();
  Status s = AllOk(RunJob(job, [](Node&) { return Status::Ok(); }));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MANIFEST"), std::string::npos) << s.ToString();
}

TEST(CheckpointManifest, RoundTripsAndRefusesGarbage) {
  CheckpointManifest m;
  m.servers = 3;
  m.partition_version = 12345;
  m.virtual_nodes = 128;
  m.partition_seed = 7;
  m.clock = 42;
  m.tables = {{"emb", 16, 16}, {"w", 1, 2}};
  auto back = ParseManifest(EncodeManifest(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->servers, 3u);
  EXPECT_EQ(back->clock, 42u);
  EXPECT_EQ(back->tables, m.tables);
  const std::string text = EncodeManifest(m);
  for (size_t cut = 0; cut < text.size(); ++cut) {
    auto r = ParseManifest(text.substr(0, cut));
    EXPECT_FALSE(r.ok()) << "a manifest cut at " << cut << " bytes parsed";
  }
  for (const char* bad : {"ferry-checkpoint 2\n", "servers 0\n", "table a/b 1 1\n"}) {
    EXPECT_FALSE(ParseManifest(std::string("ferry-checkpoint 1\n") + bad).ok()) << bad;
  }
}

TEST(CheckpointManifest, WorkerPositionsRoundTripAndMustBeComplete) {
  CheckpointManifest m;
  m.servers = 2;
  m.clock = 80;
  m.tables = {{"w", 1, 2}};
  m.positions = {5120, 5118, 0};
  const std::string text = EncodeManifest(m);
  auto back = ParseManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->positions, m.positions);
  const std::string head = text.substr(0, text.find("workers"));
  for (const std::string bad :
       {"workers 3\nposition 0 1\nposition 2 1\nend\n",                // worker 1 missing
        "workers 2\nposition 0 1\nposition 0 2\nposition 1 1\nend\n",  // twice
        "position 0 1\nworkers 1\nend\n",                              // before its count
        "workers 1\nposition 1 7\nend\n", "workers 0\nend\n", "workers 1\nposition 0 -1\nend\n"}) {
    auto r = ParseManifest(head + bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kProtocol) << bad;
  }
}

TEST(PeriodicCheckpoints, LatestNamesTheNewestAndOldOnesGo) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("ferry_periodic_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_EQ(ResolveCheckpoint(dir.string()).status().code(), Code::kNotFound);
  CheckpointManifest m;
  m.servers = 1;
  m.tables = {{"w", 1, 2}};
  for (uint64_t c : {40, 80, 120}) {
    const std::string sub = (dir / PeriodicCheckpointName(c)).string();
    std::filesystem::create_directories(sub);
    m.clock = c;
    ASSERT_TRUE(WriteManifest(sub, m).ok());
    ASSERT_TRUE(CommitLatest(dir.string(), PeriodicCheckpointName(c), 2).ok());
    auto at = ResolveCheckpoint(dir.string());
    ASSERT_TRUE(at.ok()) << at.status().ToString();
    EXPECT_EQ(*at, sub);
    EXPECT_EQ(ReadManifest(*at)->clock, c);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "clock-40")) << "beyond the two kept";
  EXPECT_TRUE(std::filesystem::exists(dir / "clock-80"));
  // A directory that is itself a checkpoint resolves to itself.
  EXPECT_EQ(*ResolveCheckpoint((dir / "clock-80").string()), (dir / "clock-80").string());
  // A LATEST that names something else is refused, not followed.
  {
    std::ofstream latest(dir / "LATEST", std::ios::trunc);
    latest << "../../etc\n";
  }
  EXPECT_EQ(ResolveCheckpoint(dir.string()).status().code(), Code::kProtocol);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::ps::testing
