// LIBSVM / svmlight lines: "label idx:val idx:val ... # comment".
//
// Accepted beyond LIBSVM's own reader, because real files carry them: svmlight "qid:N" tokens
// (skipped), '#' comments (the rest of the line is dropped; a comment-only line is blank), tabs
// as separators, CRLF line ends, indices in any order and 0-based files. Indices are never
// interpreted, only hashed, so 0- and 1-based files need no flag.
//
// Speed: the common token "123:1" is parsed in one pass over its bytes (digits accumulated
// inline, value "1" recognised without a float parse); anything else (qid, errors, indices of
// 20 digits) goes through the general token path. Raw indices are collected first and hashed
// with one HashIndices call per line. The line's shape (label, tokens, comment) is scanned by
// internal::ParseTokenLine, shared with libffm.
//
// Fields: 0, or with a FieldMap the field of each raw index, looked up before hashing (the ids
// do not depend on the map, so a model's ids match with and without one).
#include <optional>
#include <string>

#include "models/data/field_map.h"
#include "models/data/hashing.h"
#include "models/data/parse.h"
#include "models/data/parse_internal.h"

namespace ferry::models {

using internal::FeatureError;
using internal::Reject;
using internal::SkipToken;

namespace {

// One "idx:val" (or svmlight "qid:N", skipped) token at *p: the raw index into out->ids.
Status ParseLibsvmFeature(size_t feature, const char** p, const char* end, Batch* out, size_t nnz) {
  const char* start = *p;
  uint64_t index = 0;
  float value = 1.0f;
  if (internal::DigitsThen(p, end, 19, ':', &index)) {  // 19 digits cannot overflow
    FERRY_RETURN_IF_ERROR(internal::TokenValue(start, p, end, feature, out, nnz, &value));
    out->ids.push_back(index);
    out->values.push_back(value);
    return Status::Ok();
  }
  // General path: qid, and everything that is wrong.
  *p = SkipToken(start, end);
  const std::string_view token(start, static_cast<size_t>(*p - start));
  const size_t colon = token.find(':');
  if (colon == std::string_view::npos) {
    return Reject(out, nnz, FeatureError(feature, token, " is not idx:val"));
  }
  const std::string_view index_text = token.substr(0, colon);
  if (index_text == "qid") return Status::Ok();  // svmlight query id: not a feature
  if (!internal::ParseU64(index_text, &index)) {
    return Reject(out, nnz, FeatureError(feature, token, ": index is not a non-negative integer"));
  }
  if (!internal::ParseFloat(token.substr(colon + 1), &value)) {
    return Reject(out, nnz, FeatureError(feature, token, ": value is not a finite number"));
  }
  out->ids.push_back(index);
  out->values.push_back(value);
  return Status::Ok();
}

// The fields of the line's features (from `nnz` on): 0, or each raw index's in the map. Runs
// while ids still hold the raw indices: the map speaks the file's indices.
Status AssignFields(const FieldMap* field_map, Batch* out, size_t nnz) {
  if (!field_map) {
    out->fields.resize(out->ids.size(), 0);
    return Status::Ok();
  }
  for (size_t i = nnz; i < out->ids.size(); ++i) {
    const std::optional<uint32_t> field = field_map->Lookup(out->ids[i]);
    if (!field) {
      return Reject(out, nnz,
                    "feature index " + std::to_string(out->ids[i]) + " is not in the field map");
    }
    out->fields.push_back(*field);
  }
  return Status::Ok();
}

}  // namespace

Status ParseLibsvmLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out,
                       const FieldMap* field_map) {
  FERRY_RETURN_IF_ERROR(ValidateHashBits(hash_bits));
  return internal::ParseTokenLine(line, out, ParseLibsvmFeature, [&](size_t nnz) {
    FERRY_RETURN_IF_ERROR(AssignFields(field_map, out, nnz));
    HashIndices(0, out->ids.data() + nnz, out->ids.size() - nnz, seed, hash_bits);
    return Status::Ok();
  });
}

}  // namespace ferry::models
