// Consistency models through real jobs (ps/worker/worker.h, Clock/Barrier): with one deliberately
// slow worker, SSP keeps every worker within s clocks of the slowest and BSP keeps them in
// lock-step (checked from the worker's own view and against the actual clocks of all worker
// threads, which share this process); a BSP pull at clock c returns exactly the state after every
// push of the clocks before c; ASP never holds a fast worker back; BSP refuses push-pull; after
// Barrier() every worker's earlier pushes are applied (ASP, SSP).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

class PsConsistency : public ::testing::TestWithParam<BackendConfig> {};

constexpr uint32_t kWorkers = 3;
constexpr uint32_t kSlow = 2;  // the worker that naps every iteration

// Clock() calls each worker thread has begun: worker b has sent its kClock for clock k only
// after started[b] reached k, so when a Clock() returns clock c under staleness s, every
// started[b] >= c - s.
struct Clocks {
  std::atomic<uint64_t> started[kWorkers] = {};
  uint64_t Min() const {
    uint64_t m = UINT64_MAX;
    for (const auto& c : started) m = std::min(m, c.load());
    return m;
  }
};

JobSpec ClockJob(const BackendConfig& config, const std::string& consistency) {
  JobSpec job = SgdJob(config, 2, kWorkers, 4);
  job.consistency = *ParseConsistency(consistency);
  return job;
}

// Each worker: `iters` iterations of (push, [nap if slow], Clock()); after each Clock() the lead
// over the slowest worker must stay within `bound`. Returns the largest lead a fast worker saw
// in its own view through *max_fast_lead.
void RunLeadCheck(const BackendConfig& config, const std::string& consistency, uint64_t bound,
                  int iters, Millis nap, uint64_t* max_fast_lead) {
  JobSpec job = ClockJob(config, consistency);
  Clocks clocks;
  std::atomic<uint64_t> fast_lead{0};
  std::atomic<uint64_t> posted{0};  // pushes posted so far, all workers
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const uint32_t me = w->index();
    const std::vector<uint64_t> keys = {1, 2, 3, 100 + me};
    const std::vector<float> grads(keys.size() * 4, 0.125f);
    for (int i = 0; i < iters; ++i) {
      ++posted;
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, grads));
      if (me == kSlow) std::this_thread::sleep_for(nap);
      clocks.started[me] = static_cast<uint64_t>(i + 1);
      FERRY_RETURN_IF_ERROR(w->Clock());
      const uint64_t c = w->clock(), mc = w->min_clock(), actual = clocks.Min();
      FERRY_RETURN_IF_ERROR(Expect(c == static_cast<uint64_t>(i + 1), "clock counts calls"));
      FERRY_RETURN_IF_ERROR(Expect(mc <= c, "min_clock <= clock"));
      FERRY_RETURN_IF_ERROR(Expect(c - mc <= bound, consistency + ": worker " + std::to_string(me) +
                                                        " at clock " + std::to_string(c) +
                                                        " sees min_clock " + std::to_string(mc)));
      FERRY_RETURN_IF_ERROR(Expect(
          c <= actual + bound, consistency + ": worker " + std::to_string(me) + " passed clock " +
                                   std::to_string(c) + " while the slowest worker had begun only " +
                                   std::to_string(actual) + " Clock() calls"));
      if (me != kSlow) {
        uint64_t prev = fast_lead.load();
        while (c - mc > prev && !fast_lead.compare_exchange_weak(prev, c - mc)) {
        }
      }
      // What a read sees: every worker's pushes of the clocks before c - bound (each worker's
      // push of an iteration is applied before its Clock() counts), and under BSP nothing
      // more; never more than was posted. Key 1 moves by -0.125 per push.
      FERRY_ASSIGN_OR_RETURN(Ticket pull, w->Pull(0, std::vector<uint64_t>{1}));
      FERRY_RETURN_IF_ERROR(w->Wait(pull));
      FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(pull));
      const uint64_t seen = static_cast<uint64_t>(-rows[0][0] / 0.125f + 0.5f);
      w->Release(pull);
      const uint64_t at_least = kWorkers * (c > bound ? c - bound : 0);
      const uint64_t at_most = bound == 0 ? kWorkers * c : posted.load();
      FERRY_RETURN_IF_ERROR(Expect(seen >= at_least && seen <= at_most,
                                   consistency + ": worker " + std::to_string(me) + " at clock " +
                                       std::to_string(c) + " reads " + std::to_string(seen) +
                                       " pushes, expected " + std::to_string(at_least) + ".." +
                                       std::to_string(at_most)));
    }
    return Status::Ok();
  });
  Status s = AllOk(outcomes);
  EXPECT_TRUE(s.ok()) << consistency << ": " << s.ToString();
  *max_fast_lead = fast_lead.load();
}

TEST_P(PsConsistency, SspBoundsTheLeadOverTheSlowestWorker) {
  for (uint64_t s : {1u, 2u}) {
    uint64_t lead = 0;
    RunLeadCheck(GetParam(), "ssp:" + std::to_string(s), s, 6, Millis(15), &lead);
    // SSP is not BSP: the fast workers do run ahead of the napping one, by exactly s at most.
    EXPECT_EQ(lead, s) << "ssp:" << s << ": the fast workers never got " << s << " clocks ahead";
  }
}

TEST_P(PsConsistency, BspKeepsWorkersInLockStep) {
  uint64_t lead = 0;
  RunLeadCheck(GetParam(), "bsp", 0, 6, Millis(15), &lead);
  EXPECT_EQ(lead, 0u);
}

TEST_P(PsConsistency, AspNeverHoldsAFastWorkerBack) {
  JobSpec job = ClockJob(GetParam(), "asp");
  constexpr int kIters = 8;
  Clocks clocks;
  std::atomic<uint64_t> slow_done_when_fast_ended[kWorkers] = {};
  std::atomic<uint64_t> fast_max_lead{0};
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const uint32_t me = w->index();
    const std::vector<uint64_t> keys = {7, 8, 9};
    const std::vector<float> grads(keys.size() * 4, 0.5f);
    for (int i = 0; i < kIters; ++i) {
      if (me == kSlow) std::this_thread::sleep_for(Millis(50));
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, grads));
      clocks.started[me] = static_cast<uint64_t>(i + 1);
      FERRY_RETURN_IF_ERROR(w->Clock());
      if (me != kSlow) {
        const uint64_t lead = w->clock() - clocks.started[kSlow].load();
        uint64_t prev = fast_max_lead.load();
        while (lead > prev && !fast_max_lead.compare_exchange_weak(prev, lead)) {
        }
      }
    }
    slow_done_when_fast_ended[me] = clocks.started[kSlow].load();
    // Barrier: the fast workers' pushes and the slow one's are all in before anyone finishes.
    return w->Barrier();
  });
  ASSERT_OK(AllOk(outcomes));
  for (uint32_t w = 0; w < kWorkers; ++w) {
    if (w == kSlow) continue;
    // The slow worker naps 50 ms per iteration; a fast one must not wait for it.
    EXPECT_LE(slow_done_when_fast_ended[w].load(), kIters / 2)
        << "fast worker " << w << " ended only after the slow one's iteration "
        << slow_done_when_fast_ended[w].load() << " of " << kIters;
  }
  EXPECT_GE(fast_max_lead.load(), kIters / 2u);
}

// SGD with learning rate 1 from zero: a weight is minus the sum of the gradients applied to it.
// Gradients are small binary fractions, so every partial sum is exact in float whatever the order.
float Grad(uint32_t worker, uint32_t clock, uint64_t key, uint32_t d) {
  return static_cast<float>(worker + 1) * 0.25f + static_cast<float>(clock) * 0.5f +
         static_cast<float>((key + d) % 4) * 0.125f;
}

TEST_P(PsConsistency, BspPullSeesExactlyThePushesOfEarlierClocks) {
  JobSpec job = ClockJob(GetParam(), "bsp");
  constexpr uint32_t kClocks = 4;
  std::vector<uint64_t> shared;
  for (uint64_t k = 0; k < 20; ++k) shared.push_back(1000 + k * 13);
  auto own = [](uint32_t w) {
    std::vector<uint64_t> k;
    for (uint64_t i = 0; i < 5; ++i) k.push_back(50000 + w * 100 + i);
    return k;
  };
  // The keys a worker pushes, and the value every key must have once clocks [0, c) are applied.
  auto pushed_by = [&](uint32_t w) {
    std::vector<uint64_t> k = shared;
    for (uint64_t x : own(w)) k.push_back(x);
    return k;
  };
  auto expected = [&](uint64_t key, uint32_t d, uint32_t c) {
    float sum = 0.0f;
    for (uint32_t cc = 0; cc < c; ++cc) {
      for (uint32_t w = 0; w < kWorkers; ++w) {
        const auto k = pushed_by(w);
        if (std::find(k.begin(), k.end(), key) != k.end()) sum += Grad(w, cc, key, d);
      }
    }
    return -sum;
  };
  std::vector<uint64_t> all = shared;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    for (uint64_t x : own(w)) all.push_back(x);
  }
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const uint32_t me = w->index();
    auto check = [&](uint32_t c, const char* when) -> Status {
      FERRY_ASSIGN_OR_RETURN(Ticket pull, w->Pull(0, all));
      FERRY_RETURN_IF_ERROR(w->Wait(pull));
      FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(pull));
      for (size_t i = 0; i < all.size(); ++i) {
        for (uint32_t d = 0; d < 4; ++d) {
          const float want = expected(all[i], d, c);
          if (rows[i][d] != want) {
            w->Release(pull);
            return Internal("worker " + std::to_string(me) + " at clock " + std::to_string(c) +
                            " (" + when + "): key " + std::to_string(all[i]) + " reads " +
                            std::to_string(rows[i][d]) + ", want " + std::to_string(want));
          }
        }
      }
      w->Release(pull);
      return Status::Ok();
    };
    const std::vector<uint64_t> mine = pushed_by(me);
    for (uint32_t c = 0; c < kClocks; ++c) {
      if (me == kSlow) std::this_thread::sleep_for(Millis(10));
      FERRY_RETURN_IF_ERROR(check(c, "before pushing"));
      if (me == 0 && c == 0) {
        // Push-pull is refused under BSP, with a reason, and changes nothing.
        std::vector<float> g(shared.size() * 4, 100.0f);
        FERRY_ASSIGN_OR_RETURN(Ticket pp, w->PushPull(0, shared, g));
        Status refused = w->Wait(pp);
        w->Release(pp);
        FERRY_RETURN_IF_ERROR(Expect(refused.code() == Code::kUnsupported,
                                     "push-pull under BSP is unsupported: " + refused.ToString()));
        FERRY_RETURN_IF_ERROR(Expect(refused.message().find("BSP") != std::string::npos,
                                     "the refusal says why: " + refused.message()));
      }
      std::vector<float> g;
      for (uint64_t k : mine) {
        for (uint32_t d = 0; d < 4; ++d) g.push_back(Grad(me, c, k, d));
      }
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, mine, g));
      // Within the clock even this worker's own push is not applied yet.
      FERRY_RETURN_IF_ERROR(check(c, "after its own push"));
      FERRY_RETURN_IF_ERROR(w->Clock());
    }
    return check(kClocks, "at the end");
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsConsistency, BarrierMakesEveryEarlierPushVisible) {
  for (const char* model : {"asp", "ssp:1"}) {
    JobSpec job = ClockJob(GetParam(), model);
    const std::vector<uint64_t> keys = {11, 12, 13, 14, 15, 16};
    constexpr int kRounds = 3;
    auto outcomes = RunJob(job, [&](Node& node) -> Status {
      Worker* w = node.worker();
      if (w == nullptr) return Status::Ok();
      const uint32_t me = w->index();
      for (int r = 0; r < kRounds; ++r) {
        if (me == kSlow) std::this_thread::sleep_for(Millis(10));
        // Pushes are not waited for: Barrier() waits for this worker's requests first.
        std::vector<float> g(keys.size() * 4, static_cast<float>(me + 1));
        FERRY_ASSIGN_OR_RETURN(Ticket a, w->Push(0, keys, g));
        FERRY_ASSIGN_OR_RETURN(Ticket b, w->Push(0, keys, g));
        FERRY_RETURN_IF_ERROR(w->Barrier());
        FERRY_RETURN_IF_ERROR(w->Wait(a));
        FERRY_RETURN_IF_ERROR(w->Wait(b));
        w->Release(a);
        w->Release(b);
        // Every worker pushed 2 * (index + 1) per round: sum over workers = 2 * (1 + 2 + 3).
        const float want = -12.0f * static_cast<float>(r + 1);
        FERRY_ASSIGN_OR_RETURN(Ticket p, w->Pull(0, keys));
        FERRY_RETURN_IF_ERROR(w->Wait(p));
        FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(p));
        for (size_t i = 0; i < keys.size(); ++i) {
          for (uint32_t d = 0; d < 4; ++d) {
            if (rows[i][d] != want) {
              return Internal(std::string(model) + ": worker " + std::to_string(me) +
                              " after barrier " + std::to_string(r) + " reads " +
                              std::to_string(rows[i][d]) + ", want " + std::to_string(want));
            }
          }
        }
        w->Release(p);
        // Nobody pushes the next round before everyone has read this one.
        FERRY_RETURN_IF_ERROR(w->Barrier());
      }
      return Status::Ok();
    });
    Status s = AllOk(outcomes);
    EXPECT_TRUE(s.ok()) << model << ": " << s.ToString();
  }
}

// Workers may run different numbers of iterations: one that finished early must not hold the
// others' clocks back (SSP and BSP would wait for it forever), nor their barriers.
TEST_P(PsConsistency, AFinishedWorkerDoesNotHoldTheOthersBack) {
  for (const char* model : {"ssp:1", "bsp"}) {
    JobSpec job = ClockJob(GetParam(), model);
    job.workers = 2;
    auto outcomes = RunJob(
        job,
        [&](Node& node) -> Status {
          Worker* w = node.worker();
          if (w == nullptr) return Status::Ok();
          const int iters = w->index() == 0 ? 2 : 6;
          for (int i = 0; i < iters; ++i) {
            const std::vector<float> g(4, 1.0f);
            FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, std::vector<uint64_t>{42}, g));
            FERRY_RETURN_IF_ERROR(w->Clock());
          }
          if (w->index() == 0) return w->Finish();
          // Nor at a barrier.
          FERRY_RETURN_IF_ERROR(w->Barrier());
          // Worker 1 ran on alone: every push of both workers is in.
          FERRY_ASSIGN_OR_RETURN(Ticket q, w->Pull(0, std::vector<uint64_t>{42}));
          FERRY_RETURN_IF_ERROR(w->Wait(q));
          FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(q));
          const float got = rows[0][0];
          w->Release(q);
          return Expect(got == -8.0f, std::string(model) + ": key 42 reads " + std::to_string(got) +
                                          " after 2 + 6 pushes of 1");
        },
        Millis(60000));
    Status s = AllOk(outcomes);
    EXPECT_TRUE(s.ok()) << model << ": " << s.ToString();
  }
}

// Backup workers (JobSpec::backup_workers = 1 of 3; with and without replicas): the napping
// worker's clocks complete without it. Its pushes for them are dropped, before the apply or on
// arrival after it (it naps on both sides of each push), and counted by the servers (every copy
// the same); every other push is applied exactly once; it skips ahead to the job's clock instead
// of waiting, and nobody deadlocks.
void RunBackupWorkers(const BackendConfig& config, uint32_t replicas) {
  SCOPED_TRACE("replicas " + std::to_string(replicas));
  JobSpec job = ClockJob(config, "bsp");
  job.backup_workers = 1;
  job.replicas = replicas;
  constexpr uint64_t kClocks = 10;
  std::mutex mu;
  uint64_t dropped = 0, slow_skipped = 0;
  uint64_t posted[kWorkers] = {};
  float applied[kWorkers] = {};
  std::vector<uint64_t> without;  // the coordinator's count per worker
  auto outcomes = RunJob(
      job,
      [&](Node& node) -> Status {
        if (Worker* w = node.worker()) {
          const bool slow = w->index() == kSlow;
          uint64_t mine = 0;
          const std::vector<uint64_t> key = {100 + w->index()};  // each worker its own row
          while (w->clock() < kClocks) {
            if (slow) std::this_thread::sleep_for(Millis(40));
            FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, key, std::vector<float>(4, 1.0f)));
            ++mine;
            if (slow) std::this_thread::sleep_for(Millis(40));
            const uint64_t before = w->clock();
            FERRY_RETURN_IF_ERROR(w->Clock());
            FERRY_RETURN_IF_ERROR(Expect(w->clock() > before, "Clock() moves the clock on"));
          }
          FERRY_RETURN_IF_ERROR(
              Expect(w->clock() == kClocks, "every worker ends at the job's clock"));
          FERRY_RETURN_IF_ERROR(w->Barrier());
          FERRY_ASSIGN_OR_RETURN(Ticket q, w->Pull(0, key));
          FERRY_RETURN_IF_ERROR(w->Wait(q));
          FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(q));
          std::lock_guard<std::mutex> lock(mu);
          applied[w->index()] = -rows[0][0];
          w->Release(q);
          posted[w->index()] = mine;
          if (slow) slow_skipped = w->skipped_clocks();
        }
        FERRY_RETURN_IF_ERROR(node.Join());
        if (const Coordinator* c = node.coordinator()) {
          std::lock_guard<std::mutex> lock(mu);
          without = c->ClocksCompletedWithout();
        }
        for (size_t t = 0; t < node.num_shard_servers(); ++t) {
          std::lock_guard<std::mutex> lock(mu);
          dropped += node.shard_server(t)->stats().late_pushes_dropped;
        }
        return Status::Ok();
      },
      Millis(60000));
  ASSERT_TRUE(AllOk(outcomes).ok()) << AllOk(outcomes).ToString();
  EXPECT_GT(slow_skipped, 0u) << "the job's clocks never completed without the napping worker";
  ASSERT_EQ(without.size(), kWorkers);
  EXPECT_GT(without[kSlow], 0u);
  // Each push moves its worker's row by -1. A worker pushes once per clock it works on: exactly
  // the clocks completed with it are applied (none of those without it, whether its push came
  // before or after the apply), and every other push it made is dropped and counted.
  uint64_t all_posted = 0, all_applied = 0, with = 0;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(static_cast<uint64_t>(applied[w]), kClocks - without[w])
        << "worker " << w << ": " << applied[w] << " pushes applied, " << posted[w]
        << " made, the job's " << kClocks << " clocks completed without it " << without[w]
        << " times";
    all_posted += posted[w];
    all_applied += static_cast<uint64_t>(applied[w]);
    with += kClocks - without[w];
  }
  // Every copy of a row drops the same pushes (each counts its own).
  EXPECT_EQ(all_applied * replicas + dropped, all_posted * replicas) << "dropped " << dropped;
  // Every clock completed with all workers but one at most.
  EXPECT_GE(with, (kWorkers - 1) * kClocks);
}

TEST_P(PsConsistency, BackupWorkersDropAndCountTheLatePushes) {
  for (uint32_t replicas : {1u, 2u}) RunBackupWorkers(GetParam(), replicas);
}

INSTANTIATE_TEST_SUITE_P(Backends, PsConsistency, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsConsistency);

}  // namespace
}  // namespace ferry::ps::testing
