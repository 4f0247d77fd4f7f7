// The dense (fully connected) half of the MLP kernel, batched over the minibatch with Eigen.
//
// The templates in models/kernels/mlp_pass.h (MLP and DeepFM) pool the embeddings into
// MlpWorkspace::input and call these two functions; they are declared here, Eigen-free, so that
// Eigen stays inside mlp_dense.cc. Layer parameters are read and their gradients written IN PLACE
// through the given pointers (Eigen::Map, no copies); the layout is MlpShape's LayerParams.
//
// Activations are column-major matrices with one column per sample:
//
//   struct MlpWorkspace {                    // n = samples in the batch
//     float input[n][InputDim];              // pooled embeddings; column i = sample i
//     float input_grad[n][InputDim];         // d loss / d input, written by the backward pass
//     float hidden[l][n][hidden[l]];         // post-ReLU activations of hidden layer l
//     float logits[n];                       // dense logit per sample
//     float delta[..], delta_prev[..];       // backward scratch
//     float fm_sum[embed_dim];               // DeepFM: sum_j x_j e_{u_j} of the current sample
//   };
//
// Thread-safety: a workspace belongs to one thread; reuse it across batches so buffers are
// allocated once (they only grow). Blocking: none.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "models/kernels/mlp_shape.h"
#include "transport/status.h"

namespace ferry::models {

struct MlpWorkspace {
  std::vector<float> input;
  std::vector<float> input_grad;
  std::vector<std::vector<float>> hidden;
  std::vector<float> logits;
  std::vector<float> delta;
  std::vector<float> delta_prev;
  std::vector<float> fm_sum;  // used by the templates in mlp_pass.h, not by the functions below
};

// Forward through every layer for n samples: reads ws.input (InputDim x n, column per sample,
// already filled), writes ws.hidden and ws.logits[0..n). params[l] points at LayerParamCount(l)
// floats. kInvalidArgument when params has the wrong count, a null pointer, or ws.input is
// smaller than InputDim * n.
Status MlpDenseForward(const MlpShape& shape, std::span<const float* const> params, size_t n,
                       MlpWorkspace& ws);

// Backward for the batch of the preceding MlpDenseForward (same shape, params, n and ws):
// given dlogit[i] = d loss / d logit_i, ADDS d loss / d params into grads[l] (LayerParamCount(l)
// floats each) and writes ws.input_grad (InputDim x n). kInvalidArgument on count mismatches.
Status MlpDenseBackward(const MlpShape& shape, std::span<const float* const> params,
                        std::span<float* const> grads, size_t n, std::span<const float> dlogit,
                        MlpWorkspace& ws);

}  // namespace ferry::models
