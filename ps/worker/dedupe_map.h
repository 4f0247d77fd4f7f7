// DedupeMap: a generation-stamped open-addressing map from key to unique index, reused without
// clearing between uses (Reset bumps the generation). The worker dedupes a pull's keys with it;
// a training step dedupes a batch's ids. `Hash` spreads keys over the table: the partition's key
// hash by default; callers whose keys are hashes already may pass a cheaper one.
//
// Threading: none (one owner). Allocates only when Reset asks for more room than it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/job/partition.h"

namespace ferry::ps {

struct KeyHashOf {
  size_t operator()(uint64_t key) const { return Partition::KeyHash(key); }
};

template <typename Hash = KeyHashOf>
class DedupeMap {
 public:
  void Reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > entries_.size()) {
      entries_.assign(cap, Entry{});
      gen_ = 0;
    }
    mask_ = entries_.size() - 1;
    if (++gen_ == 0) {  // wrapped: clear stamps
      for (Entry& e : entries_) e.gen = 0;
      gen_ = 1;
    }
  }
  // The unique index of `key`, inserting `next` if absent (then *inserted = true).
  uint32_t FindOrInsert(uint64_t key, uint32_t next, bool* inserted) {
    size_t i = Hash()(key) & mask_;
    while (true) {
      Entry& e = entries_[i];
      if (e.gen != gen_) {
        e = Entry{key, next, gen_};
        *inserted = true;
        return next;
      }
      if (e.key == key) {
        *inserted = false;
        return e.value;
      }
      i = (i + 1) & mask_;
    }
  }

 private:
  struct Entry {
    uint64_t key = 0;
    uint32_t value = 0;
    uint32_t gen = 0;
  };
  std::vector<Entry> entries_;
  size_t mask_ = 0;
  uint32_t gen_ = 0;
};

}  // namespace ferry::ps
