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
// with one HashIndices call per line.
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

using internal::IsSpace;
using internal::Quote;
using internal::Reject;

namespace {

inline bool IsTokenEnd(const char* p, const char* end) {
  return p == end || IsSpace(*p) || *p == '#';
}

inline const char* SkipToken(const char* p, const char* end) {
  while (!IsTokenEnd(p, end)) ++p;
  return p;
}

std::string FeatureError(size_t feature, std::string_view token, const char* what) {
  return "feature " + std::to_string(feature) + " " + Quote(token) + what;
}

}  // namespace

Status ParseLibsvmLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out,
                       const FieldMap* field_map) {
  FERRY_RETURN_IF_ERROR(ValidateHashBits(hash_bits));
  internal::EnsureOffsets(out);
  line = internal::StripCr(line);
  const char* p = line.data();
  const char* const end = p + line.size();
  const size_t nnz = out->ids.size();

  while (p < end && IsSpace(*p)) ++p;
  if (p == end || *p == '#') return InvalidArgument("empty line");
  const char* label_end = SkipToken(p, end);
  const std::string_view label_text(p, static_cast<size_t>(label_end - p));
  float label;
  if (!internal::ParseLabel(label_text, &label)) {
    return InvalidArgument("label " + Quote(label_text) + " is not 1, 0, +1 or -1");
  }
  p = label_end;

  size_t feature = 0;
  while (true) {
    while (p < end && IsSpace(*p)) ++p;
    if (p == end || *p == '#') break;
    ++feature;
    const char* start = p;
    uint64_t index = 0;
    while (p < end && static_cast<unsigned char>(*p - '0') < 10) {
      index = index * 10 + static_cast<uint64_t>(*p - '0');
      ++p;
    }
    const size_t digits = static_cast<size_t>(p - start);
    if (digits > 0 && digits <= 19 && p < end && *p == ':') {  // 19 digits cannot overflow
      const char* v = ++p;
      p = SkipToken(p, end);
      float value = 1.0f;
      if ((p - v != 1 || *v != '1') &&
          !internal::ParseFloat(std::string_view(v, static_cast<size_t>(p - v)), &value)) {
        return Reject(out, nnz,
                      FeatureError(feature, std::string_view(start, static_cast<size_t>(p - start)),
                                   ": value is not a finite number"));
      }
      out->ids.push_back(index);
      out->values.push_back(value);
      continue;
    }
    // General path: qid, and everything that is wrong.
    p = SkipToken(start, end);
    const std::string_view token(start, static_cast<size_t>(p - start));
    const size_t colon = token.find(':');
    if (colon == std::string_view::npos) {
      return Reject(out, nnz, FeatureError(feature, token, " is not idx:val"));
    }
    const std::string_view index_text = token.substr(0, colon);
    if (index_text == "qid") continue;  // svmlight query id: not a feature
    if (!internal::ParseU64(index_text, &index)) {
      return Reject(out, nnz,
                    FeatureError(feature, token, ": index is not a non-negative integer"));
    }
    float value;
    if (!internal::ParseFloat(token.substr(colon + 1), &value)) {
      return Reject(out, nnz, FeatureError(feature, token, ": value is not a finite number"));
    }
    out->ids.push_back(index);
    out->values.push_back(value);
  }
  const size_t n = out->ids.size() - nnz;
  if (field_map) {
    // While ids still hold the raw indices: the map speaks the file's indices.
    for (size_t i = nnz; i < out->ids.size(); ++i) {
      const std::optional<uint32_t> field = field_map->Lookup(out->ids[i]);
      if (!field) {
        return Reject(out, nnz,
                      "feature index " + std::to_string(out->ids[i]) + " is not in the field map");
      }
      out->fields.push_back(*field);
    }
  } else {
    out->fields.resize(out->ids.size(), 0);
  }
  HashIndices(0, out->ids.data() + nnz, n, seed, hash_bits);
  return internal::Commit(out, nnz, label);
}

}  // namespace ferry::models
