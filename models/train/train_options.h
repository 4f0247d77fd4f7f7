// Everything ferry-train is told: data, model, hyper-parameters, cluster and reporting. Every
// rank of a job parses the same command line into the same TrainOptions (the job's table
// specifications derive from it, and the coordinator checks that they match).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/data/parse.h"
#include "models/io/model.h"
#include "models/io/model_writer.h"
#include "ps/job.h"

namespace ferry::models {

struct TrainOptions {
  // Data.
  std::vector<std::string> train_files;
  std::vector<std::string> test_files;
  Format format = Format::kLibsvm;
  uint64_t hash_seed = 0;
  uint32_t hash_bits = 0;
  int parse_threads = 1;
  bool strict = false;

  // Model and optimisation. Negative hyper-parameters mean "the model's default"
  // (DefaultHyper in model_def.cc), which is what works without tuning.
  ModelKind model = ModelKind::kFtrl;
  std::string optimizer = "adagrad";  // lr only: sgd | adagrad
  float learning_rate = -1.0f;        // sgd / adagrad / the FM factors / the MLP embeddings
  float l1 = -1.0f;                   // ftrl (and the linear parts of fm and mlp)
  float l2 = -1.0f;
  float alpha = -1.0f;                // ftrl
  float beta = -1.0f;                 // ftrl
  float dense_learning_rate = 1e-3f;  // mlp: Adam on the dense layers
  uint32_t factors = 8;               // fm: k
  uint32_t embed_dim = 8;             // mlp: E
  std::vector<uint32_t> hidden = {64, 32};
  uint32_t fields = 0;  // mlp: F; 0 = from the format (criteo 39) or the first train file
  bool wide = true;     // mlp: a linear (wide) part next to the MLP
  float init_std = 0.01f;
  uint64_t seed = 1;
  uint32_t epochs = 1;
  uint32_t batch_size = 256;

  // Job.
  uint32_t servers = 2;
  uint32_t workers = 2;
  uint32_t replicas = 1;        // ps::JobSpec::replicas
  double peer_timeout_s = 4.0;  // ps::JobSpec::peer_timeout
  std::string transport = "auto";
  ps::ConsistencySpec consistency;  // asp by default
  std::string secret;
  // Push wire options (ps::JobSpec): fp16 gradients; drop gradient rows whose largest |g| is
  // below push_filter (0: off). Both off by default.
  bool fp16_push = false;
  float push_filter = 0.0f;

  // Checkpoints (ps/checkpoint.h). Every checkpoint_every batches (bsp: one clock per batch),
  // a consistent checkpoint of every server into checkpoint_dir/clock-C with each worker's data
  // position; 0 with a directory: kDefaultCheckpointEvery. `resume`: a checkpoint, or a
  // directory of periodic ones (its newest): the job restores the model and, from a periodic
  // checkpoint, goes on from its clock with each worker at its recorded data position, so that
  // the final model is the one an uninterrupted run makes, bit for bit.
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;
  std::string resume;
  static constexpr uint64_t kDefaultCheckpointEvery = 1000;

  // Output.
  std::string model_out;
  ModelFormat model_format = ModelFormat::kBinary;
  std::string metrics_json;
  uint64_t eval_every = 0;         // batches (of worker 0) between streaming evaluations; 0: none
  uint64_t eval_samples = 100000;  // test samples a streaming evaluation reads
  enum class Progress { kAuto, kAlways, kNever };
  Progress progress = Progress::kAuto;
  bool quiet = false;
};

// Checks what the options can check alone (files exist is the readers' job).
Status ValidateTrainOptions(const TrainOptions& o);

}  // namespace ferry::models
