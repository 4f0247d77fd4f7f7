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
// The pass itself (shared with DeepFM) is models/kernels/mlp_pass.h.
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

#include <cstdint>
#include <span>

#include "models/kernels/kernel_batch.h"
#include "models/kernels/mlp_dense.h"
#include "models/kernels/mlp_pass.h"
#include "models/kernels/mlp_shape.h"
#include "transport/status.h"

namespace ferry::models {

// Forward and backward: fills probs, ADDS gradients into the wide rows (g_lin), the embedding
// rows (g_emb) and the dense layers (dense_grad[l]), returns the summed logloss.
// kInvalidArgument when the shape is invalid, the batch/uidx/probs shapes disagree, a field is
// out of range, or the dense pointer counts do not match the shape; gradients are untouched then.
// Arguments: mlp_detail::ForwardBackwardFn (mlp_pass.h).
inline constexpr mlp_detail::ForwardBackwardFn</*kFm=*/false> MlpForwardBackward{};

// Forward only: fills probs, returns the summed logloss against the batch's labels. Pass
// NoTable{} as w_lin (and kNoBias) for a model without a wide part.
// Arguments: mlp_detail::ForwardFn (mlp_pass.h).
inline constexpr mlp_detail::ForwardFn</*kFm=*/false> MlpForward{};

}  // namespace ferry::models
