// The one forward/backward pass behind the field-embedding kernels: the MLP (mlp.h, optionally
// wide & deep) and DeepFM (deepfm.h), which is the same pass plus the FM pairwise term over the
// same embedding rows. The public headers state the models; this file holds the machinery once:
//
//   1. validate (shape, batch, fields, bias without a linear table)
//   2. pool:     input[:, i] = concat_f sum_{j in i, field[j] == f} x_j e_{u_j}
//   3. dense:    ws.logits = MLP(input)                             (mlp_dense.cc, Eigen)
//   4. samples:  z_i = linear_i + ws.logits[i] [+ FM_i]             (sample_loop.h)
//                backward: the linear and FM gradients, and ws.logits[i] := d loss / d logit_i
//   5. backward: dense gradients and ws.input_grad = d loss / d input  (mlp_dense.cc)
//   6. scatter:  g_emb(u_j) += x_j * input_grad[field[j] block, i]
//
// Every check runs before the first gradient write, so an error leaves all gradients untouched
// (MlpDenseBackward re-checks what was checked before, so it cannot fail after step 4's writes).
// Thread-safety, blocking and allocation: as mlp.h states.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "models/kernels/fm.h"
#include "models/kernels/kernel_batch.h"
#include "models/kernels/mlp_dense.h"
#include "models/kernels/mlp_shape.h"
#include "models/kernels/sample_loop.h"
#include "transport/status.h"

namespace ferry::models::mlp_detail {

// The sample loop's term: the dense logit of step 3, plus (kFm) the FM pairwise term over the
// embedding rows, which keeps the current sample's sums s_t in ws.fm_sum.
template <bool kFm, typename WE, typename GE>
struct DenseTerm {
  MlpWorkspace& ws;
  fm_detail::PairTerm<WE, GE> fm;

  float Logit(size_t i, uint32_t begin, uint32_t end) {
    float z = ws.logits[i];
    if constexpr (kFm) z += fm.Logit(i, begin, end);
    return z;
  }
  void Backward(size_t i, uint32_t begin, uint32_t end, float dz) {
    if constexpr (kFm) fm.Backward(i, begin, end, dz);
    ws.logits[i] = dz;  // read by MlpDenseBackward
  }
};

template <bool kBackward, bool kFm, BatchLike B, typename WL, typename GL, typename WE, typename GE>
Result<double> Pass(const char* model, const MlpShape& shape, const B& batch,
                    std::span<const uint32_t> uidx, uint32_t bias_u, WL&& w_lin, GL&& g_lin,
                    WE&& w_emb, GE&& g_emb, std::span<const float* const> dense,
                    std::span<float* const> dense_grad, MlpWorkspace& ws, std::span<float> probs) {
  FERRY_RETURN_IF_ERROR(shape.Validate());
  FERRY_RETURN_IF_ERROR(CheckKernelBatch(batch, uidx, probs.size(), /*need_fields=*/true));
  if (kIsNoTable<WL> && bias_u != kNoBias) {
    return InvalidArgument(std::string(model) +
                           ": a bias index needs the linear (dim-1) table; pass kNoBias");
  }
  const std::span<const uint32_t> offsets(batch.offsets);
  const std::span<const float> values(batch.values);
  const std::span<const uint32_t> fields(batch.fields);
  FERRY_RETURN_IF_ERROR(CheckFieldRange(fields, shape.num_fields, model));
  const size_t n = batch.size();
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
    if (dense_grad.size() != shape.NumLayers() ||
        std::find(dense_grad.begin(), dense_grad.end(), nullptr) != dense_grad.end()) {
      return InvalidArgument(std::string(model) + ": need " + std::to_string(shape.NumLayers()) +
                             " non-null dense gradient pointers, got " +
                             std::to_string(dense_grad.size()));
    }
  }

  // First gradient writes from here on.
  if constexpr (kFm) ws.fm_sum.resize(e_dim);
  DenseTerm<kFm, WE, GE> term{
      ws, {static_cast<uint32_t>(e_dim), uidx, values, w_emb, g_emb, ws.fm_sum.data()}};
  const double loss =
      kernel_detail::SampleLoop<kBackward>(batch, uidx, bias_u, w_lin, g_lin, term, probs);
  if constexpr (kBackward) {
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

// The entry points mlp.h (kFm false) and deepfm.h (kFm true) publish, written once: function
// objects, so the two headers name them without repeating their signatures.
template <bool kFm>
struct ForwardBackwardFn {
  template <BatchLike B, typename WL, typename GL, typename WE, typename GE>
  Result<double> operator()(const MlpShape& shape, const B& batch, std::span<const uint32_t> uidx,
                            uint32_t bias_u, WL&& w_lin, GL&& g_lin, WE&& w_emb, GE&& g_emb,
                            std::span<const float* const> dense, std::span<float* const> dense_grad,
                            MlpWorkspace& ws, std::span<float> probs) const {
    return Pass<true, kFm>(kFm ? "deepfm" : "mlp", shape, batch, uidx, bias_u, w_lin, g_lin, w_emb,
                           g_emb, dense, dense_grad, ws, probs);
  }
};

template <bool kFm>
struct ForwardFn {
  template <BatchLike B, typename WL, typename WE>
  Result<double> operator()(const MlpShape& shape, const B& batch, std::span<const uint32_t> uidx,
                            uint32_t bias_u, WL&& w_lin, WE&& w_emb,
                            std::span<const float* const> dense, MlpWorkspace& ws,
                            std::span<float> probs) const {
    return Pass<false, kFm>(kFm ? "deepfm" : "mlp", shape, batch, uidx, bias_u, w_lin, NoTable{},
                            w_emb, NoTable{}, dense, {}, ws, probs);
  }
};

}  // namespace ferry::models::mlp_detail
