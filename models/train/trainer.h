// The training job of one rank: on a worker, passes over its shard of the training files
// (step.h) until the job decides it is done (early_stop.h), streaming evaluation on worker 0,
// held-out evaluation after each pass, the final evaluation over every worker's shard of the
// test files, the export of the model kept, and the report; a server rank just serves
// (ps::Node::Join).
//
// Passes (TrainOptions::epochs): a fixed number, or automatic (0): after each pass every
// worker scores its shard of the held-out data (the validation files, or the training lines the
// held-out hash sets aside), the sums are all-gathered, and every worker reaches the same
// verdict. The best pass's model is the one kept: when a later pass is worse, the kept model
// was saved when it was the best (its test figures taken then, and a checkpoint of it when a
// model file is wanted), and the export and the report are that model's. With a refit
// (TrainOptions::refit: small data whose held-out lines came from the training files), the
// tables are emptied once the passes stop and a fresh model trains on every line for the kept
// pass count: that model is scored and exported.
//
// Consistency (TrainOptions::consistency):
//   asp      the next batch's pulls are posted before this batch computes (one batch of
//            staleness, no clocks);
//   bsp/ssp  one Clock() per batch. Every worker runs the same number of steps per epoch (the
//            largest shard's batch count, known from a counting pass shared with a gather);
//            a worker whose shard is done takes empty steps, so clocks stay in step.
// Checkpoints (bsp): besides the servers' periodic checkpoints, worker 0 keeps the record of
// finished passes in CHECKPOINT_DIR/EPOCHS and the kept model in CHECKPOINT_DIR/kept-E
// (epoch_log.h), so a resumed job decides and exports exactly as the uninterrupted one.
// Outcome on worker 0: a JSON line per evaluation (--metrics-json; "eval" for streaming ones,
// "epoch" after each pass, the last one "final" with the kept model's test logloss, AUC and
// calibration), a progress display, one log line per pass and why training stopped, the summary.
//
// Continuous training (auto_settings.h StreamTraining: the training input is standard input or a
// FIFO): one asp pass over the stream, each batch scored by the model before its push, and a
// "window" line of metrics per TrainOptions::stream window (logloss, exact AUC, calibration, RMSE
// and MAE of the probability, samples/s) on worker 0; the end as above (test figures, export) when
// the stream ends. On a local cluster the launcher deals the stream to the workers
// (models/data/stream_dealer.h).
//
// Blocking: RunTraining returns when this rank's part is done and the rank has left the job
// (Node::Join). Threading: the thread that owns `node`. Ownership: `node`, `o` and `def` are
// borrowed for the call; `report` is written on worker 0 only.
#pragma once

#include <cstdint>
#include <string>

#include "models/train/evaluate.h"
#include "models/train/model_def.h"
#include "models/train/train_options.h"
#include "ps/node.h"

namespace ferry::models {

struct TrainReport {
  uint64_t samples = 0;      // trained, all workers and epochs
  double train_seconds = 0;  // the slowest worker's loop
  double samples_per_sec = 0;
  double train_logloss = 0;      // mean over all trained samples
  uint32_t epochs = 0;           // passes made
  uint32_t kept_epoch = 0;       // the pass whose model was kept and exported (with a refit: the
                                 // pass count the fresh model trained on all the lines)
  bool refit = false;            // the exported model is the refit one (TrainOptions::refit)
  double logit_offset = 0;       // intercept calibration on the held-out data (0: none)
  std::string stop_reason;       // why the passes ended
  uint32_t batch_size = 0;       // per worker, as resolved
  EvalMetrics validation;        // of the kept model (count 0: no held-out data)
  EvalMetrics test;              // of the kept model (count 0: no test files)
  uint64_t malformed = 0;        // training lines skipped
  uint32_t servers_removed = 0;  // shard servers that left (--elastic) or failed over meanwhile
  uint32_t servers_joined = 0;   // join slots that joined and took shards (--join-slots)
  uint32_t workers_joined = 0;   // worker join slots that joined (--worker-join-slots)
  uint32_t workers_left = 0;     // workers that left the job (SIGTERM, --worker-join-slots)
};

// Runs this rank's part. On worker 0 fills `report` (when not null). Every rank returns the
// first failure it saw; servers return once the job ended. `o` must have been through
// ResolveAutoSettings (auto_settings.h).
Status RunTraining(ps::Node& node, const TrainOptions& o, const ModelDef& def, TrainReport* report);

}  // namespace ferry::models
