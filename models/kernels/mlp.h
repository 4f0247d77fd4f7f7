// Field-embedding + MLP kernel ("deep", optionally "wide & deep") over pulled rows.
//
// Per sample i, with occurrences j in [offsets[i], offsets[i+1]), u_j = uidx[j], x_j = value[j]:
//   pool_f   = sum_{j : field[j] == f} x_j * e_{u_j}            e_u = embedding row (E floats)
//   input    = concat(pool_0, ..., pool_{F-1})                   F * E floats
//   deep     = MLP(input)                                        models/kernels/mlp_shape.h
//   logit    = deep + [w_bias + sum_j w_{u_j} x_j]               wide part: optional, dim 1
//   loss     = sum_i logloss(logit_i, y_i)
// Backward: the dense layers get d loss / d W_l, d loss / d b_l (batched Eigen products,
// mlp_dense.h), each occurrence adds x_j * d loss / d pool_{field[j]} to g_emb(u_j), and the wide
// table gets the LR gradient.
//
// Tables:
//   embeddings  dim E     w_emb(u) -> const float*, g_emb(u) -> float*
//   wide        dim 1     w_lin, g_lin; pass NoTable{} for both (and kNoBias) to leave it out
//   dense       one contiguous array per layer, LayerParamCount(l) floats:
//               dense[l] (read in place), dense_grad[l] (ADDED into, in place)
// Every occurrence must carry a field < F (kInvalidArgument otherwise; nothing is written).
// Accessor contract, bias and gradient conventions: models/kernels/kernel_batch.h.
// Thread-safety: one MlpWorkspace per thread; concurrent calls must not share gradient rows.
// Blocking: none. Allocation: the workspace grows to the largest batch seen, then is reused.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "models/kernels/kernel_batch.h"
#include "models/kernels/logistic.h"
#include "models/kernels/mlp_dense.h"
#include "models/kernels/mlp_shape.h"
#include "transport/status.h"

namespace ferry::models {
namespace mlp_detail {

template <bool kBackward, BatchLike B, typename WL, typename GL, typename WE, typename GE>
Result<double> Pass(const MlpShape& shape, const B& batch, std::span<const uint32_t> uidx,
                    uint32_t bias_u, WL&& w_lin, GL&& g_lin, WE&& w_emb, GE&& g_emb,
                    std::span<const float* const> dense, std::span<float* const> dense_grad,
                    MlpWorkspace& ws, std::span<float> probs) {
  constexpr bool kWide = !kIsNoTable<WL>;
  FERRY_RETURN_IF_ERROR(shape.Validate());
  FERRY_RETURN_IF_ERROR(CheckKernelBatch(batch, uidx, probs.size(), /*need_fields=*/true));
  if (!kWide && bias_u != kNoBias) {
    return InvalidArgument("mlp: a bias index needs the wide (dim-1) table; pass kNoBias");
  }
  const std::span<const float> labels(batch.labels);
  const std::span<const uint32_t> offsets(batch.offsets);
  const std::span<const float> values(batch.values);
  const std::span<const uint32_t> fields(batch.fields);
  for (size_t j = 0; j < fields.size(); ++j) {
    if (fields[j] >= shape.num_fields) {
      return InvalidArgument("mlp: feature " + std::to_string(j) + " has field " +
                             std::to_string(fields[j]) + " but the model has " +
                             std::to_string(shape.num_fields) + " fields");
    }
  }
  const size_t n = labels.size();
  const size_t in = shape.InputDim();
  const size_t e_dim = shape.embed_dim;

  // Sum-pool value * embedding per field into column i of the input matrix.
  ws.input.assign(in * n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    float* column = ws.input.data() + i * in;
    for (uint32_t j = offsets[i]; j < offsets[i + 1]; ++j) {
      const float* e = w_emb(uidx[j]);
      float* pool = column + static_cast<size_t>(fields[j]) * e_dim;
      const float x = values[j];
      for (size_t t = 0; t < e_dim; ++t) pool[t] += x * e[t];
    }
  }
  FERRY_RETURN_IF_ERROR(MlpDenseForward(shape, dense, n, ws));
  if constexpr (kBackward) {
    // Checked before any gradient is written, so a failure leaves every g row untouched.
    if (dense_grad.size() != shape.NumLayers() ||
        std::find(dense_grad.begin(), dense_grad.end(), nullptr) != dense_grad.end()) {
      return InvalidArgument("mlp: need " + std::to_string(shape.NumLayers()) +
                             " non-null dense gradient pointers, got " +
                             std::to_string(dense_grad.size()));
    }
  }

  // Logits, probabilities and loss; ws.logits becomes d loss / d logit in place.
  float bias = 0.0f;
  if constexpr (kWide) {
    if (bias_u != kNoBias) bias = w_lin(bias_u)[0];
  }
  double loss = 0.0;
  double bias_grad = 0.0;
  for (size_t i = 0; i < n; ++i) {
    float z = ws.logits[i];
    if constexpr (kWide) {
      z += bias;
      for (uint32_t j = offsets[i]; j < offsets[i + 1]; ++j) z += w_lin(uidx[j])[0] * values[j];
    }
    probs[i] = Sigmoid(z);
    loss += LogLoss<double>(z, labels[i]);
    ws.logits[i] = probs[i] - labels[i];
    if constexpr (kBackward && kWide) {
      for (uint32_t j = offsets[i]; j < offsets[i + 1]; ++j) {
        g_lin(uidx[j])[0] += ws.logits[i] * values[j];
      }
      bias_grad += ws.logits[i];
    }
  }
  if constexpr (kBackward) {
    if constexpr (kWide) {
      if (bias_u != kNoBias) g_lin(bias_u)[0] += static_cast<float>(bias_grad);
    }
    FERRY_RETURN_IF_ERROR(MlpDenseBackward(shape, dense, dense_grad, n,
                                           std::span<const float>(ws.logits.data(), n), ws));
    // Scatter d loss / d pool_f back to every occurrence's embedding row.
    for (size_t i = 0; i < n; ++i) {
      const float* column = ws.input_grad.data() + i * in;
      for (uint32_t j = offsets[i]; j < offsets[i + 1]; ++j) {
        float* ge = g_emb(uidx[j]);
        const float* dpool = column + static_cast<size_t>(fields[j]) * e_dim;
        const float x = values[j];
        for (size_t t = 0; t < e_dim; ++t) ge[t] += x * dpool[t];
      }
    }
  }
  return loss;
}

}  // namespace mlp_detail

// Forward and backward: fills probs, ADDS gradients into the wide rows (g_lin), the embedding
// rows (g_emb) and the dense layers (dense_grad[l]), returns the summed logloss.
// kInvalidArgument when the shape is invalid, the batch/uidx/probs shapes disagree, a field is
// out of range, or the dense pointer counts do not match the shape; gradients are untouched then.
template <BatchLike B, typename WL, typename GL, typename WE, typename GE>
Result<double> MlpForwardBackward(const MlpShape& shape, const B& batch,
                                  std::span<const uint32_t> uidx, uint32_t bias_u, WL&& w_lin,
                                  GL&& g_lin, WE&& w_emb, GE&& g_emb,
                                  std::span<const float* const> dense,
                                  std::span<float* const> dense_grad, MlpWorkspace& ws,
                                  std::span<float> probs) {
  return mlp_detail::Pass<true>(shape, batch, uidx, bias_u, w_lin, g_lin, w_emb, g_emb, dense,
                                dense_grad, ws, probs);
}

// Forward only: fills probs, returns the summed logloss against the batch's labels. Pass
// NoTable{} as w_lin (and kNoBias) for a model without a wide part.
template <BatchLike B, typename WL, typename WE>
Result<double> MlpForward(const MlpShape& shape, const B& batch, std::span<const uint32_t> uidx,
                          uint32_t bias_u, WL&& w_lin, WE&& w_emb,
                          std::span<const float* const> dense, MlpWorkspace& ws,
                          std::span<float> probs) {
  return mlp_detail::Pass<false>(shape, batch, uidx, bias_u, w_lin, NoTable{}, w_emb, NoTable{},
                                 dense, {}, ws, probs);
}

}  // namespace ferry::models
