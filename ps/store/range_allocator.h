// RangeAllocator: first-fit allocation of byte ranges inside one registered region (a worker's
// arena and send buffer), with coalescing frees. Offsets are relative to the region; every range
// is aligned to `align` bytes. O(log n) per call in the number of free ranges. Allocation-free
// once warm: the free list's nodes are reused (kept aside when a range is used up or merged), so a
// worker's steady stream of small requests never reaches the heap.
//
// Thread-safety: none (its owner serialises).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace ferry::ps {

class RangeAllocator {
 public:
  RangeAllocator() = default;
  RangeAllocator(uint64_t begin, uint64_t end, uint64_t align = 64) : align_(align) {
    begin = Round(begin);
    if (end > begin) free_[begin] = end - begin;
    capacity_ = end > begin ? end - begin : 0;
  }
  // The offset of `bytes` (rounded up to the alignment), or nullopt if no free range fits.
  std::optional<uint64_t> Allocate(uint64_t bytes) {
    bytes = Round(bytes == 0 ? 1 : bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const uint64_t at = it->first;
      const uint64_t left = it->second - bytes;
      auto node = free_.extract(it);
      if (left > 0) {  // the rest of the range keeps the node
        node.key() = at + bytes;
        node.mapped() = left;
        free_.insert(std::move(node));
      } else {
        spare_.push_back(std::move(node));
      }
      used_ += bytes;
      return at;
    }
    return std::nullopt;
  }
  void Free(uint64_t offset, uint64_t bytes) {
    bytes = Round(bytes == 0 ? 1 : bytes);
    used_ -= bytes;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + bytes == next->first) {  // merge with the next range
      bytes += next->second;
      auto after = std::next(next);
      spare_.push_back(free_.extract(next));
      next = after;
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {  // merge into the previous range
        prev->second += bytes;
        return;
      }
    }
    if (spare_.empty()) {
      free_[offset] = bytes;
      return;
    }
    auto node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = offset;
    node.mapped() = bytes;
    free_.insert(next, std::move(node));
  }
  uint64_t used() const { return used_; }
  uint64_t capacity() const { return capacity_; }

 private:
  uint64_t Round(uint64_t v) const { return (v + align_ - 1) / align_ * align_; }
  uint64_t align_ = 64;
  uint64_t used_ = 0;
  uint64_t capacity_ = 0;
  std::map<uint64_t, uint64_t> free_;                           // offset -> length
  std::vector<std::map<uint64_t, uint64_t>::node_type> spare_;  // nodes to reuse
};

}  // namespace ferry::ps
