// Server-side optimizers and initializers: how a pushed gradient row changes a weight row, and
// what a new row starts as. The optimizer state lives in the row itself (ArrayHashMap's `state`
// floats), so an update touches one cache-line-contiguous row and nothing else.
//
// Per coordinate i of a row, with g the pushed (worker-aggregated) gradient:
//   SGD       w -= lr * (g + l2 * w)
//   Adagrad   g' = g + l2 * w;  n += g'^2;  w -= lr * g' / (sqrt(n) + eps)  state: n[dim]
//             (n starts at initial_accumulator)
//   FTRL      sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma * w;  n += g^2;
//             w = |z| <= l1 ? 0 : -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha + l2)
//             (McMahan et al., "Ad Click Prediction", FTRL-Proximal)          state: z[dim], n[dim]
//   Adam      m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  t = the row's update count after
//             this update;  w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + lr * l2 * w
//                                                                          state: m[dim], v[dim]
// All arithmetic is float, in the order written above, so that a plain single-process
// reference reproduces it (tests/ps/optimizer_test.cc).
//
// Initializers are deterministic functions of (seed, key, coordinate): a row gets the same
// initial values whichever server creates it, in whatever order, before or after a restart.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ps/store/array_hash_map.h"
#include "transport/status.h"

namespace ferry::ps {

struct OptimizerSpec {
  Optimizer kind = Optimizer::kAdagrad;
  float learning_rate = 0.05f;         // SGD, Adagrad, Adam
  float l2 = 0.0f;                     // SGD, Adagrad, Adam: weight decay; FTRL: lambda2
  float l1 = 0.0f;                     // FTRL: lambda1
  float initial_accumulator = 0.1f;    // Adagrad's n at row creation
  float eps = 1e-8f;                   // Adagrad, Adam
  float alpha = 0.05f;                 // FTRL
  float beta = 1.0f;                   // FTRL
  float beta1 = 0.9f, beta2 = 0.999f;  // Adam

  bool operator==(const OptimizerSpec&) const = default;
};

// "sgd", "adagrad", "ftrl", "adam", "none" (a table nobody pushes to).
Result<Optimizer> ParseOptimizer(std::string_view name);
std::string_view OptimizerName(Optimizer kind);
// Also rejects non-finite or out-of-range hyper-parameters with a message naming the field.
Status ValidateOptimizer(const OptimizerSpec& spec);

// Keys a server resolves and then updates per block when it applies a push: the rows the lookup
// prefetched are still in cache when the update touches them (a whole request's lookups first
// would have evicted them again at 100k keys).
inline constexpr uint32_t kApplyBlock = 256;
// Keys ahead of the one being updated whose rows are prefetched whole
// (ArrayHashMap::PrefetchRowForUpdate): enough misses in flight to cover an update's arithmetic.
inline constexpr uint32_t kApplyAhead = 8;

// State floats a row of `dim` weights needs (= OptimizerStateFloats(spec.kind, dim)).
uint32_t StateFloats(const OptimizerSpec& spec, uint32_t dim);
// Writes the initial optimizer state of a new row.
void InitState(const OptimizerSpec& spec, uint32_t dim, float* state);
// One update of a row. `step` is the row's update count including this update (Adam's t >= 1).
// Runs the SIMD kernels of row_update.h (AVX2 where the CPU has it, else SSE2), which give the
// bytes of ApplyUpdateScalar.
void ApplyUpdate(const OptimizerSpec& spec, uint32_t dim, float* w, float* state, const float* g,
                 uint32_t step);
// The same update as plain loops, one coordinate at a time: the reference the kernels are tested
// against and the benchmarks' baseline.
void ApplyUpdateScalar(const OptimizerSpec& spec, uint32_t dim, float* w, float* state,
                       const float* g, uint32_t step);

struct InitializerSpec {
  enum class Kind : uint8_t { kZero, kUniform, kNormal };
  Kind kind = Kind::kZero;
  float a = 0.0f;  // uniform: low;  normal: mean
  float b = 0.0f;  // uniform: high; normal: standard deviation
  uint64_t seed = 0;

  bool operator==(const InitializerSpec&) const = default;
};
Result<InitializerSpec::Kind> ParseInitializer(std::string_view name);  // zero|uniform|normal
std::string_view InitializerName(InitializerSpec::Kind kind);
// The initial weights of `key`'s row: a function of (spec.seed, key, i) only.
void InitWeights(const InitializerSpec& spec, uint64_t key, uint32_t dim, float* w);

}  // namespace ferry::ps
