// When training is done: the decision taken after each pass from the logloss on held-out data.
//
//   EarlyStopping stop({.max_epochs = 100, .patience = 2, .min_improvement = 1e-3});
//   for (uint32_t epoch = 1;; ++epoch) {
//     TrainOnePass();
//     const EpochVerdict v = stop.Observe(epoch, HeldOutLogloss());
//     if (v.best) KeepThisModel();            // the model exported at the end is the best one
//     if (v.stop) { Log(v.reason); break; }
//   }
//
// Rules (docs/training.md, "When training stops"):
//  - the best epoch is the one with the lowest held-out loss so far (ties: the earlier one);
//  - an epoch *improves* when its loss is below best * (1 - min_improvement): smaller gains
//    still make it the best model, but do not reset the patience;
//  - training stops after `patience` epochs in a row without an improvement, at max_epochs, or
//    when the loss is not finite (a diverged model: the best one so far is kept);
//  - without held-out data (Observe is never called with a loss) only max_epochs ends it.
// Every worker feeds the same sequence of losses (an all-gathered sum, added in worker order),
// so every worker reaches the same verdicts without another round of messages.
//
// Thread-safety: a value type, one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::models {

struct EarlyStoppingOptions {
  uint32_t max_epochs = 100;      // >= 1
  uint32_t patience = 2;          // >= 1 epochs without an improvement before stopping
  double min_improvement = 1e-3;  // relative, >= 0
};

struct EpochVerdict {
  bool best = false;      // this epoch's model is the best so far: keep it
  bool improved = false;  // by more than min_improvement (resets the patience)
  bool stop = false;      // no more epochs
  std::string reason;     // why it stops (empty when it goes on)
};

// One observed epoch (what a resumed job restores).
struct EpochRecord {
  uint32_t epoch = 0;
  double loss = 0;
};

class EarlyStopping {
 public:
  explicit EarlyStopping(const EarlyStoppingOptions& options) : options_(options) {}

  // The verdict after `epoch` (1-based, increasing by one per call) whose held-out mean
  // logloss is `loss`.
  EpochVerdict Observe(uint32_t epoch, double loss);
  // The verdict after `epoch` when there is no held-out data: stop only at max_epochs.
  EpochVerdict ObserveWithoutLoss(uint32_t epoch) const;

  uint32_t best_epoch() const { return best_epoch_; }  // 0 before any loss
  double best_loss() const { return best_loss_; }
  uint32_t epochs_without_improvement() const { return stale_; }
  const std::vector<EpochRecord>& history() const { return history_; }
  const EarlyStoppingOptions& options() const { return options_; }

 private:
  EarlyStoppingOptions options_;
  std::vector<EpochRecord> history_;
  uint32_t best_epoch_ = 0;
  double best_loss_ = 0;
  double reference_ = 0;  // the loss the last improvement reached (patience counts from it)
  uint32_t stale_ = 0;
};

}  // namespace ferry::models
