// Held-out split: which side of a training / validation split a line falls on, decided by a
// hash of the line's bytes alone, so every reader agrees whatever its shard, thread count,
// buffer size or compression.
//
//   hash      = XXH3_64bits_withSeed(line, seed)      line: without its '\n' and without a
//                                                     trailing '\r' (CRLF files split like LF)
//   point     = (hash >> 11) * 2^-53                  uniform in [0, 1), exact in a double
//   held out  iff point < fraction
//
// Consequences: identical lines always land on the same side (a file with duplicates leaks
// nothing between the sides, and a duplicate is not split across them); fraction 0 holds out
// nothing; two seeds give independent splits. The fraction held out of N distinct lines is
// Binomial(N, fraction) / N.
//
// The Reader applies the split before parsing (ReaderOptions::holdout, reader.h). Lines of the
// other side are counted in ReaderStats::skipped_other_side and are neither samples nor
// malformed; blank lines stay blank.
//
// Thread-safety: the functions and Holdout's members are pure; a StreamingLineHash is used by
// one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "transport/status.h"

namespace ferry::models {

// The hash of one line as defined above (a trailing '\r' of `line` is dropped; `line` must not
// hold its '\n').
uint64_t LineHash(std::string_view line, uint64_t seed);

// point(hash) < fraction.
inline bool IsHeldOutHash(uint64_t line_hash, double fraction) {
  return static_cast<double>(line_hash >> 11) * 0x1p-53 < fraction;
}

struct Holdout {
  enum class Keep { kRest, kHeldOut };
  double fraction = 0;  // share of lines held out, 0 <= fraction < 1; 0: no split
  uint64_t seed = 0;    // independent of ReaderOptions::hash_seed
  Keep keep = Keep::kRest;

  // False when every line is kept (no split, training side): nothing needs hashing.
  bool Filters() const { return fraction > 0 || keep == Keep::kHeldOut; }
  bool KeepsHash(uint64_t line_hash) const {
    return IsHeldOutHash(line_hash, fraction) == (keep == Keep::kHeldOut);
  }
  bool Keeps(std::string_view line) const {
    if (fraction == 0) return keep == Keep::kRest;  // also skips the hash on the common path
    return KeepsHash(LineHash(line, seed));
  }
};

// Ok for 0 <= fraction < 1; InvalidArgument naming the value otherwise (NaN included).
Status ValidateHoldout(const Holdout& holdout);

// LineHash of a line that arrives in pieces (LineSource skips a line longer than its buffer
// without holding it; the split must still place it). Feed the line's bytes without the '\n';
// a trailing '\r' is held back until the next piece shows whether it is the last byte.
class StreamingLineHash {
 public:
  StreamingLineHash();
  ~StreamingLineHash();
  StreamingLineHash(const StreamingLineHash&) = delete;
  StreamingLineHash& operator=(const StreamingLineHash&) = delete;

  void Reset(uint64_t seed);
  void Update(std::string_view bytes);
  // LineHash(all bytes fed since Reset, seed). Call once per Reset.
  uint64_t Finish();

 private:
  void Feed(const char* p, size_t n);
  struct State;
  std::unique_ptr<State> state_;
  bool pending_cr_ = false;
};

}  // namespace ferry::models
