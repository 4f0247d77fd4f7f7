// Dynamic features through real jobs over every backend here: the servers' eviction tick
// (TableSpec::evict_unseen_ticks, JobSpec::evict_tick), admission at the N-th sighting, a
// max_rows bound, memory that plateaus under a stream of fresh keys, one-sided readers whose
// cached slots the tick frees and hands out again, and the counters Worker::TableStats sums.
// Ticks are 50-100 ms here so that each case runs in about a second.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "ps/store/optimizer.h"
#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

class PsDynamicFeatures : public ::testing::TestWithParam<BackendConfig> {};

// Table 0's counters once `done` holds for them (polled every 10 ms), or a timeout.
template <typename Done>
Result<TableStats> WaitForStats(Worker& w, Done done, const std::string& what, size_t table = 0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> all, w.TableStats());
    if (done(all[table])) return all[table];
    if (std::chrono::steady_clock::now() > deadline) {
      return Timeout(what + ": live " + std::to_string(all[table].live_rows) + ", admitted " +
                     std::to_string(all[table].admitted) + ", evicted " +
                     std::to_string(all[table].evicted));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<uint64_t> Keys(uint64_t first, size_t n) {
  std::vector<uint64_t> k(n);
  std::iota(k.begin(), k.end(), first);
  return k;
}

TEST_P(PsDynamicFeatures, UnseenKeysAreEvictedTouchedKeysSurvive) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  job.tables[0].evict_unseen_ticks = 4;
  job.evict_tick = Millis(50);
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const std::vector<uint64_t> once = Keys(1000, 100), hot = Keys(5000, 20);
    const std::vector<float> g1(once.size() * 4, 1.0f), g2(hot.size() * 4, 0.25f);
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, once, g1));
    // The hot keys every 10 ms, far inside the 200-250 ms the others are left unseen.
    int pushes = 0;
    for (auto end = std::chrono::steady_clock::now() + Millis(600);
         std::chrono::steady_clock::now() < end; ++pushes) {
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, hot, g2));
      std::this_thread::sleep_for(Millis(10));
    }
    FERRY_ASSIGN_OR_RETURN(
        TableStats s, WaitForStats(
                          *w, [](const TableStats& t) { return t.evicted >= 100; }, "evictions"));
    FERRY_RETURN_IF_ERROR(Expect(s.evicted == 100, "evicted " + std::to_string(s.evicted)));
    FERRY_RETURN_IF_ERROR(Expect(s.admitted == 120, "admitted " + std::to_string(s.admitted)));
    FERRY_RETURN_IF_ERROR(Expect(s.live_rows == 20, "live " + std::to_string(s.live_rows)));
    FERRY_RETURN_IF_ERROR(Expect(s.refused == 0 && s.bytes_resident > 0, "refused, bytes"));
    // The hot rows kept every update; an evicted key comes back as a new row.
    FERRY_RETURN_IF_ERROR(
        PullCheck(*w, 0, hot, 4, Constant(-0.25f * static_cast<float>(pushes)), "hot rows"));
    FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, once, 4, Constant(0.0f), "evicted rows, anew"));
    FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> all, w->TableStats());
    return Expect(all[0].admitted == 220 && all[0].live_rows == 120, "re-created rows counted");
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsDynamicFeatures, AdmissionAtTheThirdSighting) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  job.tables[0].admission.kind = AdmissionOptions::Kind::kFrequency;
  job.tables[0].admission.min_count = 3;
  job.tables[0].init = UniformInit(11);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const std::vector<uint64_t> keys = Keys(700, 10);
    const std::vector<float> g(keys.size() * 4, 0.5f);
    // Sighting 1 (a pull) reads zeros, sighting 2 (a push) is dropped: both refused.
    FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 4, Constant(0.0f), "first sighting"));
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
    FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> s, w->TableStats());
    FERRY_RETURN_IF_ERROR(Expect(s[0].refused == 20 && s[0].admitted == 0 && s[0].live_rows == 0,
                                 "two refused sightings per key: " + std::to_string(s[0].refused)));
    // Sighting 3 creates the row, untouched by the dropped push.
    FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 4, InitOf(init, 4), "third sighting"));
    FERRY_ASSIGN_OR_RETURN(s, w->TableStats());
    FERRY_RETURN_IF_ERROR(Expect(s[0].refused == 20 && s[0].admitted == 10 && s[0].live_rows == 10,
                                 "admitted at the third sighting"));
    auto want = [&](uint64_t key, uint32_t d) { return InitOf(init, 4)(key, d) - 0.5f; };
    return PushPullCheck(*w, 0, keys, g, 4, want, "admitted rows learn");
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsDynamicFeatures, MaxRowsPerServerHonoured) {
  JobSpec job = SgdJob(GetParam(), 1, 1, 4);
  job.tables[0].max_rows = 256;
  job.tables[0].initial_rows = 64;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    for (uint64_t round = 0; round < 20; ++round) {
      const std::vector<uint64_t> keys = Keys(100000 + round * 100, 100);
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, std::vector<float>(keys.size() * 4, 1.0f)));
      FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> s, w->TableStats());
      FERRY_RETURN_IF_ERROR(Expect(s[0].live_rows <= 256 && s[0].admitted == (round + 1) * 100 &&
                                       s[0].admitted - s[0].evicted == s[0].live_rows,
                                   "round " + std::to_string(round) + ": live " +
                                       std::to_string(s[0].live_rows) + ", evicted " +
                                       std::to_string(s[0].evicted)));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsDynamicFeatures, MemoryPlateausWithEvictionAndGrowsWithout) {
  JobSpec job = SgdJob(GetParam(), 1, 1, 4);
  job.tables[0].initial_rows = 64;
  job.tables[0].evict_unseen_ticks = 2;
  job.tables.push_back(job.tables[0]);
  job.tables[1].name = "kept";
  job.tables[1].evict_unseen_ticks = 0;
  job.evict_tick = Millis(50);
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    // Round r uses the keys of rounds r-2..r: 50 fresh keys a round, each used 3 rounds.
    constexpr uint64_t kRounds = 40, kFresh = 50;
    for (uint64_t r = 0; r < kRounds; ++r) {
      const std::vector<uint64_t> keys = Keys(r < 2 ? 0 : (r - 2) * kFresh, kFresh * 3);
      const std::vector<float> g(keys.size() * 4, 0.1f);
      for (uint32_t t : {0u, 1u}) {
        FERRY_ASSIGN_OR_RETURN(Ticket p, w->Push(t, keys, g));
        FERRY_RETURN_IF_ERROR(w->Wait(p));
        w->Release(p);
      }
      std::this_thread::sleep_for(Millis(15));
    }
    FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> s, w->TableStats());
    const uint64_t total = kRounds * kFresh;  // distinct keys pushed
    FERRY_RETURN_IF_ERROR(
        Expect(s[1].live_rows == total && s[1].evicted == 0,
               "without eviction every key stays: " + std::to_string(s[1].live_rows)));
    // Live keys: the last 3 rounds' plus those seen within the last 2-3 ticks (~10 rounds).
    FERRY_RETURN_IF_ERROR(
        Expect(s[0].live_rows <= total / 2 && s[0].evicted > 0,
               "with eviction live rows stay bounded: " + std::to_string(s[0].live_rows) + " of " +
                   std::to_string(total)));
    FERRY_RETURN_IF_ERROR(Expect(s[0].admitted - s[0].evicted == s[0].live_rows, "counts add up"));
    return Expect(s[0].bytes_resident < s[1].bytes_resident,
                  "resident bytes " + std::to_string(s[0].bytes_resident) + " vs " +
                      std::to_string(s[1].bytes_resident));
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsDynamicFeatures, OneSidedReadsNeverSeeAnEvictedRow) {
  JobSpec job = SgdJob(GetParam(), 1, 1, 4);
  job.tables[0].init = UniformInit(5);
  job.tables[0].evict_unseen_ticks = 5;
  job.evict_tick = Millis(100);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    if (!w->transport()->capabilities().sparse_read || w->transport()->name() == "verbs") {
      return Status::Ok();  // no one-sided reads of a growing table here (onesided_test.cc)
    }
    // Rows in slot order: key 900000 in slot 0, key j in slot j + 1. When the tick frees them in
    // slot order, the free list's link in slot j + 1 is j: a reader checking the key word alone
    // would take the dead row for key j's.
    const std::vector<uint64_t> keys = Keys(0, 32);
    FERRY_ASSIGN_OR_RETURN(auto r0, PullRows(*w, std::vector<uint64_t>{900000}, true, 4));
    for (uint64_t k : keys) {
      FERRY_ASSIGN_OR_RETURN(auto r, PullRows(*w, std::vector<uint64_t>{k}, true, 4));
    }
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, std::vector<float>(keys.size() * 4, 0.5f)));
    const WorkerStats s0 = w->stats();
    auto pushed = [&](uint64_t key, uint32_t d) { return InitOf(init, 4)(key, d) - 0.5f; };
    FERRY_ASSIGN_OR_RETURN(auto warm, PullRows(*w, keys, true, 4));
    const WorkerStats s1 = w->stats();
    for (size_t i = 0; i < keys.size(); ++i) {
      FERRY_RETURN_IF_ERROR(Expect(FloatBits(warm[i * 4]) == FloatBits(pushed(keys[i], 0)),
                                   "warm read of key " + std::to_string(keys[i])));
    }
    FERRY_RETURN_IF_ERROR(
        Expect(s1.keys_one_sided - s0.keys_one_sided == keys.size(), "warm cache read one-sided"));
    FERRY_RETURN_IF_ERROR(WaitForStats(
                              *w, [](const TableStats& t) { return t.evicted >= 33; }, "evictions")
                              .status());
    // Evicted: the rows come back as new ones, never as the dead rows (or another key's).
    FERRY_ASSIGN_OR_RETURN(auto after, PullRows(*w, keys, true, 4));
    std::vector<float> own(4);
    for (size_t i = 0; i < keys.size(); ++i) {
      InitWeights(init, keys[i], 4, own.data());
      for (uint32_t d = 0; d < 4; ++d) {
        if (FloatBits(after[i * 4 + d]) != FloatBits(own[d])) {
          return Internal("key " + std::to_string(keys[i]) + " reads " +
                          std::to_string(after[i * 4 + d]) +
                          " after its eviction, not a new row (" + std::to_string(own[d]) + ")");
        }
      }
    }
    return Expect(w->stats().one_sided_fallbacks - s1.one_sided_fallbacks >= keys.size(),
                  "the bumped generation sent the cached keys back to requests");
  });
  EXPECT_OK(AllOk(outcomes));
}

// TableStats does not wait for requests: asked by two workers at once while one has pushes in
// flight and the other pulls, it answers, and once everything completed the sums are exact.
TEST_P(PsDynamicFeatures, TableStatsWithRequestsInFlight) {
  JobSpec job = SgdJob(GetParam(), 2, 2, 4);
  job.tables[0].evict_unseen_ticks = 1000;  // counted sightings, nothing evicted
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const std::vector<uint64_t> keys = Keys(10000 + 1000 * w->index(), 200);
    for (int round = 0; round < 20; ++round) {
      std::vector<Ticket> pending;
      if (w->index() == 0) {
        const std::vector<float> g(keys.size() * 4, 1.0f);
        FERRY_ASSIGN_OR_RETURN(pending, PushesInFlight(*w, 0, keys, g, 3));
      } else {
        FERRY_ASSIGN_OR_RETURN(Ticket t, w->Pull(0, keys));
        pending.push_back(t);
      }
      FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> s, w->TableStats());
      FERRY_RETURN_IF_ERROR(Expect(s.size() == 1 && s[0].live_rows <= 400, "mid-flight stats"));
      FERRY_RETURN_IF_ERROR(WaitAndRelease(*w, pending));
    }
    FERRY_RETURN_IF_ERROR(w->Barrier());
    FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> s, w->TableStats());
    return Expect(s[0].live_rows == 400 && s[0].admitted == 400 && s[0].evicted == 0,
                  "exact once quiet: live " + std::to_string(s[0].live_rows));
  });
  EXPECT_OK(AllOk(outcomes));
}

// A checkpoint keeps each row's last sighting and score (row metadata) and the table's tick; a
// restored table ages its rows from there. Were its tick to restart at 0, every restored row
// would look last seen in the future, its age wrapping around to ~2^32 ticks: evicted at once.
TEST_P(PsDynamicFeatures, RestoredRowsAgeFromTheirLastSighting) {
  const std::string dir = ::testing::TempDir() + "dynamic_features_ckpt_" + GetParam().TestName() +
                          "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  JobSpec job = SgdJob(GetParam(), 1, 1, 4);
  job.tables[0].evict_unseen_ticks = 60;
  job.evict_tick = Millis(10);
  const std::vector<uint64_t> keys = Keys(300, 50);
  EXPECT_OK(AllOk(RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, std::vector<float>(keys.size() * 4, 1.0f)));
    std::this_thread::sleep_for(Millis(200));  // ~20 ticks: rows last seen at tick ~0, tick ~20
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, std::vector<float>(keys.size() * 4, 1.0f)));
    return w->Checkpoint(dir);  // last_seen ~20
  })));
  job.restore_dir = dir;
  EXPECT_OK(AllOk(RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::this_thread::sleep_for(Millis(100));  // 10 ticks of the 60 the rows may stay unseen
    FERRY_ASSIGN_OR_RETURN(std::vector<TableStats> s, w->TableStats());
    FERRY_RETURN_IF_ERROR(Expect(s[0].live_rows == keys.size() && s[0].evicted == 0,
                                 "restored rows kept: live " + std::to_string(s[0].live_rows)));
    FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 4, Constant(-2.0f), "restored rows"));
    // Pulled: seen now. Left alone, they go after 60 ticks.
    return WaitForStats(
               *w, [&](const TableStats& t) { return t.evicted == keys.size(); },
               "restored rows evicted")
        .status();
  })));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, PsDynamicFeatures, ::testing::ValuesIn(JobConfigs()),
                         JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsDynamicFeatures);

// With replicas the chain's head decides rows and its replicas follow (server_records.cc): such
// tables are taken; a tick of zero is still refused.
TEST(DynamicFeaturesJob, ReplicasTakeAdmissionAndEvictionButNoZeroTick) {
  JobSpec job;
  job.servers = 2;
  job.replicas = 2;
  job.tables.resize(1);
  job.tables[0].name = "t";
  job.tables[0].evict_unseen_ticks = 3;
  EXPECT_OK(ValidateJob(job));
  job.evict_tick = Millis(0);
  EXPECT_EQ(ValidateJob(job).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::ps::testing
