// MlpShape validation, its "mlp_shape" string, and the seeded initialisation.
#include "models/kernels/mlp_shape.h"

#include <charconv>
#include <cmath>

namespace ferry::models {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a fixed, portable stream; good enough for weights.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Result<uint32_t> ParseU32(std::string_view text, std::string_view what) {
  uint32_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return InvalidArgument("mlp shape: " + std::string(what) + " '" + std::string(text) +
                           "' is not an unsigned integer");
  }
  return v;
}

// Splits "a=1,b=2" at the first occurrence of `sep` from `pos`.
std::string_view NextToken(std::string_view text, size_t& pos, char sep) {
  const size_t end = text.find(sep, pos);
  const std::string_view token =
      text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
  pos = end == std::string_view::npos ? text.size() + 1 : end + 1;
  return token;
}

}  // namespace

size_t MlpShape::TotalParamCount() const {
  size_t total = 0;
  for (size_t l = 0; l < NumLayers(); ++l) total += LayerParamCount(l);
  return total;
}

Status MlpShape::Validate() const {
  if (num_fields == 0 || num_fields > kMaxFields) {
    return InvalidArgument("mlp shape: fields=" + std::to_string(num_fields) + " is outside [1, " +
                           std::to_string(kMaxFields) + "]");
  }
  if (embed_dim == 0 || embed_dim > kMaxEmbedDim) {
    return InvalidArgument("mlp shape: embed_dim=" + std::to_string(embed_dim) +
                           " is outside [1, " + std::to_string(kMaxEmbedDim) + "]");
  }
  if (hidden.size() > kMaxHiddenLayers) {
    return InvalidArgument("mlp shape: " + std::to_string(hidden.size()) +
                           " hidden layers; at most " + std::to_string(kMaxHiddenLayers));
  }
  for (size_t l = 0; l < hidden.size(); ++l) {
    if (hidden[l] == 0 || hidden[l] > kMaxWidth) {
      return InvalidArgument("mlp shape: hidden layer " + std::to_string(l) + " width " +
                             std::to_string(hidden[l]) + " is outside [1, " +
                             std::to_string(kMaxWidth) + "]");
    }
  }
  if (LayerParamCount(0) >= (size_t{1} << 31)) {
    return InvalidArgument("mlp shape: the first layer has " + std::to_string(LayerParamCount(0)) +
                           " parameters; reduce fields * embed_dim or the first hidden width");
  }
  return Status::Ok();
}

std::string MlpShape::Encode() const {
  std::string out = "fields=" + std::to_string(num_fields) +
                    ",embed_dim=" + std::to_string(embed_dim) + ",hidden=";
  for (size_t l = 0; l < hidden.size(); ++l) {
    if (l > 0) out += 'x';
    out += std::to_string(hidden[l]);
  }
  return out;
}

Result<MlpShape> MlpShape::Parse(std::string_view text) {
  MlpShape shape;
  bool seen[3] = {false, false, false};
  size_t pos = 0;
  while (pos <= text.size()) {
    const std::string_view item = NextToken(text, pos, ',');
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("mlp shape '" + std::string(text) + "': item '" + std::string(item) +
                             "' is not key=value (expected fields=F,embed_dim=E,hidden=H1xH2)");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "fields" && !seen[0]) {
      FERRY_ASSIGN_OR_RETURN(shape.num_fields, ParseU32(value, "fields"));
      seen[0] = true;
    } else if (key == "embed_dim" && !seen[1]) {
      FERRY_ASSIGN_OR_RETURN(shape.embed_dim, ParseU32(value, "embed_dim"));
      seen[1] = true;
    } else if (key == "hidden" && !seen[2]) {
      size_t hpos = 0;
      while (!value.empty() && hpos <= value.size()) {
        FERRY_ASSIGN_OR_RETURN(const uint32_t width,
                               ParseU32(NextToken(value, hpos, 'x'), "hidden width"));
        shape.hidden.push_back(width);
        if (shape.hidden.size() > kMaxHiddenLayers) break;  // Validate() reports it
      }
      seen[2] = true;
    } else {
      return InvalidArgument("mlp shape '" + std::string(text) + "': unknown or repeated key '" +
                             std::string(key) + "'");
    }
  }
  if (!seen[0] || !seen[1] || !seen[2]) {
    return InvalidArgument("mlp shape '" + std::string(text) +
                           "' needs fields=, embed_dim= and hidden= (e.g. "
                           "fields=39,embed_dim=8,hidden=256x128)");
  }
  FERRY_RETURN_IF_ERROR(shape.Validate());
  return shape;
}

Status InitMlpLayer(const MlpShape& shape, size_t layer, uint64_t seed, std::span<float> params) {
  FERRY_RETURN_IF_ERROR(shape.Validate());
  if (layer >= shape.NumLayers()) {
    return InvalidArgument("mlp init: layer " + std::to_string(layer) + " of a " +
                           std::to_string(shape.NumLayers()) + "-layer shape");
  }
  if (params.size() != shape.LayerParamCount(layer)) {
    return InvalidArgument("mlp init: layer " + std::to_string(layer) + " needs " +
                           std::to_string(shape.LayerParamCount(layer)) + " floats, got " +
                           std::to_string(params.size()));
  }
  const size_t in = shape.LayerIn(layer);
  const size_t out = shape.LayerOut(layer);
  const bool relu = layer + 1 < shape.NumLayers();
  const double limit = relu ? std::sqrt(6.0 / static_cast<double>(in))
                            : std::sqrt(6.0 / static_cast<double>(in + out));
  // One stream per (seed, layer): layers can be initialised independently, in any order.
  uint64_t state = seed ^ (0xd1b54a32d192ed03ull * (layer + 1));
  for (size_t i = 0; i < out * in; ++i) {
    const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    params[i] = static_cast<float>((2.0 * u - 1.0) * limit);
  }
  for (size_t i = out * in; i < params.size(); ++i) params[i] = 0.0f;
  return Status::Ok();
}

}  // namespace ferry::models
