// Pure planning for a server's replies: which bytes of which rows go where in the worker's arena.
// No transport, no table: the serving code (server_requests.cc ReplyRows) resolves the slots,
// then posts what these return.
//
// Threading: pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "transport/transport.h"

namespace ferry::ps {

// What a pull's reply moves of each row: `length` bytes at `field_offset` of a row of `stride`.
struct ReplyRowShape {
  uint64_t stride = 0;
  uint64_t field_offset = 0;
  uint64_t length = 0;
};

// The segments of a pull's reply into `out` (cleared first): key i's row, at slots[i] of the
// rows buffer, lands at dest_offset + i * dest_stride of the worker's arena. A slot equal to
// `no_slot` (a key the table refused) is skipped: its destination stays as the worker zeroed it.
// Neighbours on both sides merge (AppendMergedSegment).
void PlanReplySegments(std::span<const uint32_t> slots, uint32_t no_slot, const ReplyRowShape& row,
                       uint64_t dest_offset, uint64_t dest_stride, std::vector<Segment>* out);

}  // namespace ferry::ps
