// Held-out scoring and merging (evaluate.h).
#include "models/train/evaluate.h"

#include <cmath>
#include <cstring>

#include "models/eval/metrics.h"

namespace ferry::models {

namespace {

// Little-endian on every platform this runs on (x86-64); the parts never leave the job.
constexpr size_t kHeader = 5 * 8;

}  // namespace

std::vector<uint8_t> EvalPart::Encode() const {
  const uint64_t n = scores.size();
  std::vector<uint8_t> out(kHeader + 8 * n);
  uint8_t* p = out.data();
  auto put = [&p](const void* v, size_t bytes) {
    if (bytes != 0) std::memcpy(p, v, bytes);  // an empty vector's data() may be null
    p += bytes;
  };
  put(&count, 8), put(&loss_sum, 8), put(&prob_sum, 8), put(&label_sum, 8), put(&n, 8);
  put(scores.data(), 4 * n), put(labels.data(), 4 * n);
  return out;
}

Result<EvalPart> EvalPart::Decode(std::span<const uint8_t> in) {
  if (in.size() < kHeader) return ProtocolError("evaluation part is truncated");
  EvalPart part;
  const uint8_t* p = in.data();
  auto get = [&p](void* v, size_t bytes) {
    if (bytes != 0) std::memcpy(v, p, bytes);
    p += bytes;
  };
  uint64_t n = 0;
  get(&part.count, 8), get(&part.loss_sum, 8), get(&part.prob_sum, 8), get(&part.label_sum, 8);
  get(&n, 8);
  if (n > (in.size() - kHeader) / 8 || in.size() != kHeader + 8 * n ||
      (n != 0 && n != part.count)) {
    return ProtocolError("evaluation part has a bad length");
  }
  part.scores.resize(n);
  part.labels.resize(n);
  get(part.scores.data(), 4 * n), get(part.labels.data(), 4 * n);
  return part;
}

Status ScoreShard(Stepper& step, Reader& reader, uint32_t batch_size, bool keep_scores,
                  EvalPart* part) {
  Stepper::Slot slot;
  std::vector<float> probs;
  Batch b;
  while (true) {
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, reader.Next(batch_size, &b));
    if (n == 0) break;
    FERRY_RETURN_IF_ERROR(step.Begin(b, &slot, Stepper::Use::kScore));
    FERRY_ASSIGN_OR_RETURN(double loss, step.Finish(&slot, /*train=*/false, &probs));
    part->count += n;
    part->loss_sum += loss;
    for (size_t i = 0; i < n; ++i) {
      part->prob_sum += probs[i];
      part->label_sum += b.labels[i];
    }
    if (keep_scores) {
      part->scores.insert(part->scores.end(), probs.begin(), probs.end());
      part->labels.insert(part->labels.end(), b.labels.begin(), b.labels.end());
    }
  }
  return Status::Ok();
}

EvalMetrics MetricsOf(const EvalPart& m, bool with_auc) {
  EvalMetrics out;
  out.count = m.count;
  if (m.count == 0) return out;
  const double n = static_cast<double>(m.count);
  out.logloss = m.loss_sum / n;
  out.positive_rate = m.label_sum / n;
  if (m.label_sum > 0) out.calibration = m.prob_sum / m.label_sum;
  if (with_auc && m.scores.size() == m.count) {
    AucAccumulator auc;
    if (auc.Add(m.scores, m.labels).ok()) out.auc = auc.Compute().auc;
  }
  return out;
}

void EvalPart::Merge(const EvalPart& p) {
  count += p.count;
  loss_sum += p.loss_sum;
  prob_sum += p.prob_sum;
  label_sum += p.label_sum;
  scores.insert(scores.end(), p.scores.begin(), p.scores.end());
  labels.insert(labels.end(), p.labels.begin(), p.labels.end());
}

Result<EvalMetrics> MergeParts(const std::vector<std::vector<uint8_t>>& parts) {
  EvalPart all;
  bool scored = true;
  for (const auto& bytes : parts) {
    if (bytes.empty()) continue;  // a worker that sent none (an elastic job's, absent)
    FERRY_ASSIGN_OR_RETURN(EvalPart p, EvalPart::Decode(bytes));
    if (p.count > 0 && p.scores.empty()) scored = false;
    all.Merge(p);
  }
  return MetricsOf(all, scored);
}

ProbabilityErrors ProbabilityErrorsOf(const EvalPart& part) {
  ProbabilityErrors e;
  if (part.scores.empty() || part.scores.size() != part.labels.size()) return e;
  double squares = 0, absolute = 0;
  for (size_t i = 0; i < part.scores.size(); ++i) {
    const double d = static_cast<double>(part.scores[i]) - part.labels[i];
    squares += d * d;
    absolute += std::fabs(d);
  }
  const double n = static_cast<double>(part.scores.size());
  e.rmse = std::sqrt(squares / n);
  e.mae = absolute / n;
  return e;
}

}  // namespace ferry::models
