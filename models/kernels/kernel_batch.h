// What every model kernel expects of a minibatch, and the shared shape check.
//
// A kernel receives, from the trainer or from ferry-predict:
//  - the minibatch (models/data/batch.h `ferry::models::Batch`; any type with the same members
//    satisfies `BatchLike`, which keeps the kernels independent of the readers' library):
//      labels  [n]       0 or 1
//      offsets [n + 1]   sample i owns feature occurrences [offsets[i], offsets[i+1])
//      ids     [m]       hashed feature ids (kernels never look at them; they use uidx)
//      values  [m]       feature values
//      fields  [m]       field of each occurrence (the MLP, FFM and DeepFM read them; may be empty
//                        for LR and FM)
//  - uidx [m]: for occurrence j, the index of ids[j] among the batch's unique ids;
//  - accessors, called as `w(u)` / `g(u)` with a unique index u (uint32_t):
//      w(u) -> const float*   the pulled row of unique id u (`dim` floats, read in place)
//      g(u) -> float*         the gradient row of unique id u, zero-initialised by the trainer;
//                             kernels ADD into it (never overwrite), so several kernels or
//                             several occurrences of one id accumulate.
//    Kernels call accessors only with values present in uidx, plus the bias index when one is
//    given; the accessors must return valid rows for all of those (the kernels do not
//    bounds-check u: the trainer built uidx against its own unique-id list).
//  - bias_u: the unique index of the bias id (a unique id like any other, added by the trainer),
//    or kNoBias.
//
// Gradients are SUMS over the batch's samples of d(logloss)/d(param), not means; the server-side
// optimizer scales them. Losses are returned as sums too (divide by n for the mean).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "transport/status.h"

namespace ferry::models {

// No bias id: the logit has no bias term from a sparse table.
inline constexpr uint32_t kNoBias = 0xffffffffu;

// Pass in place of an accessor to leave a table out (e.g. an MLP without a wide part).
struct NoTable {};

template <typename A>
inline constexpr bool kIsNoTable = std::is_same_v<std::remove_cvref_t<A>, NoTable>;

template <typename B>
concept BatchLike = requires(const B& b) {
  std::span<const float>(b.labels);
  std::span<const uint32_t>(b.offsets);
  std::span<const uint64_t>(b.ids);
  std::span<const float>(b.values);
  std::span<const uint32_t>(b.fields);
  { b.size() } -> std::convertible_to<size_t>;
};

// Checks that the minibatch, uidx and the probability output agree in shape:
//   offsets.size() == n + 1, offsets[0] == 0, offsets non-decreasing, offsets[n] == m,
//   ids, values and uidx all of size m, probs of size n, and (need_fields) fields of size m.
// Returns kInvalidArgument naming the first mismatch. O(n).
template <BatchLike B>
Status CheckKernelBatch(const B& batch, std::span<const uint32_t> uidx, size_t probs_size,
                        bool need_fields) {
  const size_t n = batch.size();
  const std::span<const uint32_t> offsets(batch.offsets);
  const size_t m = std::span<const float>(batch.values).size();
  if (offsets.size() != n + 1) {
    return InvalidArgument("batch has " + std::to_string(n) + " labels but " +
                           std::to_string(offsets.size()) + " offsets; expected labels + 1");
  }
  if (offsets[0] != 0) return InvalidArgument("batch offsets[0] is not 0");
  for (size_t i = 0; i < n; ++i) {
    if (offsets[i + 1] < offsets[i]) {
      return InvalidArgument("batch offsets decrease at sample " + std::to_string(i));
    }
  }
  if (offsets[n] != m) {
    return InvalidArgument("batch offsets end at " + std::to_string(offsets[n]) + " but it has " +
                           std::to_string(m) + " feature values");
  }
  if (const size_t ids = std::span<const uint64_t>(batch.ids).size(); ids != m) {
    return InvalidArgument("batch has " + std::to_string(ids) + " ids but " + std::to_string(m) +
                           " feature values");
  }
  if (uidx.size() != m) {
    return InvalidArgument("uidx has " + std::to_string(uidx.size()) +
                           " entries but the batch has " + std::to_string(m) +
                           " feature occurrences");
  }
  if (const size_t fields = std::span<const uint32_t>(batch.fields).size();
      need_fields && fields != m) {
    return InvalidArgument("batch has " + std::to_string(fields) + " field indices but " +
                           std::to_string(m) +
                           " features; this model needs a field per feature (libffm or Criteo "
                           "input)");
  }
  if (probs_size != n) {
    return InvalidArgument("probability output has " + std::to_string(probs_size) +
                           " slots but the batch has " + std::to_string(n) + " samples");
  }
  return Status::Ok();
}

// For the field-aware kernels (MLP, FFM, DeepFM): kInvalidArgument naming the first occurrence
// whose field is >= num_fields, prefixed with `model` ("mlp", "ffm", ...). O(m).
inline Status CheckFieldRange(std::span<const uint32_t> fields, uint32_t num_fields,
                              const char* model) {
  for (size_t j = 0; j < fields.size(); ++j) {
    if (fields[j] >= num_fields) {
      return InvalidArgument(std::string(model) + ": feature " + std::to_string(j) + " has field " +
                             std::to_string(fields[j]) + " but the model has " +
                             std::to_string(num_fields) + " fields");
    }
  }
  return Status::Ok();
}

}  // namespace ferry::models
