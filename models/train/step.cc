// Minibatch stages over the parameter server (step.h).
#include "models/train/step.h"

#include "models/eval/calibration.h"
#include "models/train/model_kernel.h"

namespace ferry::models {

void UniqueIds::Build(const Batch& batch, bool add_bias) {
  map_.Reset(batch.ids.size() + 1);
  uniq_.clear();
  uidx_.resize(batch.ids.size());
  auto find = [&](uint64_t id) -> uint32_t {
    bool inserted = false;
    const uint32_t u = map_.FindOrInsert(id, static_cast<uint32_t>(uniq_.size()), &inserted);
    if (inserted) uniq_.push_back(id);
    return u;
  };
  for (size_t j = 0; j < batch.ids.size(); ++j) uidx_[j] = find(batch.ids[j]);
  bias_ = add_bias ? find(kBiasId) : 0xffffffffu;
}

Stepper::Stepper(ps::Worker& worker, const ModelDef& def) : w_(worker), def_(def) {
  for (const ps::TableSpec& t : def.tables) {
    auto id = w_.TableId(t.name);
    table_ids_.push_back(id.ok() ? *id : 0);
  }
}

Status Stepper::Begin(const Batch& batch, Slot* slot, Use use) {
  slot->batch = &batch;
  slot->ids.Build(batch, def_.linear >= 0);
  slot->pulls.assign(def_.tables.size(), 0);
  slot->active = true;
  ps::PullOptions unique;
  unique.keys_unique = true;
  // Scoring reads the sparse tables only; a dense table's one row is the model's whatever the
  // batch holds (created by the first pull that needs it).
  ps::PullOptions sparse = unique;
  sparse.read_only = use == Use::kScore;
  for (size_t t = 0; t < def_.tables.size(); ++t) {
    const bool dense =
        std::find(def_.dense.begin(), def_.dense.end(), static_cast<int>(t)) != def_.dense.end();
    auto p = dense ? w_.Pull(table_ids_[t], zero_key_, unique)
                   : w_.Pull(table_ids_[t], slot->ids.ids(), sparse);
    if (!p.ok()) {
      Abandon(slot);
      return p.status();
    }
    slot->pulls[t] = *p;
  }
  return Status::Ok();
}

void Stepper::Abandon(Slot* slot) {
  for (ps::Ticket t : slot->pulls) {
    if (t != 0) w_.Release(t);
  }
  slot->pulls.clear();
  slot->active = false;
}

Status Stepper::ReapPushes(size_t keep) {
  while (!pushes_.empty()) {
    const ps::Ticket t = pushes_.front();
    if (pushes_.size() <= keep && !w_.Test(t)) break;
    Status s = w_.Wait(t);
    w_.Release(t);
    pushes_.pop_front();
    FERRY_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

Status Stepper::Drain() {
  return ReapPushes(0);
}

Result<double> Stepper::Finish(Slot* slot, bool train, std::vector<float>* probs) {
  const Batch& b = *slot->batch;
  const size_t nt = def_.tables.size();
  std::vector<ps::PulledRows> rows(nt);
  std::vector<ps::GradRows> grads(nt);
  Status st;
  for (size_t t = 0; t < nt && st.ok(); ++t) {
    st = w_.Wait(slot->pulls[t]);
    if (!st.ok()) break;
    auto r = w_.Rows(slot->pulls[t]);
    if (!r.ok()) {
      st = r.status();
      break;
    }
    rows[t] = *r;
    if (train) {
      auto g = w_.Gradients(slot->pulls[t]);
      if (!g.ok()) {
        st = g.status();
        break;
      }
      grads[t] = *g;
    }
  }
  if (!st.ok()) {
    Abandon(slot);
    return st;
  }
  std::vector<float>& p = probs != nullptr ? *probs : probs_;
  p.resize(b.size());
  dense_.clear();
  dense_grad_.clear();
  for (int t : def_.dense) {
    dense_.push_back(rows[t][0]);
    if (train) dense_grad_.push_back(grads[t][0]);
  }
  rows_view_.resize(nt);
  grads_view_.resize(nt);
  for (size_t t = 0; t < nt; ++t) {
    rows_view_[t] = PulledAccessor{&rows[t]};
    grads_view_[t] = GradAccessor{&grads[t]};
  }
  Result<double> loss = train ? RunModelKernel<true>(def_, b, slot->ids.uidx(), slot->ids.bias(),
                                                     std::span<const PulledAccessor>(rows_view_),
                                                     std::span<const GradAccessor>(grads_view_),
                                                     dense_, dense_grad_, ws_, p)
                              : RunModelKernel<false>(def_, b, slot->ids.uidx(), slot->ids.bias(),
                                                      std::span<const PulledAccessor>(rows_view_),
                                                      std::span<const GradAccessor>(grads_view_),
                                                      dense_, dense_grad_, ws_, p);
  if (loss.ok() && train) {
    for (size_t t = 0; t < nt; ++t) {
      auto push = w_.PushGradients(slot->pulls[t]);
      if (!push.ok()) {
        loss = push.status();
        break;
      }
      pushes_.push_back(*push);
    }
  }
  Abandon(slot);  // releases the rows (the pushes keep their keys and gradients alive)
  if (!loss.ok()) return loss;
  if (!train && offset_ != 0) loss = ApplyOffset(offset_, p, b.labels);
  // One batch of pushes in flight: more would let the next pulls read older weights (asp
  // staleness measurably hurt FM at 4 batches).
  FERRY_RETURN_IF_ERROR(ReapPushes(nt));
  return loss;
}

}  // namespace ferry::models
