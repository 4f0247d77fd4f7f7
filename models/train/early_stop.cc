// Early stopping on held-out logloss (early_stop.h).
#include "models/train/early_stop.h"

#include <cmath>
#include <cstdio>

namespace ferry::models {

namespace {

std::string Epochs(uint32_t n) {
  return std::to_string(n) + (n == 1 ? " epoch" : " epochs");
}

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g%%", 100.0 * fraction);
  return buf;
}

}  // namespace

EpochVerdict EarlyStopping::Observe(uint32_t epoch, double loss) {
  EpochVerdict v;
  history_.push_back({epoch, loss});
  if (!std::isfinite(loss)) {
    // A diverged model never becomes the best; going on would not bring it back.
    v.stop = true;
    v.reason = "the held-out logloss is not finite (the model diverged)";
    return v;
  }
  if (best_epoch_ == 0 || loss < best_loss_) {
    v.best = true;
    best_epoch_ = epoch;
    best_loss_ = loss;
  }
  // Improvement is measured from the loss of the last improvement, not from the best: a run of
  // gains each below min_improvement still adds up to one once their sum passes it.
  if (history_.size() == 1 || loss < reference_ * (1.0 - options_.min_improvement)) {
    v.improved = true;
    reference_ = loss;
    stale_ = 0;
  } else {
    ++stale_;
  }
  if (stale_ >= options_.patience) {
    v.stop = true;
    v.reason = "the held-out logloss has not improved by " + Percent(options_.min_improvement) +
               " for " + Epochs(stale_);
  } else if (epoch >= options_.max_epochs) {
    v.stop = true;
    v.reason = "reached the cap of " + Epochs(options_.max_epochs);
  }
  return v;
}

EpochVerdict EarlyStopping::ObserveWithoutLoss(uint32_t epoch) const {
  EpochVerdict v;
  if (epoch >= options_.max_epochs) {
    v.stop = true;
    v.reason = Epochs(options_.max_epochs) + " done";
  }
  return v;
}

}  // namespace ferry::models
