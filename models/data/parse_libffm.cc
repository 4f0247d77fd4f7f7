// libffm lines: "label field:idx:val ...". Same label, comment and separator rules as LIBSVM;
// the field is kept in Batch::fields and also salts the hash, so idx 7 in field 1 and idx 7 in
// field 2 are different features (libffm's own indices are usually global, which is harmless).
// Parsed like LIBSVM: a one-pass fast path for "digits:digits:value", the general path for the
// rest, raw indices hashed once per line.
#include <string>

#include "models/data/hashing.h"
#include "models/data/parse.h"
#include "models/data/parse_internal.h"

namespace ferry::models {

using internal::IsSpace;
using internal::Quote;
using internal::Reject;

namespace {

inline const char* SkipToken(const char* p, const char* end) {
  while (p < end && !IsSpace(*p) && *p != '#') ++p;
  return p;
}

// Digits at *p (at most `max_digits`), then `sep`; advances *p past the separator.
inline bool Number(const char** p, const char* end, size_t max_digits, char sep, uint64_t* v) {
  const char* s = *p;
  const char* q = s;
  uint64_t x = 0;
  while (q < end && static_cast<unsigned char>(*q - '0') < 10) {
    x = x * 10 + static_cast<uint64_t>(*q - '0');
    ++q;
  }
  const size_t digits = static_cast<size_t>(q - s);
  if (digits == 0 || digits > max_digits || q == end || *q != sep) return false;
  *v = x;
  *p = q + 1;
  return true;
}

std::string FeatureError(size_t feature, std::string_view token, const char* what) {
  return "feature " + std::to_string(feature) + " " + Quote(token) + what;
}

}  // namespace

Status ParseLibffmLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out) {
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
    uint64_t field = 0, index = 0;
    float value = 1.0f;
    // Fields up to 9 digits always fit 32 bits; 10-digit ones take the general path.
    if (Number(&p, end, 9, ':', &field) && Number(&p, end, 19, ':', &index)) {
      const char* v = p;
      p = SkipToken(p, end);
      if ((p - v != 1 || *v != '1') &&
          !internal::ParseFloat(std::string_view(v, static_cast<size_t>(p - v)), &value)) {
        return Reject(out, nnz,
                      FeatureError(feature, std::string_view(start, static_cast<size_t>(p - start)),
                                   ": value is not a finite number"));
      }
    } else {
      p = SkipToken(start, end);
      const std::string_view token(start, static_cast<size_t>(p - start));
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
  }
  const size_t n = out->ids.size() - nnz;
  HashFieldIndices(out->fields.data() + nnz, out->ids.data() + nnz, n, seed, hash_bits);
  return internal::Commit(out, nnz, label);
}

}  // namespace ferry::models
