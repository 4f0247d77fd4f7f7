// Scoring held-out data with the model on the servers, and merging every worker's part.
//
// A worker scores its shard of a data set (validation or test) through the Stepper's forward
// pass (the rows come from the servers, nothing is pushed) into an EvalPart; the parts travel
// to the workers that need them as bytes (Worker::GatherFromWorkers) and merge into EvalMetrics:
//
//   EvalPart mine;
//   FERRY_RETURN_IF_ERROR(ScoreShard(stepper, *reader, batch_size, /*keep_scores=*/true, &mine));
//   FERRY_ASSIGN_OR_RETURN(auto parts, worker.GatherFromWorkers(mine.Encode(), /*to_all=*/false));
//   FERRY_ASSIGN_OR_RETURN(EvalMetrics m, MergeParts(parts));   // on worker 0
//
// Calibration is mean prediction / observed positive rate (1 = calibrated, above 1: the model
// over-predicts), as CTR systems report it next to logloss and AUC.
// Parts are merged in worker order, so every worker that merges the same parts gets the same
// numbers bit for bit (the early-stopping decision relies on it).
//
// Thread-safety: value types; ScoreShard drives the worker from the calling thread.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "models/data/reader.h"
#include "models/train/step.h"
#include "transport/status.h"

namespace ferry::models {

struct EvalPart {
  uint64_t count = 0;
  double loss_sum = 0;   // summed logloss (from the kernels' logits: exact, not clamped)
  double prob_sum = 0;   // sum of predicted probabilities
  double label_sum = 0;  // positives
  std::vector<float> scores, labels;  // with keep_scores, for the exact AUC

  void Merge(const EvalPart& other);  // appends other's sums and scores
  std::vector<uint8_t> Encode() const;
  // kProtocol for a truncated or inconsistent encoding.
  static Result<EvalPart> Decode(std::span<const uint8_t> bytes);
};

struct EvalMetrics {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  uint64_t count = 0;
  double logloss = kNaN;      // NaN without samples
  double auc = kNaN;          // NaN without scores or without both classes
  double calibration = kNaN;  // mean prediction / positive rate; NaN without positives
  double positive_rate = kNaN;
};

// Scores every sample `reader` yields (from where it stands to its end) in batches of
// batch_size; adds to *part. The reader is left at its end.
Status ScoreShard(Stepper& step, Reader& reader, uint32_t batch_size, bool keep_scores,
                  EvalPart* part);

// Merges encoded parts (in the order given) into metrics; the AUC only when every part kept its
// scores. kProtocol when a part does not decode.
Result<EvalMetrics> MergeParts(const std::vector<std::vector<uint8_t>>& parts);
EvalMetrics MetricsOf(const EvalPart& merged, bool with_auc);

// Errors of the probabilities against the 0/1 labels, over a part's kept scores: root mean
// square (the Brier score's root) and mean absolute. NaN without scores.
struct ProbabilityErrors {
  double rmse = EvalMetrics::kNaN;
  double mae = EvalMetrics::kNaN;
};
ProbabilityErrors ProbabilityErrorsOf(const EvalPart& part);

}  // namespace ferry::models
