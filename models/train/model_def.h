// What each model kind is on the parameter server: its tables (names, widths, optimizers,
// initializers) and the reserved ids the trainer adds. The names follow docs/model-format.md:
//
//   lr    weights[1]                       sgd or adagrad
//   ftrl  weights[1]                       FTRL-Proximal
//   fm      linear[1] (FTRL) + factors[k]          factors by Adagrad, as DiFacto does
//   ffm     linear[1] (FTRL) + field_factors[F*k]  Adagrad; row = F blocks of k: block g is the
//                                                  vector the feature uses against field g
//   mlp     wide[1] (FTRL, optional) + embeddings[E] (Adagrad) + dense.<l> (Adam, one row each:
//           the layer's weights then bias, key 0)
//   deepfm  linear[1] (FTRL) + embeddings[E] (Adagrad; the FM part and the MLP share them) +
//           dense.<l> (Adam)
//
// The bias is the row of kBiasId in the 1-wide table; hashed feature ids are never below
// kReservedIds (models/data/hashing.h), so it cannot collide with a feature.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/kernels/mlp_shape.h"
#include "models/train/model_kernel.h"
#include "models/train/train_options.h"
#include "ps/job.h"

namespace ferry::models {

inline constexpr uint64_t kBiasId = 1;
inline constexpr uint32_t kDefaultFmFactors = 8;
inline constexpr uint32_t kDefaultFfmFactors = 4;  // libffm's default k
inline constexpr uint64_t kMaxFfmRowFloats = 1u << 16;
// The "field_map" parameter of a model whose map was too large to carry.
inline constexpr std::string_view kExternalFieldMap = "external";

// The layout (model_kernel.h: kind, which table plays which role, k, fields, MLP shape) and
// the tables on the servers, in the layout's order.
struct ModelDef : ModelLayout {
  std::vector<ps::TableSpec> tables;
  // --field-map's map as FieldMap::Encode() text ("" without one): the model file carries it
  // (parameter "field_map") so that ferry-predict reads the fields the training read.
  std::string field_map;
};

// The resolved hyper-parameters (defaults filled in) as model-file parameters, for export.
ModelParams DescribeModel(const TrainOptions& o, const ModelDef& def);

// Resolves defaults; for the field-aware models (ffm, mlp, deepfm) with fields == 0 it counts
// them: criteo 39, the field map's, or the first lines of the first train file (libffm).
// Deterministic, so every rank gets the same answer.
Result<ModelDef> DefineModel(const TrainOptions& o);

// The job every rank runs: DefineModel's tables plus the cluster, transport and sizes.
Result<ps::JobSpec> MakeJob(const TrainOptions& o, const ModelDef& def);

}  // namespace ferry::models
