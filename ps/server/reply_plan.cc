// Pure planning for replies (reply_plan.h), tested alone in tests/ps/reply_plan_test.cc.
#include "ps/server/reply_plan.h"

namespace ferry::ps {

void PlanReplySegments(std::span<const uint32_t> slots, uint32_t no_slot, const ReplyRowShape& row,
                       uint64_t dest_offset, uint64_t dest_stride, std::vector<Segment>* out) {
  out->clear();
  out->reserve(slots.size());
  uint64_t remote = dest_offset;
  for (size_t i = 0; i < slots.size(); ++i, remote += dest_stride) {
    if (slots[i] == no_slot) continue;
    AppendMergedSegment(*out,
                        Segment{slots[i] * row.stride + row.field_offset, remote, row.length});
  }
}

}  // namespace ferry::ps
