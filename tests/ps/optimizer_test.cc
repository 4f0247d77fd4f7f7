// Optimizers and initializers (ps/store/optimizer.h).
//
// (a) Unit: ApplyUpdate / InitState against a plain reference written here from the formulas in
//     the header (FTRL's l1 driving weights to exactly 0, Adam's bias correction with the row's
//     update count, Adagrad's initial accumulator, l2), initializer determinism and distribution,
//     and the parse / validate errors. This reference retypes the header's formulas; the
//     independent check, written in double from the papers, is optimizer_paper_test.cc.
// (b) Job: a deterministic gradient stream (keys repeating within and across pushes) pushed
//     through a real job, 1 worker under ASP and 2 workers under BSP, then pulled and compared
//     with the reference replaying the same stream: worker-side aggregation sums the rows of a
//     repeated key in input order, then one update per unique key; under BSP the server applies
//     a clock's pushes in worker order.
#include "ps/store/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <ostream>
#include <random>
#include <vector>

#include "tests/ps/job_util.h"

namespace ferry::ps::testing {
namespace {

// ---- The reference ------------------------------------------------------------------------------

// One row of the reference model: weights, the optimizer's state vectors and the update count.
struct RefRow {
  std::vector<float> w;
  std::vector<float> s1;  // Adagrad n | FTRL z | Adam m
  std::vector<float> s2;  // FTRL n | Adam v
  uint32_t updates = 0;
};

RefRow RefNew(const OptimizerSpec& o, uint32_t dim, const std::vector<float>& w0) {
  RefRow r;
  r.w = w0;
  r.s1.assign(dim, o.kind == Optimizer::kAdagrad ? o.initial_accumulator : 0.0f);
  r.s2.assign(dim, 0.0f);
  return r;
}

// The formulas of ps/store/optimizer.h, coordinate by coordinate, in float, in the order written
// there.
void RefUpdate(const OptimizerSpec& o, RefRow& r, const float* g) {
  ++r.updates;
  const size_t dim = r.w.size();
  for (size_t i = 0; i < dim; ++i) {
    float& w = r.w[i];
    switch (o.kind) {
      case Optimizer::kNone:
        break;
      case Optimizer::kSgd:
        w = w - o.learning_rate * (g[i] + o.l2 * w);
        break;
      case Optimizer::kAdagrad: {
        float& n = r.s1[i];
        const float gp = g[i] + o.l2 * w;
        n = n + gp * gp;
        w = w - o.learning_rate * gp / (std::sqrt(n) + o.eps);
        break;
      }
      case Optimizer::kFtrl: {
        float& z = r.s1[i];
        float& n = r.s2[i];
        const float sigma = (std::sqrt(n + g[i] * g[i]) - std::sqrt(n)) / o.alpha;
        z = z + (g[i] - sigma * w);
        n = n + g[i] * g[i];
        if (std::fabs(z) <= o.l1) {
          w = 0.0f;
        } else {
          const float sign = z < 0.0f ? -1.0f : 1.0f;
          w = -(z - sign * o.l1) / ((o.beta + std::sqrt(n)) / o.alpha + o.l2);
        }
        break;
      }
      case Optimizer::kAdam: {
        float& m = r.s1[i];
        float& v = r.s2[i];
        const float t = static_cast<float>(r.updates);
        m = o.beta1 * m + (1.0f - o.beta1) * g[i];
        v = o.beta2 * v + (1.0f - o.beta2) * g[i] * g[i];
        const float mhat = m / (1.0f - std::pow(o.beta1, t));
        const float vhat = v / (1.0f - std::pow(o.beta2, t));
        w = w - (o.learning_rate * mhat / (std::sqrt(vhat) + o.eps) + o.learning_rate * o.l2 * w);
        break;
      }
    }
  }
}

OptimizerSpec SpecFor(Optimizer kind) {
  OptimizerSpec o;
  o.kind = kind;
  switch (kind) {
    case Optimizer::kSgd:
      o.learning_rate = 0.1f;
      o.l2 = 0.01f;
      break;
    case Optimizer::kAdagrad:
      o.learning_rate = 0.1f;
      o.l2 = 0.01f;
      o.initial_accumulator = 0.2f;
      break;
    case Optimizer::kFtrl:
      o.alpha = 0.1f;
      o.beta = 1.0f;
      o.l1 = 1.0f;  // large against gradients in [-1, 1]: many weights stay exactly 0
      o.l2 = 0.01f;
      break;
    case Optimizer::kAdam:
      o.learning_rate = 0.01f;
      o.l2 = 0.001f;
      break;
    case Optimizer::kNone:
      break;
  }
  return o;
}

const Optimizer kTrained[] = {Optimizer::kSgd, Optimizer::kAdagrad, Optimizer::kFtrl,
                              Optimizer::kAdam};

// Where the state of a row lives in ApplyUpdate's layout.
void SplitState(const OptimizerSpec& o, uint32_t dim, const std::vector<float>& state,
                std::vector<float>* s1, std::vector<float>* s2) {
  s1->assign(dim, 0.0f);
  s2->assign(dim, 0.0f);
  if (o.kind == Optimizer::kAdagrad) s1->assign(state.begin(), state.begin() + dim);
  if (o.kind == Optimizer::kFtrl || o.kind == Optimizer::kAdam) {
    s1->assign(state.begin(), state.begin() + dim);
    s2->assign(state.begin() + dim, state.begin() + 2 * dim);
  }
}

// ---- (a) unit tests ---------------------------------------------------------------------------

TEST(OptimizerUnit, StateFloatsPerKind) {
  for (uint32_t dim : {1u, 7u, 64u}) {
    OptimizerSpec o;
    o.kind = Optimizer::kNone;
    EXPECT_EQ(StateFloats(o, dim), 0u);
    o.kind = Optimizer::kSgd;
    EXPECT_EQ(StateFloats(o, dim), 0u);
    o.kind = Optimizer::kAdagrad;
    EXPECT_EQ(StateFloats(o, dim), dim);
    o.kind = Optimizer::kFtrl;
    EXPECT_EQ(StateFloats(o, dim), 2 * dim);
    o.kind = Optimizer::kAdam;
    EXPECT_EQ(StateFloats(o, dim), 2 * dim);
  }
}

TEST(OptimizerUnit, InitStateWritesExactlyTheState) {
  constexpr uint32_t kDim = 5;
  for (Optimizer kind : {Optimizer::kNone, Optimizer::kSgd, Optimizer::kAdagrad, Optimizer::kFtrl,
                         Optimizer::kAdam}) {
    OptimizerSpec o = SpecFor(kind);
    o.initial_accumulator = 0.375f;
    const uint32_t n = StateFloats(o, kDim);
    std::vector<float> state(n + 4, -123.0f);  // sentinels after the state
    InitState(o, kDim, state.data());
    for (uint32_t i = 0; i < n; ++i) {
      const float want = kind == Optimizer::kAdagrad ? 0.375f : 0.0f;
      EXPECT_EQ(state[i], want) << OptimizerName(kind) << " state[" << i << "]";
    }
    for (uint32_t i = n; i < n + 4; ++i) {
      EXPECT_EQ(state[i], -123.0f) << OptimizerName(kind) << " wrote past its state";
    }
  }
}

// Random gradient streams through ApplyUpdate and the reference, for several widths and
// hyper-parameters (l2 on and off).
TEST(OptimizerUnit, ApplyUpdateMatchesReference) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> grad(-2.0f, 2.0f);
  std::uniform_real_distribution<float> init(-0.5f, 0.5f);
  for (Optimizer kind : kTrained) {
    for (float l2 : {0.0f, 0.05f}) {
      for (uint32_t dim : {1u, 7u, 16u}) {
        OptimizerSpec o = SpecFor(kind);
        o.l2 = l2;
        std::vector<float> w(dim), state(StateFloats(o, dim) + 1);
        for (float& x : w) x = init(rng);
        InitState(o, dim, state.data());
        RefRow ref = RefNew(o, dim, w);
        std::vector<float> g(dim);
        uint32_t exact = 0, total = 0;
        for (uint32_t step = 1; step <= 60; ++step) {
          for (float& x : g) x = grad(rng) * (step % 5 == 0 ? 0.01f : 1.0f);
          ApplyUpdate(o, dim, w.data(), state.data(), g.data(), step);
          RefUpdate(o, ref, g.data());
          std::vector<float> s1, s2;
          SplitState(o, dim, state, &s1, &s2);
          for (uint32_t i = 0; i < dim; ++i) {
            ++total;
            exact += FloatBits(w[i]) == FloatBits(ref.w[i]);
            ASSERT_TRUE(NearRel(w[i], ref.w[i]))
                << OptimizerName(kind) << " l2=" << l2 << " dim=" << dim << " step " << step
                << " w[" << i << "]: got " << w[i] << ", reference " << ref.w[i];
            ASSERT_TRUE(NearRel(s1[i], ref.s1[i]) && NearRel(s2[i], ref.s2[i]))
                << OptimizerName(kind) << " state of coordinate " << i << " at step " << step;
          }
        }
        // The header promises the reference reproduces the arithmetic: not just close.
        EXPECT_EQ(exact, total) << OptimizerName(kind) << " l2=" << l2 << " dim=" << dim
                                << ": only " << exact << " of " << total
                                << " weights bit-identical to the header's formulas";
      }
    }
  }
}

TEST(OptimizerUnit, SgdWeightDecay) {
  OptimizerSpec o = SpecFor(Optimizer::kSgd);
  o.learning_rate = 0.5f;
  o.l2 = 0.25f;
  float w = 2.0f;
  const float g = 0.0f;
  ApplyUpdate(o, 1, &w, nullptr, &g, 1);
  EXPECT_EQ(w, 2.0f - 0.5f * (0.25f * 2.0f));  // 1.75: decay only
  const float g2 = 1.0f;
  ApplyUpdate(o, 1, &w, nullptr, &g2, 2);
  EXPECT_EQ(w, 1.75f - 0.5f * (1.0f + 0.25f * 1.75f));
}

TEST(OptimizerUnit, AdagradStartsFromInitialAccumulator) {
  OptimizerSpec o = SpecFor(Optimizer::kAdagrad);
  o.l2 = 0.0f;
  o.learning_rate = 1.0f;
  o.initial_accumulator = 3.0f;
  o.eps = 1e-8f;
  float state[1];
  InitState(o, 1, state);
  ASSERT_EQ(state[0], 3.0f);
  float w = 0.0f;
  const float g = 1.0f;
  ApplyUpdate(o, 1, &w, state, &g, 1);
  EXPECT_EQ(state[0], 4.0f);  // 3 + 1^2
  EXPECT_EQ(w, -1.0f / (2.0f + 1e-8f));
  // With an accumulator of 0 the first step is lr * g / |g| (up to eps).
  o.initial_accumulator = 0.0f;
  InitState(o, 1, state);
  w = 0.0f;
  const float g2 = 0.25f;
  ApplyUpdate(o, 1, &w, state, &g2, 1);
  EXPECT_NEAR(w, -1.0f, 1e-6f);
}

TEST(OptimizerUnit, FtrlL1DrivesWeightsToExactlyZero) {
  OptimizerSpec o = SpecFor(Optimizer::kFtrl);
  o.l1 = 5.0f;
  o.l2 = 0.0f;
  constexpr uint32_t kDim = 4;
  float w[kDim] = {0.3f, -0.2f, 0.0f, 1.0f};
  std::vector<float> state(2 * kDim);
  InitState(o, kDim, state.data());
  // Small gradients: |z| stays within l1 (sigma * w is small too), weights become exactly 0.
  const float g[kDim] = {0.5f, -0.5f, 0.1f, 0.2f};
  for (uint32_t step = 1; step <= 3; ++step) {
    ApplyUpdate(o, kDim, w, state.data(), g, step);
    for (uint32_t i = 0; i < kDim; ++i) {
      EXPECT_EQ(FloatBits(w[i]), FloatBits(0.0f)) << "coordinate " << i << " step " << step;
    }
  }
  // A large, persistent gradient takes |z| past l1: the weight moves against the gradient.
  const float big[kDim] = {10.0f, -10.0f, 0.0f, 0.0f};
  ApplyUpdate(o, kDim, w, state.data(), big, 4);
  EXPECT_LT(w[0], 0.0f);
  EXPECT_GT(w[1], 0.0f);
  EXPECT_EQ(w[2], 0.0f);
  // And the exact value of the header's formula.
  const float z0 = state[0], n0 = state[kDim];
  EXPECT_FLOAT_EQ(w[0], -(z0 - o.l1) / ((o.beta + std::sqrt(n0)) / o.alpha + o.l2));
}

TEST(OptimizerUnit, AdamBiasCorrectionUsesTheRowsUpdateCount) {
  OptimizerSpec o = SpecFor(Optimizer::kAdam);
  o.l2 = 0.0f;
  o.learning_rate = 0.1f;
  // First update (t = 1): m_hat = g and v_hat = g^2, so the step is lr * g / (|g| + eps).
  for (float g : {0.001f, 0.5f, -3.0f}) {
    float w = 1.0f;
    float state[2];
    InitState(o, 1, state);
    ApplyUpdate(o, 1, &w, state, &g, 1);
    EXPECT_NEAR(w, 1.0f - 0.1f * (g > 0 ? 1.0f : -1.0f), 1e-5f) << "g = " << g;
  }
  // The same state and gradient with a different count gives a different step: the count is
  // the row's (its updates so far), not some global clock.
  float state_a[2] = {0.05f, 0.0025f}, state_b[2] = {0.05f, 0.0025f};
  float wa = 0.0f, wb = 0.0f;
  const float g = 0.5f;
  ApplyUpdate(o, 1, &wa, state_a, &g, 2);
  ApplyUpdate(o, 1, &wb, state_b, &g, 50);
  EXPECT_NE(wa, wb);
  RefRow ra = RefNew(o, 1, {0.0f});
  ra.s1[0] = 0.05f;
  ra.s2[0] = 0.0025f;
  ra.updates = 1;  // RefUpdate counts this update: t = 2
  RefUpdate(o, ra, &g);
  EXPECT_TRUE(NearRel(wa, ra.w[0])) << wa << " vs " << ra.w[0];
  RefRow rb = RefNew(o, 1, {0.0f});
  rb.s1[0] = 0.05f;
  rb.s2[0] = 0.0025f;
  rb.updates = 49;
  RefUpdate(o, rb, &g);
  EXPECT_TRUE(NearRel(wb, rb.w[0])) << wb << " vs " << rb.w[0];
}

TEST(OptimizerUnit, NoneChangesNothing) {
  OptimizerSpec o;
  o.kind = Optimizer::kNone;
  float w[2] = {1.5f, -2.5f};
  const float g[2] = {100.0f, -100.0f};
  ApplyUpdate(o, 2, w, nullptr, g, 1);
  EXPECT_EQ(w[0], 1.5f);
  EXPECT_EQ(w[1], -2.5f);
}

TEST(InitializerUnit, DeterministicPerSeedKeyAndCoordinate) {
  for (auto kind : {InitializerSpec::Kind::kUniform, InitializerSpec::Kind::kNormal}) {
    InitializerSpec s;
    s.kind = kind;
    s.a = kind == InitializerSpec::Kind::kUniform ? -1.0f : 0.0f;
    s.b = 1.0f;
    s.seed = 99;
    std::vector<float> a(16), b(16), prefix(5);
    InitWeights(s, 12345, 16, a.data());
    // Other keys in between (another server's rows, another order) change nothing.
    for (uint64_t k = 0; k < 100; ++k) InitWeights(s, k, 16, b.data());
    InitWeights(s, 12345, 16, b.data());
    EXPECT_EQ(a, b) << InitializerName(kind);
    // A function of (seed, key, i) only: a narrower row is a prefix of a wider one.
    InitWeights(s, 12345, 5, prefix.data());
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin())) << InitializerName(kind);
    // Another key or another seed gives other values.
    InitWeights(s, 12346, 16, b.data());
    EXPECT_NE(a, b) << InitializerName(kind);
    InitializerSpec t = s;
    t.seed = 100;
    InitWeights(t, 12345, 16, b.data());
    EXPECT_NE(a, b) << InitializerName(kind);
    // Coordinates of one row differ from each other.
    EXPECT_NE(a[0], a[1]);
  }
  InitializerSpec z;
  std::vector<float> w(8, 7.0f);
  InitWeights(z, 1, 8, w.data());
  for (float x : w) EXPECT_EQ(FloatBits(x), 0u);
}

TEST(InitializerUnit, UniformStaysInsideItsBoundsAndIsFlat) {
  InitializerSpec s;
  s.kind = InitializerSpec::Kind::kUniform;
  s.a = 0.0f;
  s.b = 1.0f;
  s.seed = 3;
  // 2^25 draws (one per key) cover the top of the 24-bit range many times over: the high
  // bound itself must never come out.
  constexpr uint64_t kDraws = uint64_t{1} << 25;
  double sum = 0, sum2 = 0;
  float lo = 2.0f, hi = -1.0f;
  uint64_t buckets[10] = {};
  for (uint64_t k = 0; k < kDraws; ++k) {
    float w;
    InitWeights(s, k, 1, &w);
    lo = std::min(lo, w);
    hi = std::max(hi, w);
    sum += w;
    sum2 += double{w} * w;
    ++buckets[std::min(9, static_cast<int>(w * 10))];
  }
  EXPECT_GT(lo, 0.0f);
  EXPECT_LT(hi, 1.0f) << "a uniform draw reached the high bound";
  const double mean = sum / kDraws, var = sum2 / kDraws - mean * mean;
  EXPECT_NEAR(mean, 0.5, 1e-3);
  EXPECT_NEAR(var, 1.0 / 12, 1e-3);
  for (uint64_t b : buckets) EXPECT_NEAR(static_cast<double>(b) / kDraws, 0.1, 2e-3);
  // Other bounds: an affine map of the same draws.
  s.a = -3.0f;
  s.b = -1.0f;
  for (uint64_t k = 0; k < 100000; ++k) {
    float w[3];
    InitWeights(s, k, 3, w);
    for (float x : w) {
      ASSERT_GE(x, -3.0f);
      ASSERT_LT(x, -1.0f);
    }
  }
}

TEST(InitializerUnit, NormalHasItsMeanAndStddev) {
  InitializerSpec s;
  s.kind = InitializerSpec::Kind::kNormal;
  s.a = 0.5f;
  s.b = 2.0f;
  s.seed = 17;
  constexpr int kKeys = 50000, kDim = 4;
  double sum = 0, sum2 = 0;
  int within1 = 0;
  for (int k = 0; k < kKeys; ++k) {
    float w[kDim];
    InitWeights(s, static_cast<uint64_t>(k) * 977, kDim, w);
    for (float x : w) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sum2 += double{x} * x;
      within1 += std::fabs(x - 0.5f) <= 2.0f;
    }
  }
  const double n = double{kKeys} * kDim;
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.5, 0.02);
  EXPECT_NEAR(sd, 2.0, 0.02);
  EXPECT_NEAR(within1 / n, 0.6827, 0.01);  // one standard deviation
  // stddev 0: every weight is the mean.
  s.b = 0.0f;
  float w[3];
  InitWeights(s, 5, 3, w);
  for (float x : w) EXPECT_EQ(x, 0.5f);
}

TEST(OptimizerUnit, ParseAndNames) {
  for (Optimizer k : {Optimizer::kNone, Optimizer::kSgd, Optimizer::kAdagrad, Optimizer::kFtrl,
                      Optimizer::kAdam}) {
    auto p = ParseOptimizer(OptimizerName(k));
    ASSERT_TRUE(p.ok()) << OptimizerName(k);
    EXPECT_EQ(*p, k);
  }
  for (const char* bad : {"", "SGD", "adamw", "ftrl "}) {
    auto p = ParseOptimizer(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_NE(p.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
        << p.status().message();
  }
  for (auto k : {InitializerSpec::Kind::kZero, InitializerSpec::Kind::kUniform,
                 InitializerSpec::Kind::kNormal}) {
    auto p = ParseInitializer(InitializerName(k));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, k);
  }
  auto bad = ParseInitializer("xavier");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("xavier"), std::string::npos);
}

TEST(OptimizerUnit, ValidateNamesTheBadField) {
  EXPECT_TRUE(ValidateOptimizer(OptimizerSpec{}).ok());
  for (Optimizer k : kTrained) EXPECT_TRUE(ValidateOptimizer(SpecFor(k)).ok());
  const float nan = std::nanf("");
  const float inf = INFINITY;
  struct Case {
    const char* field;
    void (*set)(OptimizerSpec&, float);
    float value;
  };
  const Case cases[] = {
      {"learning_rate", [](OptimizerSpec& o, float v) { o.learning_rate = v; }, -0.1f},
      {"learning_rate", [](OptimizerSpec& o, float v) { o.learning_rate = v; }, nan},
      {"learning_rate", [](OptimizerSpec& o, float v) { o.learning_rate = v; }, inf},
      {"l1", [](OptimizerSpec& o, float v) { o.l1 = v; }, -1.0f},
      {"l2", [](OptimizerSpec& o, float v) { o.l2 = v; }, nan},
      {"initial_accumulator", [](OptimizerSpec& o, float v) { o.initial_accumulator = v; }, -1.0f},
      {"eps", [](OptimizerSpec& o, float v) { o.eps = v; }, 0.0f},
      {"alpha", [](OptimizerSpec& o, float v) { o.alpha = v; }, 0.0f},
      {"beta", [](OptimizerSpec& o, float v) { o.beta = v; }, -1.0f},
      {"beta1", [](OptimizerSpec& o, float v) { o.beta1 = v; }, 1.0f},
      {"beta2", [](OptimizerSpec& o, float v) { o.beta2 = v; }, -0.5f},
      {"beta2", [](OptimizerSpec& o, float v) { o.beta2 = v; }, nan},
  };
  for (const Case& c : cases) {
    OptimizerSpec o;
    c.set(o, c.value);
    Status s = ValidateOptimizer(o);
    ASSERT_FALSE(s.ok()) << c.field << " = " << c.value;
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
}

// ---- (b) through a job ------------------------------------------------------------------------

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint32_t kDim = 6;
constexpr uint32_t kPool = 40;      // distinct keys
constexpr uint32_t kPushKeys = 24;  // keys per push (with repeats)
constexpr uint32_t kClocks = 3;
constexpr uint32_t kPushesPerClock = 2;

uint64_t PoolKey(uint32_t i) {
  return Mix(i + 1000) | 1;
}

// The push (worker, clock, p): keys drawn from the pool with repeats, gradients in [-1, 1].
void MakePush(uint32_t worker, uint32_t clock, uint32_t p, std::vector<uint64_t>* keys,
              std::vector<float>* grads) {
  keys->clear();
  grads->clear();
  const uint64_t base = (uint64_t{worker} << 40) | (uint64_t{clock} << 20) | (uint64_t{p} << 8);
  for (uint32_t i = 0; i < kPushKeys; ++i) {
    // Every third entry repeats an earlier key of this push.
    const uint32_t pick = (i % 3 == 2) ? static_cast<uint32_t>(Mix(base + i) % i)
                                       : static_cast<uint32_t>(Mix(base ^ (i * 77)) % kPool);
    keys->push_back(i % 3 == 2 ? (*keys)[pick] : PoolKey(pick));
    for (uint32_t d = 0; d < kDim; ++d) {
      const uint64_t h = Mix(base * 31 + i * 1009 + d);
      grads->push_back(static_cast<float>(static_cast<int>(h % 2001) - 1000) / 1000.0f);
    }
  }
}

// Replays the job's stream: per clock, worker by worker, push by push; each push aggregates the
// rows of repeated keys (input order, from zero) and updates each unique key once.
std::map<uint64_t, RefRow> Replay(const TableSpec& t, uint32_t workers) {
  std::map<uint64_t, RefRow> rows;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  for (uint32_t c = 0; c < kClocks; ++c) {
    for (uint32_t w = 0; w < workers; ++w) {
      for (uint32_t p = 0; p < kPushesPerClock; ++p) {
        MakePush(w, c, p, &keys, &grads);
        std::map<uint64_t, std::vector<float>> sum;
        for (size_t i = 0; i < keys.size(); ++i) {
          auto [it, fresh] = sum.try_emplace(keys[i], std::vector<float>(kDim, 0.0f));
          for (uint32_t d = 0; d < kDim; ++d) it->second[d] += grads[i * kDim + d];
        }
        for (auto& [key, g] : sum) {
          auto it = rows.find(key);
          if (it == rows.end()) {
            std::vector<float> w0(kDim);
            InitWeights(t.init, key, kDim, w0.data());
            it = rows.emplace(key, RefNew(t.optimizer, kDim, w0)).first;
          }
          RefUpdate(t.optimizer, it->second, g.data());
        }
      }
    }
  }
  return rows;
}

struct StreamParam {
  BackendConfig config;
  Optimizer kind;
  uint32_t workers;  // 1: ASP; 2: BSP
};

void PrintTo(const StreamParam& p, std::ostream* os) {
  *os << p.config.name << " " << OptimizerName(p.kind) << " " << p.workers << " worker(s)";
}

class OptimizerJob : public ::testing::TestWithParam<StreamParam> {};

TEST_P(OptimizerJob, PushedStreamMatchesReference) {
  const StreamParam& param = GetParam();
  JobSpec job = SmallJob(param.config, 2, param.workers, kDim);
  job.consistency.kind = param.workers == 1 ? Consistency::kAsp : Consistency::kBsp;
  job.max_keys_per_request = 7;  // several requests per push and server
  TableSpec& t = job.tables[0];
  t.optimizer = SpecFor(param.kind);
  t.init.kind = InitializerSpec::Kind::kUniform;
  t.init.a = -0.5f;
  t.init.b = 0.5f;
  t.init.seed = 11;
  const std::map<uint64_t, RefRow> want = Replay(t, param.workers);
  const InitializerSpec init = t.init;
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (uint32_t c = 0; c < kClocks; ++c) {
      // A clock's pushes go out back to back: the server applies them in posting order.
      std::vector<Ticket> pushes;
      for (uint32_t p = 0; p < kPushesPerClock; ++p) {
        MakePush(w->index(), c, p, &keys, &grads);
        FERRY_ASSIGN_OR_RETURN(Ticket push, w->Push(0, keys, grads));
        pushes.push_back(push);
      }
      for (Ticket push : pushes) {
        FERRY_RETURN_IF_ERROR(w->Wait(push));
        w->Release(push);
      }
      FERRY_RETURN_IF_ERROR(w->Clock());
    }
    // Every pool key (pushed or not) and one key nobody pushed.
    std::vector<uint64_t> all;
    for (uint32_t i = 0; i < kPool; ++i) all.push_back(PoolKey(i));
    all.push_back(0xfeedfacecafeull);
    FERRY_ASSIGN_OR_RETURN(Ticket pull, w->Pull(0, all));
    FERRY_RETURN_IF_ERROR(w->Wait(pull));
    FERRY_ASSIGN_OR_RETURN(PulledRows rows, w->Rows(pull));
    uint32_t zeros = 0, nonzeros = 0, pushed = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      std::vector<float> expect(kDim);
      auto it = want.find(all[i]);
      if (it != want.end()) {
        expect = it->second.w;
        ++pushed;
      } else {
        InitWeights(init, all[i], kDim, expect.data());
      }
      for (uint32_t d = 0; d < kDim; ++d) {
        if (!NearRel(rows[i][d], expect[d])) {
          return Internal(std::string(OptimizerName(param.kind)) + ": key " +
                          std::to_string(all[i]) + " coordinate " + std::to_string(d) +
                          ": pulled " + std::to_string(rows[i][d]) + ", reference " +
                          std::to_string(expect[d]) + " (" +
                          std::to_string(it == want.end() ? 0 : it->second.updates) + " updates)");
        }
        if (it != want.end()) (expect[d] == 0.0f ? zeros : nonzeros)++;
      }
    }
    w->Release(pull);
    FERRY_RETURN_IF_ERROR(Expect(pushed >= kPool / 2, "most pool keys were pushed"));
    if (param.kind == Optimizer::kFtrl) {
      FERRY_RETURN_IF_ERROR(
          Expect(zeros > 0 && nonzeros > 0, "FTRL's l1 zeroes some weights and not all (" +
                                                std::to_string(zeros) + " zeros, " +
                                                std::to_string(nonzeros) + " others)"));
    }
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

std::vector<StreamParam> StreamParams() {
  std::vector<StreamParam> out;
  for (const BackendConfig& c : JobConfigs()) {
    for (Optimizer k : kTrained) {
      out.push_back({c, k, 1});
      out.push_back({c, k, 2});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, OptimizerJob, ::testing::ValuesIn(StreamParams()),
                         [](const ::testing::TestParamInfo<StreamParam>& info) {
                           return info.param.config.TestName() + "_" +
                                  std::string(OptimizerName(info.param.kind)) + "_" +
                                  (info.param.workers == 1 ? "asp1" : "bsp2");
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OptimizerJob);

}  // namespace
}  // namespace ferry::ps::testing
