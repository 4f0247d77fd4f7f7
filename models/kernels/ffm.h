// Field-aware factorization machine kernel (Juan et al. 2016, libffm's model) over pulled rows,
// read in place.
//
// Two tables share the batch's unique ids (the trainer pulls the same ids from both):
//   linear  dim 1:      w_u             (also holds the bias row, if any)
//   factors dim F * k:  the row of u is F blocks of k floats, one per field it may meet:
//
//     struct FfmRow {             // FfmRowWidth(k, F) floats
//       float v[F][k];            // v[g] = V_{u,g}: the latent vector u uses against field g
//     };
//
//   (the bias id's factor row, if pulled, is never read).
//
// Per sample, over its occurrences j (u_j = uidx[j], x_j = value[j], f_j = field[j]):
//   logit = w_bias + sum_j w_{u_j} x_j
//         + sum_{j1 < j2} < V_{u_j1, f_j2}, V_{u_j2, f_j1} > x_j1 x_j2
//   dlogit / dV_{u_j1, f_j2} += V_{u_j2, f_j1} x_j1 x_j2      (and symmetrically for j2)
// The pairs run over OCCURRENCES, same-field pairs included, as libffm does; an id repeated
// within a sample therefore meets itself, and its derivatives add up per occurrence.
// Cost: O(m^2 k) per sample of m occurrences (m = 39 for Criteo rows).
//
// Every occurrence must carry a field < F (kInvalidArgument otherwise; nothing is written).
// Accessor contract, bias and gradient conventions: models/kernels/kernel_batch.h; in addition,
// the factor rows of distinct unique indices must be disjoint and no gradient row may overlap a
// weight row (true of the trainer's pull and gradient buffers): the backward pass relies on it.
// Thread-safety: pure functions of their arguments; concurrent calls must not share g rows.
// Blocking: none. Allocation: two scratch vectors per call, sized to the longest sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/kernels/kernel_batch.h"
#include "models/kernels/sample_loop.h"
#include "transport/status.h"

namespace ferry::models {

// Largest factor row (k * F floats) the kernels accept.
inline constexpr uint32_t kMaxFfmRowWidth = 1u << 20;

// Floats in one factor row: k per field. The caller keeps k * fields <= kMaxFfmRowWidth.
inline uint32_t FfmRowWidth(uint32_t k, uint32_t fields) {
  return k * fields;
}

namespace ffm_detail {

// ga += c vb and gb += c va over k floats, where ga and gb overlap neither each other nor va,
// vb (which lets the compiler vectorise the loop).
inline void AddPairGrad(uint32_t k, float c, const float* __restrict va, const float* __restrict vb,
                        float* __restrict ga, float* __restrict gb) {
  for (uint32_t t = 0; t < k; ++t) {
    ga[t] += c * vb[t];
    gb[t] += c * va[t];
  }
}

// The field-aware pairwise term (a kernel_detail::SampleLoop term). Logit fetches each
// occurrence's row once into `rows`; Backward fetches the gradient rows once into `grads`.
template <typename WV, typename GV>
struct PairTerm {
  uint32_t k;
  std::span<const uint32_t> uidx;
  std::span<const float> values;
  std::span<const uint32_t> fields;
  WV& w_ffm;
  GV& g_ffm;
  std::vector<const float*>& rows;
  std::vector<float*>& grads;

  float Logit(size_t, uint32_t begin, uint32_t end) {
    rows.clear();
    for (uint32_t j = begin; j < end; ++j) rows.push_back(w_ffm(uidx[j]));
    const size_t m = end - begin;
    const uint32_t* f = fields.data() + begin;
    const float* x = values.data() + begin;
    float sum = 0.0f;
    for (size_t a = 0; a < m; ++a) {
      const float* row_a = rows[a];
      const size_t fa = static_cast<size_t>(f[a]) * k;
      for (size_t b = a + 1; b < m; ++b) {
        const float* va = row_a + static_cast<size_t>(f[b]) * k;  // V_{u_a, f_b}
        const float* vb = rows[b] + fa;                           // V_{u_b, f_a}
        float dot = 0.0f;
        for (uint32_t t = 0; t < k; ++t) dot += va[t] * vb[t];
        sum += dot * x[a] * x[b];
      }
    }
    return sum;
  }

  // Uses `rows` as Logit left them for the same sample.
  void Backward(size_t, uint32_t begin, uint32_t end, float dz) {
    grads.clear();
    for (uint32_t j = begin; j < end; ++j) grads.push_back(g_ffm(uidx[j]));
    const size_t m = end - begin;
    const uint32_t* f = fields.data() + begin;
    const float* x = values.data() + begin;
    for (size_t a = 0; a < m; ++a) {
      const size_t fa = static_cast<size_t>(f[a]) * k;
      const float dza = dz * x[a];
      for (size_t b = a + 1; b < m; ++b) {
        const size_t fb = static_cast<size_t>(f[b]) * k;
        const float c = dza * x[b];
        const float* va = rows[a] + fb;
        const float* vb = rows[b] + fa;
        float* ga = grads[a] + fb;
        float* gb = grads[b] + fa;
        if (ga == gb) {  // an id meeting itself in its own field: d<v, v> = 2v
          for (uint32_t t = 0; t < k; ++t) ga[t] += c * (va[t] + vb[t]);
        } else {
          AddPairGrad(k, c, va, vb, ga, gb);
        }
      }
    }
  }
};

template <bool kBackward, BatchLike B, typename WL, typename GL, typename WV, typename GV>
Result<double> Pass(uint32_t k, uint32_t num_fields, const B& batch, std::span<const uint32_t> uidx,
                    uint32_t bias_u, WL&& w_lin, GL&& g_lin, WV&& w_ffm, GV&& g_ffm,
                    std::span<float> probs) {
  if (k == 0 || num_fields == 0 ||
      static_cast<uint64_t>(k) * num_fields > static_cast<uint64_t>(kMaxFfmRowWidth)) {
    return InvalidArgument("ffm: k=" + std::to_string(k) +
                           " with fields=" + std::to_string(num_fields) +
                           " is not a valid factor row; both must be at least 1 and k * fields "
                           "at most " +
                           std::to_string(kMaxFfmRowWidth) + " floats");
  }
  FERRY_RETURN_IF_ERROR(CheckKernelBatch(batch, uidx, probs.size(), /*need_fields=*/true));
  const std::span<const uint32_t> fields(batch.fields);
  FERRY_RETURN_IF_ERROR(CheckFieldRange(fields, num_fields, "ffm"));
  std::vector<const float*> rows;
  std::vector<float*> grads;
  PairTerm<WV, GV> term{k,    uidx, std::span<const float>(batch.values), fields, w_ffm, g_ffm,
                        rows, grads};
  return kernel_detail::SampleLoop<kBackward>(batch, uidx, bias_u, w_lin, g_lin, term, probs);
}

}  // namespace ffm_detail

// Forward and backward: fills probs, ADDS gradients through g_lin (dim 1) and g_ffm
// (dim FfmRowWidth(k, num_fields)), returns the summed logloss. kInvalidArgument (nothing
// written) when k or num_fields is 0, k * num_fields > kMaxFfmRowWidth, a field is
// >= num_fields, the batch has no fields, or the batch/uidx/probs shapes disagree.
template <BatchLike B, typename WL, typename GL, typename WV, typename GV>
Result<double> FfmForwardBackward(uint32_t k, uint32_t num_fields, const B& batch,
                                  std::span<const uint32_t> uidx, uint32_t bias_u, WL&& w_lin,
                                  GL&& g_lin, WV&& w_ffm, GV&& g_ffm, std::span<float> probs) {
  return ffm_detail::Pass<true>(k, num_fields, batch, uidx, bias_u, w_lin, g_lin, w_ffm, g_ffm,
                                probs);
}

// Forward only: fills probs, returns the summed logloss against the batch's labels.
template <BatchLike B, typename WL, typename WV>
Result<double> FfmForward(uint32_t k, uint32_t num_fields, const B& batch,
                          std::span<const uint32_t> uidx, uint32_t bias_u, WL&& w_lin, WV&& w_ffm,
                          std::span<float> probs) {
  return ffm_detail::Pass<false>(k, num_fields, batch, uidx, bias_u, w_lin, NoTable{}, w_ffm,
                                 NoTable{}, probs);
}

}  // namespace ferry::models
