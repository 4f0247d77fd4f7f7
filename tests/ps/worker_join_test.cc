// Workers joining and leaving a running elastic job (JobSpec::worker_join_slots, Worker::Leave)
// while they read data the coordinator deals (Worker::TakeWork, models/data/reader.h "Dealt
// input"), in-process over every transport configuration available here (FERRY_TEST_BACKENDS
// narrows it; verbs in the VM: vm-ps.sh).
//
// The rule: every training sample is consumed exactly once per pass, whoever joins or leaves.
// Sample i of the data is the line "1 i:1": one feature of its own, so its row counts how many
// times it was trained on (plain SGD, learning rate 1, a gradient of -1 per consumption adds 1).
// Worker 1 stops asking for data after its third clock and leaves once it read what it took;
// the worker join slot starts after worker 0's second clock, joins, and takes its share. After
// two passes every sample's row must be exactly 2 on the servers (a sample lost or read twice
// shows), no other row may exist, and the samples the workers counted must add up to 2 N.
// The workers that stay end with the collectives of a real job: each stops its clocks when out
// of data (Worker::StopClocks: under BSP the others' clocks go on without it), then a barrier
// and a gather of their counts to worker 0, which must hold the parts of workers 0 and 2 (the
// joined one) and none of worker 1 (it left before).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "models/data/reader.h"
#include "tests/ps/job_util.h"

// A namespace of its own: the sanitizer builds compile this file in one unit with replica_test.cc.
namespace ferry::ps::testing::worker_join_test {
namespace {

using models::Batch;
using models::Reader;
using models::ReaderOptions;

constexpr uint32_t kServers = 2, kWorkers = 2, kSamples = 3000, kPasses = 2, kBatch = 50;
// Items per pass: 16 per worker member, about 60 lines each.
constexpr uint32_t kItems = 16 * (kWorkers + 1);

struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool let_join = false, joined = false;
  std::map<uint32_t, uint64_t> consumed;  // worker -> samples it trained on
  std::map<uint32_t, uint64_t> clocks;    // worker -> clocks it made
  std::map<uint64_t, float> rows;         // key -> weight, from every server's tables
  std::vector<std::string> left;          // workers whose Leave returned, and how
  std::vector<uint64_t> gathered;         // worker 0's gather: each worker's count (or ~0: none)
};

std::string WriteData() {
  const std::string path = "/tmp/ferry-worker-join-" + std::to_string(getpid()) + ".svm";
  std::ofstream out(path);
  for (uint32_t i = 0; i < kSamples; ++i) out << "1 " << i + 1 << ":1\n";
  return path;
}

// Every sample's key, in file order (a plain reader of the whole file).
std::vector<uint64_t> SampleKeys(const std::string& path) {
  ReaderOptions ro;
  ro.files = {path};
  auto r = Reader::Open(ro);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<uint64_t> keys;
  Batch b;
  while (r.ok()) {
    b.Clear();
    auto n = (*r)->Next(1024, &b);
    if (!n.ok() || *n == 0) break;
    keys.insert(keys.end(), b.ids.begin(), b.ids.end());
  }
  return keys;
}

Status TrainDealt(Worker& w, const std::string& path, Shared& sh) {
  if (w.join_slot()) {
    std::lock_guard<std::mutex> lock(sh.mu);
    sh.joined = true;
    sh.cv.notify_all();
  }
  bool leaving = false;
  ReaderOptions ro;
  ro.files = {path};
  ro.deal_items = kItems;
  ro.deal = [&](uint64_t pass) -> Result<std::optional<uint64_t>> {
    if (leaving) return std::optional<uint64_t>();  // it reads what it took, and no more
    return w.TakeWork(pass, kItems);
  };
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Reader> reader, Reader::Open(ro));
  uint64_t samples = 0, clocks = 0;
  Batch b;
  std::vector<float> grads;
  for (uint32_t pass = 0; pass < kPasses && !leaving; ++pass) {
    if (pass > 0) FERRY_RETURN_IF_ERROR(reader->Rewind());
    while (true) {
      b.Clear();
      FERRY_ASSIGN_OR_RETURN(const size_t n, reader->Next(kBatch, &b));
      if (n == 0) break;
      grads.assign(b.ids.size(), -1.0f);
      FERRY_RETURN_IF_ERROR(PushAndWait(w, 0, b.ids, grads));
      samples += n;
      FERRY_RETURN_IF_ERROR(w.Clock());
      ++clocks;
      if (w.index() == 0 && clocks == 2) {
        // Let the join slot start, and go on once it joined: it must find data left to take.
        std::unique_lock<std::mutex> lock(sh.mu);
        sh.let_join = true;
        sh.cv.notify_all();
        if (!sh.cv.wait_for(lock, std::chrono::seconds(30), [&] { return sh.joined; })) {
          return Timeout("the worker join slot never joined");
        }
      }
      if (w.index() == 1 && clocks == 3) leaving = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    sh.consumed[w.index()] = samples;
    sh.clocks[w.index()] = clocks;
  }
  if (!leaving) {
    FERRY_RETURN_IF_ERROR(w.StopClocks());
    FERRY_RETURN_IF_ERROR(w.Barrier());
    uint8_t mine[8];
    std::memcpy(mine, &samples, 8);
    FERRY_ASSIGN_OR_RETURN(auto parts, w.GatherFromWorkers(mine));
    if (w.index() != 0) return Status::Ok();
    std::lock_guard<std::mutex> lock(sh.mu);
    for (const auto& p : parts) {
      uint64_t n = ~uint64_t{0};
      if (p.size() == 8) std::memcpy(&n, p.data(), 8);
      sh.gathered.push_back(p.empty() ? ~uint64_t{0} : n);
    }
    return Status::Ok();  // Node::Join finishes it with the job
  }
  // At a clock boundary (its last batch clocked): the job's clocks go on without it.
  Status s = w.Leave();
  std::lock_guard<std::mutex> lock(sh.mu);
  sh.left.push_back(std::to_string(w.index()) + ": " + s.ToString());
  return s;
}

Status RunRank(Node& node, const std::string& path, uint32_t shards, Shared& sh) {
  if (Worker* w = node.worker()) FERRY_RETURN_IF_ERROR(TrainDealt(*w, path, sh));
  FERRY_RETURN_IF_ERROR(node.Join());  // the tables may be read once the servers stopped
  for (size_t t = 0; t < node.num_shard_servers(); ++t) {
    Server* s = node.shard_server(t);
    for (uint32_t shard = 0; shard < shards; ++shard) {
      const ArrayHashMap* m = s->HostedTable(shard, 0);
      if (m == nullptr) continue;
      const RowLayout& l = m->layout();
      std::lock_guard<std::mutex> lock(sh.mu);
      m->ForEach([&](uint32_t, const uint8_t* row) {
        uint64_t key;
        float weight;
        std::memcpy(&key, row, 8);
        std::memcpy(&weight, row + l.embedding_offset, 4);
        sh.rows[key] += weight;
      });
    }
  }
  return Status::Ok();
}

class PsWorkers : public ::testing::TestWithParam<BackendConfig> {
 public:
  void SetUp() override {
    if (TestServerThreads() > 1) GTEST_SKIP() << "elastic jobs take one shard server a rank";
  }
};

void JoinAndLeave(const BackendConfig& config, Consistency c) {
  JobSpec job = SgdJob(config, kServers, kWorkers, 1);
  job.consistency.kind = c;
  job.elastic = true;
  job.shards = 4;
  job.worker_join_slots = 1;
  job.peer_timeout = Millis(3000);
  const int join_rank = RanksNeeded(job) - 1;
  const std::string path = WriteData();
  const std::vector<uint64_t> keys = SampleKeys(path);
  ASSERT_EQ(keys.size(), kSamples);
  Shared sh;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outcomes = RunJob(
      job, [&](Node& node) { return RunRank(node, path, job.num_shards(), sh); }, Millis(120000),
      [&](int rank) {
        if (rank != join_rank) return;
        std::unique_lock<std::mutex> lock(sh.mu);
        sh.cv.wait_for(lock, std::chrono::seconds(60), [&] { return sh.let_join; });
      });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::unlink(path.c_str());
  ASSERT_TRUE(AllOk(outcomes).ok()) << AllOk(outcomes).ToString();
  ASSERT_EQ(sh.left.size(), 1u);
  EXPECT_EQ(sh.left[0], "1: " + Status::Ok().ToString());
  // Every sample trained on once per pass: its row is exactly kPasses, and no other row exists.
  size_t wrong = 0;
  for (uint64_t k : keys) {
    auto it = sh.rows.find(k);
    const float got = it == sh.rows.end() ? 0.0f : it->second;
    if (got != static_cast<float>(kPasses) && wrong++ < 5) {
      ADD_FAILURE() << "sample with key " << k << " was trained on " << got << " times, not "
                    << kPasses;
    }
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(sh.rows.size(), keys.size()) << "rows of keys no sample has";
  uint64_t total = 0;
  for (const auto& [w, n] : sh.consumed) total += n;
  EXPECT_EQ(total, uint64_t{kSamples} * kPasses);
  ASSERT_EQ(sh.consumed.size(), 3u);
  EXPECT_GT(sh.consumed[kWorkers], 0u) << "the joining worker took no data";
  EXPECT_GT(sh.consumed[1], 0u);
  EXPECT_LT(sh.consumed[1], sh.consumed[0]) << "the leaving worker read on";
  const std::vector<uint64_t> gathered = {sh.consumed[0], ~uint64_t{0}, sh.consumed[kWorkers]};
  EXPECT_EQ(sh.gathered, gathered) << "worker 0's gather of the workers' counts";
  std::printf(
      "[ info     ] %s: samples trained by worker 0 / 1 (left after its clock %llu) / 2 "
      "(joined): %llu / %llu / %llu of %u x %u, in %.2f s\n",
      ConsistencyName(job.consistency).c_str(), static_cast<unsigned long long>(sh.clocks[1]),
      static_cast<unsigned long long>(sh.consumed[0]),
      static_cast<unsigned long long>(sh.consumed[1]),
      static_cast<unsigned long long>(sh.consumed[kWorkers]), kSamples, kPasses, seconds);
}

TEST_P(PsWorkers, AWorkerJoinsAndAnotherLeavesEverySampleOncePerPass) {
  {
    SCOPED_TRACE("bsp");
    JoinAndLeave(GetParam(), Consistency::kBsp);
  }
  {
    SCOPED_TRACE("asp");
    JoinAndLeave(GetParam(), Consistency::kAsp);
  }
}

// Coordinator::SetWorkerJoinGate (ferry-train closes it once its stream ended): a worker join
// slot is turned away while the gate gives a reason, whether it gives one when the slot
// registers or only when the slot would start (after the servers accepted it); the slot's rank
// ends cleanly without a worker, and the job ends as if it never came.
void TurnedAway(const BackendConfig& config, bool at_start) {
  JobSpec job = SgdJob(config, kServers, kWorkers, 1);
  job.elastic = true;
  job.shards = 4;
  job.worker_join_slots = 1;
  job.peer_timeout = Millis(3000);
  const int join_rank = RanksNeeded(job) - 1;
  std::mutex mu;
  std::condition_variable cv;
  bool gate_set = false, slot_done = false, slot_joined = false;
  int asked = 0;
  const auto outcomes = RunJob(
      job,
      [&](Node& node) -> Status {
        if (node.rank() == 0) {
          node.SetWorkerJoinGate([&, at_start]() -> std::string {
            std::lock_guard<std::mutex> lock(mu);
            return ++asked == 1 && at_start ? std::string() : std::string("closed");
          });
          std::lock_guard<std::mutex> lock(mu);
          gate_set = true;
          cv.notify_all();
        }
        if (node.rank() == join_rank) {
          std::lock_guard<std::mutex> lock(mu);
          slot_joined = node.worker() != nullptr;
          slot_done = true;
          cv.notify_all();
        }
        Worker* w = node.worker();
        if (w == nullptr) return Status::Ok();
        if (!w->join_slot()) {
          // The job runs until the slot came and went.
          std::unique_lock<std::mutex> lock(mu);
          if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return slot_done; })) {
            return Timeout("the join slot never came back");
          }
        }
        return w->Finish();
      },
      Millis(120000),
      [&](int rank) {
        if (rank != join_rank) return;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::seconds(60), [&] { return gate_set; });
      });
  ASSERT_TRUE(AllOk(outcomes).ok()) << AllOk(outcomes).ToString();
  EXPECT_TRUE(slot_done);
  EXPECT_FALSE(slot_joined) << "the gate let the slot in";
  EXPECT_EQ(asked, at_start ? 2 : 1) << "the gate was asked at register and at start";
}

TEST_P(PsWorkers, AClosedJoinGateTurnsAWorkerJoinSlotAwayCleanly) {
  {
    SCOPED_TRACE("closed when it registers");
    TurnedAway(GetParam(), /*at_start=*/false);
  }
  {
    SCOPED_TRACE("closed when it would start");
    TurnedAway(GetParam(), /*at_start=*/true);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PsWorkers, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsWorkers);

}  // namespace
}  // namespace ferry::ps::testing::worker_join_test
