// A small request costs no allocation on the worker (#30: a pull or push of 1-64 keys costs a
// bounded number of transport ops and no allocation): once warm, Pull, Push and PushPull of 8
// keys, their Wait, Rows and Release do not reach operator new on the worker's thread. Tickets
// come from a pool (TicketTable), ranges and scratch keep their capacity, the ring of requests in
// flight reuses its slots. What may still allocate is growth: a pool meeting a depth it never had
// (ucx's reply pool when more replies are in flight than during the warm-up), bounded by the
// depth and not by the calls (seen: up to 5 in 300 calls over ucx-tcp on a busy machine), so the
// worker's bound is one allocation per 30 calls (before the pools: one to three per call). The
// other threads (servers, coordinator, ucx's liveness and control pumps) also do timed work whose
// count grows with the window on a loaded machine (seen: 12 in 300 calls beside a TSan run):
// their bound is one per 5 calls, which an allocation per request still fails. Its own binary: it
// replaces the global operator new to count (tests/common/count_allocs.cc).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ps/worker/worker.h"
#include "tests/common/count_allocs.h"
#include "tests/ps/cluster.h"
#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

constexpr uint32_t kDim = 16;
constexpr uint64_t kKeySpace = 512;  // every key created during the warm-up

enum class Call { kPull, kPush, kPushPull };

// One call of `kind` on 8 distinct keys (of 2 servers), waited for and released; Rows read.
Status OneCall(Worker* w, Call kind, std::mt19937_64& rng, std::vector<uint64_t>& keys,
               std::vector<float>& grads, float* sink) {
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (rng() % (kKeySpace / 8)) * 8 + i;
  Result<Ticket> t = kind == Call::kPull   ? w->Pull(0, keys)
                     : kind == Call::kPush ? w->Push(0, keys, grads)
                                           : w->PushPull(0, keys, grads);
  FERRY_RETURN_IF_ERROR(t.status());
  FERRY_RETURN_IF_ERROR(w->Wait(*t));
  if (kind != Call::kPush) {
    FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(*t));
    *sink += rows[0][0];
  }
  w->Release(*t);
  return Status::Ok();
}

class PsNoAlloc : public ::testing::TestWithParam<BackendConfig> {};

TEST_P(PsNoAlloc, SmallRequestsAllocateNothingOnTheWorkerOnceWarm) {
  JobSpec job = SgdJob(GetParam(), 2, 1, kDim);
  std::vector<std::string> failures;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::mt19937_64 rng(7);
    std::vector<uint64_t> keys(8);
    std::vector<float> grads(8 * kDim, 0.01f);
    float sink = 0;
    for (Call kind : {Call::kPull, Call::kPush, Call::kPushPull}) {
      // Warm: every key's row exists, every pool and scratch vector has grown.
      for (int i = 0; i < 1000; ++i)
        FERRY_RETURN_IF_ERROR(OneCall(w, kind, rng, keys, grads, &sink));
      ferry::testing::CountAllocs count;
      Status s;
      for (int i = 0; i < 300 && s.ok(); ++i) s = OneCall(w, kind, rng, keys, grads, &sink);
      const uint64_t allocs = count.Stop();
      FERRY_RETURN_IF_ERROR(s);
      if (allocs > 10 || count.others() > 60) {
        failures.push_back("call " + std::to_string(static_cast<int>(kind)) + ": " +
                           std::to_string(allocs) + " allocations on the worker and " +
                           std::to_string(count.others()) +
                           " on the other threads (servers, coordinator) in 300 calls");
      }
    }
    // Several tickets in flight at once (a pipeline, as ferry-ps-bench runs one): still none.
    std::vector<Ticket> inflight;
    inflight.reserve(8);
    auto pipelined = [&](int rounds) {
      for (int round = 0; round < rounds; ++round) {
        inflight.clear();
        for (int i = 0; i < 8; ++i) {
          for (size_t k = 0; k < keys.size(); ++k) keys[k] = (rng() % (kKeySpace / 8)) * 8 + k;
          Result<Ticket> t = w->Pull(0, keys);
          if (!t.ok()) break;
          inflight.push_back(*t);
        }
        for (Ticket t : inflight) {
          (void)w->Wait(t);
          w->Release(t);
        }
      }
    };
    pipelined(100);  // warm at this depth too
    ferry::testing::CountAllocs count;
    pipelined(100);
    const uint64_t allocs = count.Stop();
    if (allocs > 24 || count.others() > 160) {
      failures.push_back("pipelined pulls: " + std::to_string(allocs) + " allocations on the " +
                         "worker and " + std::to_string(count.others()) + " on the others in 800");
    }
    // The counter counts: a refused call builds its error text.
    ferry::testing::CountAllocs refusal;
    const bool refused = !w->Pull(7, keys).ok();
    if (!refused || refusal.Stop() == 0) failures.push_back("the allocation counter saw nothing");
    return Status::Ok();
  });
  ASSERT_TRUE(AllOk(outcomes).ok()) << AllOk(outcomes).ToString();
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Backends, PsNoAlloc, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsNoAlloc);

}  // namespace
}  // namespace ferry::ps::testing
