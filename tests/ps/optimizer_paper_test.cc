// The server's optimizers (ps/store/optimizer.cc ApplyUpdate, the entry point
// tests/ps/optimizer_test.cc drives) against an INDEPENDENT reference: written here in double from
// the papers' per-coordinate definitions, not from ps/store/optimizer.h's formulas (which
// optimizer_test.cc retypes in float, bit for bit, and so cannot catch a formula that is wrong in
// both places). Plus closed forms.
//
//   SGD      w <- w - lr * d/dw (loss + l2/2 w^2).
//   AdaGrad  Duchi, Hazan, Singer 2011, diagonal form: w <- w - lr g_t / (delta + sqrt(G_t)),
//            G_t = sum over s <= t of g_s^2, recomputed here from the whole gradient history.
//            Ferry's additions: G starts at initial_accumulator (a prior sum of squares), delta
//            is eps, and l2 enters the gradient (g = dloss + l2 w).
//   FTRL     McMahan et al. 2013, "Ad Click Prediction", Algorithm 1 in its order: at the start
//            of a round w_i = 0 if |z_i| <= l1, else -(z_i - sgn(z_i) l1) / ((beta +
//            sqrt(n_i)) / alpha + l2); then with the gradient g_i at that w: sigma_i =
//            (sqrt(n_i + g_i^2) - sqrt(n_i)) / alpha, z_i += g_i - sigma_i w_i, n_i += g_i^2. The
//            server stores the next round's w; rows start at z = n = 0, so w = 0.
//   Adam     Kingma & Ba 2015, Algorithm 1 as written (bias-corrected m_hat and v_hat, eps added
//            to sqrt(v_hat)): the server uses this form too, not section 2's "epsilon-hat" form,
//            so the same eps is compared and no tolerance is spent on the two forms' difference.
//            Ferry's addition: l2 is decoupled weight decay, lr * l2 * w_{t-1} (not in the paper).
//
// Tolerance: the server runs in float (unit roundoff u = 2^-24 = 6e-8), the reference in double.
// A step is about ten roundings, each at most u times the magnitudes involved (|w|, a step, and
// for FTRL |z| and l1, whose cancellation loses relative but not absolute accuracy), and the errors
// of the steps add up: over 30 steps at most 30 * 10 * 6e-8 = 1.8e-5 of those magnitudes (here
// about 1). kTol = 2e-5 * (1 + |w|) covers that worst case; the errors measured are about 2e-7
// (each case prints its largest). A changed formula moves a weight by far more: a step is lr =
// 0.01..0.1 times a gradient of 1e-3..2, and a flipped sign, a dropped bias correction, eps moved
// into the square root or Adam's epsilon-hat form (eps = 1e-3 against gradients of 1e-3) each
// failed these cases when tried.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ps/store/optimizer.h"

namespace ferry::ps {
namespace {

constexpr double kTol = 2e-5;
constexpr uint32_t kSteps = 30;

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

double Tol(double want) {
  return kTol * (1.0 + std::fabs(want));
}

// A gradient stream with varied magnitudes (1e-3 .. 2) and signs, and a zero now and then.
std::vector<std::vector<float>> Gradients(uint32_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mag(-2.0f, 2.0f);
  std::vector<std::vector<float>> out(kSteps, std::vector<float>(dim));
  for (uint32_t t = 0; t < kSteps; ++t) {
    for (uint32_t i = 0; i < dim; ++i) {
      const uint64_t pick = rng() % 10;
      float g = mag(rng);
      if (pick == 0) g = 0.0f;
      if (pick == 1 || pick == 2) g *= 1e-3f;
      out[t][i] = g;
    }
  }
  return out;
}

// One coordinate of each paper's algorithm, in double.
struct PaperSgd {
  double lr, l2, w;
  void Step(double g) { w -= lr * (g + l2 * w); }
};

struct PaperAdagrad {
  double lr, l2, delta, g0, w;
  std::vector<double> history;  // the gradients seen, l2 included
  void Step(double dloss) {
    const double g = dloss + l2 * w;
    history.push_back(g);
    double sum = g0;
    for (double x : history) sum += x * x;
    w -= lr * g / (delta + std::sqrt(sum));
  }
};

struct PaperFtrl {
  double alpha, beta, l1, l2, z = 0, n = 0;
  double W() const {  // Algorithm 1, "for i in I, compute w_{t,i}"
    if (std::fabs(z) <= l1) return 0.0;
    const double sgn = z < 0 ? -1.0 : 1.0;
    return -(z - sgn * l1) / ((beta + std::sqrt(n)) / alpha + l2);
  }
  void Step(double g) {  // "for all i in I": the gradient was taken at W()
    const double w = W();
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / alpha;
    z += g - sigma * w;
    n += g * g;
  }
};

struct PaperAdam {
  double alpha, beta1, beta2, eps, l2, w, m = 0, v = 0;
  int t = 0;
  void Step(double g) {
    ++t;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double m_hat = m / (1 - std::pow(beta1, t));
    const double v_hat = v / (1 - std::pow(beta2, t));
    w = w - alpha * m_hat / (std::sqrt(v_hat) + eps) - alpha * l2 * w;
  }
};

// Drives ApplyUpdate over the stream and a reference per coordinate (Ref: Step(g), Weight());
// returns the largest |server - reference| seen and fails at the first coordinate out of bound.
template <typename Ref, typename WeightOf>
double Compare(const OptimizerSpec& o, const std::vector<float>& w0, std::vector<Ref> refs,
               WeightOf weight, uint64_t seed, const std::string& what) {
  const uint32_t dim = static_cast<uint32_t>(w0.size());
  std::vector<float> w = w0, state(StateFloats(o, dim) + 1);
  InitState(o, dim, state.data());
  double worst = 0;
  const auto grads = Gradients(dim, seed);
  for (uint32_t t = 1; t <= kSteps; ++t) {
    ApplyUpdate(o, dim, w.data(), state.data(), grads[t - 1].data(), t);
    for (uint32_t i = 0; i < dim; ++i) {
      refs[i].Step(grads[t - 1][i]);
      const double want = weight(refs[i]);
      const double err = std::fabs(double{w[i]} - want);
      worst = std::max(worst, err);
      if (err > Tol(want)) {
        ADD_FAILURE() << what << ": step " << t << " w[" << i << "] = " << w[i] << ", paper "
                      << want << " (error " << err << ", bound " << Tol(want) << ")";
        return worst;
      }
    }
  }
  std::printf("  %s: largest error %.3g over %u steps\n", what.c_str(), worst, kSteps);
  return worst;
}

std::vector<float> Initial(uint32_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  std::vector<float> w(dim);
  for (float& x : w) x = d(rng);
  return w;
}

constexpr uint32_t kDim = 12;

TEST(OptimizerPaperReference, Sgd) {
  for (float l2 : {0.0f, 0.05f}) {
    OptimizerSpec o;
    o.kind = Optimizer::kSgd;
    o.learning_rate = 0.1f;
    o.l2 = l2;
    const std::vector<float> w0 = Initial(kDim, 1);
    std::vector<PaperSgd> refs;
    for (float x : w0) refs.push_back(PaperSgd{o.learning_rate, l2, x});
    Compare(
        o, w0, refs, [](const PaperSgd& r) { return r.w; }, 11, "sgd l2=" + Num(l2));
  }
}

TEST(OptimizerPaperReference, Adagrad) {
  for (float l2 : {0.0f, 0.05f}) {
    for (float eps : {1e-8f, 0.05f}) {
      OptimizerSpec o;
      o.kind = Optimizer::kAdagrad;
      o.learning_rate = 0.1f;
      o.l2 = l2;
      o.eps = eps;
      o.initial_accumulator = 0.1f;
      const std::vector<float> w0 = Initial(kDim, 2);
      std::vector<PaperAdagrad> refs;
      for (float x : w0) refs.push_back(PaperAdagrad{o.learning_rate, l2, eps, 0.1f, x, {}});
      Compare(
          o, w0, refs, [](const PaperAdagrad& r) { return r.w; }, 12,
          "adagrad l2=" + Num(l2) + " eps=" + Num(eps));
    }
  }
}

TEST(OptimizerPaperReference, Ftrl) {
  // l1 = 0.5 against gradients up to 2: some coordinates sit at exactly 0, others move.
  for (float l1 : {0.0f, 0.5f}) {
    for (float l2 : {0.0f, 0.1f}) {
      OptimizerSpec o;
      o.kind = Optimizer::kFtrl;
      o.alpha = 0.1f;
      o.beta = 1.0f;
      o.l1 = l1;
      o.l2 = l2;
      std::vector<PaperFtrl> refs(kDim, PaperFtrl{o.alpha, o.beta, l1, l2});
      Compare(
          o, std::vector<float>(kDim, 0.0f), refs, [](const PaperFtrl& r) { return r.W(); }, 13,
          "ftrl l1=" + Num(l1) + " l2=" + Num(l2));
    }
  }
}

TEST(OptimizerPaperReference, Adam) {
  // eps = 1e-3 against gradients of 1e-3 makes where eps is added matter.
  for (float l2 : {0.0f, 0.01f}) {
    for (float eps : {1e-8f, 1e-3f}) {
      OptimizerSpec o;
      o.kind = Optimizer::kAdam;
      o.learning_rate = 0.01f;
      o.l2 = l2;
      o.eps = eps;
      const std::vector<float> w0 = Initial(kDim, 4);
      std::vector<PaperAdam> refs;
      for (float x : w0) refs.push_back(PaperAdam{o.learning_rate, o.beta1, o.beta2, eps, l2, x});
      Compare(
          o, w0, refs, [](const PaperAdam& r) { return r.w; }, 14,
          "adam l2=" + Num(l2) + " eps=" + Num(eps));
    }
  }
}

// ---- Closed forms: k identical gradients ----------------------------------------------------

// Runs k updates of one coordinate with the same gradient; returns the weight.
float Repeat(const OptimizerSpec& o, float w, float g, uint32_t k) {
  std::vector<float> state(StateFloats(o, 1) + 1);
  InitState(o, 1, state.data());
  for (uint32_t t = 1; t <= k; ++t) ApplyUpdate(o, 1, &w, state.data(), &g, t);
  return w;
}

TEST(OptimizerPaperReference, SgdClosedForm) {
  OptimizerSpec o;
  o.kind = Optimizer::kSgd;
  o.learning_rate = 0.1f;
  for (uint32_t k : {1u, 7u, 25u}) {
    for (float g : {0.5f, -1.5f}) {
      o.l2 = 0.0f;  // w_k = w_0 - k lr g
      double want = 0.3 - k * 0.1 * double{g};
      EXPECT_NEAR(Repeat(o, 0.3f, g, k), want, Tol(want)) << "k=" << k << " g=" << g;
      // With l2: w <- r w - lr g, r = 1 - lr l2, so w_k = r^k w_0 - lr g (1 - r^k) / (1 - r).
      o.l2 = 0.2f;
      const double r = 1.0 - 0.1 * double{o.l2};
      want = std::pow(r, k) * 0.3 - 0.1 * g * (1 - std::pow(r, k)) / (1 - r);
      EXPECT_NEAR(Repeat(o, 0.3f, g, k), want, Tol(want)) << "k=" << k << " g=" << g << " l2";
    }
  }
}

TEST(OptimizerPaperReference, AdagradClosedForm) {
  // Constant g, no l2: G_i = n0 + i g^2, so w_k = w_0 - lr g sum_{i=1..k} 1 / (sqrt(G_i) + eps).
  OptimizerSpec o;
  o.kind = Optimizer::kAdagrad;
  o.learning_rate = 0.1f;
  o.l2 = 0.0f;
  o.eps = 0.01f;
  o.initial_accumulator = 0.25f;
  for (uint32_t k : {1u, 10u, 30u}) {
    for (float g : {0.02f, -1.0f, 3.0f}) {
      double sum = 0;
      for (uint32_t i = 1; i <= k; ++i) sum += 1 / (std::sqrt(0.25 + i * double{g} * g) + 0.01);
      const double want = 1.0 - 0.1 * g * sum;
      EXPECT_NEAR(Repeat(o, 1.0f, g, k), want, Tol(want)) << "k=" << k << " g=" << g;
    }
  }
}

TEST(OptimizerPaperReference, FtrlClosedForms) {
  OptimizerSpec o;
  o.kind = Optimizer::kFtrl;
  o.alpha = 0.1f;
  o.beta = 1.0f;
  o.l2 = 0.0f;
  // First step from w = 0, no l1: z = g, n = g^2, so w_1 = -alpha g / (beta + |g|).
  o.l1 = 0.0f;
  for (float g : {0.001f, -0.4f, 2.5f}) {
    const double want = -0.1 * g / (1.0 + std::fabs(double{g}));
    EXPECT_NEAR(Repeat(o, 0.0f, g, 1), want, Tol(want)) << "g=" << g;
  }
  // l1 above the sum of |g|: z stays the plain sum of the gradients (w stays 0, so sigma w = 0)
  // and |z| <= l1, so every weight is exactly 0, whatever the signs.
  o.l1 = 61.0f;  // kSteps gradients of at most 2
  const auto grads = Gradients(kDim, 15);
  std::vector<float> w(kDim, 0.0f), state(StateFloats(o, kDim));
  InitState(o, kDim, state.data());
  for (uint32_t t = 1; t <= kSteps; ++t) {
    ApplyUpdate(o, kDim, w.data(), state.data(), grads[t - 1].data(), t);
    for (uint32_t i = 0; i < kDim; ++i) ASSERT_EQ(w[i], 0.0f) << "step " << t << " w[" << i << "]";
  }
}

TEST(OptimizerPaperReference, AdamClosedForm) {
  // Constant g, no l2: m_t = (1 - b1^t) g and v_t = (1 - b2^t) g^2, so the bias corrections give
  // m_hat = g and v_hat = g^2 exactly: every step is lr g / (|g| + eps).
  OptimizerSpec o;
  o.kind = Optimizer::kAdam;
  o.learning_rate = 0.01f;
  o.l2 = 0.0f;
  o.eps = 1e-3f;
  for (uint32_t k : {1u, 2u, 10u, 30u}) {
    for (float g : {0.004f, -0.5f, 2.0f}) {
      const double want = 0.2 - k * 0.01 * g / (std::fabs(double{g}) + 1e-3);
      EXPECT_NEAR(Repeat(o, 0.2f, g, k), want, Tol(want)) << "k=" << k << " g=" << g;
    }
  }
}

}  // namespace
}  // namespace ferry::ps
