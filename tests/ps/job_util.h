// Helpers shared by the in-process job tests (tests/ps/*_test.cc run through ps_job_test): the
// backend configurations to instantiate, checks that return a Status from inside a rank's body
// (a rank thread must not use gtest's fatal assertions), float comparisons, and the worker's
// push-wait-pull-check round trips:
//   FERRY_RETURN_IF_ERROR(PushPullCheck(*w, 0, keys, grads, 4, Constant(-0.5f), "one push"));
// Each round trip waits for its tickets and releases them (also when the check fails).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "ps/store/optimizer.h"
#include "tests/common/backends.h"
#include "tests/common/status_asserts.h"
#include "tests/ps/cluster.h"
#include "transport/status.h"

namespace ferry::ps::testing {

using ferry::testing::BackendConfig;

// The configurations every job case runs over (FERRY_TEST_BACKENDS narrows them).
inline std::vector<BackendConfig> JobConfigs() {
  std::vector<BackendConfig> out;
  for (const BackendConfig& c : ferry::testing::SelectedConfigs().run) out.push_back(c);
  return out;
}

inline std::string JobConfigName(const ::testing::TestParamInfo<BackendConfig>& info) {
  return info.param.TestName();
}

// SmallJob whose table "t" is plain SGD with learning rate 1 (a push of g moves a row by -g).
inline JobSpec SgdJob(const BackendConfig& config, uint32_t servers, uint32_t workers,
                      uint32_t dim) {
  JobSpec job = SmallJob(config, servers, workers, dim);
  job.tables[0].optimizer.kind = Optimizer::kSgd;
  job.tables[0].optimizer.learning_rate = 1.0f;
  return job;
}

// kInternal naming `what` unless `cond` holds.
inline Status Expect(bool cond, const std::string& what) {
  return cond ? Status::Ok() : Internal("check failed: " + what);
}

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Equal, or within `rel` of the larger magnitude (both finite).
inline bool NearRel(float a, float b, float rel = 1e-6f) {
  if (a == b) return true;
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b));
}

// A seeded uniform(-1, 1) initializer: rows the tests can recompute with InitWeights.
inline InitializerSpec UniformInit(uint64_t seed) {
  InitializerSpec s;
  s.kind = InitializerSpec::Kind::kUniform;
  s.a = -1.0f;
  s.b = 1.0f;
  s.seed = seed;
  return s;
}

// ---- Round trips through a Worker (inside a rank's body) ----

// Pulled rows of `keys` equal `want(key, d)` bit for bit (d < dim).
template <typename Want>
Status CheckRows(const PulledRows& rows, std::span<const uint64_t> keys, uint32_t dim, Want want,
                 const std::string& what) {
  if (rows.size() != keys.size()) return Internal(what + ": wrong row count");
  for (size_t i = 0; i < keys.size(); ++i) {
    for (uint32_t d = 0; d < dim; ++d) {
      const float w = want(keys[i], d);
      if (FloatBits(rows[i][d]) != FloatBits(w)) {
        return Internal(what + ": key " + std::to_string(keys[i]) + " coordinate " +
                        std::to_string(d) + " reads " + std::to_string(rows[i][d]) + ", want " +
                        std::to_string(w));
      }
    }
  }
  return Status::Ok();
}

// want(key, d) for CheckRows: the initializer's row of `key`.
inline auto InitOf(const InitializerSpec& init, uint32_t dim) {
  return [init, dim](uint64_t key, uint32_t d) {
    std::vector<float> w(dim);
    InitWeights(init, key, dim, w.data());
    return w[d];
  };
}

// want(key, d) for CheckRows: `v` everywhere.
inline auto Constant(float v) {
  return [v](uint64_t, uint32_t) { return v; };
}

// Pushes `grads` (keys.size() rows) for `keys` of `table`, waits for the push and releases it.
inline Status PushAndWait(Worker& w, uint32_t table, std::span<const uint64_t> keys,
                          std::span<const float> grads) {
  FERRY_ASSIGN_OR_RETURN(Ticket p, w.Push(table, keys, grads));
  Status s = w.Wait(p);
  w.Release(p);
  return s;
}

// Posts `count` pushes of the same `grads` without waiting for any; their tickets, in order.
inline Result<std::vector<Ticket>> PushesInFlight(Worker& w, uint32_t table,
                                                  std::span<const uint64_t> keys,
                                                  std::span<const float> grads, int count) {
  std::vector<Ticket> out;
  for (int i = 0; i < count; ++i) {
    FERRY_ASSIGN_OR_RETURN(Ticket t, w.Push(table, keys, grads));
    out.push_back(t);
  }
  return out;
}

// Waits for each of `tickets` in turn and releases it; stops at the first error.
inline Status WaitAndRelease(Worker& w, std::span<const Ticket> tickets) {
  for (Ticket t : tickets) {
    FERRY_RETURN_IF_ERROR(w.Wait(t));
    w.Release(t);
  }
  return Status::Ok();
}

// Pulls `keys` of `table`, waits, returns check(rows) (any Status(const PulledRows&) callable),
// and releases the ticket.
template <typename Check>
Status PullAndCheck(Worker& w, uint32_t table, std::span<const uint64_t> keys, Check check) {
  FERRY_ASSIGN_OR_RETURN(Ticket t, w.Pull(table, keys));
  Status s = w.Wait(t);
  if (s.ok()) {
    auto rows = w.Rows(t);
    s = rows.ok() ? check(*rows) : rows.status();
  }
  w.Release(t);
  return s;
}

// PullAndCheck with CheckRows: the rows of `keys` equal want(key, d).
template <typename Want>
Status PullCheck(Worker& w, uint32_t table, std::span<const uint64_t> keys, uint32_t dim, Want want,
                 const std::string& what) {
  return PullAndCheck(w, table, keys, [&](const PulledRows& rows) {
    return CheckRows(rows, keys, dim, want, what);
  });
}

// PushAndWait, then PullCheck of the same keys.
template <typename Want>
Status PushPullCheck(Worker& w, uint32_t table, std::span<const uint64_t> keys,
                     std::span<const float> grads, uint32_t dim, Want want,
                     const std::string& what) {
  FERRY_RETURN_IF_ERROR(PushAndWait(w, table, keys, grads));
  return PullCheck(w, table, keys, dim, want, what);
}

// Pulls `keys` of table 0 (one-sided or not), waits, and copies the rows (dim floats each) out.
inline Result<std::vector<float>> PullRows(Worker& w, std::span<const uint64_t> keys,
                                           bool one_sided, uint32_t dim) {
  PullOptions o;
  o.one_sided = one_sided;
  FERRY_ASSIGN_OR_RETURN(Ticket t, w.Pull(0, keys, o));
  Status s = w.Wait(t);
  std::vector<float> out;
  if (s.ok()) {
    auto rows = w.Rows(t);
    s = rows.status();
    if (s.ok()) {
      for (size_t i = 0; i < keys.size(); ++i) {
        out.insert(out.end(), (*rows)[i], (*rows)[i] + dim);
      }
    }
  }
  w.Release(t);
  if (!s.ok()) return s;
  return out;
}

}  // namespace ferry::ps::testing
