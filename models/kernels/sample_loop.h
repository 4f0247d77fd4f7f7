// The per-sample skeleton every kernel shares: logit = linear part + the model's own term,
// probability, logloss, d loss / d logit, and the linear part's gradient.
//
// For each sample i with occurrences [begin, end) = [offsets[i], offsets[i+1]):
//   z_i       = w_bias + sum_j w_{u_j} x_j + term.Logit(i, begin, end)
//   probs[i]  = sigmoid(z_i),  loss += logloss(z_i, y_i)
//   backward: dz_i = probs[i] - y_i;  g_lin(u_j) += dz_i x_j;  term.Backward(i, begin, end, dz_i)
// and after the last sample g_lin(bias) += sum_i dz_i (one write per batch).
//
// A Term is the model-specific part (FM pairs, FFM pairs, the MLP's dense logit, ...):
//   struct Term {
//     float Logit(size_t i, uint32_t begin, uint32_t end);             // its share of z_i
//     void Backward(size_t i, uint32_t begin, uint32_t end, float dz);  // only when kBackward
//   };
// Backward(i, ...) is called right after Logit(i, ...), so a term may keep per-sample scratch
// between the two. Pass NoTable{} as w_lin (and kNoBias) for a model without a linear part;
// LinearOnly is the term of plain logistic regression.
//
// Preconditions (the kernels check them first): CheckKernelBatch passed, and bias_u == kNoBias
// when there is no linear table. Thread-safety and accessor contract: kernel_batch.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "models/kernels/kernel_batch.h"
#include "models/kernels/logistic.h"

namespace ferry::models::kernel_detail {

// The empty term: logistic regression.
struct LinearOnly {
  float Logit(size_t, uint32_t, uint32_t) { return 0.0f; }
  void Backward(size_t, uint32_t, uint32_t, float) {}
};

template <bool kBackward, BatchLike B, typename WL, typename GL, typename Term>
double SampleLoop(const B& batch, std::span<const uint32_t> uidx, uint32_t bias_u, WL& w_lin,
                  GL& g_lin, Term& term, std::span<float> probs) {
  constexpr bool kLinear = !kIsNoTable<WL>;
  const std::span<const float> labels(batch.labels);
  const std::span<const uint32_t> offsets(batch.offsets);
  const std::span<const float> values(batch.values);
  float bias = 0.0f;
  if constexpr (kLinear) {
    if (bias_u != kNoBias) bias = w_lin(bias_u)[0];
  }
  double loss = 0.0;
  double bias_grad = 0.0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const uint32_t begin = offsets[i];
    const uint32_t end = offsets[i + 1];
    float z = bias;
    if constexpr (kLinear) {
      for (uint32_t j = begin; j < end; ++j) z += w_lin(uidx[j])[0] * values[j];
    }
    z += term.Logit(i, begin, end);
    probs[i] = Sigmoid(z);
    loss += LogLoss<double>(z, labels[i]);
    if constexpr (kBackward) {
      const float dz = probs[i] - labels[i];
      if constexpr (kLinear) {
        for (uint32_t j = begin; j < end; ++j) g_lin(uidx[j])[0] += dz * values[j];
      }
      bias_grad += dz;
      term.Backward(i, begin, end, dz);
    }
  }
  if constexpr (kBackward && kLinear) {
    if (bias_u != kNoBias) g_lin(bias_u)[0] += static_cast<float>(bias_grad);
  }
  return loss;
}

}  // namespace ferry::models::kernel_detail
