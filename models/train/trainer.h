// The training job of one rank: on a worker, the minibatch loop over its shard of the training
// files (step.h), streaming evaluation on worker 0, the final evaluation over every worker's
// shard of the test files, and the report; a server rank just serves (ps::Node::Join).
//
// Consistency (TrainOptions::consistency):
//   asp      the next batch's pulls are posted before this batch computes (one batch of
//            staleness, no clocks);
//   bsp/ssp  one Clock() per batch. Every worker runs the same number of steps per epoch (the
//            largest shard's batch count, known from a counting pass shared with a gather);
//            a worker whose shard is done takes empty steps, so clocks stay in step.
// Outcome on worker 0: a JSON line per evaluation (--metrics-json; the last one has event
// "final" with the test logloss and AUC), a progress display, and the summary.
#pragma once

#include <cstdint>
#include <string>

#include "models/train/model_def.h"
#include "models/train/train_options.h"
#include "ps/node.h"

namespace ferry::models {

struct TrainReport {
  uint64_t samples = 0;       // trained, all workers and epochs
  double train_seconds = 0;   // the slowest worker's loop
  double samples_per_sec = 0;
  double train_logloss = 0;   // mean over all trained samples
  uint64_t test_samples = 0;
  double test_logloss = 0;
  double test_auc = 0;
  uint64_t malformed = 0;     // training lines skipped
};

// Runs this rank's part. On worker 0 fills `report` (when not null). Every rank returns the
// first failure it saw; servers return once the job ended.
Status RunTraining(ps::Node& node, const TrainOptions& o, const ModelDef& def,
                   TrainReport* report);

}  // namespace ferry::models
