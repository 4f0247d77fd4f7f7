// Pull and push through a real job: initial rows come from the initializer, pushes change rows
// as the optimizer says, keys may repeat and come unsorted, several servers share the keys.
// Every case runs over each transport configuration available here (tests/common/backends.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "ps/store/optimizer.h"
#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

class PsJob : public ::testing::TestWithParam<BackendConfig> {};

bool Near(float a, float b) {
  return std::fabs(a - b) <= 1e-6f * std::max(1.0f, std::max(std::fabs(a), std::fabs(b)));
}

TEST_P(PsJob, PullInitializesRowsPushAppliesSgd) {
  JobSpec job = SmallJob(GetParam(), 2, 2, 5);
  TableSpec& t = job.tables[0];
  t.optimizer.kind = Optimizer::kSgd;
  t.optimizer.learning_rate = 0.5f;
  t.init = UniformInit(7);
  const InitializerSpec init = t.init;
  // Keys: 3000 distinct, unsorted, each worker's list with repeats; workers overlap.
  std::vector<uint64_t> all(3000);
  for (size_t i = 0; i < all.size(); ++i) all[i] = (i * 0x9e3779b97f4a7c15ull) ^ 0xabcdef;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const uint32_t me = w->index();
    std::vector<uint64_t> keys;
    for (size_t i = me; i < all.size(); i += 1) keys.push_back(all[(i * 7 + me) % all.size()]);
    for (size_t i = 0; i < 500; ++i) keys.push_back(keys[i * 3]);  // repeats
    std::vector<float> expect(5);
    FERRY_RETURN_IF_ERROR(PullAndCheck(*w, 0, keys, [&](const PulledRows& rows) -> Status {
      for (size_t i = 0; i < keys.size(); ++i) {
        InitWeights(init, keys[i], 5, expect.data());
        for (int d = 0; d < 5; ++d) {
          FERRY_RETURN_IF_ERROR(
              Expect(rows[i][d] == expect[d], "initial row of key " + std::to_string(keys[i])));
        }
      }
      return Status::Ok();
    }));
    FERRY_RETURN_IF_ERROR(w->Barrier());  // every worker saw initial rows before anyone pushes
    // Push gradient g(key, d) = (key % 7 + d) * 0.01 once per occurrence in `keys`.
    std::vector<float> grads(keys.size() * 5);
    for (size_t i = 0; i < keys.size(); ++i) {
      for (int d = 0; d < 5; ++d) grads[i * 5 + d] = static_cast<float>(keys[i] % 7 + d) * 0.01f;
    }
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, grads));
    FERRY_RETURN_IF_ERROR(w->Barrier());  // both workers' pushes are applied
    // Expected: init - lr * (occurrences over both workers) * g.
    std::map<uint64_t, int> count;
    for (uint32_t x = 0; x < 2; ++x) {
      std::vector<uint64_t> k;
      for (size_t i = x; i < all.size(); ++i) k.push_back(all[(i * 7 + x) % all.size()]);
      for (size_t i = 0; i < 500; ++i) k.push_back(k[i * 3]);
      for (uint64_t key : k) ++count[key];
    }
    return PullAndCheck(*w, 0, all, [&](const PulledRows& after) -> Status {
      for (size_t i = 0; i < all.size(); ++i) {
        InitWeights(init, all[i], 5, expect.data());
        const int c = count[all[i]];
        for (int d = 0; d < 5; ++d) {
          const float g = static_cast<float>(all[i] % 7 + d) * 0.01f;
          const float want = expect[d] - 0.5f * (g * static_cast<float>(c));
          if (!Near(after[i][d], want)) {
            return Internal("key " + std::to_string(all[i]) + " dim " + std::to_string(d) +
                            ": got " + std::to_string(after[i][d]) + ", want " +
                            std::to_string(want) + " (" + std::to_string(c) + " pushes)");
          }
        }
      }
      return Status::Ok();
    });
  });
  EXPECT_OK(AllOk(outcomes));
}

INSTANTIATE_TEST_SUITE_P(Backends, PsJob, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsJob);

}  // namespace
}  // namespace ferry::ps::testing
