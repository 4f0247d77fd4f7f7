// Factorization machine kernel (Rendle 2010) over pulled rows, read in place.
//
// Two tables share the batch's unique ids (the trainer pulls the same ids from both):
//   linear  dim 1: w_u          (also holds the bias row, if any)
//   factors dim k: v_u[0..k)    (the bias id's factor row, if pulled, is never read)
//
// Per sample, with x_j = value[j] and u_j = uidx[j] over the sample's occurrences j:
//   s_f    = sum_j v_{u_j,f} x_j                                       f = 0..k-1
//   logit  = w_bias + sum_j w_{u_j} x_j + 1/2 sum_f (s_f^2 - sum_j v_{u_j,f}^2 x_j^2)
//   dlogit/dw_{u_j}   += x_j
//   dlogit/dv_{u_j,f} += x_j s_f - v_{u_j,f} x_j^2
// The derivatives are per OCCURRENCE and add up, so an id repeated within a sample receives the
// exact derivative of the formula above (which then includes the id's interaction with itself
// across its two occurrences, as the formula says).
//
// Accessor contract, bias and gradient conventions: models/kernels/kernel_batch.h.
// Thread-safety: pure functions of their arguments; concurrent calls must not share g rows.
// Blocking: none. Allocation: one scratch vector of k floats per call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/kernels/kernel_batch.h"
#include "models/kernels/sample_loop.h"
#include "transport/status.h"

namespace ferry::models {

// Largest factor dimension the kernels accept.
inline constexpr uint32_t kMaxFmFactors = 1u << 16;

namespace fm_detail {

// The pairwise term over one sample's occurrences (a kernel_detail::SampleLoop term), reading
// factor rows of dim k through w_fac. DeepFM (deepfm.h) uses it on its embedding rows.
// s: caller-owned scratch of at least k floats, holding s_f of the current sample between
// Logit and Backward.
template <typename WV, typename GV>
struct PairTerm {
  uint32_t k;
  std::span<const uint32_t> uidx;
  std::span<const float> values;
  WV& w_fac;
  GV& g_fac;
  float* s;

  float Logit(size_t, uint32_t begin, uint32_t end) {
    std::fill(s, s + k, 0.0f);
    float squares = 0.0f;  // sum_j sum_f v^2 x^2
    for (uint32_t j = begin; j < end; ++j) {
      const float x = values[j];
      const float* v = w_fac(uidx[j]);
      for (uint32_t f = 0; f < k; ++f) {
        const float vx = v[f] * x;
        s[f] += vx;
        squares += vx * vx;
      }
    }
    float pairs = 0.0f;
    for (uint32_t f = 0; f < k; ++f) pairs += s[f] * s[f];
    return 0.5f * (pairs - squares);
  }

  void Backward(size_t, uint32_t begin, uint32_t end, float dz) {
    for (uint32_t j = begin; j < end; ++j) {
      const float x = values[j];
      const float* v = w_fac(uidx[j]);
      float* gv = g_fac(uidx[j]);
      for (uint32_t f = 0; f < k; ++f) gv[f] += dz * x * (s[f] - v[f] * x);
    }
  }
};

template <bool kBackward, BatchLike B, typename WL, typename GL, typename WV, typename GV>
Result<double> Pass(uint32_t k, const B& batch, std::span<const uint32_t> uidx, uint32_t bias_u,
                    WL&& w_lin, GL&& g_lin, WV&& w_fac, GV&& g_fac, std::span<float> probs) {
  if (k == 0 || k > kMaxFmFactors) {
    return InvalidArgument("FM factor dimension k=" + std::to_string(k) + " is outside [1, " +
                           std::to_string(kMaxFmFactors) + "]");
  }
  FERRY_RETURN_IF_ERROR(CheckKernelBatch(batch, uidx, probs.size(), /*need_fields=*/false));
  std::vector<float> s(k);
  PairTerm<WV, GV> term{k, uidx, std::span<const float>(batch.values), w_fac, g_fac, s.data()};
  return kernel_detail::SampleLoop<kBackward>(batch, uidx, bias_u, w_lin, g_lin, term, probs);
}

}  // namespace fm_detail

// Forward and backward: fills probs, ADDS gradients through g_lin (dim 1) and g_fac (dim k),
// returns the summed logloss. kInvalidArgument (nothing written) for a bad k or a shape mismatch.
template <BatchLike B, typename WL, typename GL, typename WV, typename GV>
Result<double> FmForwardBackward(uint32_t k, const B& batch, std::span<const uint32_t> uidx,
                                 uint32_t bias_u, WL&& w_lin, GL&& g_lin, WV&& w_fac, GV&& g_fac,
                                 std::span<float> probs) {
  return fm_detail::Pass<true>(k, batch, uidx, bias_u, w_lin, g_lin, w_fac, g_fac, probs);
}

// Forward only: fills probs, returns the summed logloss against the batch's labels.
template <BatchLike B, typename WL, typename WV>
Result<double> FmForward(uint32_t k, const B& batch, std::span<const uint32_t> uidx,
                         uint32_t bias_u, WL&& w_lin, WV&& w_fac, std::span<float> probs) {
  return fm_detail::Pass<false>(k, batch, uidx, bias_u, w_lin, NoTable{}, w_fac, NoTable{}, probs);
}

}  // namespace ferry::models
