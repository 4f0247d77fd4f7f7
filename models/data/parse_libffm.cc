// libffm lines: "label field:idx:val ...". Same label, comment and separator rules as LIBSVM;
// the field is kept in Batch::fields and also salts the hash, so idx 7 in field 1 and idx 7 in
// field 2 are different features (libffm's own indices are usually global, which is harmless).
// Parsed like LIBSVM: a one-pass fast path for "digits:digits:value", the general path for the
// rest, raw indices hashed once per line; the line's shape is internal::ParseTokenLine's.
#include <string>

#include "models/data/hashing.h"
#include "models/data/parse.h"
#include "models/data/parse_internal.h"

namespace ferry::models {

using internal::FeatureError;
using internal::Reject;

namespace {

// One "field:idx:val" token at *p: the field and the raw index into out->fields / out->ids.
Status ParseLibffmFeature(size_t feature, const char** p, const char* end, Batch* out, size_t nnz) {
  const char* start = *p;
  uint64_t field = 0, index = 0;
  float value = 1.0f;
  // Fields up to 9 digits always fit 32 bits; 10-digit ones take the general path.
  if (internal::DigitsThen(p, end, 9, ':', &field) &&
      internal::DigitsThen(p, end, 19, ':', &index)) {
    FERRY_RETURN_IF_ERROR(internal::TokenValue(start, p, end, feature, out, nnz, &value));
  } else {
    *p = internal::SkipToken(start, end);
    const std::string_view token(start, static_cast<size_t>(*p - start));
    const size_t c1 = token.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : token.find(':', c1 + 1);
    if (c2 == std::string_view::npos) {
      return Reject(out, nnz, FeatureError(feature, token, " is not field:idx:val"));
    }
    if (!internal::ParseU64(token.substr(0, c1), &field) || field > UINT32_MAX) {
      return Reject(out, nnz,
                    FeatureError(feature, token, ": field is not an integer in 0..4294967295"));
    }
    if (!internal::ParseU64(token.substr(c1 + 1, c2 - c1 - 1), &index)) {
      return Reject(out, nnz,
                    FeatureError(feature, token, ": index is not a non-negative integer"));
    }
    if (!internal::ParseFloat(token.substr(c2 + 1), &value)) {
      return Reject(out, nnz, FeatureError(feature, token, ": value is not a finite number"));
    }
  }
  out->ids.push_back(index);
  out->values.push_back(value);
  out->fields.push_back(static_cast<uint32_t>(field));
  return Status::Ok();
}

}  // namespace

Status ParseLibffmLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out) {
  FERRY_RETURN_IF_ERROR(ValidateHashBits(hash_bits));
  return internal::ParseTokenLine(line, out, ParseLibffmFeature, [&](size_t nnz) {
    const size_t n = out->ids.size() - nnz;
    HashFieldIndices(out->fields.data() + nnz, out->ids.data() + nnz, n, seed, hash_bits);
    return Status::Ok();
  });
}

}  // namespace ferry::models
