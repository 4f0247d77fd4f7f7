// What each model kind is on the parameter server: its tables (names, widths, optimizers,
// initializers) and the reserved ids the trainer adds. The names follow docs/model-format.md:
//
//   lr    weights[1]                       sgd or adagrad
//   ftrl  weights[1]                       FTRL-Proximal
//   fm    linear[1] (FTRL) + factors[k]    factors by Adagrad, as DiFacto does
//   mlp   wide[1] (FTRL, optional) + embeddings[E] (Adagrad) + dense.<l> (Adam, one row each:
//         the layer's weights then bias, key 0)
//
// The bias is the row of kBiasId in the 1-wide table; hashed feature ids are never below
// kReservedIds (models/data/hashing.h), so it cannot collide with a feature.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/kernels/mlp_shape.h"
#include "models/train/train_options.h"
#include "ps/job.h"

namespace ferry::models {

inline constexpr uint64_t kBiasId = 1;

struct ModelDef {
  ModelKind kind = ModelKind::kFtrl;
  std::vector<ps::TableSpec> tables;
  int linear = -1;      // the 1-wide table holding the bias (weights / linear / wide), or -1
  int factors = -1;     // fm
  int embeddings = -1;  // mlp
  std::vector<int> dense;  // mlp: one table per layer
  uint32_t k = 0;
  MlpShape shape;
};

// The resolved hyper-parameters (defaults filled in) as model-file parameters, for export.
ModelParams DescribeModel(const TrainOptions& o, const ModelDef& def);

// Resolves defaults; for the MLP with fields == 0 it reads the first lines of the first train
// file to count the fields (criteo: 39). Deterministic, so every rank gets the same answer.
Result<ModelDef> DefineModel(const TrainOptions& o);

// The job every rank runs: DefineModel's tables plus the cluster, transport and sizes.
Result<ps::JobSpec> MakeJob(const TrainOptions& o, const ModelDef& def);

}  // namespace ferry::models
