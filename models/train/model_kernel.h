// One model's pass over a minibatch, whatever its kind: the one place that maps a model kind to
// its kernel (models/kernels/), for training (step.cc, rows pulled from the servers) and for
// scoring (predict.cc, rows looked up in a model file).
//
//   ModelLayout layout = ...;                   // which table plays which role
//   std::vector<MyRows> rows(layout tables);    // rows[t](u): table t's row of unique id u
//   auto loss = RunModelKernel<true>(layout, batch, uidx, bias, rows, grads, dense, dense_grad,
//                                    ws, probs);
//
// Accessors: R is callable as r(u) -> const float* and G as g(u) -> float*, for every unique
// index u of the batch (models/kernels/kernel_batch.h). `rows` and `grads` are indexed by table
// (the layout's role indices); grads is ignored when kBackward is false. Dense tables (the MLP
// layers) come as one row each in `dense` / `dense_grad`, in layer order.
//
// Thread-safety: as the kernels (pure; one MlpWorkspace per thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/data/batch.h"
#include "models/io/model.h"
#include "models/kernels/deepfm.h"
#include "models/kernels/ffm.h"
#include "models/kernels/fm.h"
#include "models/kernels/lr.h"
#include "models/kernels/mlp.h"
#include "models/kernels/mlp_shape.h"
#include "transport/status.h"

namespace ferry::models {

// Which table plays which role in a model (indices into the model's table list, -1: none):
//
//   kind     linear        factors              embeddings   dense
//   lr/ftrl  weights[1]    -                    -            -
//   fm       linear[1]     factors[k]           -            -
//   ffm      linear[1]     field_factors[F*k]   -            -
//   mlp      wide[1] (opt) -                    embeddings   dense.<l>
//   deepfm   linear[1]     -                    embeddings   dense.<l>   (FM on the embeddings)
struct ModelLayout {
  ModelKind kind = ModelKind::kFtrl;
  int linear = -1;         // the 1-wide table holding the bias
  int factors = -1;        // fm: k wide; ffm: fields * k wide
  int embeddings = -1;     // mlp, deepfm
  std::vector<int> dense;  // mlp, deepfm: one table per layer
  uint32_t k = 0;          // fm, ffm
  uint32_t fields = 0;     // ffm
  MlpShape shape;          // mlp, deepfm
};

template <bool kBackward, typename R, typename G>
Result<double> RunModelKernel(const ModelLayout& m, const Batch& b, std::span<const uint32_t> uidx,
                              uint32_t bias, std::span<const R> rows, std::span<const G> grads,
                              std::span<const float* const> dense,
                              std::span<float* const> dense_grad, MlpWorkspace& ws,
                              std::span<float> probs) {
  auto row = [&](int t) -> const R& { return rows[static_cast<size_t>(t)]; };
  auto grad = [&](int t) -> const G& { return grads[static_cast<size_t>(t)]; };
  switch (m.kind) {
    case ModelKind::kLr:
    case ModelKind::kFtrl:
      if constexpr (kBackward) {
        return LrForwardBackward(b, uidx, bias, row(m.linear), grad(m.linear), probs);
      } else {
        return LrForward(b, uidx, bias, row(m.linear), probs);
      }
    case ModelKind::kFm:
      if constexpr (kBackward) {
        return FmForwardBackward(m.k, b, uidx, bias, row(m.linear), grad(m.linear), row(m.factors),
                                 grad(m.factors), probs);
      } else {
        return FmForward(m.k, b, uidx, bias, row(m.linear), row(m.factors), probs);
      }
    case ModelKind::kFfm:
      if constexpr (kBackward) {
        return FfmForwardBackward(m.k, m.fields, b, uidx, bias, row(m.linear), grad(m.linear),
                                  row(m.factors), grad(m.factors), probs);
      } else {
        return FfmForward(m.k, m.fields, b, uidx, bias, row(m.linear), row(m.factors), probs);
      }
    case ModelKind::kMlp:
    case ModelKind::kDeepFm: {
      const bool deepfm = m.kind == ModelKind::kDeepFm;
      if (m.linear < 0) {
        // Without a wide part (mlp --no-wide): no bias either.
        if constexpr (kBackward) {
          return deepfm ? DeepFmForwardBackward(m.shape, b, uidx, kNoBias, NoTable{}, NoTable{},
                                                row(m.embeddings), grad(m.embeddings), dense,
                                                dense_grad, ws, probs)
                        : MlpForwardBackward(m.shape, b, uidx, kNoBias, NoTable{}, NoTable{},
                                             row(m.embeddings), grad(m.embeddings), dense,
                                             dense_grad, ws, probs);
        } else {
          return deepfm ? DeepFmForward(m.shape, b, uidx, kNoBias, NoTable{}, row(m.embeddings),
                                        dense, ws, probs)
                        : MlpForward(m.shape, b, uidx, kNoBias, NoTable{}, row(m.embeddings), dense,
                                     ws, probs);
        }
      }
      if constexpr (kBackward) {
        return deepfm ? DeepFmForwardBackward(m.shape, b, uidx, bias, row(m.linear), grad(m.linear),
                                              row(m.embeddings), grad(m.embeddings), dense,
                                              dense_grad, ws, probs)
                      : MlpForwardBackward(m.shape, b, uidx, bias, row(m.linear), grad(m.linear),
                                           row(m.embeddings), grad(m.embeddings), dense, dense_grad,
                                           ws, probs);
      } else {
        return deepfm ? DeepFmForward(m.shape, b, uidx, bias, row(m.linear), row(m.embeddings),
                                      dense, ws, probs)
                      : MlpForward(m.shape, b, uidx, bias, row(m.linear), row(m.embeddings), dense,
                                   ws, probs);
      }
    }
  }
  return InvalidArgument("unknown model kind");
}

}  // namespace ferry::models
