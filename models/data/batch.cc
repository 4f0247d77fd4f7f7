#include "models/data/batch.h"

#include <limits>
#include <string>

namespace ferry::models {

void Batch::Clear() {
  labels.clear();
  offsets.clear();
  offsets.push_back(0);
  ids.clear();
  values.clear();
  fields.clear();
}

Status Batch::Append(const Batch& src, size_t first, size_t count) {
  if (offsets.empty()) offsets.push_back(0);
  if (count == 0) return Status::Ok();
  const uint32_t lo = src.offsets[first];
  const uint32_t hi = src.offsets[first + count];
  const uint64_t base = ids.size();
  if (base + (hi - lo) > std::numeric_limits<uint32_t>::max()) {
    return ResourceExhausted("batch would hold more than 2^32-1 features; use smaller batches");
  }
  labels.insert(labels.end(), src.labels.begin() + first, src.labels.begin() + first + count);
  for (size_t i = first + 1; i <= first + count; ++i) {
    offsets.push_back(static_cast<uint32_t>(base + (src.offsets[i] - lo)));
  }
  ids.insert(ids.end(), src.ids.begin() + lo, src.ids.begin() + hi);
  values.insert(values.end(), src.values.begin() + lo, src.values.begin() + hi);
  fields.insert(fields.end(), src.fields.begin() + lo, src.fields.begin() + hi);
  return Status::Ok();
}

void Batch::Truncate(size_t samples) {
  if (offsets.empty()) offsets.push_back(0);
  if (samples >= size()) return;
  const uint32_t keep = offsets[samples];
  labels.resize(samples);
  offsets.resize(samples + 1);
  ids.resize(keep);
  values.resize(keep);
  fields.resize(keep);
}

Status Batch::Validate() const {
  if (offsets.size() != labels.size() + 1) {
    return Internal("batch has " + std::to_string(labels.size()) + " labels but " +
                    std::to_string(offsets.size()) + " offsets (want labels + 1)");
  }
  if (offsets[0] != 0) return Internal("batch offsets[0] is not 0");
  if (values.size() != ids.size() || fields.size() != ids.size()) {
    return Internal("batch ids/values/fields sizes differ");
  }
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (offsets[i] > offsets[i + 1]) {
      return Internal("batch offsets decrease at sample " + std::to_string(i));
    }
  }
  if (offsets.back() != ids.size()) return Internal("batch offsets do not end at nnz()");
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      return Internal("batch label of sample " + std::to_string(i) + " is not 0 or 1");
    }
  }
  return Status::Ok();
}

}  // namespace ferry::models
