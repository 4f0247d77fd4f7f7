// Logistic regression kernel over pulled rows, read in place.
//
//   logit_i = w[bias] + sum_{j in sample i} w[uidx[j]][0] * value[j]
//   p_i     = sigmoid(logit_i)
//   loss    = sum_i logloss(logit_i, label_i)
//   grad    : g[uidx[j]][0] += (p_i - y_i) * value[j]      g[bias][0] += sum_i (p_i - y_i)
//
// The weight table has dim 1 (FTRL exports the same shape: its z/n state stays on the servers).
// Accessor contract, bias and gradient conventions: models/kernels/kernel_batch.h.
// Thread-safety: pure functions of their arguments; concurrent calls must not share g rows.
// Blocking: none. Allocation: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "models/kernels/kernel_batch.h"
#include "models/kernels/sample_loop.h"
#include "transport/status.h"

namespace ferry::models {
namespace lr_detail {

template <bool kBackward, BatchLike B, typename W, typename G>
Result<double> Pass(const B& batch, std::span<const uint32_t> uidx, uint32_t bias_u, W&& w, G&& g,
                    std::span<float> probs) {
  FERRY_RETURN_IF_ERROR(CheckKernelBatch(batch, uidx, probs.size(), /*need_fields=*/false));
  kernel_detail::LinearOnly term;
  return kernel_detail::SampleLoop<kBackward>(batch, uidx, bias_u, w, g, term, probs);
}

}  // namespace lr_detail

// Forward and backward: fills probs[i] = p_i, ADDS the gradients through g, returns the summed
// logloss. kInvalidArgument (nothing written) when the batch, uidx and probs disagree in shape.
template <BatchLike B, typename W, typename G>
Result<double> LrForwardBackward(const B& batch, std::span<const uint32_t> uidx, uint32_t bias_u,
                                 W&& w, G&& g, std::span<float> probs) {
  return lr_detail::Pass<true>(batch, uidx, bias_u, w, g, probs);
}

// Forward only (evaluation, ferry-predict): fills probs, returns the summed logloss against the
// batch's labels (meaningless for unlabeled input, which readers fill with 0).
template <BatchLike B, typename W>
Result<double> LrForward(const B& batch, std::span<const uint32_t> uidx, uint32_t bias_u, W&& w,
                         std::span<float> probs) {
  return lr_detail::Pass<false>(batch, uidx, bias_u, w, NoTable{}, probs);
}

}  // namespace ferry::models
