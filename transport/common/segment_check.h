// The target side's rule for remote accesses, as an HCA applies it, in one place for every
// software target: tcp's receive path, ucx's emulated one-sided protocol and the same-host
// engine's check against a peer's published region table.
//
// Rule: the region must grant the needed right (kAccessRemoteRead / kAccessRemoteWrite), and
// every [offset, offset + length) must lie inside the region's `size` bytes (overflow-safe).
// Rights are checked first, so a region without the right is refused even for an empty or
// zero-length table. The error names the first failing segment.
//
// Contract: pure functions, no allocation unless the check fails; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::common {

// One access: [offset, offset+length) inside a region of `size` bytes granting `needed`.
Status CheckRemoteAccess(uint64_t size, uint32_t granted, uint64_t offset, uint64_t length,
                         uint32_t needed);

// A whole table of `count` segments in whatever layout the caller's wire uses: at(i) returns
// segment i as a TargetSegment (offset inside the region, length).
struct TargetSegment {
  uint64_t offset = 0;
  uint64_t length = 0;
};
template <typename At>
Status CheckSegmentTable(size_t count, At&& at, uint64_t size, uint32_t granted, uint32_t needed);

// The table as ferry::Segment (remote_offset, length), e.g. tcp's wire table.
Status CheckSegmentsInRegion(std::span<const Segment> table, uint64_t size, uint32_t granted,
                             uint32_t needed);

// ---- implementation ----

// Builds the error for segment `index` (segment_check.cc; only on the failure path).
Status SegmentError(size_t index, uint64_t size, uint32_t granted, TargetSegment s,
                    uint32_t needed);

template <typename At>
Status CheckSegmentTable(size_t count, At&& at, uint64_t size, uint32_t granted, uint32_t needed) {
  if ((granted & needed) != needed) return CheckRemoteAccess(size, granted, 0, 0, needed);
  // Tight bounds loop (tens of thousands of rows per request); the Status with its message is
  // built only for the first segment that fails.
  for (size_t i = 0; i < count; ++i) {
    const TargetSegment s = at(i);
    if (s.offset <= size && s.length <= size - s.offset) continue;
    return SegmentError(i, size, granted, s, needed);
  }
  return Status::Ok();
}

}  // namespace ferry::common
