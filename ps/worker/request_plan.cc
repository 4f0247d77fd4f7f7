// Pure planning for requests (request_plan.h). Nothing here touches a transport or a ticket, so
// each step is tested alone (tests/ps/request_plan_test.cc).
#include "ps/worker/request_plan.h"

#include <algorithm>

#include "ps/wire/protocol.h"

namespace ferry::ps {

std::vector<RequestChunk> PlanRequests(std::span<const RangePlan> ranges, uint32_t cap) {
  std::vector<RequestChunk> plan;
  PlanRequests(ranges, cap, &plan);
  return plan;
}

void PlanRequests(std::span<const RangePlan> ranges, uint32_t cap, std::vector<RequestChunk>* out) {
  out->clear();
  uint64_t total = 0;
  for (const RangePlan& r : ranges) total += RequestsFor(r.end - r.begin, cap);
  out->reserve(total);
  for (const RangePlan& r : ranges) {
    for (uint32_t b = r.begin; b < r.end; b += cap) {
      out->push_back(RequestChunk{r.shard, b, std::min(cap, r.end - b), r.want_slots});
    }
  }
}

CacheSplit SplitByCache(std::span<const uint32_t> group_begin, std::span<uint64_t> keys,
                        std::span<uint32_t> slots) {
  CacheSplit plan;
  std::vector<std::pair<uint64_t, uint32_t>> group;
  for (uint32_t srv = 0; srv + 1 < group_begin.size(); ++srv) {
    const uint32_t b = group_begin[srv], e = group_begin[srv + 1];
    if (b == e) continue;
    uint32_t hits = 0;
    for (uint32_t p = b; p < e; ++p) hits += slots[p] != kNoSlotValue ? 1 : 0;
    const uint32_t first_cached = e - hits;
    if (hits != 0 && hits != e - b) {
      // Uncached keys first (stable), so that each part is one contiguous range.
      if (plan.new_position.empty()) {
        plan.new_position.resize(keys.size());
        for (uint32_t p = 0; p < keys.size(); ++p) plan.new_position[p] = p;
      }
      group.clear();
      uint32_t lo = b, hi = first_cached;
      for (uint32_t p = b; p < e; ++p) {
        plan.new_position[p] = slots[p] == kNoSlotValue ? lo++ : hi++;
        group.emplace_back(keys[p], slots[p]);
      }
      for (uint32_t p = b; p < e; ++p) {
        keys[plan.new_position[p]] = group[p - b].first;
        slots[plan.new_position[p]] = group[p - b].second;
      }
    }
    if (first_cached > b) plan.requests.push_back(RangePlan{srv, b, first_cached, true});
    if (hits != 0) plan.cached.push_back(RangePlan{srv, first_cached, e, false});
  }
  return plan;
}

std::vector<Segment> ReadSegments(std::span<const uint32_t> slots, uint32_t begin, uint32_t end,
                                  uint64_t local_base, uint64_t local_stride,
                                  uint64_t remote_stride, uint64_t length) {
  std::vector<Segment> segments;
  segments.reserve(end - begin);
  for (uint32_t p = begin; p < end; ++p) {
    AppendMergedSegment(segments, Segment{local_base + uint64_t{p} * local_stride,
                                          uint64_t{slots[p]} * remote_stride, length});
  }
  return segments;
}

std::vector<std::pair<size_t, size_t>> ChunkSegments(std::span<const Segment> segments,
                                                     uint64_t max_segments, uint64_t max_bytes) {
  std::vector<std::pair<size_t, size_t>> chunks;
  size_t first = 0;
  while (first < segments.size()) {
    size_t last = first;
    uint64_t bytes = 0;
    while (last < segments.size() && last - first < max_segments &&
           bytes + segments[last].length <= max_bytes) {
      bytes += segments[last++].length;
    }
    if (last == first) ++last;  // one row past max_bytes: Post names the problem
    chunks.emplace_back(first, last);
    first = last;
  }
  return chunks;
}

}  // namespace ferry::ps
