// Data-path features through real jobs: pulls chunked over several servers, tickets released out
// of order (and before their replies), a pull behind pushes still in flight, admission refusing
// every key, read-only (scoring) pulls, fp16 pull mirrors, fp16 pushes and the significance filter,
// Gather across the control chunk size, and a staging ring that wraps many times with few requests
// in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <numeric>
#include <vector>

#include "ps/store/optimizer.h"
#include "ps/wire/protocol.h"
#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

class PsFeatures : public ::testing::TestWithParam<BackendConfig> {};

TEST_P(PsFeatures, PullsAreChunkedAcrossServers) {
  JobSpec job = SmallJob(GetParam(), 3, 2, 3);
  job.max_keys_per_request = 50;
  job.max_outstanding = 4;
  job.tables[0].init = UniformInit(5);
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys;
    for (uint64_t i = 0; i < 3000; ++i) keys.push_back(i * 7919 + w->index());
    for (uint64_t i = 0; i < 400; ++i) keys.push_back(keys[(i * 31) % 3000]);  // repeats
    FERRY_RETURN_IF_ERROR(PullAndCheck(*w, 0, keys, [&](const PulledRows& rows) -> Status {
      FERRY_RETURN_IF_ERROR(Expect(rows.unique_count() == 3000, "3000 unique keys"));
      return CheckRows(rows, keys, 3, InitOf(init, 3), "chunked pull");
    }));
    // 3000 keys over 3 servers in chunks of 50: at least 60 requests, more than fit in flight.
    FERRY_RETURN_IF_ERROR(
        Expect(w->stats().requests >= 60, "requests " + std::to_string(w->stats().requests)));
    FERRY_RETURN_IF_ERROR(Expect(w->stats().waits_for_space > 0, "waited for reply slots"));
    // Every (shard) server got a share of the keys: at least half of an even one.
    const uint32_t servers = w->num_servers();  // 3 x server_threads
    std::vector<uint32_t> per(servers, 0);
    for (uint64_t k : keys) ++per[w->partition().ServerOf(k)];
    for (uint32_t s = 0; s < servers; ++s) {
      FERRY_RETURN_IF_ERROR(
          Expect(per[s] > 1500 / servers, "server " + std::to_string(s) + " share"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, TicketsReleasedOutOfOrder) {
  JobSpec job = SmallJob(GetParam(), 2, 1, 5);
  job.tables[0].init = UniformInit(8);
  job.arena_bytes = 256u << 10;  // little room: released space must come back
  const InitializerSpec init = job.tables[0].init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    auto keyset = [](uint64_t base, size_t n) {
      std::vector<uint64_t> k(n);
      for (size_t i = 0; i < n; ++i) k[i] = base + i * 3;
      return k;
    };
    const auto want = InitOf(init, 5);
    for (int round = 0; round < 20; ++round) {
      const auto ka = keyset(1000 * round + 1, 1500), kb = keyset(1000 * round + 2, 900),
                 kc = keyset(1000 * round + 3, 2000);
      FERRY_ASSIGN_OR_RETURN(Ticket a, w->Pull(0, ka));
      FERRY_ASSIGN_OR_RETURN(Ticket b, w->Pull(0, kb));
      FERRY_ASSIGN_OR_RETURN(Ticket c, w->Pull(0, kc));
      // Released before its replies came: its rows must stay allocated until they did.
      FERRY_ASSIGN_OR_RETURN(Ticket e, w->Pull(0, keyset(999999, 3000)));
      w->Release(e);
      FERRY_RETURN_IF_ERROR(Expect(w->Wait(e).code() == Code::kInvalidArgument,
                                   "a released ticket cannot be waited for"));
      FERRY_RETURN_IF_ERROR(w->Wait(c));
      FERRY_RETURN_IF_ERROR(w->Wait(a));
      FERRY_RETURN_IF_ERROR(w->Wait(b));
      w->Release(b);
      w->Release(a);
      // d reuses a's and b's space (and e's, once its replies are in) while c is still held.
      const auto kd = keyset(1000 * round + 4, 2200);
      FERRY_ASSIGN_OR_RETURN(Ticket d, w->Pull(0, kd));
      FERRY_RETURN_IF_ERROR(w->Wait(d));
      FERRY_ASSIGN_OR_RETURN(PulledRows rd, w->Rows(d));
      FERRY_RETURN_IF_ERROR(CheckRows(rd, kd, 5, want, "pull d"));
      FERRY_ASSIGN_OR_RETURN(PulledRows rc, w->Rows(c));
      FERRY_RETURN_IF_ERROR(CheckRows(rc, kc, 5, want, "pull c (held while others came and went)"));
      FERRY_RETURN_IF_ERROR(Expect(!w->Rows(a).ok(), "released rows are gone"));
      w->Release(c);
      w->Release(d);
      w->Release(d);  // twice: harmless
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, PullBehindPushesInFlightSeesThem) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  job.max_keys_per_request = 16;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(100);
    std::iota(keys.begin(), keys.end(), 5000);
    for (int round = 1; round <= 5; ++round) {
      // Three pushes without waiting, then a pull of the same keys: each server handles one
      // worker's requests in posting order, so the pull reads all three.
      const std::vector<float> g(keys.size() * 4, 0.5f);
      FERRY_ASSIGN_OR_RETURN(std::vector<Ticket> pushes, PushesInFlight(*w, 0, keys, g, 3));
      FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 4, Constant(-1.5f * static_cast<float>(round)),
                                      "pull behind pushes, round " + std::to_string(round)));
      FERRY_RETURN_IF_ERROR(WaitAndRelease(*w, pushes));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, AdmissionRefusingEveryKeyReadsZeros) {
  JobSpec job = SmallJob(GetParam(), 2, 1, 4);
  TableSpec& closed = job.tables[0];
  closed.name = "closed";
  closed.init = UniformInit(3);
  closed.optimizer.kind = Optimizer::kSgd;
  closed.admission.kind = AdmissionOptions::Kind::kProbability;
  closed.admission.probability = 0.0;
  const InitializerSpec init = closed.init;  // `closed` dangles after the push_back below
  TableSpec open = closed;
  open.name = "open";
  open.admission = AdmissionOptions{};
  job.tables.push_back(open);
  std::atomic<size_t> closed_rows{999}, open_rows{0};
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    if (Worker* w = node.worker()) {
      std::vector<uint64_t> keys;
      for (uint64_t i = 0; i < 300; ++i) keys.push_back(i * 11 + 1);
      for (int pass = 0; pass < 2; ++pass) {
        FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 4, Constant(0.0f),
                                        "refused keys, pass " + std::to_string(pass)));
        // Pushes to refused keys change nothing.
        std::vector<float> g(keys.size() * 4, 1.0f);
        FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
      }
      // The other table admits as usual.
      FERRY_RETURN_IF_ERROR(PullCheck(*w, 1, keys, 4, InitOf(init, 4), "admitting table"));
      return w->Finish();
    }
    // A server: its tables can be read once the job is over.
    FERRY_RETURN_IF_ERROR(node.Join());
    for (size_t t = 0; t < node.num_shard_servers(); ++t) {
      Server* s = node.shard_server(t);
      if (closed_rows == 999) closed_rows = 0;
      closed_rows += s->table(0).size();
      open_rows += s->table(1).size();
    }
    return Status::Ok();
  });
  ASSERT_OK(AllOk(outcomes));
  EXPECT_EQ(closed_rows.load(), 0u);
  EXPECT_EQ(open_rows.load(), 300u);
}

// A read-only pull (scoring: evaluation, prediction) reads the rows the servers hold and zeros
// for keys they do not, over the request path and one-sided, and creates no row: after it the
// tables hold only the pushed keys. A push-pull cannot be read-only.
TEST_P(PsFeatures, ReadOnlyPullCreatesNoRow) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  job.tables[0].init = UniformInit(7);
  std::atomic<size_t> rows{0};
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    if (Worker* w = node.worker()) {
      std::vector<uint64_t> trained, scored;
      for (uint64_t i = 0; i < 100; ++i) trained.push_back(i * 7 + 3);
      for (uint64_t i = 0; i < 300; ++i) scored.push_back(i * 5 + 1);  // 20 of them trained
      const std::vector<float> g(trained.size() * 4, 0.25f);
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, trained, g));
      FERRY_ASSIGN_OR_RETURN(std::vector<float> held, PullRows(*w, trained, false, 4));
      std::map<uint64_t, const float*> row_of;
      for (size_t i = 0; i < trained.size(); ++i) row_of[trained[i]] = held.data() + 4 * i;
      for (const bool one_sided : {false, true, true}) {  // the second one-sided pass reads
        PullOptions o;
        o.read_only = true;
        o.one_sided = one_sided;
        FERRY_ASSIGN_OR_RETURN(Ticket t, w->Pull(0, scored, o));
        Status s = w->Wait(t);
        auto got = w->Rows(t);
        if (s.ok()) s = got.status();
        for (size_t i = 0; s.ok() && i < scored.size(); ++i) {
          auto it = row_of.find(scored[i]);
          for (uint32_t d = 0; s.ok() && d < 4; ++d) {
            const float want = it == row_of.end() ? 0.0f : it->second[d];
            s = Expect(FloatBits((*got)[i][d]) == FloatBits(want),
                       "key " + std::to_string(scored[i]) + " dim " + std::to_string(d) + ": " +
                           std::to_string((*got)[i][d]) + ", want " + std::to_string(want) +
                           (one_sided ? " (one-sided)" : ""));
          }
        }
        w->Release(t);
        FERRY_RETURN_IF_ERROR(s);
      }
      PullOptions o;
      o.read_only = true;
      auto pp = w->PushPull(0, trained, g, o);
      FERRY_RETURN_IF_ERROR(Expect(pp.status().code() == Code::kInvalidArgument,
                                   "a read-only push-pull: " + pp.status().ToString()));
      return w->Finish();
    }
    FERRY_RETURN_IF_ERROR(node.Join());
    for (size_t t = 0; t < node.num_shard_servers(); ++t)
      rows += node.shard_server(t)->table(0).size();
    return Status::Ok();
  });
  ASSERT_OK(AllOk(outcomes));
  EXPECT_EQ(rows.load(), 100u);
}

// A table bounded by max_rows evicts while it admits: a request with more new keys than the
// bound evicts rows that earlier keys of the same request just got. No key may then read (or
// update) the row another key took over: each row is the key's own, or zeros (not kept).
TEST_P(PsFeatures, BoundedTableNeverMixesUpRows) {
  JobSpec job = SmallJob(GetParam(), 1, 1, 4);
  TableSpec& t = job.tables[0];
  t.initial_rows = 64;
  t.max_rows = 64;
  t.init = UniformInit(12);
  t.optimizer.kind = Optimizer::kSgd;
  t.optimizer.learning_rate = 1.0f;
  const InitializerSpec init = t.init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(200);
    std::iota(keys.begin(), keys.end(), 1000);
    auto check = [&](const PulledRows& rows, bool pushed, const std::string& when) -> Status {
      size_t kept = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        float own[4];
        InitWeights(init, keys[i], 4, own);
        bool zero = true, fresh = true, moved = true;
        for (uint32_t d = 0; d < 4; ++d) {
          zero = zero && rows[i][d] == 0.0f;
          fresh = fresh && rows[i][d] == own[d];
          moved = moved && rows[i][d] == own[d] - 1.0f;
        }
        if (!(zero || fresh || (pushed && moved))) {
          return Internal(when + ": key " + std::to_string(keys[i]) + " reads " +
                          std::to_string(rows[i][0]) + ", neither its own row (" +
                          std::to_string(own[0]) + ") nor zeros");
        }
        kept += !zero;
      }
      return Expect(kept > 0 && kept <= 64, when + ": " + std::to_string(kept) + " rows kept");
    };
    FERRY_RETURN_IF_ERROR(PullAndCheck(
        *w, 0, keys, [&](const PulledRows& rows) { return check(rows, false, "first pull"); }));
    std::vector<float> g(keys.size() * 4, 1.0f);
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
    FERRY_RETURN_IF_ERROR(PullAndCheck(
        *w, 0, keys, [&](const PulledRows& rows) { return check(rows, true, "after a push"); }));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, Fp16PullShipsTheMirror) {
  JobSpec job = SmallJob(GetParam(), 2, 1, 7);  // odd width: the mirror's last half is padding
  TableSpec& t = job.tables[0];
  t.fp16_pull = true;
  t.init = UniformInit(21);
  t.optimizer.kind = Optimizer::kSgd;
  t.optimizer.learning_rate = 0.37f;
  TableSpec plain = job.tables[0];
  plain.name = "plain";
  plain.fp16_pull = false;
  job.tables.push_back(plain);
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys;
    for (uint64_t i = 0; i < 500; ++i) keys.push_back(i * 101 + 7);
    keys.push_back(keys[3]);
    auto compare = [&](const std::string& when) -> Status {
      FERRY_ASSIGN_OR_RETURN(Ticket f32, w->Pull(0, keys));
      PullOptions half;
      half.fp16 = true;
      FERRY_ASSIGN_OR_RETURN(Ticket f16, w->Pull(0, keys, half));
      FERRY_RETURN_IF_ERROR(w->Wait(f32));
      FERRY_RETURN_IF_ERROR(w->Wait(f16));
      FERRY_ASSIGN_OR_RETURN(PulledRows a, w->Rows(f32));
      FERRY_ASSIGN_OR_RETURN(PulledRows b, w->Rows(f16));
      FERRY_RETURN_IF_ERROR(Expect(b.fp16() && !a.fp16(), "row formats"));
      for (size_t i = 0; i < keys.size(); ++i) {
        for (uint32_t d = 0; d < 7; ++d) {
          if (b.half(i)[d] != FloatToHalf(a[i][d])) {
            return Internal(when + ": key " + std::to_string(keys[i]) + " coordinate " +
                            std::to_string(d) + ": fp16 row has " + std::to_string(b.half(i)[d]) +
                            ", the weight " + std::to_string(a[i][d]) + " rounds to " +
                            std::to_string(FloatToHalf(a[i][d])));
          }
        }
      }
      w->Release(f32);
      w->Release(f16);
      return Status::Ok();
    };
    FERRY_RETURN_IF_ERROR(compare("fresh rows"));
    std::vector<float> g(keys.size() * 7);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 13) * 0.031f - 0.2f;
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
    FERRY_RETURN_IF_ERROR(compare("after a push"));
    // A table without a mirror refuses fp16 pulls up front.
    PullOptions half;
    half.fp16 = true;
    auto refused = w->Pull(1, keys, half);
    FERRY_RETURN_IF_ERROR(Expect(!refused.ok() &&
                                     refused.status().code() == Code::kInvalidArgument &&
                                     refused.status().message().find("fp16") != std::string::npos,
                                 "fp16 pull of a plain table: " + refused.status().ToString()));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, Fp16PushAndSignificanceFilter) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  job.fp16_push = true;
  job.push_filter = 0.05f;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    // Key k's aggregated gradient row: keys with k % 3 == 0 are insignificant (all |g| < 0.05);
    // k % 3 == 1 has one significant coordinate; k % 3 == 2 is pushed twice with 0.03 each,
    // which only the aggregate (0.06) makes significant.
    std::vector<uint64_t> keys;
    std::vector<float> g;
    std::map<uint64_t, std::vector<float>> sum;
    for (uint64_t k = 1; k <= 90; ++k) {
      const int copies = k % 3 == 2 ? 2 : 1;
      for (int c = 0; c < copies; ++c) {
        keys.push_back(k * 1000003);
        for (uint32_t d = 0; d < 4; ++d) {
          float v = 0.0f;
          if (k % 3 == 0) v = 0.049f - 0.01f * static_cast<float>(d);
          if (k % 3 == 1) v = d == 2 ? -0.3337f : 0.0123f;
          if (k % 3 == 2) v = 0.03f;
          g.push_back(v);
          auto& s = sum[k * 1000003];
          s.resize(4, 0.0f);
          s[d] += v;
        }
      }
    }
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
    FERRY_RETURN_IF_ERROR(
        Expect(w->stats().filtered == 30,
               "filtered " + std::to_string(w->stats().filtered) + " rows, want 30"));
    std::vector<uint64_t> unique;
    for (const auto& [k, v] : sum) unique.push_back(k);
    FERRY_RETURN_IF_ERROR(PullCheck(
        *w, 0, unique, 4,
        [&](uint64_t key, uint32_t d) {
          if ((key / 1000003) % 3 == 0) return 0.0f;      // filtered: never applied
          return -HalfToFloat(FloatToHalf(sum[key][d]));  // shipped as a half
        },
        "fp16 push with filter"));
    // The same through Gradients()/PushGradients().
    FERRY_ASSIGN_OR_RETURN(Ticket q, w->Pull(0, unique));
    FERRY_RETURN_IF_ERROR(w->Wait(q));
    FERRY_ASSIGN_OR_RETURN(GradRows gr, w->Gradients(q));
    for (size_t i = 0; i < unique.size(); ++i) gr[i][0] = i % 2 == 0 ? 1.0f : 0.001f;
    FERRY_ASSIGN_OR_RETURN(Ticket pg, w->PushGradients(q));
    FERRY_RETURN_IF_ERROR(w->Wait(pg));
    w->Release(pg);
    FERRY_ASSIGN_OR_RETURN(PulledRows before, w->Rows(q));
    std::vector<float> old(unique.size());
    for (size_t i = 0; i < unique.size(); ++i) old[i] = before[i][0];
    w->Release(q);
    FERRY_RETURN_IF_ERROR(PullAndCheck(*w, 0, unique, [&](const PulledRows& after) -> Status {
      for (size_t i = 0; i < unique.size(); ++i) {
        const float want = i % 2 == 0 ? old[i] - 1.0f : old[i];
        FERRY_RETURN_IF_ERROR(Expect(after[i][0] == want, "PushGradients through the filter"));
      }
      return Status::Ok();
    }));
    FERRY_RETURN_IF_ERROR(Expect(w->stats().filtered == 30 + unique.size() / 2,
                                 "filtered count after PushGradients"));
    // A push-pull whose rows the filter would drop is refused.
    std::vector<float> tiny(unique.size() * 4, 0.001f);
    auto pp = w->PushPull(0, unique, tiny);
    FERRY_RETURN_IF_ERROR(Expect(!pp.ok() && pp.status().code() == Code::kInvalidArgument,
                                 "filtered push-pull: " + pp.status().ToString()));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

std::vector<uint8_t> Pattern(uint32_t worker, uint32_t round, size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i)
    b[i] = static_cast<uint8_t>((i * 131 + worker * 17 + round) ^ (i >> 8));
  return b;
}

TEST_P(PsFeatures, GatherCollectsEveryWorkersBytes) {
  JobSpec job = SmallJob(GetParam(), 1, 3, 4);
  const size_t sizes[2][3] = {
      {0, kGatherChunk, 2 * kGatherChunk + 17},
      {1, 100, (500u << 10) + 3},
  };
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    for (uint32_t round = 0; round < 2; ++round) {
      const auto mine = Pattern(w->index(), round, sizes[round][w->index()]);
      FERRY_ASSIGN_OR_RETURN(auto parts, w->GatherFromWorkers(mine));
      if (w->index() != 0) {
        FERRY_RETURN_IF_ERROR(Expect(parts.empty(), "only worker 0 receives"));
        continue;
      }
      FERRY_RETURN_IF_ERROR(Expect(parts.size() == 3, "one part per worker"));
      for (uint32_t x = 0; x < 3; ++x) {
        FERRY_RETURN_IF_ERROR(Expect(parts[x] == Pattern(x, round, sizes[round][x]),
                                     "gather " + std::to_string(round) + ": worker " +
                                         std::to_string(x) + "'s " +
                                         std::to_string(sizes[round][x]) + " bytes (got " +
                                         std::to_string(parts[x].size()) + ")"));
      }
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, StagingRingWrapsManyTimes) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 8);
  job.staging_bytes = 64u << 10;  // the minimum
  job.max_outstanding = 2;
  job.max_keys_per_request = 40;
  constexpr int kIters = 300;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::map<uint64_t, float> expect;  // every coordinate of a row moves alike
    for (int it = 0; it < kIters; ++it) {
      // 1..97 keys from a pool of 120: request sizes vary, so ring offsets never line up.
      const size_t n = 1 + (it * 37) % 97;
      std::vector<uint64_t> keys;
      for (size_t i = 0; i < n; ++i) keys.push_back(77 + (it * 13 + i * 7) % 120);
      std::vector<float> g(n * 8, 0.125f);
      FERRY_ASSIGN_OR_RETURN(Ticket p, w->Push(0, keys, g));
      for (uint64_t k : keys) expect[k] -= 0.125f;
      if (it % 3 != 0) {  // sometimes the pull goes out behind the unacknowledged push
        FERRY_RETURN_IF_ERROR(w->Wait(p));
        w->Release(p);
      }
      FERRY_RETURN_IF_ERROR(PullCheck(
          *w, 0, keys, 8, [&](uint64_t k, uint32_t) { return expect[k]; },
          "iteration " + std::to_string(it)));
      if (it % 3 == 0) {
        FERRY_RETURN_IF_ERROR(w->Wait(p));
        w->Release(p);
      }
    }
    // ~1 KiB per request and server on average against a 64 KiB ring: it wrapped many times.
    FERRY_RETURN_IF_ERROR(
        Expect(w->stats().requests > 400, "requests " + std::to_string(w->stats().requests)));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, BspRingFullOfStagedPushesAsksForClock) {
  JobSpec job = SgdJob(GetParam(), 1, 1, 8);
  job.consistency.kind = Consistency::kBsp;
  job.staging_bytes = 64u << 10;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    // 200 keys of shard server 0 (with server_threads > 1 the rank has several): one ring.
    std::vector<uint64_t> keys;
    for (uint64_t k = 1; keys.size() < 200; ++k) {
      if (w->partition().ServerOf(k) == 0) keys.push_back(k);
    }
    const std::vector<float> g(200 * 8, 0.5f);  // 64 + 1600 + 6400 bytes: 8 fit in 64 KiB
    int accepted = 0;
    Status full;
    for (int i = 0; i < 12 && full.ok(); ++i) {
      auto p = w->Push(0, keys, g);
      if (!p.ok()) {
        full = p.status();
        break;
      }
      FERRY_RETURN_IF_ERROR(w->Wait(*p));
      w->Release(*p);
      ++accepted;
    }
    FERRY_RETURN_IF_ERROR(Expect(full.code() == Code::kResourceExhausted &&
                                     full.message().find("Clock()") != std::string::npos,
                                 "a full ring of staged pushes: " + full.ToString()));
    FERRY_RETURN_IF_ERROR(
        Expect(accepted == 8, "8 staged pushes fit, not " + std::to_string(accepted)));
    FERRY_RETURN_IF_ERROR(w->Clock());  // applies them and frees the ring
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
    FERRY_RETURN_IF_ERROR(w->Clock());
    FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 8,
                                    Constant(-0.5f * static_cast<float>(accepted + 1)),
                                    "staged pushes applied once each"));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

TEST_P(PsFeatures, PushPullTablesOfDifferentWidthsAndPullOptions) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 3);
  job.tables[0].init = UniformInit(1);
  TableSpec wide;
  wide.name = "wide";
  wide.dim = 33;
  wide.initial_rows = 64;
  wide.optimizer.kind = Optimizer::kAdagrad;
  wide.init = UniformInit(2);
  wide.fp16_pull = true;
  job.tables.push_back(wide);
  const TableSpec narrow_spec = job.tables[0], wide_spec = wide;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(uint32_t narrow, w->TableId("t"));
    FERRY_ASSIGN_OR_RETURN(uint32_t wide_id, w->TableId("wide"));
    // An empty pull completes at once with no rows.
    FERRY_RETURN_IF_ERROR(PullAndCheck(*w, narrow, {}, [](const PulledRows& none) {
      return Expect(none.size() == 0, "an empty pull has no rows");
    }));
    // keys_unique: the caller's order is kept, spread over both servers.
    std::vector<uint64_t> keys;
    for (uint64_t i = 0; i < 300; ++i) keys.push_back(i * 7 + 3);
    PullOptions unique;
    unique.keys_unique = true;
    FERRY_ASSIGN_OR_RETURN(Ticket u, w->Pull(wide_id, keys, unique));
    while (!w->Test(u)) {
    }
    FERRY_ASSIGN_OR_RETURN(PulledRows ur, w->Rows(u));
    FERRY_RETURN_IF_ERROR(CheckRows(ur, keys, 33, InitOf(wide_spec.init, 33), "keys_unique pull"));
    w->Release(u);
    FERRY_RETURN_IF_ERROR(Expect(
        w->stats().bytes_received >= 300u * 33 * 4,
        "bytes_received counts the rows (" + std::to_string(w->stats().bytes_received) + ")"));
    // Push-pull on the narrow table returns the updated rows (repeats summed), and the wide
    // table is untouched by it.
    std::vector<uint64_t> pk = {5, 6, 5, 7, 100000};
    std::vector<float> g(pk.size() * 3);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.25f * static_cast<float>(i % 5);
    FERRY_ASSIGN_OR_RETURN(Ticket pp, w->PushPull(narrow, pk, g));
    FERRY_RETURN_IF_ERROR(w->Wait(pp));
    FERRY_ASSIGN_OR_RETURN(PulledRows pr, w->Rows(pp));
    for (size_t i = 0; i < pk.size(); ++i) {
      // The worker sums a repeated key's gradient rows in input order, then SGD (lr 1) subtracts.
      std::vector<float> sum(3, 0.0f), init(3);
      InitWeights(narrow_spec.init, pk[i], 3, init.data());
      for (size_t j = 0; j < pk.size(); ++j) {
        if (pk[j] != pk[i]) continue;
        for (uint32_t d = 0; d < 3; ++d) sum[d] += g[j * 3 + d];
      }
      for (uint32_t d = 0; d < 3; ++d) {
        FERRY_RETURN_IF_ERROR(Expect(FloatBits(pr[i][d]) == FloatBits(init[d] - sum[d]),
                                     "push-pull row of key " + std::to_string(pk[i])));
      }
    }
    w->Release(pp);
    // Push-pull with fp16 rows on the wide table: halves of the updated weights.
    std::vector<float> wg(keys.size() * 33, 0.5f);
    PullOptions half;
    half.fp16 = true;
    FERRY_ASSIGN_OR_RETURN(Ticket hp, w->PushPull(wide_id, keys, wg, half));
    FERRY_RETURN_IF_ERROR(w->Wait(hp));
    FERRY_ASSIGN_OR_RETURN(PulledRows hr, w->Rows(hp));
    FERRY_ASSIGN_OR_RETURN(Ticket fp, w->Pull(wide_id, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(fp));
    FERRY_ASSIGN_OR_RETURN(PulledRows fr, w->Rows(fp));
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t d = 0; d < 33; ++d) {
        FERRY_RETURN_IF_ERROR(Expect(hr.half(i)[d] == FloatToHalf(fr[i][d]),
                                     "fp16 push-pull row " + std::to_string(i)));
      }
    }
    w->Release(hp);
    w->Release(fp);
    // Gradients() + PushGradients() without filter: the pull's layout, repeats summed.
    std::vector<uint64_t> gk = {9, 10, 9};
    FERRY_ASSIGN_OR_RETURN(Ticket q, w->Pull(narrow, gk));
    FERRY_RETURN_IF_ERROR(w->Wait(q));
    FERRY_ASSIGN_OR_RETURN(PulledRows before, w->Rows(q));
    const float b9 = before[0][1], b10 = before[1][1];
    FERRY_ASSIGN_OR_RETURN(GradRows gr, w->Gradients(q));
    for (size_t i = 0; i < gk.size(); ++i) gr[i][1] += 1.0f;  // key 9 twice: 2
    FERRY_ASSIGN_OR_RETURN(Ticket push, w->PushGradients(q));
    w->Release(q);  // the push keeps what it reads alive
    FERRY_RETURN_IF_ERROR(w->Wait(push));
    w->Release(push);
    FERRY_RETURN_IF_ERROR(PullAndCheck(*w, narrow, gk, [&](const PulledRows& after) {
      return Expect(
          after[0][1] == b9 - 2.0f && after[2][1] == b9 - 2.0f && after[1][1] == b10 - 1.0f,
          "PushGradients sums the rows of a repeated key");
    }));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// Wide rows: a request of max_keys_per_request keys would not fit the staging ring, so the
// worker must cut requests by bytes too, not only by key count.
TEST_P(PsFeatures, WideRowsAreChunkedToFitTheRing) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 256);
  job.staging_bytes = 256u << 10;
  job.max_keys_per_request = 4096;  // 4096 * (8 + 1024) bytes: 16x the ring
  job.arena_bytes = 8u << 20;
  job.send_bytes = 8u << 20;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(3000);
    std::iota(keys.begin(), keys.end(), 1);
    std::vector<float> g(keys.size() * 256, 0.5f);
    FERRY_RETURN_IF_ERROR(PushPullCheck(*w, 0, keys, g, 256, Constant(-0.5f), "wide rows"));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// A request that can never fit the worker's arena or send buffer fails at once, saying what to
// raise, instead of waiting for space that cannot come.
TEST_P(PsFeatures, RequestsLargerThanTheBuffersFailAtOnce) {
  JobSpec job = SmallJob(GetParam(), 1, 1, 8);
  job.arena_bytes = 1u << 20;
  job.send_bytes = 1u << 20;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(40000);  // rows: 1.25 MiB > arena; keys: 312 KiB
    std::iota(keys.begin(), keys.end(), 1);
    const auto t0 = std::chrono::steady_clock::now();
    auto pull = w->Pull(0, keys);
    FERRY_RETURN_IF_ERROR(
        Expect(!pull.ok() && pull.status().code() == Code::kResourceExhausted &&
                   pull.status().message().find("arena_bytes") != std::string::npos,
               "pull larger than the arena: " + pull.status().ToString()));
    std::vector<uint64_t> many(200000);  // keys alone: 1.5 MiB > send buffer
    std::iota(many.begin(), many.end(), 1);
    auto big = w->Pull(0, many);
    FERRY_RETURN_IF_ERROR(Expect(!big.ok() && big.status().code() == Code::kResourceExhausted &&
                                     big.status().message().find("send_bytes") != std::string::npos,
                                 "keys larger than the send buffer: " + big.status().ToString()));
    std::vector<float> g(keys.size() * 8, 1.0f);  // gradients: 1.25 MiB > send buffer
    auto push = w->Push(0, keys, g);
    FERRY_RETURN_IF_ERROR(Expect(!push.ok() && push.status().code() == Code::kResourceExhausted,
                                 "push larger than the send buffer: " + push.status().ToString()));
    // Well under peer_timeout (5 s): nothing waited for space that cannot come.
    FERRY_RETURN_IF_ERROR(Expect(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4),
                                 "the refusals were immediate"));
    // The worker still works.
    keys.resize(1000);
    FERRY_ASSIGN_OR_RETURN(Ticket ok, w->Pull(0, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(ok));
    w->Release(ok);
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// fp16 pushes ship a converted copy of the gradients: when earlier pushes still hold the send
// buffer, the copy waits for their sends to complete like every other allocation.
TEST_P(PsFeatures, Fp16PushesWaitForSendSpace) {
  JobSpec job = SgdJob(GetParam(), 1, 1, 64);
  job.fp16_push = true;
  job.send_bytes = 256u << 10;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys(300);  // gradients 75 KiB, their fp16 copy 38 KiB
    std::iota(keys.begin(), keys.end(), 1);
    const std::vector<float> g(keys.size() * 64, 0.25f);
    // Released at once: their space returns as their sends complete (not at once).
    for (int i = 0; i < 12; ++i) {
      FERRY_ASSIGN_OR_RETURN(Ticket p, w->Push(0, keys, g));
      w->Release(p);
    }
    FERRY_RETURN_IF_ERROR(Expect(w->stats().waits_for_space > 0, "some push waited for space"));
    // The pull goes out behind the pushes: the server applies them first.
    FERRY_RETURN_IF_ERROR(PullCheck(*w, 0, keys, 64, Constant(-3.0f), "12 fp16 pushes of 0.25"));
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// Colocated roles: rank r is server r and worker r; a worker's own server is in its process.
TEST_P(PsFeatures, ColocatedRolesPushAndPull) {
  JobSpec job = SgdJob(GetParam(), 3, 3, 4);
  job.role_rule = RoleRule::kColocated;
  job.consistency = *ParseConsistency("bsp");
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Internal("every colocated rank has a worker");
    if (node.server() == nullptr) return Internal("every colocated rank has a server");
    std::vector<uint64_t> keys(500);
    std::iota(keys.begin(), keys.end(), 1);
    for (int c = 0; c < 3; ++c) {
      std::vector<float> g(keys.size() * 4, 0.25f);
      FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, g));
      FERRY_RETURN_IF_ERROR(w->Clock());
      const float want = -0.75f * static_cast<float>(c + 1);  // 3 workers x 0.25 per clock
      FERRY_RETURN_IF_ERROR(
          PullCheck(*w, 0, keys, 4, Constant(want), "colocated clock " + std::to_string(c)));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

INSTANTIATE_TEST_SUITE_P(Backends, PsFeatures, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsFeatures);

}  // namespace
}  // namespace ferry::ps::testing
