// FieldMap: assigns LIBSVM feature indices to fields, so field-aware models (FFM, DeepFM, the
// MLP) can train on LIBSVM files. Without a map every LIBSVM feature is in field 0.
//
// File format (docs/data-formats.md), one mapping per line:
//
//   # comment                   '#' starts a comment anywhere; blank lines are ignored
//   1-1000     0                FIRST-LAST FIELD: indices FIRST..LAST (inclusive) are in FIELD
//   1001       1                INDEX FIELD: one index
//   1002-5000  2
//
// Indices are the LIBSVM indices as written in the data files (0- or 1-based, whatever the file
// uses), decimal, below 2^64. A field is an integer below kMaxFields (2^20). Ranges must not
// overlap; gaps are allowed (an index in a gap makes its line malformed). Errors name the line:
// "FILE:LINE: reason" (Load) or "field map line LINE: reason" (Parse).
//
// With a map, ParseLibsvmLine (parse.h) takes each feature's field from Lookup; the ids stay
// HashIndex(0, index, seed), exactly the ids read without a map.
//
// Thread-safety: immutable once built; share one map between readers and threads through a
// std::shared_ptr<const FieldMap> (ReaderOptions::field_map).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

class FieldMap {
 public:
  static constexpr uint32_t kMaxFields = uint32_t{1} << 20;

  // Reads and parses a map file. IoError "open PATH: ..." if it cannot be read.
  static Result<FieldMap> Load(const std::string& path);
  // Parses map text. InvalidArgument for a bad line, overlapping ranges or an empty map.
  static Result<FieldMap> Parse(std::string_view text);

  // An empty map (maps nothing); only Load and Parse make useful ones.
  FieldMap() = default;

  // The field of a LIBSVM index, or nullopt if no range covers it. O(log num_ranges()).
  std::optional<uint32_t> Lookup(uint64_t index) const {
    // The last range starting at or before `index`.
    size_t lo = 0, hi = ranges_.size();
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (ranges_[mid].first <= index) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == 0 || ranges_[lo - 1].last < index) return std::nullopt;
    return ranges_[lo - 1].field;
  }

  // 1 + the largest field mapped (0 for an empty map).
  uint32_t num_fields() const { return num_fields_; }
  size_t num_ranges() const { return ranges_.size(); }
  bool empty() const { return ranges_.empty(); }
  // The map as text Parse reads back to an equal map: one "FIRST-LAST FIELD" line per range
  // (a model file carries it, so ferry-predict reads the fields the training read).
  std::string Encode() const;

 private:
  struct Range {
    uint64_t first = 0;
    uint64_t last = 0;  // inclusive
    uint32_t field = 0;
  };
  static Result<FieldMap> ParseNamed(std::string_view text, const std::string& path);

  std::vector<Range> ranges_;  // sorted by first, disjoint
  uint32_t num_fields_ = 0;
};

}  // namespace ferry::models
