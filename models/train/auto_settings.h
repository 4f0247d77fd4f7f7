// Defaults that follow the data: the settings ferry-train derives from the size of the training
// data when the user leaves them to it (docs/training.md, "Defaults and the data-size rule").
//
//   TrainOptions o = ...;                                  // from the command line
//   FERRY_ASSIGN_OR_RETURN(TrainOptions r, ResolveAutoSettings(o));
//   // r.batch_size, r.max_epochs, r.validation_fraction are set; r.data_samples says why
//
// The size is an ESTIMATE every rank computes alike from the same bytes (servers too, so that
// any server-side setting could depend on it): the first lines of the training files give
// samples per byte, the file sizes the bytes (a gzip file's uncompressed size from its trailer).
// Small inputs are read whole, so their count is exact.
//
// The rule (AutoRuleFor, pure, tested alone; constants from the sweep in perf/train/sweep.py,
// results in docs/perf/training.md):
//   batch_size  per worker: the power of two nearest N / kUpdatesPerEpoch, within
//               [kMinBatch, kMaxBatch]: small data gets enough optimizer steps per pass
//   max_epochs  ceil(kSampleBudget / N), within [1, kMaxEpochs]: a cap that lets 10^3-sample sets
//               take their hundred passes and stops 10^9-sample sets after one
//   patience    ceil(kPatienceSamples / N) passes without an improvement, within [2, 10]: on
//               small data the held-out loss is noisy (a few hundred lines) and the first
//               passes can overshoot before they settle, and a pass costs next to nothing (with
//               patience 2, 1 run in 3 on 1,200 documents stopped at pass 3 with twice the
//               logloss); on large data two passes is already expensive enough
//   validation  kValidationFraction of the training lines held out (by line hash) when passes are
//               automatic and no --validation file is given; kRefitValidationFraction when a
//               refit follows (the held-out lines train the final model anyway: a larger
//               fraction only makes the pass count more reliable; 1,500 documents: logloss
//               0.354-0.358 against 0.357-0.364 over 5 runs)
//   step scale  1 / (root mean square of the feature values), within [1e-3, 1e3]: the default
//               steps (FTRL alpha, Adagrad rates) are per unit of feature value, so data whose
//               values are 0.1 (unit-norm text rows) gets steps 10 times larger, as the weights
//               it needs are (scaling every value by c scales the optimal weights by 1 / c)
//   refit       when passes are automatic and the held-out lines come from the training files,
//               N <= kRefitMaxSamples and no checkpoints are written: once the passes stop, a
//               fresh model trains on every line for the best pass count (the held-out tenth
//               is worth 0.5-3% of logloss below 10^5 samples, less above, at twice the time)
// N is the number of training samples left after the held-out fraction.
//
// A stream (StreamTraining) has no size and is read once, so nothing is probed: one pass, the
// batch size of large data (kMaxBatch), step scale 1, no held-out split and no refit (each sample
// is scored before it is trained on instead). What a stream cannot do is refused here, naming
// the flag: --epochs other than 1, held-out data, a refit, ssp, another input next to the
// stream, and libffm models with fields but no --fields (counting them would read the stream).
// bsp and checkpoints only with --follow DIR (LockstepStream): a pipe cannot be read again, so
// its positions could not be resumed; there, --max-samples and --window-seconds are refused
// (each worker reads its own files, and rounds must fall on the same clock everywhere).
//
// Thread-safety: pure functions (EstimateTrainingSamples reads files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/train/train_options.h"
#include "transport/status.h"

namespace ferry::models {

// Whether the job trains from a stream: --follow, or one training input that is "-" or a FIFO,
// socket or character device (models/data/input.h IsStreamInput).
bool StreamTraining(const TrainOptions& o);
// Set to "dealt" by ferry-train's local launcher (tools/train/stream_launch.h) for ranks whose
// standard input is their share of the stream; StreamDealtHere reads it.
inline constexpr char kStreamDealtEnv[] = "FERRY_TRAIN_STREAM";
bool StreamDealtHere();
// kStreamDealtEnv's value for workers of a lockstep stream on ferry-train's local cluster: their
// standard input is a pipe from the launcher whose end means "stop following" (the first Ctrl-C).
inline constexpr char kStreamStopOnStdin[] = "stop-on-stdin";
bool StreamStopOnStdin();
// kStreamDealtEnv's value for the ranks of ferry-train's local cluster when workers may join and
// leave (--worker-join-slots): rank 0 deals the stream as under a launcher (stream_ranks.h), from
// the launcher's standard input when the stream is "-".
inline constexpr char kStreamRankZero[] = "rank-0";
bool StreamFromLauncher();
// A stream trained in lockstep (--follow DIR with --consistency bsp): no dealer; every worker
// follows the directory itself and takes every W-th file in name order (stream_input.h
// FollowShare), one batch per clock, so a checkpoint's clock fixes every worker's position and
// --resume continues exactly once. Otherwise a stream is dealt (stream_dealer.h).
bool LockstepStream(const TrainOptions& o);
// Whether the training files are dealt to the workers as they ask (worker join slots: workers
// join and leave the running job; ps::Worker::TakeWork, models/data/reader.h "Dealt input"), and
// whether o (resolved) allows worker join slots: files in fixed passes with nothing decided
// between them (no held-out data), no periodic checkpoints, resume, export directory or backup
// workers (each needs every worker's place in the data, or the same workers throughout); or a
// stream that rank 0 deals (not lockstep), without export directory or backup workers.
bool DealtTraining(const TrainOptions& o);
Status CheckDealtTraining(const TrainOptions& o);

struct SampleEstimate {
  uint64_t samples = 0;  // estimated samples in all the files together
  bool exact = false;    // the probe read every line
  double value_rms = 1;  // root mean square of the probed feature values (1 without any)
};

// Reads at most kProbeSamples samples from the start of `files` (as one shard) and scales by
// their bytes. kInvalidArgument when the files hold no sample
// (NoSampleError, reader.h: what they hold instead); file errors name the file.
Result<SampleEstimate> EstimateTrainingSamples(const TrainOptions& o);

struct AutoRule {
  uint32_t batch_size = 0;
  uint32_t max_epochs = 0;
  uint32_t patience = 0;
  double step_scale = 1;
};

inline constexpr uint32_t kUpdatesPerEpoch = 1024;
inline constexpr uint32_t kMinBatch = 16;
inline constexpr uint32_t kMaxBatch = 256;
inline constexpr uint32_t kMaxEpochs = 100;
inline constexpr double kSampleBudget = 1e9;
inline constexpr double kValidationFraction = 0.1;
inline constexpr double kRefitValidationFraction = 0.2;
inline constexpr uint64_t kProbeSamples = 20000;
inline constexpr uint64_t kRefitMaxSamples = 100000;
inline constexpr double kPatienceSamples = 2e5;
inline constexpr uint32_t kMinPatience = 2, kMaxPatience = 10;

// The rule for `train_samples` (after any held-out fraction) whose feature values have root
// mean square value_rms. Pure.
AutoRule AutoRuleFor(ModelKind kind, uint64_t train_samples, double value_rms);

// Whether a refit can follow the passes: automatic ones, held-out lines from the training files
// (a fraction > 0 and no --validation file), no checkpoints (a resumed job could not tell the
// refit's passes from the others) and no resume.
bool CanRefit(const TrainOptions& o);

// Fills what the user left automatic: batch_size (0), max_epochs (0), patience (0),
// validation_fraction (< 0), refit (kAuto), step_scale, and records the estimate in
// data_samples. Everything else is copied.
Result<TrainOptions> ResolveAutoSettings(const TrainOptions& o);

}  // namespace ferry::models
