// DeepFM kernel (Guo et al. 2017) over pulled rows: an FM and an MLP that SHARE the field
// embeddings, plus an optional linear part.
//
// Per sample i, with occurrences j in [offsets[i], offsets[i+1]), u_j = uidx[j], x_j = value[j],
// f_j = field[j], e_u = embedding row (E = shape.embed_dim floats):
//   linear   = w_bias + sum_j w_{u_j} x_j                       optional, dim 1
//   s_t      = sum_j e_{u_j,t} x_j                               t = 0..E-1
//   fm       = 1/2 sum_t (s_t^2 - sum_j e_{u_j,t}^2 x_j^2)       = sum_{j1<j2} <e_j1, e_j2> x_j1
//   x_j2 deep     = MLP(concat_f sum_{j : f_j == f} x_j e_{u_j})      exactly as mlp.h logit    =
//   linear + fm + deep,  loss = sum_i logloss(logit_i, y_i)
// Backward, with dz = d loss / d logit_i:
//   dense layers as mlp.h;  linear part as LR;
//   g_emb(u_j) += x_j * dpool_{f_j}  (the MLP's share)  +  dz x_j (s - e_{u_j} x_j)  (the FM's).
// The FM pairs run over occurrences, so an id repeated within a sample meets itself (as in fm.h).
//
// Tables (the trainer pulls the same ids from the linear and embedding tables):
//   linear      dim 1     w_lin, g_lin (holds the bias row); NoTable{} for both and kNoBias
//                         to leave it out
//   embeddings  dim E     w_emb, g_emb (the bias id's embedding row, if pulled, is never read)
//   dense       one contiguous array per layer, MlpShape's LayerParams: dense[l] (read in
//               place), dense_grad[l] (ADDED into, in place)
// Every occurrence must carry a field < F. Accessor contract, bias and gradient conventions:
// models/kernels/kernel_batch.h. The pass is shared with the MLP: models/kernels/mlp_pass.h.
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

// Forward and backward: fills probs, ADDS gradients into the linear rows (g_lin), the embedding
// rows (g_emb) and the dense layers (dense_grad[l]), returns the summed logloss.
// kInvalidArgument when the shape is invalid, the batch/uidx/probs shapes disagree, the batch
// has no fields or a field is out of range, a bias is given without a linear table, or the
// dense pointer counts do not match the shape; gradients are untouched then.
// Arguments: mlp_detail::ForwardBackwardFn (mlp_pass.h).
inline constexpr mlp_detail::ForwardBackwardFn</*kFm=*/true> DeepFmForwardBackward{};

// Forward only: fills probs, returns the summed logloss against the batch's labels. Pass
// NoTable{} as w_lin (and kNoBias) for a model without a linear part.
// Arguments: mlp_detail::ForwardFn (mlp_pass.h).
inline constexpr mlp_detail::ForwardFn</*kFm=*/true> DeepFmForward{};

}  // namespace ferry::models
