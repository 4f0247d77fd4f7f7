// An exported model in memory: its kind, a string->string parameter map and named tables of
// (uint64 key, float[dim]) rows, with a key -> row lookup per table.
//
// This is what models/io/model_reader.h loads and what ferry-predict evaluates; the trainer
// streams its tables out with models/io/model_writer.h instead of building a Model.
// Conventions used by the training layer (not enforced here):
//   - sparse tables ("weights", "linear", "factors", "field_factors", "embeddings") hold one row
//     per feature id;
//   - a dense parameter block (an MLP layer) is a table holding ONE row, key 0;
//   - params carry what a reader needs to rebuild the features and the model: hash seed, hash
//     bits, input format, hyper-parameters, "mlp_shape" (MlpShape::Encode()), ...
// File formats: docs/model-format.md.
//
// Thread-safety: const methods may run concurrently; mutation needs external synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

enum class ModelKind : uint8_t { kLr, kFtrl, kFm, kFfm, kMlp, kDeepFm };

// "lr", "ftrl", "fm", "ffm", "mlp", "deepfm".
std::string_view ModelKindName(ModelKind kind);
// Inverse of ModelKindName; kInvalidArgument listing the known kinds.
Result<ModelKind> ParseModelKind(std::string_view name);

// Sorted by key, so both formats write parameters in a deterministic order.
using ModelParams = std::map<std::string, std::string, std::less<>>;

// Limits shared by the writer (kInvalidArgument) and the readers (kProtocol).
inline constexpr size_t kMaxModelNameBytes = 256;  // table names and parameter keys
inline constexpr size_t kMaxModelParamValueBytes = 1 << 16;
inline constexpr size_t kMaxModelParams = 4096;
inline constexpr size_t kMaxModelTables = 1024;
inline constexpr uint32_t kMaxModelDim = 1u << 28;  // floats per row
inline constexpr uint64_t kMaxModelTableRows = 0xfffffffeull;

// Names (table names, parameter keys) are 1..kMaxModelNameBytes printable ASCII characters
// without spaces ('!'..'~'), so that they survive the text format unquoted.
// kInvalidArgument naming `what` ("table name", "parameter key") otherwise.
Status ValidateModelName(std::string_view name, std::string_view what);

class ModelTable {
 public:
  ModelTable(std::string name, uint32_t dim) : name_(std::move(name)), dim_(dim) {}

  const std::string& name() const { return name_; }
  uint32_t dim() const { return dim_; }
  size_t size() const { return keys_.size(); }

  // Row i (i < size()) is keys()[i] -> values()[i * dim, (i + 1) * dim), in file order.
  std::span<const uint64_t> keys() const { return keys_; }
  std::span<const float> values() const { return values_; }
  const float* Row(size_t i) const { return values_.data() + i * dim_; }

  // The row of `key` (dim floats), or nullptr when the table has no such key. O(1) expected.
  const float* Find(uint64_t key) const;

  // Appends rows (values.size() == keys.size() * dim). kInvalidArgument, with nothing appended
  // from the offending key on, for a repeated key, a size mismatch or more than
  // kMaxModelTableRows rows.
  Status Append(std::span<const uint64_t> keys, std::span<const float> values);
  void Reserve(size_t rows);

 private:
  static constexpr uint32_t kEmpty = 0xffffffffu;
  void Rehash(size_t capacity);
  // Slot of `key` in index_: where it is, or the empty slot where it would go.
  size_t Probe(uint64_t key) const;

  std::string name_;
  uint32_t dim_;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
  // Open addressing, linear probing, power-of-two capacity, load <= 1/2: each slot holds a row
  // index (kEmpty = free); the key is read from keys_[slot]. 8 to 16 bytes per row.
  std::vector<uint32_t> index_;
};

struct Model {
  ModelKind kind = ModelKind::kLr;
  ModelParams params;
  std::vector<ModelTable> tables;

  const ModelTable* FindTable(std::string_view name) const;
  ModelTable* FindTable(std::string_view name);
  // The table `name` with row width `dim`; kProtocol naming the model's tables when it is
  // missing, or both dims when they differ (a model file that does not match the program).
  Result<const ModelTable*> RequireTable(std::string_view name, uint32_t dim) const;
  // The parameter `key`; kProtocol when the model has none.
  Result<std::string_view> RequireParam(std::string_view key) const;
};

}  // namespace ferry::models
