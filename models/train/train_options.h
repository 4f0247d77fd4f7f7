// Everything ferry-train is told: data, model, hyper-parameters, cluster and reporting. Every
// rank of a job parses the same command line into the same TrainOptions (the job's table
// specifications derive from it, and the coordinator checks that they match).
//
// Thread-safety: a value type; built on the main thread, then read only (the trainer borrows it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/data/parse.h"
#include "models/io/model.h"
#include "models/io/model_writer.h"
#include "models/train/feature_options.h"
#include "ps/job/job.h"

namespace ferry::models {

struct TrainOptions {
  // Data.
  std::vector<std::string> train_files;
  std::vector<std::string> test_files;
  // Held-out data for early stopping: these files, or (when empty) validation_fraction of the
  // training lines, chosen by a hash of the line (models/data/reader.h, Holdout). A negative
  // fraction means the default: kValidationFraction when the passes are automatic and no
  // validation file is given, else none (auto_settings.h).
  std::vector<std::string> validation_files;
  double validation_fraction = -1.0;
  Format format = Format::kLibsvm;
  std::string field_map;  // libsvm: a file mapping feature indices to fields (models/data)
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
  float l2 = -1.0f;                   // ftrl and its linear parts; the lr model's weights
  float factor_l2 = -1.0f;            // fm / ffm factors, mlp / deepfm embeddings
  float initial_accumulator = -1.0f;  // Adagrad's squared-gradient sum of a new row
  float alpha = -1.0f;                // ftrl
  float beta = -1.0f;                 // ftrl
  float dense_learning_rate = 1e-3f;  // mlp: Adam on the dense layers
  uint32_t factors = 0;               // fm, ffm: k; 0 = the model's default (fm 8, ffm 4)
  uint32_t embed_dim = 8;             // mlp: E
  std::vector<uint32_t> hidden = {64, 32};
  // ffm, mlp, deepfm: F; 0 = from the format (criteo 39), the field map, or the first train file
  uint32_t fields = 0;
  bool wide = true;        // mlp: a linear (wide) part next to the MLP
  float init_std = -1.0f;  // factors and embeddings; negative: the default (model_def.h)
  uint64_t seed = 1;
  // Passes over the training data. 0 = automatic: passes go on while the held-out logloss
  // improves (early_stop.h), at most max_epochs. With a fixed count and held-out data, every
  // pass is still evaluated and the best one is the model kept.
  uint32_t epochs = 0;
  uint32_t max_epochs = 0;        // 0: the data-size rule (auto_settings.h)
  uint32_t patience = 0;          // epochs without an improvement before stopping; 0: the rule
  double min_improvement = 1e-3;  // relative gain in held-out logloss that counts
  uint32_t batch_size = 0;        // per worker; 0: the data-size rule (auto_settings.h)
  // After automatic passes that held out part of the training lines: empty the tables and train
  // a fresh model on every line for the best pass count. kAuto: on for small data without
  // checkpoints (auto_settings.h); ResolveAutoSettings turns it into kOn or kOff.
  enum class Refit { kAuto, kOn, kOff };
  Refit refit = Refit::kAuto;
  // With held-out data: fit one logit offset on it that calibrates the kept model (mean
  // prediction = positive rate; models/eval/calibration.h), applied to its test scores and
  // carried by the exported model.
  bool calibrate = true;
  // Set by ResolveAutoSettings: the estimated training samples (after any held-out fraction)
  // the rule was applied to, and the factor the default steps are multiplied by (1 / the
  // feature values' root mean square; auto_settings.h).
  uint64_t data_samples = 0;
  double step_scale = 1.0;

  // Job.
  uint32_t servers = 2;
  uint32_t workers = 2;
  uint32_t replicas = 1;    // ps::JobSpec::replicas
  uint32_t spares = 0;      // ps::JobSpec::spares (repairs lost copies)
  uint32_t shards = 0;      // ps::JobSpec::shards (0: one per shard server; elastic: 4)
  bool elastic = false;     // ps::JobSpec::elastic (server ranks may leave)
  uint32_t join_slots = 0;  // ps::JobSpec::join_slots (server ranks that join later)
  int join = -1;            // local cluster: start only this join slot, into a running job
  // ps::JobSpec::worker_join_slots: worker ranks that join later; with them the training data is
  // dealt to the workers as they ask (ps::Worker::TakeWork), and a worker may leave (SIGTERM).
  uint32_t worker_join_slots = 0;
  int join_worker = -1;  // local cluster: start only this worker join slot, into a running job
  uint32_t backup_workers = 0;  // ps::JobSpec::backup_workers (bsp: stragglers' clocks dropped)
  uint32_t server_threads = 1;  // ps::JobSpec::server_threads
  double peer_timeout_s = 4.0;  // ps::JobSpec::peer_timeout
  std::string transport = "auto";
  ps::ConsistencySpec consistency;  // asp by default
  std::string secret;
  // Push wire options (ps::JobSpec): fp16 gradients; drop gradient rows whose largest |g| is
  // below push_filter (0: off). Both off by default.
  bool fp16_push = false;
  float push_filter = 0.0f;

  // Checkpoints (ps/job/checkpoint.h). Every checkpoint_every batches (bsp: one clock per batch),
  // a consistent checkpoint of every server into checkpoint_dir/clock-C with each worker's data
  // position; 0 with a directory: kDefaultCheckpointEvery. `resume`: a checkpoint, or a
  // directory of periodic ones (its newest): the job restores the model and, from a periodic
  // checkpoint, goes on from its clock with each worker at its recorded data position, so that
  // the final model is the one an uninterrupted run makes, bit for bit.
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;
  std::string resume;
  static constexpr uint64_t kDefaultCheckpointEvery = 1000;

  // Continuous training (stream_loop.h): the training input is a stream (--train - / a FIFO);
  // one pass, scored before it is trained on (progressive evaluation), reported per window.
  StreamOptions stream;
  // Feature admission and eviction (feature_flags.h): which keys get a row, which rows go.
  FeatureOptions features;
  // Incremental export for serving (feature_options.h): versions in an export directory.
  ExportOptions exports;

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
