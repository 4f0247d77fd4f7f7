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
//
// Thread-safety: pure functions over TrainOptions (DefineModel, MakeJob, DescribeModel); every
// rank computes the same definition from the same options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/kernels/mlp_shape.h"
#include "models/train/model_kernel.h"
#include "models/train/train_options.h"
#include "ps/job/job.h"

namespace ferry::models {

inline constexpr uint64_t kBiasId = 1;
inline constexpr uint32_t kDefaultFmFactors = 8;
inline constexpr uint32_t kDefaultFfmFactors = 4;  // libffm's default k
inline constexpr uint64_t kMaxFfmRowFloats = 1u << 16;
// Default hyper-parameters. The linear weights' (FTRL, the lr model) are per unit of feature
// value: DefineModel multiplies their steps by TrainOptions::step_scale and divides L1 by it and
// L2 by its square; factors and embeddings take theirs as they are (model_def.cc says why). Chosen
// by the sweep of perf/train/sweep.py over many generated data sets (its table:
// docs/perf/training.md); a flag given on the command line is used as it is. A table of factors or
// embeddings: Adagrad's step, L2 and initial squared-gradient sum, and the standard deviation of
// its N(0, sd) initial rows.
struct LatentDefaults {
  float step, l2, initial_accumulator, init_std;
};
struct HyperDefaults {
  // FTRL (ftrl, and the linear parts of fm, ffm, mlp, deepfm). beta and the initial
  // accumulators are not scaled: they set how cautious the first steps on a rarely seen
  // coordinate are.
  float ftrl_alpha = 0.4f, ftrl_beta = 10.0f, ftrl_l1 = 0.05f, ftrl_l2 = 1.0f;
  float lr_step = 0.1f, lr_l2 = 0.0f, lr_initial_accumulator = 30.0f;  // lr (Adagrad)
  LatentDefaults fm{0.04f, 0.01f, 10.0f, 0.03f};                       // fm factors
  LatentDefaults ffm{0.08f, 1e-4f, 10.0f, 0.03f};                      // ffm field factors
  LatentDefaults mlp{0.05f, 1e-5f, 0.1f, 0.01f};                       // mlp embeddings
  LatentDefaults deepfm{0.02f, 1e-5f, 0.1f, 0.01f};                    // deepfm embeddings
};
inline constexpr HyperDefaults kHyperDefaults{};

// The model parameter holding the intercept calibration (models/eval/calibration.h): ferry-predict
// applies it to every prediction. Absent: 0.
inline constexpr std::string_view kLogitOffsetParam = "logit_offset";
// 17 significant digits: the offset reads back to the same double.
std::string FormatOffset(double offset);

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
