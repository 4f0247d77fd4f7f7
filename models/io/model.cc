// ModelTable's key index and the Model lookups.
//
//   index_ (capacity C = 2^b >= 2 * rows):  uint32_t slot[C];  // row index, or kEmpty
//   home(key) = Mix(key) & (C - 1); probe home, home+1, ... (wrapping) until the key or kEmpty.
// Rows are never removed, so no tombstones; growth doubles C and reinserts every row.
#include "models/io/model.h"

#include <algorithm>

namespace ferry::models {
namespace {

// MurmurHash3's fmix64: feature ids are often sequential or low-entropy.
uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  return k ^ (k >> 33);
}

}  // namespace

std::string_view ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kLr:
      return "lr";
    case ModelKind::kFtrl:
      return "ftrl";
    case ModelKind::kFm:
      return "fm";
    case ModelKind::kFfm:
      return "ffm";
    case ModelKind::kMlp:
      return "mlp";
    case ModelKind::kDeepFm:
      return "deepfm";
  }
  return "unknown";
}

Result<ModelKind> ParseModelKind(std::string_view name) {
  for (ModelKind kind : {ModelKind::kLr, ModelKind::kFtrl, ModelKind::kFm, ModelKind::kFfm,
                         ModelKind::kMlp, ModelKind::kDeepFm}) {
    if (name == ModelKindName(kind)) return kind;
  }
  return InvalidArgument("unknown model kind '" + std::string(name) +
                         "'; known kinds: lr, ftrl, fm, ffm, mlp, deepfm");
}

Status ValidateModelName(std::string_view name, std::string_view what) {
  if (name.empty() || name.size() > kMaxModelNameBytes) {
    return InvalidArgument(std::string(what) + " has " + std::to_string(name.size()) +
                           " bytes; it must have 1 to " + std::to_string(kMaxModelNameBytes));
  }
  for (const char c : name) {
    if (c < '!' || c > '~') {
      return InvalidArgument(std::string(what) + " '" + std::string(name) +
                             "' must be printable ASCII without spaces");
    }
  }
  return Status::Ok();
}

size_t ModelTable::Probe(uint64_t key) const {
  const size_t mask = index_.size() - 1;
  for (size_t s = Mix(key) & mask;; s = (s + 1) & mask) {
    const uint32_t row = index_[s];
    if (row == kEmpty || keys_[row] == key) return s;
  }
}

void ModelTable::Rehash(size_t capacity) {
  index_.assign(capacity, kEmpty);
  for (size_t row = 0; row < keys_.size(); ++row) {
    index_[Probe(keys_[row])] = static_cast<uint32_t>(row);
  }
}

void ModelTable::Reserve(size_t rows) {
  keys_.reserve(rows);
  values_.reserve(rows * dim_);
  size_t capacity = std::max<size_t>(index_.size(), 16);
  while (capacity < 2 * rows) capacity *= 2;
  if (capacity != index_.size()) Rehash(capacity);
}

const float* ModelTable::Find(uint64_t key) const {
  if (index_.empty()) return nullptr;
  const uint32_t row = index_[Probe(key)];
  return row == kEmpty ? nullptr : Row(row);
}

Status ModelTable::Append(std::span<const uint64_t> keys, std::span<const float> values) {
  if (values.size() != keys.size() * dim_) {
    return InvalidArgument("table '" + name_ + "': " + std::to_string(keys.size()) + " keys need " +
                           std::to_string(keys.size() * dim_) + " values (dim " +
                           std::to_string(dim_) + "), got " + std::to_string(values.size()));
  }
  if (keys_.size() + keys.size() > kMaxModelTableRows) {
    return InvalidArgument("table '" + name_ + "' would exceed " +
                           std::to_string(kMaxModelTableRows) + " rows");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (2 * (keys_.size() + 1) > index_.size()) Rehash(std::max<size_t>(16, 2 * index_.size()));
    const size_t slot = Probe(keys[i]);
    if (index_[slot] != kEmpty) {
      return InvalidArgument("table '" + name_ + "' has key " + std::to_string(keys[i]) + " twice");
    }
    index_[slot] = static_cast<uint32_t>(keys_.size());
    keys_.push_back(keys[i]);
    values_.insert(values_.end(), values.begin() + static_cast<ptrdiff_t>(i * dim_),
                   values.begin() + static_cast<ptrdiff_t>((i + 1) * dim_));
  }
  return Status::Ok();
}

const ModelTable* Model::FindTable(std::string_view name) const {
  for (const ModelTable& t : tables) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

ModelTable* Model::FindTable(std::string_view name) {
  for (ModelTable& t : tables) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

Result<const ModelTable*> Model::RequireTable(std::string_view name, uint32_t dim) const {
  const ModelTable* t = FindTable(name);
  if (t == nullptr) {
    std::string have;
    for (const ModelTable& other : tables)
      have += (have.empty() ? "'" : ", '") + other.name() + "'";
    return ProtocolError(std::string(ModelKindName(kind)) + " model has no table '" +
                         std::string(name) + "' (it has " + (have.empty() ? "none" : have) + ")");
  }
  if (t->dim() != dim) {
    return ProtocolError("model table '" + std::string(name) + "' has dim " +
                         std::to_string(t->dim()) + " but this model needs dim " +
                         std::to_string(dim) + "; was it exported with other settings?");
  }
  return t;
}

Result<std::string_view> Model::RequireParam(std::string_view key) const {
  const auto it = params.find(key);
  if (it == params.end()) {
    return ProtocolError(std::string(ModelKindName(kind)) + " model file has no parameter '" +
                         std::string(key) + "'");
  }
  return std::string_view(it->second);
}

}  // namespace ferry::models
