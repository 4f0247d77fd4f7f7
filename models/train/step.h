// One minibatch on a worker, in two stages so that the next batch's pulls overlap this batch's
// compute (asp):
//   Begin   unique ids of the batch (+ the bias id), one pull per table of those ids (the dense
//           tables of the MLP: their one row), posted without waiting;
//   Finish  wait for the rows, run the model's kernel on them IN PLACE (pointers into the pull
//           arena), then, when training, push the gradient rows the kernel filled (registered
//           memory laid out like the rows: no packing) and release the rows.
// Pushes stay in flight; Drain() waits for them (Clock/Barrier also do).
//
// Threading: the worker's thread only. Ownership: a Stepper borrows the worker and the model
// definition (they outlive it). Blocking: Begin posts and returns; Finish waits for the slot's
// pulls; Drain waits for every push in flight.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "models/data/batch.h"
#include "models/kernels/mlp_dense.h"
#include "models/train/model_def.h"
#include "ps/worker/dedupe_map.h"
#include "ps/worker/worker.h"

namespace ferry::models {

// Unique ids of a batch: uniq[u] for u in [0, n), uidx[j] = u of occurrence j.
class UniqueIds {
 public:
  void Build(const Batch& batch, bool add_bias);
  const std::vector<uint64_t>& ids() const { return uniq_; }
  const std::vector<uint32_t>& uidx() const { return uidx_; }
  uint32_t bias() const { return bias_; }

 private:
  // Fibonacci hashing: ids are already hashes, any odd multiplier spreads them.
  struct IdHash {
    size_t operator()(uint64_t id) const {
      return static_cast<size_t>((id * 0x9e3779b97f4a7c15ull) >> 20);
    }
  };
  ps::DedupeMap<IdHash> map_;
  std::vector<uint64_t> uniq_;
  std::vector<uint32_t> uidx_;
  uint32_t bias_ = 0xffffffffu;
};

// Kernel accessors over the worker's pulled rows and gradient rows (model_kernel.h).
struct PulledAccessor {
  const ps::PulledRows* rows = nullptr;
  const float* operator()(uint32_t u) const { return (*rows)[u]; }
};
struct GradAccessor {
  const ps::GradRows* grads = nullptr;
  float* operator()(uint32_t u) const { return (*grads)[u]; }
};

class Stepper {
 public:
  struct Slot {
    const Batch* batch = nullptr;
    UniqueIds ids;
    std::vector<ps::Ticket> pulls;  // per table of the model (0 = none)
    bool active = false;
  };

  Stepper(ps::Worker& worker, const ModelDef& def);

  // What a batch's pulls are for: training pulls create the rows of new ids (the push that
  // follows updates them); scoring pulls (evaluation) read only, an id the model lacks counting
  // as zeros, as in ferry-predict, so a test set's features never enter the model.
  enum class Use { kTrain, kScore };
  Status Begin(const Batch& batch, Slot* slot, Use use);
  // Returns the batch's summed logloss; fills `probs` (one per sample) when not null. Without
  // training, the logit offset (SetLogitOffset) is applied to the probabilities and the loss.
  Result<double> Finish(Slot* slot, bool train, std::vector<float>* probs);
  // Intercept calibration of scoring passes (models/eval/calibration.h); 0: none.
  void SetLogitOffset(double offset) { offset_ = offset; }
  // Releases a begun slot without computing (error paths).
  void Abandon(Slot* slot);
  Status Drain();

 private:
  Status ReapPushes(size_t keep);

  ps::Worker& w_;
  const ModelDef& def_;
  std::vector<uint32_t> table_ids_;  // def.tables[i] -> the job's table id
  std::deque<ps::Ticket> pushes_;
  std::vector<float> probs_;
  double offset_ = 0;
  MlpWorkspace ws_;
  std::vector<const float*> dense_;
  std::vector<float*> dense_grad_;
  std::vector<PulledAccessor> rows_view_;
  std::vector<GradAccessor> grads_view_;
  const std::vector<uint64_t> zero_key_{0};
};

}  // namespace ferry::models
