// The SIMD row updates (row_update.h). row_update_kernels.inc holds the kernels once; it is
// included below in one namespace per instruction set, after that set's vector operations (Vec)
// and, for AVX2, under a target("avx2") region (GCC's pragma, clang's attribute), so each set's
// code is compiled for that set only and nothing compiled for AVX2 can be picked where only SSE2
// runs (no inline function is shared between the namespaces; the AVX2 one holds nothing but these
// kernels).
#include "ps/store/row_update.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::ps {
namespace {

// The scalars of a row update: the spec's, and Adam's bias corrections for this step.
struct RowParams {
  float lr, l2, l1, eps, alpha, beta, beta1, beta2;
  float c1 = 1.0f, c2 = 1.0f;
};

RowParams ParamsFor(const OptimizerSpec& s, uint32_t step) {
  RowParams p{s.learning_rate, s.l2, s.l1, s.eps, s.alpha, s.beta, s.beta1, s.beta2};
  if (s.kind == Optimizer::kAdam) {
    const float t = static_cast<float>(step == 0 ? 1 : step);
    p.c1 = 1.0f - std::pow(s.beta1, t);
    p.c2 = 1.0f - std::pow(s.beta2, t);
  }
  return p;
}

#if defined(__x86_64__)

namespace sse2 {
struct Vec {
  using V = __m128;
  static constexpr uint32_t kW = 4;
  static V Load(const float* p) { return _mm_loadu_ps(p); }
  static void Store(float* p, V a) { _mm_storeu_ps(p, a); }
  static V Set1(float a) { return _mm_set1_ps(a); }
  static V Add(V a, V b) { return _mm_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm_div_ps(a, b); }
  static V Sqrt(V a) { return _mm_sqrt_ps(a); }
  static V Abs(V a) { return _mm_andnot_ps(_mm_set1_ps(-0.0f), a); }
  static V Neg(V a) { return _mm_xor_ps(_mm_set1_ps(-0.0f), a); }
  static V Le(V a, V b) { return _mm_cmple_ps(a, b); }
  static V Lt(V a, V b) { return _mm_cmplt_ps(a, b); }
  static V Select(V m, V a, V b) { return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b)); }
};
#include "ps/store/row_update_kernels.inc"
}  // namespace sse2

// GCC takes the target for a region by pragma; clang by applying the attribute to each function
// of the region.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
namespace avx2 {
struct Vec {
  using V = __m256;
  static constexpr uint32_t kW = 8;
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V a) { _mm256_storeu_ps(p, a); }
  static V Set1(float a) { return _mm256_set1_ps(a); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  static V Sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V Abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static V Neg(V a) { return _mm256_xor_ps(_mm256_set1_ps(-0.0f), a); }
  static V Le(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static V Lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static V Select(V m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
};
#include "ps/store/row_update_kernels.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // __x86_64__

}  // namespace

RowIsa BestRowIsa() {
#if defined(__x86_64__)
  static const RowIsa best = __builtin_cpu_supports("avx2") ? RowIsa::kAvx2 : RowIsa::kSse2;
  return best;
#else
  return RowIsa::kScalar;
#endif
}

bool RowIsaAvailable(RowIsa isa) {
  if (isa == RowIsa::kScalar) return true;
#if defined(__x86_64__)
  return isa == RowIsa::kSse2 || BestRowIsa() == RowIsa::kAvx2;
#else
  return false;
#endif
}

std::string_view RowIsaName(RowIsa isa) {
  switch (isa) {
    case RowIsa::kScalar:
      return "scalar";
    case RowIsa::kSse2:
      return "sse2";
    case RowIsa::kAvx2:
      return "avx2";
  }
  return "?";
}

void ApplyUpdateWith(RowIsa isa, const OptimizerSpec& spec, uint32_t dim, float* w, float* state,
                     const float* g, uint32_t step) {
#if defined(__x86_64__)
  if (isa == RowIsa::kAvx2) return avx2::Apply(ParamsFor(spec, step), spec.kind, dim, w, state, g);
  if (isa == RowIsa::kSse2) return sse2::Apply(ParamsFor(spec, step), spec.kind, dim, w, state, g);
#endif
  ApplyUpdateScalar(spec, dim, w, state, g, step);
}

}  // namespace ferry::ps
