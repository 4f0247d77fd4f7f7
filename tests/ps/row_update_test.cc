// The SIMD row updates (ps/store/row_update.h) against the plain loops (ApplyUpdateScalar), bit
// for bit: every optimizer, every instruction set this CPU runs, every row width from 1 to 40
// and 64 (whole vectors and every tail), several updates in a row (Adam's step-dependent bias
// correction), values around FTRL's l1 threshold and both signs of zero. A kernel that fused a
// multiply-add, reordered an operation or mishandled a tail changes some bytes here.
#include "ps/store/row_update.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace ferry::ps {
namespace {

std::vector<RowIsa> Isas() {
  std::vector<RowIsa> out;
  for (RowIsa isa : {RowIsa::kSse2, RowIsa::kAvx2}) {
    if (RowIsaAvailable(isa)) out.push_back(isa);
  }
  return out;
}

OptimizerSpec Spec(Optimizer kind) {
  OptimizerSpec s;
  s.kind = kind;
  s.learning_rate = 0.07f;
  s.l2 = 0.003f;
  s.l1 = 0.5f;
  s.alpha = 0.1f;
  s.beta = 1.0f;
  return s;
}

// A row's floats: weights, then state; some exact zeros of either sign, and FTRL z values at,
// just under and just over l1.
std::vector<float> RandomRow(std::mt19937& rng, uint32_t floats) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(floats);
  for (uint32_t i = 0; i < floats; ++i) {
    switch (rng() % 8) {
      case 0:
        v[i] = 0.0f;
        break;
      case 1:
        v[i] = -0.0f;
        break;
      case 2:
        v[i] = (rng() % 2 ? 1.0f : -1.0f) * (0.5f + static_cast<float>(rng() % 3 - 1) * 1e-7f);
        break;
      default:
        v[i] = normal(rng);
    }
  }
  return v;
}

// Byte equality of two float arrays (memcmp, but not on the null data() of an empty vector:
// SGD keeps no state).
bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(RowUpdate, KernelsGiveTheBytesOfThePlainLoops) {
  ASSERT_TRUE(RowIsaAvailable(RowIsa::kScalar));
  const std::vector<RowIsa> isas = Isas();
#if defined(__x86_64__)
  ASSERT_FALSE(isas.empty());  // SSE2 is part of x86-64
#endif
  std::vector<uint32_t> dims;
  for (uint32_t d = 1; d <= 40; ++d) dims.push_back(d);
  dims.push_back(64);
  size_t compared = 0;
  for (Optimizer kind :
       {Optimizer::kSgd, Optimizer::kAdagrad, Optimizer::kFtrl, Optimizer::kAdam}) {
    const OptimizerSpec spec = Spec(kind);
    for (uint32_t dim : dims) {
      std::mt19937 rng(dim * 31 + static_cast<uint32_t>(kind));
      const uint32_t state_floats = StateFloats(spec, dim);
      std::vector<float> w = RandomRow(rng, dim), state = RandomRow(rng, state_floats);
      // Accumulators (Adagrad's n, FTRL's n, Adam's v) are never negative.
      const uint32_t acc = kind == Optimizer::kAdagrad ? 0 : dim;
      for (uint32_t i = acc; i < state_floats; ++i) state[i] = std::fabs(state[i]);
      for (RowIsa isa : isas) {
        SCOPED_TRACE(std::string(OptimizerName(kind)) + " dim " + std::to_string(dim) + " " +
                     std::string(RowIsaName(isa)));
        std::vector<float> w_ref = w, s_ref = state, w_simd = w, s_simd = state;
        for (uint32_t step = 1; step <= 4; ++step) {
          const std::vector<float> g = RandomRow(rng, dim);
          ApplyUpdateScalar(spec, dim, w_ref.data(), s_ref.data(), g.data(), step);
          ApplyUpdateWith(isa, spec, dim, w_simd.data(), s_simd.data(), g.data(), step);
          ASSERT_TRUE(SameBytes(w_ref, w_simd)) << "weights differ after update " << step;
          ASSERT_TRUE(SameBytes(s_ref, s_simd)) << "state differs after update " << step;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 4 * dims.size() * isas.size() * 4);
}

TEST(RowUpdate, ApplyUpdateRunsTheBestKernels) {
  const RowIsa best = BestRowIsa();
  EXPECT_TRUE(RowIsaAvailable(best));
#if defined(__x86_64__)
  EXPECT_EQ(best, __builtin_cpu_supports("avx2") ? RowIsa::kAvx2 : RowIsa::kSse2);
#endif
  const OptimizerSpec spec = Spec(Optimizer::kFtrl);
  std::mt19937 rng(7);
  std::vector<float> w = RandomRow(rng, 16), state(32, 0.25f), g = RandomRow(rng, 16);
  std::vector<float> w2 = w, state2 = state;
  ApplyUpdate(spec, 16, w.data(), state.data(), g.data(), 1);
  ApplyUpdateWith(best, spec, 16, w2.data(), state2.data(), g.data(), 1);
  EXPECT_TRUE(SameBytes(w, w2));
  EXPECT_TRUE(SameBytes(state, state2));
}

}  // namespace
}  // namespace ferry::ps
