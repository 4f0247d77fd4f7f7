// Input formats and their single-line parsers (pure functions; the Reader streams lines into them).
//
//   LIBSVM   "1 3:1 17:0.5 # comment"         label idx:val ...; id = HashIndex(0, idx), field 0
//                                             (or the field of idx in a FieldMap, field_map.h)
//   Criteo   "1\t5\t\t...\t68fd1e64\t..."      label, I1..I13 integers, C1..C26 tokens (TSV)
//   libffm   "0 2:17:1 5:901:0.5"              label field:idx:val ...; id = HashIndex(field, idx)
//
// The exact rules (labels, indices, bucketing, comments) are in docs/data-formats.md and next to
// each parser below.
//
// Contract of every Parse*Line:
//  - `line` is one line without its '\n' (a trailing '\r' is ignored). Callers skip blank lines
//    first with IsBlankLine(); given one, a parser reports "empty line".
//  - On success exactly one sample is appended to *out. On failure *out is left exactly as it was
//    and the Status (InvalidArgument) says why, naming the offending token; the caller adds the
//    file name and line number.
//  - hash_bits must pass ValidateHashBits (models/data/hashing.h); otherwise InvalidArgument.
//  - Thread-safety: pure; concurrent calls on different Batches are fine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "models/data/batch.h"
#include "transport/status.h"

namespace ferry::models {

class FieldMap;  // field_map.h

enum class Format { kLibsvm, kCriteo, kLibffm };

// "libsvm" (also "svmlight"), "criteo" or "libffm"; InvalidArgument naming the choices otherwise.
Result<Format> ParseFormat(std::string_view name);
std::string_view FormatName(Format format);

// Criteo layout: label, then kCriteoIntColumns integer columns (fields 0..12), then
// kCriteoCatColumns categorical columns (fields 13..38).
inline constexpr uint32_t kCriteoIntColumns = 13;
inline constexpr uint32_t kCriteoCatColumns = 26;
inline constexpr uint32_t kCriteoFields = kCriteoIntColumns + kCriteoCatColumns;

// Criteo integer bucketing: v itself for v <= 2 (so every negative value is its own bucket),
// floor(log(v)^2) above. As in the Kaggle-2014 winning preprocessing, buckets of large values
// reuse small numbers (v = 3, 4 fall in bucket 1 with v = 1); the field still tells them apart
// from nothing else, which is the accepted trade-off of that scheme.
int64_t CriteoBucket(int64_t v);
// The token hashed for integer column `column` (0..12) holding v:
// HashToken(column, std::to_string(CriteoBucket(v)), seed, hash_bits).
uint64_t CriteoIntId(uint32_t column, int64_t v, uint64_t seed, uint32_t hash_bits);

// True for lines that carry no sample and are not errors: LIBSVM/libffm lines holding only
// whitespace or only a '#' comment; Criteo lines that are empty (after dropping a '\r').
bool IsBlankLine(Format format, std::string_view line);

// label idx:val ...   label 1/0, +1/-1 or -1/0 (any numeric spelling of -1, 0, 1) -> 1/0;
// idx a non-negative integer (0- or 1-based alike: it is only hashed); val a finite float;
// "qid:N" tokens are skipped; everything from '#' on is a comment. Tokens are separated by
// spaces or tabs. A label with no features is a valid (empty) sample.
// With a field_map, each feature's field is field_map->Lookup(idx) (the id is unchanged); an
// index the map does not cover fails the line: "feature index 123 is not in the field map".
Status ParseLibsvmLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out,
                       const FieldMap* field_map = nullptr);

// label \t I1 .. I13 \t C1 .. C26 (exactly 40 tab-separated columns). Label 0 or 1. An empty
// column adds no feature. I-columns are integers (possibly negative), bucketized by
// CriteoBucket; C-columns are tokens (any bytes but tab), hashed as they are. Every feature has
// value 1 and field = column index 0..38.
Status ParseCriteoLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out);

// label field:idx:val ...   label as LIBSVM; field a 32-bit unsigned integer, idx a
// non-negative integer, val a finite float; '#' starts a comment as in LIBSVM.
Status ParseLibffmLine(std::string_view line, uint64_t seed, uint32_t hash_bits, Batch* out);

// Dispatches on format. field_map is for LIBSVM only: with another format it is
// InvalidArgument.
Status ParseLine(Format format, std::string_view line, uint64_t seed, uint32_t hash_bits,
                 Batch* out, const FieldMap* field_map = nullptr);

}  // namespace ferry::models
