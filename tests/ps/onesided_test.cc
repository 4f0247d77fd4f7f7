// One-sided pulls (PullOptions::one_sided) through real jobs over every backend here: rows equal
// the request path's, mixed cached and uncached keys, many servers, a read refused as stale after
// the table grew, slots reused after evictions (also while another worker churns the table),
// read-your-writes behind pushes in flight, tickets released before their reads complete; and the
// protocol's slot-reply framing on its own.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <vector>

#include "ferry_config.h"
#include "ps/store/optimizer.h"
#include "ps/wire/protocol.h"
#include "tests/ps/job_util.h"
#if FERRY_HAVE_VERBS
#include "transport/verbs/verbs_transport.h"
#endif

namespace ferry::ps::testing {
namespace {

class PsOneSided : public ::testing::TestWithParam<BackendConfig> {};

PullOptions OneSided() {
  PullOptions o;
  o.one_sided = true;
  return o;
}

// Whether this worker's backend reads unbounded (growing) tables one-sided at all: verbs reads
// only registrations that cannot go stale (worker_onesided.cc).
bool ReadsGrowingTables(Worker& w) {
  return w.transport()->capabilities().sparse_read && w.transport()->name() != "verbs";
}

// Rows of `keys` are each key's own initial row (or zeros, where `zeros_ok`: a bounded table
// refuses keys evicted within their own batch).
Status CheckInit(const std::vector<float>& rows, std::span<const uint64_t> keys,
                 const InitializerSpec& init, uint32_t dim, bool zeros_ok,
                 const std::string& what) {
  std::vector<float> own(dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    InitWeights(init, keys[i], dim, own.data());
    bool fresh = true, zero = true;
    for (uint32_t d = 0; d < dim; ++d) {
      fresh = fresh && FloatBits(rows[i * dim + d]) == FloatBits(own[d]);
      zero = zero && rows[i * dim + d] == 0.0f;
    }
    if (!fresh && !(zeros_ok && zero)) {
      return Internal(what + ": key " + std::to_string(keys[i]) + " reads " +
                      std::to_string(rows[i * dim]) + ", not its own row (" +
                      std::to_string(own[0]) + ")");
    }
  }
  return Status::Ok();
}

Status SameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  if (a.size() != b.size()) return Internal(what + ": row counts differ");
  for (size_t i = 0; i < a.size(); ++i) {
    if (FloatBits(a[i]) != FloatBits(b[i])) {
      return Internal(what + ": float " + std::to_string(i) + " reads " + std::to_string(a[i]) +
                      " one-sided and " + std::to_string(b[i]) + " through requests");
    }
  }
  return Status::Ok();
}

TEST_P(PsOneSided, RowsEqualTheRequestPathsAcrossServers) {
  JobSpec job = SmallJob(GetParam(), 3, 2, 5);
  job.tables[0].init = UniformInit(3);
  job.max_keys_per_request = 300;  // several requests per server, several fallback chunks
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys;
    for (uint64_t i = 0; i < 2000; ++i) keys.push_back(i * 7919 + 1000003 * w->index());
    for (uint64_t i = 0; i < 300; ++i) keys.push_back(keys[(i * 37) % 2000]);  // repeats
    // First touch: request path, slots learned.
    FERRY_ASSIGN_OR_RETURN(auto first, PullRows(*w, keys, true, 5));
    FERRY_RETURN_IF_ERROR(CheckInit(first, keys, job.tables[0].init, 5, false, "first pull"));
    // The other worker's first pull grows the tables: descriptors learned before the last
    // growth are refused as stale, fall back, and the fallback brings the current ones.
    FERRY_RETURN_IF_ERROR(w->Barrier());
    FERRY_ASSIGN_OR_RETURN(auto again, PullRows(*w, keys, true, 5));
    FERRY_RETURN_IF_ERROR(CheckInit(again, keys, job.tables[0].init, 5, false, "second pull"));
    // Change the rows (this worker's keys only), then compare both paths.
    std::vector<float> g(keys.size() * 5);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
    const WorkerStats before = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto one, PullRows(*w, keys, true, 5));
    const WorkerStats after = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto req, PullRows(*w, keys, false, 5));
    FERRY_RETURN_IF_ERROR(SameBits(one, req, "after a push"));
    if (w->transport()->capabilities().sparse_read && ReadsGrowingTables(*w)) {
      FERRY_RETURN_IF_ERROR(
          Expect(after.keys_one_sided - before.keys_one_sided == 2000,
                 "every key read one-sided: " +
                     std::to_string(after.keys_one_sided - before.keys_one_sided)));
      FERRY_RETURN_IF_ERROR(Expect(after.requests == before.requests, "no request posted"));
      FERRY_RETURN_IF_ERROR(
          Expect(after.one_sided_reads - before.one_sided_reads == w->num_servers(),
                 "one read per (shard) server"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// A push of known keys into a nearly full table creates no row and so must not grow it: growth
// re-registers the rows and sends every one-sided reader back to requests. (The server grew for
// any request of more keys than the room left, present or not: with six shard servers the
// one-sided pulls of RowsEqualTheRequestPathsAcrossServers fell back for whole servers.)
TEST_P(PsOneSided, KnownKeysNearCapacityKeepTheRegistration) {
  JobSpec job = SmallJob(GetParam(), 1, 1, 4);  // 256 initial rows
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(200);
    std::iota(keys.begin(), keys.end(), 5000);
    FERRY_ASSIGN_OR_RETURN(auto first, PullRows(*w, keys, true, 4));  // creates, learns slots
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, std::vector<float>(keys.size() * 4, 0.5f)));
    const WorkerStats before = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto again, PullRows(*w, keys, true, 4));
    const WorkerStats after = w->stats();
    if (!ReadsGrowingTables(*w)) return Status::Ok();
    FERRY_RETURN_IF_ERROR(
        Expect(after.one_sided_fallbacks == before.one_sided_fallbacks,
               "no read refused as stale: " +
                   std::to_string(after.one_sided_fallbacks - before.one_sided_fallbacks) +
                   " keys fell back"));
    return Expect(after.keys_one_sided - before.keys_one_sided == keys.size(),
                  "every key read one-sided");
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsOneSided, MixedCachedAndUncachedKeys) {
  JobSpec job = SmallJob(GetParam(), 2, 1, 3);
  job.tables[0].init = UniformInit(4);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> a(500), b(700);
    std::iota(a.begin(), a.end(), 10000);
    std::iota(b.begin(), b.end(), 90000);
    FERRY_ASSIGN_OR_RETURN(auto ra, PullRows(*w, a, true, 3));
    // Interleaved: every other key cached; repeats of both kinds.
    std::vector<uint64_t> mixed;
    for (size_t i = 0; i < 700; ++i) {
      if (i < 500) mixed.push_back(a[499 - i]);
      mixed.push_back(b[i]);
      if (i % 5 == 0) mixed.push_back(a[i % 500]);
    }
    const WorkerStats before = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto rm, PullRows(*w, mixed, true, 3));
    FERRY_RETURN_IF_ERROR(CheckInit(rm, mixed, init, 3, false, "mixed pull"));
    const WorkerStats mid = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto rb, PullRows(*w, b, true, 3));
    FERRY_RETURN_IF_ERROR(CheckInit(rb, b, init, 3, false, "second pull of b"));
    const WorkerStats after = w->stats();
    if (ReadsGrowingTables(*w)) {
      // Slots are learned at the start of the next one-sided pull.
      FERRY_RETURN_IF_ERROR(Expect(mid.keys_one_sided - before.keys_one_sided == 500,
                                   "the cached keys read one-sided"));
      FERRY_RETURN_IF_ERROR(Expect(mid.requests - before.requests == w->num_servers(),
                                   "the others requested (one request per shard server)"));
      FERRY_RETURN_IF_ERROR(
          Expect(after.slots_learned - mid.slots_learned == 700, "the uncached keys learned"));
      FERRY_RETURN_IF_ERROR(
          Expect(after.keys_one_sided - mid.keys_one_sided == 700, "then read one-sided too"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsOneSided, StaleDescriptorAfterGrowthFallsBack) {
  JobSpec job = SmallJob(GetParam(), 1, 1, 4);
  job.tables[0].initial_rows = 64;  // grows many times below
  job.tables[0].init = UniformInit(5);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> a(50), b(6000);
    std::iota(a.begin(), a.end(), 7);
    std::iota(b.begin(), b.end(), 500000);
    FERRY_ASSIGN_OR_RETURN(auto r0, PullRows(*w, a, true, 4));
    FERRY_ASSIGN_OR_RETURN(auto r1, PullRows(*w, a, true, 4));   // one-sided, current epoch
    FERRY_ASSIGN_OR_RETURN(auto rb, PullRows(*w, b, false, 4));  // the table grows
    const WorkerStats before = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto r2, PullRows(*w, a, true, 4));  // refused as stale: falls back
    const WorkerStats mid = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto r3, PullRows(*w, a, true, 4));  // the new descriptor
    const WorkerStats after = w->stats();
    for (const auto* r : {&r0, &r1, &r2, &r3}) {
      FERRY_RETURN_IF_ERROR(CheckInit(*r, a, init, 4, false, "pull of a"));
    }
    if (ReadsGrowingTables(*w)) {
      FERRY_RETURN_IF_ERROR(
          Expect(mid.one_sided_fallbacks - before.one_sided_fallbacks == 50,
                 "the stale read fell back: " +
                     std::to_string(mid.one_sided_fallbacks - before.one_sided_fallbacks)));
      FERRY_RETURN_IF_ERROR(Expect(after.keys_one_sided - mid.keys_one_sided == 50,
                                   "then one-sided with the new descriptor"));
      FERRY_RETURN_IF_ERROR(Expect(after.one_sided_fallbacks == mid.one_sided_fallbacks,
                                   "no fallback with the new descriptor"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// RDMA READ work requests this worker's transport has posted (verbs only; 0 elsewhere).
uint64_t RdmaReads(Worker& w) {
#if FERRY_HAVE_VERBS
  if (auto s = verbs::VerbsStats(*w.transport())) return s->rdma_reads;
#endif
  (void)w;
  return 0;
}

// One server, one worker, a dim-4 table bounded at 256 rows whose rows buffer holds max_rows from
// the start (capacity >= max_rows): a stable registration, read one-sided on verbs too.
JobSpec StableBoundedJob(const BackendConfig& config, uint64_t init_seed) {
  JobSpec job = SmallJob(config, 1, 1, 4);
  TableSpec& t = job.tables[0];
  t.initial_rows = 256;
  t.max_rows = 256;
  t.init = UniformInit(init_seed);
  return job;
}

// The case that makes verbs post real RDMA READs (tests/ps/vm-ps.sh runs it in the soft-RoCE VM):
// a bounded table whose rows buffer already holds max_rows, so its registration is stable, read
// one-sided whole and then every other key (scattered slots); rows equal the request path's.
// Adagrad rows keep their state after the embedding, so no two rows' reads are contiguous; SGD
// rows are exactly [key word .. embedding end), so adjacent slots make one run.
TEST_P(PsOneSided, StableBoundedTableIsReadOneSided) {
  for (const Optimizer kind : {Optimizer::kAdagrad, Optimizer::kSgd}) {
    SCOPED_TRACE(kind == Optimizer::kSgd ? "sgd" : "adagrad");
    JobSpec job = StableBoundedJob(GetParam(), 8);  // kSlotsStableRegion
    job.tables[0].optimizer.kind = kind;
    const InitializerSpec init = job.tables[0].init;
    auto outcomes = RunJob(job, [&](Node& node) -> Status {
      Worker* w = node.worker();
      if (w == nullptr) return Status::Ok();
      // 96 keys, all created by the first pull: nothing is evicted, the reuse generation stays
      // (server_requests.cc ResolveSlots bumps it only when absent keys may evict rows).
      std::vector<uint64_t> all(96), every_other;
      std::iota(all.begin(), all.end(), 4000);
      for (size_t i = 0; i < all.size(); i += 2) every_other.push_back(all[i]);
      FERRY_ASSIGN_OR_RETURN(auto r0, PullRows(*w, all, true, 4));  // requests; slots learned
      FERRY_RETURN_IF_ERROR(CheckInit(r0, all, init, 4, false, "first pull"));
      if (!w->transport()->capabilities().sparse_read) return Status::Ok();
      for (const auto* keys : {&all, &every_other}) {
        const WorkerStats before = w->stats();
        const uint64_t reads_before = RdmaReads(*w);
        FERRY_ASSIGN_OR_RETURN(auto one, PullRows(*w, *keys, true, 4));
        const WorkerStats after = w->stats();
        const uint64_t rdma_reads = RdmaReads(*w) - reads_before;
        FERRY_ASSIGN_OR_RETURN(auto req, PullRows(*w, *keys, false, 4));
        FERRY_RETURN_IF_ERROR(SameBits(one, req, "one-sided against requests"));
        FERRY_RETURN_IF_ERROR(CheckInit(one, *keys, init, 4, false, "one-sided pull"));
        const uint64_t n = keys->size();
        std::printf(
            "%s, %s rows: %llu keys one-sided: %llu sparse read op(s), %llu keys read, %llu "
            "fallbacks, %llu RDMA READ WRs (verbs: one per run of slots + the generation word)\n",
            std::string(w->transport()->name()).c_str(),
            kind == Optimizer::kSgd ? "sgd" : "adagrad", static_cast<unsigned long long>(n),
            static_cast<unsigned long long>(after.one_sided_reads - before.one_sided_reads),
            static_cast<unsigned long long>(after.keys_one_sided - before.keys_one_sided),
            static_cast<unsigned long long>(after.one_sided_fallbacks - before.one_sided_fallbacks),
            static_cast<unsigned long long>(rdma_reads));
        FERRY_RETURN_IF_ERROR(
            Expect(after.one_sided_reads > before.one_sided_reads, "a sparse read was posted"));
        FERRY_RETURN_IF_ERROR(
            Expect(after.keys_one_sided - before.keys_one_sided == n,
                   "every key read one-sided: " +
                       std::to_string(after.keys_one_sided - before.keys_one_sided)));
        FERRY_RETURN_IF_ERROR(
            Expect(after.one_sided_fallbacks == before.one_sided_fallbacks, "no fallback"));
        FERRY_RETURN_IF_ERROR(Expect(after.requests == before.requests, "no request posted"));
        if (w->transport()->name() == "verbs") {
          // The rows' READs (one per remote-contiguous run of slots) and the generation word's.
          FERRY_RETURN_IF_ERROR(Expect(rdma_reads >= 2 && rdma_reads <= n + 1,
                                       "RDMA READs posted: " + std::to_string(rdma_reads)));
          if (kind == Optimizer::kAdagrad) {
            FERRY_RETURN_IF_ERROR(
                Expect(rdma_reads == n + 1, "one READ per row: " + std::to_string(rdma_reads)));
          }
        }
      }
      return Status::Ok();
    });
    EXPECT_OK(AllOk(outcomes));
  }
}

// A bounded table near its bound: a request whose keys are all in the table (a push after the
// pull that created them) evicts nothing, so it must not bump the reuse generation; before that
// was checked, a push of 200 present keys to a 256-row table (200 + 200 > 256) sent every
// following one-sided read back to the request path (server_requests.cc ResolveSlots).
TEST_P(PsOneSided, PushOfPresentKeysAtTheBoundKeepsReadsOneSided) {
  const JobSpec job = StableBoundedJob(GetParam(), 9);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(200);
    std::iota(keys.begin(), keys.end(), 7000);
    FERRY_ASSIGN_OR_RETURN(auto first, PullRows(*w, keys, true, 4));  // creates them; slots learned
    FERRY_RETURN_IF_ERROR(CheckInit(first, keys, init, 4, false, "first pull"));
    std::vector<float> g(keys.size() * 4);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.02f * static_cast<float>(i % 7) - 0.06f;
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));  // 200 present + 200 rows > 256
    if (!w->transport()->capabilities().sparse_read) return Status::Ok();
    const WorkerStats before = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto one, PullRows(*w, keys, true, 4));
    const WorkerStats after = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto req, PullRows(*w, keys, false, 4));
    FERRY_RETURN_IF_ERROR(SameBits(one, req, "one-sided after the push"));
    FERRY_RETURN_IF_ERROR(Expect(
        after.one_sided_fallbacks == before.one_sided_fallbacks,
        "no fallback: " + std::to_string(after.one_sided_fallbacks - before.one_sided_fallbacks)));
    return Expect(after.keys_one_sided - before.keys_one_sided == keys.size(),
                  "every key read one-sided: " +
                      std::to_string(after.keys_one_sided - before.keys_one_sided));
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsOneSided, EvictedSlotsAreNeverReadAsTheirOldKeys) {
  const JobSpec job = StableBoundedJob(GetParam(), 6);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> a(64);
    std::iota(a.begin(), a.end(), 100);
    FERRY_ASSIGN_OR_RETURN(auto r0, PullRows(*w, a, true, 4));
    const WorkerStats s0 = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto r1, PullRows(*w, a, true, 4));  // no eviction since: one-sided
    const WorkerStats s1 = w->stats();
    const bool reads = w->transport()->capabilities().sparse_read;
    if (reads) {
      FERRY_RETURN_IF_ERROR(
          Expect(s1.keys_one_sided - s0.keys_one_sided == 64, "unchanged generation: one-sided"));
    }
    // Churn: every row of a is evicted and its slot handed to another key.
    for (uint64_t round = 0; round < 8; ++round) {
      std::vector<uint64_t> other(256);
      std::iota(other.begin(), other.end(), 1000000 + round * 1000);
      FERRY_ASSIGN_OR_RETURN(auto ro, PullRows(*w, other, false, 4));
    }
    FERRY_ASSIGN_OR_RETURN(auto r2, PullRows(*w, a, true, 4));
    const WorkerStats s2 = w->stats();
    for (const auto* r : {&r0, &r1, &r2}) {
      FERRY_RETURN_IF_ERROR(CheckInit(*r, a, init, 4, true, "pull of a"));
    }
    if (reads) {
      FERRY_RETURN_IF_ERROR(Expect(s2.one_sided_fallbacks - s1.one_sided_fallbacks == 64,
                                   "the changed generation sent every key back to requests"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsOneSided, ReadsWhileAnotherWorkerChurnsABoundedTable) {
  JobSpec job = SmallJob(GetParam(), 1, 2, 4);
  TableSpec& t = job.tables[0];
  t.initial_rows = 256;
  t.max_rows = 256;
  t.init = UniformInit(7);
  const InitializerSpec init = t.init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    if (w->index() == 1) {  // evicts continually: 200 fresh keys per pull into 256 rows
      for (uint64_t round = 0; round < 150; ++round) {
        std::vector<uint64_t> other(200);
        std::iota(other.begin(), other.end(), 5000000 + round * 200);
        FERRY_ASSIGN_OR_RETURN(auto ro, PullRows(*w, other, false, 4));
      }
      return w->Barrier();
    }
    std::vector<uint64_t> a(40);
    std::iota(a.begin(), a.end(), 300);
    for (int round = 0; round < 300; ++round) {
      FERRY_ASSIGN_OR_RETURN(auto r, PullRows(*w, a, true, 4));
      FERRY_RETURN_IF_ERROR(
          CheckInit(r, a, init, 4, true, "round " + std::to_string(round) + " under churn"));
    }
    return w->Barrier();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsOneSided, PullBehindPushesInFlightSeesThem) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(100);
    std::iota(keys.begin(), keys.end(), 5000);
    FERRY_ASSIGN_OR_RETURN(auto r0, PullRows(*w, keys, true, 4));  // learn the slots
    for (int round = 1; round <= 5; ++round) {
      const std::vector<float> g(keys.size() * 4, 0.5f);
      FERRY_ASSIGN_OR_RETURN(std::vector<Ticket> pushes, PushesInFlight(*w, 0, keys, g, 3));
      FERRY_ASSIGN_OR_RETURN(auto r, PullRows(*w, keys, true, 4));
      const float want = -1.5f * static_cast<float>(round);
      for (size_t i = 0; i < r.size(); ++i) {
        if (r[i] != want) {
          return Internal("round " + std::to_string(round) + ": float " + std::to_string(i) +
                          " reads " + std::to_string(r[i]) + ", want " + std::to_string(want));
        }
      }
      FERRY_RETURN_IF_ERROR(WaitAndRelease(*w, pushes));
    }
    // Nothing in flight now: the same keys go one-sided.
    const WorkerStats before = w->stats();
    FERRY_ASSIGN_OR_RETURN(auto r, PullRows(*w, keys, true, 4));
    if (ReadsGrowingTables(*w)) {
      FERRY_RETURN_IF_ERROR(Expect(w->stats().keys_one_sided - before.keys_one_sided == 100,
                                   "idle servers are read one-sided"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsOneSided, ReleasedBeforeTheReadsCompleteAndManyInFlight) {
  JobSpec job = SmallJob(GetParam(), 4, 1, 8);
  job.tables[0].init = UniformInit(9);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(3000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 104729 + 11;
    FERRY_ASSIGN_OR_RETURN(auto r0, PullRows(*w, keys, true, 8));
    for (int round = 0; round < 20; ++round) {
      FERRY_ASSIGN_OR_RETURN(Ticket gone, w->Pull(0, keys, OneSided()));
      w->Release(gone);  // its reads still land; nothing may be freed under them
      std::vector<Ticket> live;
      for (int k = 0; k < 4; ++k) {
        FERRY_ASSIGN_OR_RETURN(Ticket t, w->Pull(0, keys, OneSided()));
        live.push_back(t);
      }
      for (Ticket t : live) {
        FERRY_RETURN_IF_ERROR(w->Wait(t));
        FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(t));
        std::vector<float> copy;
        for (size_t i = 0; i < keys.size(); ++i) copy.insert(copy.end(), rows[i], rows[i] + 8);
        FERRY_RETURN_IF_ERROR(CheckInit(copy, keys, init, 8, false, "pipelined pull"));
        w->Release(t);
      }
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

INSTANTIATE_TEST_SUITE_P(Backends, PsOneSided, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsOneSided);

// ---- The protocol's slot replies, on their own ----

RequestHeader SlotsPull(uint32_t n, uint64_t offset, uint32_t bytes) {
  RequestHeader h;
  h.type = static_cast<uint8_t>(RequestType::kPull);
  h.flags = kFlagWantSlots;
  h.num_keys = n;
  h.dim = 4;
  h.dest_offset = 4096;
  h.dest_stride = 16;
  h.payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(RequestType::kPull, 0, n, 4));
  h.slots_offset = offset;
  h.slots_bytes = bytes;
  return h;
}

Status Parse(const RequestHeader& h) {
  std::vector<uint8_t> ring(4096, 0);
  std::memcpy(ring.data(), &h, sizeof h);
  const TableShape shape{4, false};
  const RequestLimits limits{ring.size(), 1u << 20, 4096, 1000};
  RequestView v;
  return ParseRequest(ring, 0, std::span<const TableShape>(&shape, 1), limits, &v);
}

TEST(SlotReplyProtocol, RequestsForSlotsAreChecked) {
  EXPECT_TRUE(Parse(SlotsPull(10, 8192, 4096)).ok());
  EXPECT_EQ(Parse(SlotsPull(10, 8193, 4096)).code(), Code::kOutOfRange);             // unaligned
  EXPECT_EQ(Parse(SlotsPull(10, 8192, 40)).code(), Code::kOutOfRange);               // too small
  EXPECT_EQ(Parse(SlotsPull(10, 1024, 4096)).code(), Code::kOutOfRange);             // reply slots
  EXPECT_EQ(Parse(SlotsPull(10, (1u << 20) - 64, 4096)).code(), Code::kOutOfRange);  // past end
  RequestHeader push = SlotsPull(10, 8192, 4096);
  push.type = static_cast<uint8_t>(RequestType::kPush);
  push.payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(RequestType::kPush, 0, 10, 4));
  EXPECT_EQ(Parse(push).code(), Code::kInvalidArgument);
}

TEST(SlotReplyProtocol, RepliesAreReadBackChecked) {
  std::vector<uint8_t> area(SlotReplyBytes(3, 16), 0);
  SlotReplyView v;
  EXPECT_EQ(ReadSlotReply(area, 5, 3, &v).code(), Code::kNotFound);  // nothing written
  SlotReplyHeader h;
  h.seq = 5;
  h.num_keys = 3;
  h.row_stride = 56;
  h.embedding_offset = 24;
  h.rows_descriptor_bytes = 10;
  h.status_descriptor_bytes = 6;
  std::memcpy(area.data(), &h, sizeof h);
  const uint32_t slots[3] = {7, kNoSlotValue, 9};
  std::memcpy(area.data() + sizeof h, slots, sizeof slots);
  ASSERT_TRUE(ReadSlotReply(area, 5, 3, &v).ok());
  EXPECT_EQ(v.slot(0), 7u);
  EXPECT_EQ(v.slot(1), kNoSlotValue);
  EXPECT_EQ(v.rows_descriptor.size(), 10u);
  EXPECT_EQ(v.status_descriptor.size(), 6u);
  EXPECT_EQ(ReadSlotReply(area, 6, 3, &v).code(), Code::kNotFound);  // another request's
  EXPECT_EQ(ReadSlotReply(area, 5, 4, &v).code(), Code::kProtocol);  // another count
  h.status_descriptor_bytes = 600;                                   // past the area
  std::memcpy(area.data(), &h, sizeof h);
  EXPECT_EQ(ReadSlotReply(area, 5, 3, &v).code(), Code::kProtocol);
  h.status_descriptor_bytes = 6;
  h.row_stride = 0;
  std::memcpy(area.data(), &h, sizeof h);
  EXPECT_EQ(ReadSlotReply(area, 5, 3, &v).code(), Code::kProtocol);
}

}  // namespace
}  // namespace ferry::ps::testing
