// Batch: the minibatch every model kernel consumes, in CSR form.
//
//   struct Batch {                     // n = size() samples, m = nnz() features
//     float    labels[n];              // 0 or 1
//     uint32_t offsets[n + 1];         // sample i owns features [offsets[i], offsets[i+1])
//     uint64_t ids[m];                 // hashed feature ids (models/data/hashing.h), never < 16
//     float    values[m];              // 1.0 for categorical features
//     uint32_t fields[m];              // field index per feature (0 when the format has none)
//   };
//
// Contract:
//  - offsets always has size() + 1 entries with offsets[0] == 0 and is non-decreasing; a default
//    constructed Batch is the empty batch (offsets == {0}).
//  - Readers append to a Batch; the caller clears it between minibatches. Clear() keeps capacity,
//    so one Batch reused across steps allocates only while it grows.
//  - Thread-safety: a plain value type; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

// A minibatch in CSR form: sample i's features are [offsets[i], offsets[i+1]).
struct Batch {
  std::vector<float> labels;            // 0 or 1
  std::vector<uint32_t> offsets = {0};  // labels.size() + 1 entries, offsets[0] == 0
  std::vector<uint64_t> ids;            // hashed 64-bit feature ids
  std::vector<float> values;            // feature values (1.0 for categorical)
  std::vector<uint32_t> fields;         // field index per feature (0 when the format has none)

  size_t size() const { return labels.size(); }
  size_t nnz() const { return ids.size(); }
  void Clear();  // keeps capacity; leaves offsets == {0}

  // Appends samples [first, first + count) of `src` (offsets rebased). Precondition:
  // first + count <= src.size(). Fails, leaving *this unchanged, if nnz() would pass 2^32 - 1.
  Status Append(const Batch& src, size_t first, size_t count);
  // Drops every sample from `samples` on (samples <= size()); used to roll back a partial line.
  void Truncate(size_t samples);
  // Checks the CSR invariants above (sizes agree, offsets start at 0, non-decreasing, end at
  // nnz(), labels are 0 or 1). For tests and for data that crossed a process boundary.
  Status Validate() const;
};

}  // namespace ferry::models
