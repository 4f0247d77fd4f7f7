// Pure planning for a worker's requests: functions from inputs to a plan, no transport, no
// state. The code that posts (worker_requests.cc, worker_onesided.cc) acts on what these return.
//
//   a ticket's keys, by server range, cut into requests of at most `cap` keys    PlanRequests
//
//   a pull's keys, grouped by server         [ s0 keys | s1 keys | ... )   (group_begin)
//   one-sided: each group split by the slot cache into uncached (requests) and cached (reads),
//   each part contiguous                     [ s0 uncached | s0 cached | s1 uncached | ... )
//   a cached part: one sparse read, its segments merged where rows are neighbours on both sides,
//   cut into ops at the backend's limits     ReadSegments -> ChunkSegments
//
// Threading: pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace ferry::ps {

// A range of a ticket's positions of one shard (the keys one server owns without replicas),
// for Worker::PostRequests.
struct RangePlan {
  uint32_t shard = 0, begin = 0, end = 0;
  bool want_slots = false;
};

// One request: `n` keys from ticket position `begin`, of `shard`.
struct RequestChunk {
  uint32_t shard = 0, begin = 0, n = 0;
  bool want_slots = false;
  bool operator==(const RequestChunk&) const = default;
};

// How many requests `keys` keys make at `cap` keys per request.
inline uint64_t RequestsFor(uint64_t keys, uint32_t cap) {
  return (keys + cap - 1) / cap;
}

// The requests of `ranges`, in order: each range cut into chunks of at most `cap` (> 0) keys.
std::vector<RequestChunk> PlanRequests(std::span<const RangePlan> ranges, uint32_t cap);
// The same into `out` (cleared first): no allocation once `out` has grown to the plan's size.
void PlanRequests(std::span<const RangePlan> ranges, uint32_t cap, std::vector<RequestChunk>* out);

// How a one-sided pull splits its keys between the request path and sparse reads.
struct CacheSplit {
  std::vector<uint32_t> new_position;  // old position -> new; empty when nothing moved
  std::vector<RangePlan> requests;     // uncached keys of a server: the request path, want slots
  std::vector<RangePlan> cached;       // cached keys of a server: one sparse read
};

// keys[p] and slots[p] for every position p of a pull (slots[p] == kNoSlotValue: not cached);
// server s's keys are positions [group_begin[s], group_begin[s + 1]). Reorders keys and slots in
// place so that each group's uncached keys come first (both parts keep their order) and returns
// the two ranges of each group.
CacheSplit SplitByCache(std::span<const uint32_t> group_begin, std::span<uint64_t> keys,
                        std::span<uint32_t> slots);

// The segments of one sparse read: position p (of [begin, end)) lands at local_base + p *
// local_stride and is read from slots[p] * remote_stride, `length` bytes each; neighbours on both
// sides merge (AppendMergedSegment).
std::vector<Segment> ReadSegments(std::span<const uint32_t> slots, uint32_t begin, uint32_t end,
                                  uint64_t local_base, uint64_t local_stride,
                                  uint64_t remote_stride, uint64_t length);

// Cuts a segment list into consecutive chunks [first, last) of at most max_segments segments and
// max_bytes bytes each. A single segment over max_bytes is a chunk of its own (the transport's
// Post then names the problem).
std::vector<std::pair<size_t, size_t>> ChunkSegments(std::span<const Segment> segments,
                                                     uint64_t max_segments, uint64_t max_bytes);

}  // namespace ferry::ps
