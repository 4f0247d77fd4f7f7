// The target-side access rule (see segment_check.h).
#include "transport/common/segment_check.h"

#include <string>

namespace ferry::common {

Status CheckRemoteAccess(uint64_t size, uint32_t granted, uint64_t offset, uint64_t length,
                         uint32_t needed) {
  if (offset > size || length > size - offset) {
    return OutOfRange("remote access [" + std::to_string(offset) + ", +" + std::to_string(length) +
                      ") outside a region of " + std::to_string(size) + " bytes");
  }
  if ((granted & needed) != needed) {
    return PermissionDenied(needed & kAccessRemoteWrite ? "region does not grant remote write"
                                                        : "region does not grant remote read");
  }
  return Status::Ok();
}

Status SegmentError(size_t index, uint64_t size, uint32_t granted, TargetSegment s,
                    uint32_t needed) {
  return CheckRemoteAccess(size, granted, s.offset, s.length, needed)
      .Annotate("segment " + std::to_string(index));
}

Status CheckSegmentsInRegion(std::span<const Segment> table, uint64_t size, uint32_t granted,
                             uint32_t needed) {
  return CheckSegmentTable(
      table.size(),
      [&](size_t i) {
        return TargetSegment{table[i].remote_offset, table[i].length};
      },
      size, granted, needed);
}

}  // namespace ferry::common
