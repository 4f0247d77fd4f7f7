#include "models/data/holdout.h"

#include <cmath>
#include <string>

// Inlined like hashing.cc: with a split, every line is hashed once more in the parse loop.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ferry::models {

uint64_t LineHash(std::string_view line, uint64_t seed) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return XXH3_64bits_withSeed(line.data(), line.size(), seed);
}

Status ValidateHoldout(const Holdout& holdout) {
  // Written so that NaN fails too.
  if (holdout.fraction >= 0 && holdout.fraction < 1) return Status::Ok();
  return InvalidArgument("holdout fraction " + std::to_string(holdout.fraction) +
                         " is out of range; use 0 <= fraction < 1 (0: no split)");
}

// XXH3's streaming state: the same digest as the one-shot XXH3_64bits_withSeed over the
// concatenation of the updates. 576 bytes, 64-byte aligned (operator new honours that).
struct StreamingLineHash::State {
  XXH3_state_t xxh;
};

StreamingLineHash::StreamingLineHash() : state_(std::make_unique<State>()) {
  Reset(0);
}

StreamingLineHash::~StreamingLineHash() = default;

void StreamingLineHash::Reset(uint64_t seed) {
  XXH3_64bits_reset_withSeed(&state_->xxh, seed);
  pending_cr_ = false;
}

void StreamingLineHash::Feed(const char* p, size_t n) {
  XXH3_64bits_update(&state_->xxh, p, n);
}

void StreamingLineHash::Update(std::string_view bytes) {
  if (bytes.empty()) return;
  // A '\r' held back from the previous piece was not the last byte after all.
  if (pending_cr_) Feed("\r", 1);
  pending_cr_ = bytes.back() == '\r';
  if (pending_cr_) bytes.remove_suffix(1);
  Feed(bytes.data(), bytes.size());
}

uint64_t StreamingLineHash::Finish() {
  pending_cr_ = false;  // the trailing '\r', dropped as LineHash drops it
  return XXH3_64bits_digest(&state_->xxh);
}

}  // namespace ferry::models
