// Numerically stable logistic function and binary log loss on logits.
//
// Contract:
//  - Every function takes the LOGIT z (not a probability), so no clipping is ever needed:
//      sigmoid(z)      = 1 / (1 + exp(-z))            evaluated without overflow for any z
//      logloss(z, y)   = -y log sigmoid(z) - (1 - y) log(1 - sigmoid(z))
//                      = max(z, 0) - y z + log1p(exp(-|z|))
//      d logloss / dz  = sigmoid(z) - y
//  - y is the label, 0 or 1 (values in between act as soft labels, the formulas stay exact).
//  - Pure functions, header-only, usable with float or double.
#pragma once

#include <cmath>
#include <concepts>

namespace ferry::models {

// 1 / (1 + exp(-z)). For z < 0 it is computed as exp(z) / (1 + exp(z)), so exp never overflows
// and tiny probabilities keep their relative precision.
template <std::floating_point T>
inline T Sigmoid(T z) {
  if (z >= T(0)) return T(1) / (T(1) + std::exp(-z));
  const T e = std::exp(z);
  return e / (T(1) + e);
}

// log(1 + exp(z)) ("softplus"), never overflowing: max(z, 0) + log1p(exp(-|z|)).
template <std::floating_point T>
inline T Softplus(T z) {
  return std::fmax(z, T(0)) + std::log1p(std::exp(-std::fabs(z)));
}

// Binary cross-entropy of logit z against label y: softplus(z) - y z. Finite for every finite z.
template <std::floating_point T>
inline T LogLoss(T z, T y) {
  return Softplus(z) - y * z;
}

// d LogLoss(z, y) / dz.
template <std::floating_point T>
inline T LogLossGrad(T z, T y) {
  return Sigmoid(z) - y;
}

}  // namespace ferry::models
