// Number and token helpers shared by the line parsers (internal to models/data).
//
// Everything here is allocation-free and built on std::from_chars: the readers parse tens of
// millions of features per second per thread, so no iostreams, no strtod/stod (locale lookups),
// no exceptions.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "models/data/batch.h"
#include "transport/status.h"

namespace ferry::models::internal {

inline bool IsSpace(char c) {
  return c == ' ' || c == '\t';
}

inline std::string_view StripCr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// Drops a '#' comment tail.
inline std::string_view StripComment(std::string_view line) {
  const size_t hash = line.find('#');
  return hash == std::string_view::npos ? line : line.substr(0, hash);
}

// Splits on runs of spaces and tabs.
class Tokenizer {
 public:
  explicit Tokenizer(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}
  bool Next(std::string_view* token) {
    while (p_ < end_ && IsSpace(*p_)) ++p_;
    if (p_ == end_) return false;
    const char* start = p_;
    while (p_ < end_ && !IsSpace(*p_)) ++p_;
    *token = std::string_view(start, static_cast<size_t>(p_ - start));
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

// A whole-token unsigned integer (decimal digits only).
inline bool ParseU64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

inline bool ParseI64(std::string_view s, int64_t* v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A whole-token finite float; a leading '+' is accepted (from_chars rejects it).
inline bool ParseFloat(std::string_view s, float* v) {
  if (s.size() == 1 && s[0] == '1') {  // the categorical value, by far the most common
    *v = 1.0f;
    return true;
  }
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (!s.empty() && s[0] == '-') return false;  // "+-1"
  }
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(*v);
}

// LIBSVM/libffm label: any numeric spelling of 1, 0 or -1 (with an optional '+'); 1 -> 1,
// 0 and -1 -> 0.
inline bool ParseLabel(std::string_view s, float* label) {
  if (s.size() == 1 && (s[0] == '0' || s[0] == '1')) {
    *label = s[0] == '1' ? 1.0f : 0.0f;
    return true;
  }
  float v;
  if (!ParseFloat(s, &v)) return false;
  if (v == 1.0f) {
    *label = 1.0f;
  } else if (v == 0.0f || v == -1.0f) {
    *label = 0.0f;
  } else {
    return false;
  }
  return true;
}

// A token quoted for an error message: at most 40 bytes, control bytes shown as '?'.
inline std::string Quote(std::string_view token) {
  std::string q = "'";
  const size_t n = token.size() < 40 ? token.size() : 40;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    q += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (token.size() > n) q += "...";
  q += "'";
  return q;
}

// Rolls a Batch back to `nnz` features (the sample being parsed is dropped) and returns the
// error, so every failure path of a parser is one line.
inline Status Reject(Batch* out, size_t nnz, std::string reason) {
  out->ids.resize(nnz);
  out->values.resize(nnz);
  out->fields.resize(nnz);
  return InvalidArgument(std::move(reason));
}

// Closes the sample whose features start at `nnz`: pushes its label and end offset, unless the
// batch would pass 2^32-1 features (offsets are 32-bit).
inline Status Commit(Batch* out, size_t nnz, float label) {
  if (out->ids.size() > UINT32_MAX) {
    return Reject(out, nnz, "batch would hold more than 2^32-1 features; use smaller batches");
  }
  out->labels.push_back(label);
  out->offsets.push_back(static_cast<uint32_t>(out->ids.size()));
  return Status::Ok();
}

inline void EnsureOffsets(Batch* out) {
  if (out->offsets.empty()) out->offsets.push_back(0);
}

// The scanner the LIBSVM and libffm parsers share. Their lines have one shape:
//
//   [spaces] label { spaces token } [spaces] [# comment]      tokens: "idx:val", "field:idx:val"
//
// a token ending at a space, a tab, a '#' or the end of the line.

inline const char* SkipToken(const char* p, const char* end) {
  while (p < end && !IsSpace(*p) && *p != '#') ++p;
  return p;
}

// Digits at *p (at most `max_digits`, so that they cannot overflow), then `sep`; advances *p
// past the separator. False (and *p unchanged) otherwise: the caller takes its general path.
inline bool DigitsThen(const char** p, const char* end, size_t max_digits, char sep, uint64_t* v) {
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

// "feature N 'token'<what>", the message of every rejected feature.
inline std::string FeatureError(size_t feature, std::string_view token, const char* what) {
  return "feature " + std::to_string(feature) + " " + Quote(token) + what;
}

// The value at *p, the rest of the token that starts at `start` (the fast path: "1" without a
// float parse); advances *p to the token's end. On a bad value the sample is rolled back to
// `nnz` and the error returned.
inline Status TokenValue(const char* start, const char** p, const char* end, size_t feature,
                         Batch* out, size_t nnz, float* value) {
  const char* v = *p;
  *p = SkipToken(v, end);
  *value = 1.0f;
  if ((*p - v != 1 || *v != '1') &&
      !ParseFloat(std::string_view(v, static_cast<size_t>(*p - v)), value)) {
    return Reject(out, nnz,
                  FeatureError(feature, std::string_view(start, static_cast<size_t>(*p - start)),
                               ": value is not a finite number"));
  }
  return Status::Ok();
}

// Parses one line into `out`: the label, then each feature token through
// `parse_feature(size_t feature, const char** p, const char* end, Batch* out, size_t nnz) ->
// Status` (feature counts from 1; *p is the token's first byte and must end past it; nnz is
// where the sample's features start, for Reject), then `finish(size_t nnz) -> Status` (fields,
// hashing), then Commit. "empty line" and a bad label are kInvalidArgument; a feature's error is
// returned as it is (the parser has rolled the sample back).
template <typename ParseFeature, typename Finish>
inline Status ParseTokenLine(std::string_view line, Batch* out, ParseFeature&& parse_feature,
                             Finish&& finish) {
  EnsureOffsets(out);
  const size_t nnz = out->ids.size();
  line = StripCr(line);
  const char* p = line.data();
  const char* const end = p + line.size();
  while (p < end && IsSpace(*p)) ++p;
  if (p == end || *p == '#') return InvalidArgument("empty line");
  const char* label_end = SkipToken(p, end);
  const std::string_view label_text(p, static_cast<size_t>(label_end - p));
  float label = 0;
  if (!ParseLabel(label_text, &label)) {
    return InvalidArgument("label " + Quote(label_text) + " is not 1, 0, +1 or -1");
  }
  p = label_end;
  size_t feature = 0;
  while (true) {
    while (p < end && IsSpace(*p)) ++p;
    if (p == end || *p == '#') break;
    FERRY_RETURN_IF_ERROR(parse_feature(++feature, &p, end, out, nnz));
  }
  FERRY_RETURN_IF_ERROR(finish(nnz));
  return Commit(out, nnz, label);
}

}  // namespace ferry::models::internal
