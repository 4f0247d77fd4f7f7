// ForEachMergedRun: walks the bytes of a one-sided Op as runs, merging consecutive segments that
// are adjacent on BOTH sides (local and remote), so that a data path issues one copy, iovec or
// put/get per run instead of per row. Used by the same-host engine and every ucx path.
//
// Contract: calls add(local_offset, remote_offset, length) once for a contiguous op (kWrite,
// kRead), and for a sparse op once per run, in list order; stops early when add returns false.
// Zero-length runs are passed on (callers skip them). Allocation-free; thread-safe.
//
// Worked example: segments {l0 r100 +8}, {l8 r108 +8}, {l32 r116 +8} give two runs:
// (0, 100, 16) and (32, 116, 8): the third row is adjacent remotely but not locally.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace ferry::common {

template <typename F>
void ForEachMergedRun(const Op& op, F&& add) {
  if (op.type == OpType::kWrite || op.type == OpType::kRead) {
    add(op.local_offset, op.remote_offset, op.length);
    return;
  }
  const Segment* seg = op.segments;
  const size_t n = op.num_segments;
  for (size_t i = 0; i < n;) {
    uint64_t lo = seg[i].local_offset, ro = seg[i].remote_offset, len = seg[i].length;
    size_t j = i + 1;
    while (j < n && seg[j].local_offset == lo + len && seg[j].remote_offset == ro + len) {
      len += seg[j].length;
      ++j;
    }
    if (!add(lo, ro, len)) return;
    i = j;
  }
}

}  // namespace ferry::common
