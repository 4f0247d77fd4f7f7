// Helpers shared by the in-process job tests (tests/ps/*_test.cc run through ps_job_test): the
// backend configurations to instantiate, checks that return a Status from inside a rank's body
// (a rank thread must not use gtest's fatal assertions), and float comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/backends.h"
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

}  // namespace ferry::ps::testing
