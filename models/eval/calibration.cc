// Intercept calibration (calibration.h).
#include "models/eval/calibration.h"

#include <algorithm>
#include <cmath>

namespace ferry::models {

namespace {

double Sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z));
}

}  // namespace

double LogitOf(float p) {
  const double q =
      std::clamp<double>(p, kCalibrationMinProbability, 1.0 - kCalibrationMinProbability);
  return std::log(q) - std::log1p(-q);
}

OffsetSums SumsAt(double d, std::span<const double> logits, std::span<const float> labels) {
  OffsetSums s;
  const size_t n = std::min(logits.size(), labels.size());
  for (size_t i = 0; i < n; ++i) {
    const double p = Sigmoid(logits[i] + d);
    s.gradient += p - labels[i];
    s.hessian += p * (1.0 - p);
  }
  s.count = n;
  return s;
}

bool OffsetFit::Step(const OffsetSums& total) {
  // A label set of one class has no finite optimum (the hessian vanishes as d runs off).
  if (total.count == 0 || !(total.hessian > 1e-12 * static_cast<double>(total.count))) {
    return false;
  }
  const double step = total.gradient / total.hessian;
  const double next = std::clamp(offset - step, -kMaxOffset, kMaxOffset);
  const bool moved = std::abs(next - offset) > 1e-9;
  offset = next;
  return moved;
}

double ApplyOffset(double d, std::span<float> probs, std::span<const float> labels) {
  double loss = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (d != 0) probs[i] = static_cast<float>(Sigmoid(LogitOf(probs[i]) + d));
    const double q =
        std::clamp<double>(probs[i], kCalibrationMinProbability, 1.0 - kCalibrationMinProbability);
    const double y = i < labels.size() ? labels[i] : 0.0;
    loss -= y * std::log(q) + (1.0 - y) * std::log1p(-q);
  }
  return loss;
}

}  // namespace ferry::models
