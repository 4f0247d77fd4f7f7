// Criteo TSV lines (the Display Advertising Challenge / 1TB Click Logs layout):
//
//   label \t I1 \t ... \t I13 \t C1 \t ... \t C26        40 columns, 39 tabs
//
// I-columns are counts (Criteo's I2 also holds -1..-3), bucketized with CriteoBucket and hashed
// as decimal tokens; C-columns are 32-bit hex hashes in the real data and are hashed verbatim.
// Empty columns are missing values: no feature. Field of column k (0-based, label excluded) is k.
#include <cmath>
#include <cstring>
#include <string>

#include "models/data/hashing.h"
#include "models/data/parse.h"
#include "models/data/parse_internal.h"

namespace ferry::models {

using internal::Quote;
using internal::Reject;

int64_t CriteoBucket(int64_t v) {
  if (v <= 2) return v;
  const double l = std::log(static_cast<double>(v));
  return static_cast<int64_t>(std::floor(l * l));
}

uint64_t CriteoIntId(uint32_t column, int64_t v, uint64_t seed, uint32_t hash_bits) {
  char text[24];
  const auto r = std::to_chars(text, text + sizeof text, CriteoBucket(v));
  return HashToken(column, std::string_view(text, static_cast<size_t>(r.ptr - text)), seed,
                   hash_bits);
}

Status ParseCriteoLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out) {
  FERRY_RETURN_IF_ERROR(ValidateHashBits(hash_bits));
  internal::EnsureOffsets(out);
  line = internal::StripCr(line);
  if (line.empty()) return InvalidArgument("empty line");
  const size_t nnz = out->ids.size();

  // Column boundaries first: a line with the wrong column count is rejected before any work.
  std::string_view columns[1 + kCriteoFields];
  size_t count = 0;
  const char* p = line.data();
  const char* const end = line.data() + line.size();
  while (true) {
    const char* tab = static_cast<const char*>(std::memchr(p, '\t', static_cast<size_t>(end - p)));
    const char* stop = tab ? tab : end;
    if (count == 1 + kCriteoFields) {
      return InvalidArgument("more than " + std::to_string(1 + kCriteoFields) +
                             " tab-separated columns (label, 13 integer, 26 categorical)");
    }
    columns[count++] = std::string_view(p, static_cast<size_t>(stop - p));
    if (!tab) break;
    p = tab + 1;
  }
  if (count != 1 + kCriteoFields) {
    return InvalidArgument("has " + std::to_string(count) + " tab-separated columns, want " +
                           std::to_string(1 + kCriteoFields) +
                           " (label, 13 integer, 26 categorical)");
  }
  const std::string_view label_text = columns[0];
  if (label_text.size() != 1 || (label_text[0] != '0' && label_text[0] != '1')) {
    return InvalidArgument("label " + Quote(label_text) + " is not 0 or 1");
  }
  for (uint32_t k = 0; k < kCriteoIntColumns; ++k) {
    const std::string_view text = columns[1 + k];
    if (text.empty()) continue;
    int64_t v;
    if (!internal::ParseI64(text, &v)) {
      return Reject(
          out, nnz,
          "integer column I" + std::to_string(k + 1) + " " + Quote(text) + " is not an integer");
    }
    out->ids.push_back(CriteoIntId(k, v, seed, hash_bits));
    out->values.push_back(1.0f);
    out->fields.push_back(k);
  }
  for (uint32_t k = kCriteoIntColumns; k < kCriteoFields; ++k) {
    const std::string_view text = columns[1 + k];
    if (text.empty()) continue;
    out->ids.push_back(HashToken(k, text, seed, hash_bits));
    out->values.push_back(1.0f);
    out->fields.push_back(k);
  }
  return internal::Commit(out, nnz, label_text[0] == '1' ? 1.0f : 0.0f);
}

}  // namespace ferry::models
