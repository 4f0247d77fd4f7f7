// MlpShape: the dense part of the field-embedding + MLP model, and its parameter layout.
//
//   input   x = concat_f pool_f        F fields * E embedding floats   (InputDim() = F * E)
//   layer l = 0 .. NumLayers()-1:      h_l = act(W_l h_{l-1} + b_l)
//           LayerIn(l)  = l == 0 ? F * E : hidden[l - 1]
//           LayerOut(l) = l < hidden.size() ? hidden[l] : 1
//           act = ReLU for hidden layers, identity for the last (it outputs the logit)
//
// The parameters of layer l are ONE contiguous float array (one pulled row of the trainer's
// dense table for that layer), LayerParamCount(l) = out * in + out floats:
//
//   struct LayerParams {
//     float w[out][in];   // row-major: w[o][i] multiplies input i into output o
//     float b[out];
//   };
//
// Thread-safety: value type. Encode()/Parse() give the "mlp_shape" string kept in model files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

struct MlpShape {
  // Limits checked by Validate(); they keep every size below 2^31 floats.
  static constexpr uint32_t kMaxFields = 1u << 12;
  static constexpr uint32_t kMaxEmbedDim = 1u << 10;
  static constexpr uint32_t kMaxWidth = 1u << 14;
  static constexpr size_t kMaxHiddenLayers = 64;

  uint32_t num_fields = 0;       // F
  uint32_t embed_dim = 0;        // E
  std::vector<uint32_t> hidden;  // widths of the ReLU layers; empty = one linear layer

  size_t InputDim() const { return static_cast<size_t>(num_fields) * embed_dim; }
  size_t NumLayers() const { return hidden.size() + 1; }
  size_t LayerIn(size_t l) const { return l == 0 ? InputDim() : hidden[l - 1]; }
  size_t LayerOut(size_t l) const { return l < hidden.size() ? hidden[l] : 1; }
  // Floats in layer l's contiguous parameter array (weights then bias). l < NumLayers().
  size_t LayerParamCount(size_t l) const { return LayerOut(l) * LayerIn(l) + LayerOut(l); }
  size_t TotalParamCount() const;

  // kInvalidArgument when F, E or a width is 0 or above its limit.
  Status Validate() const;

  // "fields=39,embed_dim=8,hidden=256x128" ("hidden=" when there are no hidden layers).
  std::string Encode() const;
  // Inverse of Encode(); also validates. kInvalidArgument naming the bad part.
  static Result<MlpShape> Parse(std::string_view text);

  bool operator==(const MlpShape&) const = default;
};

// Deterministic initialisation of layer l's parameters (params.size() == LayerParamCount(l)):
// hidden (ReLU) layers get He-uniform weights U(-sqrt(6/in), sqrt(6/in)), the output layer gets
// Glorot-uniform U(-sqrt(6/(in+out)), +...), biases are 0. The values depend only on (shape, l,
// seed) -- a fixed SplitMix64 stream, not <random>'s implementation-defined distributions -- so
// every worker and every platform initialises the same model. kInvalidArgument on a size mismatch.
Status InitMlpLayer(const MlpShape& shape, size_t layer, uint64_t seed, std::span<float> params);

}  // namespace ferry::models
