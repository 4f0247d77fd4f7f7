// Optimizer updates and deterministic initializers (see optimizer.h for the formulas).
#include "ps/store/optimizer.h"

#include <cmath>
#include <cstring>

#include "ps/store/row_update.h"

namespace ferry::ps {

Result<Optimizer> ParseOptimizer(std::string_view name) {
  if (name == "sgd") return Optimizer::kSgd;
  if (name == "adagrad") return Optimizer::kAdagrad;
  if (name == "ftrl") return Optimizer::kFtrl;
  if (name == "adam") return Optimizer::kAdam;
  if (name == "none") return Optimizer::kNone;
  return InvalidArgument("unknown optimizer '" + std::string(name) +
                         "' (sgd, adagrad, ftrl, adam or none)");
}

std::string_view OptimizerName(Optimizer kind) {
  switch (kind) {
    case Optimizer::kNone:
      return "none";
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kAdagrad:
      return "adagrad";
    case Optimizer::kFtrl:
      return "ftrl";
    case Optimizer::kAdam:
      return "adam";
  }
  return "?";
}

Status ValidateOptimizer(const OptimizerSpec& s) {
  auto bad = [](const char* field, float v, const char* rule) {
    return InvalidArgument(std::string("optimizer ") + field + " = " + std::to_string(v) +
                           " must be " + rule);
  };
  auto finite_nonneg = [](float v) { return std::isfinite(v) && v >= 0.0f; };
  if (!finite_nonneg(s.learning_rate)) return bad("learning_rate", s.learning_rate, ">= 0");
  if (!finite_nonneg(s.l1)) return bad("l1", s.l1, ">= 0");
  if (!finite_nonneg(s.l2)) return bad("l2", s.l2, ">= 0");
  if (!finite_nonneg(s.initial_accumulator)) {
    return bad("initial_accumulator", s.initial_accumulator, ">= 0");
  }
  if (!(std::isfinite(s.eps) && s.eps > 0.0f)) return bad("eps", s.eps, "> 0");
  if (!(std::isfinite(s.alpha) && s.alpha > 0.0f)) return bad("alpha", s.alpha, "> 0");
  if (!finite_nonneg(s.beta)) return bad("beta", s.beta, ">= 0");
  if (!(s.beta1 >= 0.0f && s.beta1 < 1.0f)) return bad("beta1", s.beta1, "in [0, 1)");
  if (!(s.beta2 >= 0.0f && s.beta2 < 1.0f)) return bad("beta2", s.beta2, "in [0, 1)");
  return Status::Ok();
}

uint32_t StateFloats(const OptimizerSpec& spec, uint32_t dim) {
  return OptimizerStateFloats(spec.kind, dim);
}

void InitState(const OptimizerSpec& spec, uint32_t dim, float* state) {
  const uint32_t n = StateFloats(spec, dim);
  if (n == 0) return;
  std::memset(state, 0, sizeof(float) * n);
  if (spec.kind == Optimizer::kAdagrad) {
    for (uint32_t i = 0; i < dim; ++i) state[i] = spec.initial_accumulator;
  }
}

void ApplyUpdate(const OptimizerSpec& spec, uint32_t dim, float* w, float* state, const float* g,
                 uint32_t step) {
  ApplyUpdateWith(BestRowIsa(), spec, dim, w, state, g, step);
}

void ApplyUpdateScalar(const OptimizerSpec& spec, uint32_t dim, float* w, float* state,
                       const float* g, uint32_t step) {
  const float lr = spec.learning_rate;
  switch (spec.kind) {
    case Optimizer::kNone:
      return;
    case Optimizer::kSgd:
      for (uint32_t i = 0; i < dim; ++i) w[i] -= lr * (g[i] + spec.l2 * w[i]);
      return;
    case Optimizer::kAdagrad: {
      float* n = state;
      for (uint32_t i = 0; i < dim; ++i) {
        const float gi = g[i] + spec.l2 * w[i];
        n[i] += gi * gi;
        w[i] -= lr * gi / (std::sqrt(n[i]) + spec.eps);
      }
      return;
    }
    case Optimizer::kFtrl: {
      // Divisions by alpha, not multiplications by 1/alpha: the header's formulas exactly (a
      // reciprocal rounds differently, and z's cancellation magnifies that past 1e-6).
      float* z = state;
      float* n = state + dim;
      for (uint32_t i = 0; i < dim; ++i) {
        const float gi = g[i];
        const float n_new = n[i] + gi * gi;
        const float sigma = (std::sqrt(n_new) - std::sqrt(n[i])) / spec.alpha;
        z[i] += gi - sigma * w[i];
        n[i] = n_new;
        const float zi = z[i];
        if (std::fabs(zi) <= spec.l1) {
          w[i] = 0.0f;
        } else {
          const float sign = zi < 0.0f ? -1.0f : 1.0f;
          w[i] = -(zi - sign * spec.l1) / ((spec.beta + std::sqrt(n_new)) / spec.alpha + spec.l2);
        }
      }
      return;
    }
    case Optimizer::kAdam: {
      float* m = state;
      float* v = state + dim;
      const float t = static_cast<float>(step == 0 ? 1 : step);
      const float c1 = 1.0f - std::pow(spec.beta1, t);
      const float c2 = 1.0f - std::pow(spec.beta2, t);
      for (uint32_t i = 0; i < dim; ++i) {
        const float gi = g[i];
        m[i] = spec.beta1 * m[i] + (1.0f - spec.beta1) * gi;
        v[i] = spec.beta2 * v[i] + (1.0f - spec.beta2) * gi * gi;
        w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + spec.eps) + lr * spec.l2 * w[i];
      }
      return;
    }
  }
}

Result<InitializerSpec::Kind> ParseInitializer(std::string_view name) {
  if (name == "zero") return InitializerSpec::Kind::kZero;
  if (name == "uniform") return InitializerSpec::Kind::kUniform;
  if (name == "normal") return InitializerSpec::Kind::kNormal;
  return InvalidArgument("unknown initializer '" + std::string(name) +
                         "' (zero, uniform or normal)");
}

std::string_view InitializerName(InitializerSpec::Kind kind) {
  switch (kind) {
    case InitializerSpec::Kind::kZero:
      return "zero";
    case InitializerSpec::Kind::kUniform:
      return "uniform";
    case InitializerSpec::Kind::kNormal:
      return "normal";
  }
  return "?";
}

namespace {

// Counter-based generator: a value per (seed, key, i) with no state, so initial values do not
// depend on which server creates a row or when.
uint64_t Hash3(uint64_t seed, uint64_t key, uint64_t i) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ key;
  x ^= (i + 1) * 0xd1b54a32d192ed03ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 32);
}

// Uniform in (0, 1), never 0 (Box-Muller takes a log) and never 1 (a uniform row stays below its
// high bound): 23 random bits + 0.5 is exact in a float, and so is the scaling by 2^-23. (With 24
// bits, 2^24 - 1 + 0.5 rounds to 2^24 and the draw became exactly 1.)
float Unit(uint64_t bits) {
  return (static_cast<float>(bits >> 41) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace

void InitWeights(const InitializerSpec& spec, uint64_t key, uint32_t dim, float* w) {
  switch (spec.kind) {
    case InitializerSpec::Kind::kZero:
      std::memset(w, 0, sizeof(float) * dim);
      return;
    case InitializerSpec::Kind::kUniform:
      for (uint32_t i = 0; i < dim; ++i) {
        w[i] = spec.a + (spec.b - spec.a) * Unit(Hash3(spec.seed, key, i));
      }
      return;
    case InitializerSpec::Kind::kNormal:
      for (uint32_t i = 0; i < dim; ++i) {
        // Box-Muller on two independent draws for coordinate i.
        const float u1 = Unit(Hash3(spec.seed, key, 2 * uint64_t{i}));
        const float u2 = Unit(Hash3(spec.seed, key, 2 * uint64_t{i} + 1));
        const float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
        w[i] = spec.a + spec.b * z;
      }
      return;
  }
}

}  // namespace ferry::ps
