// Op factories for every suite (conformance, tcp, ucx, fault, ...): one way to spell a send,
// receive, write, read or sparse op in a test. Plain value builders; the Op borrows what it
// names (regions, key, segment array), as Transport::Post requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/transport.h"

namespace ferry::testing {

inline Op SendOp(Endpoint* ep, const MemoryRegion* mr, uint64_t offset, uint64_t length,
                 uint64_t ctx) {
  Op op;
  op.type = OpType::kSend;
  op.ep = ep;
  op.local = mr;
  op.local_offset = offset;
  op.length = length;
  op.context = ctx;
  return op;
}

inline Op RecvOp(Endpoint* ep, const MemoryRegion* mr, uint64_t offset, uint64_t capacity,
                 uint64_t ctx) {
  Op op = SendOp(ep, mr, offset, capacity, ctx);
  op.type = OpType::kRecv;
  return op;
}

inline Op WriteOp(Endpoint* ep, const MemoryRegion* mr, uint64_t local_offset, const RemoteKey* key,
                  uint64_t remote_offset, uint64_t length, uint64_t ctx) {
  Op op = SendOp(ep, mr, local_offset, length, ctx);
  op.type = OpType::kWrite;
  op.remote = key;
  op.remote_offset = remote_offset;
  return op;
}

inline Op ReadOp(Endpoint* ep, const MemoryRegion* mr, uint64_t local_offset, const RemoteKey* key,
                 uint64_t remote_offset, uint64_t length, uint64_t ctx) {
  Op op = WriteOp(ep, mr, local_offset, key, remote_offset, length, ctx);
  op.type = OpType::kRead;
  return op;
}

inline Op SparseOp(OpType type, Endpoint* ep, const MemoryRegion* mr, const RemoteKey* key,
                   const Segment* segs, size_t n, uint64_t ctx) {
  Op op = SendOp(ep, mr, 0, 0, ctx);
  op.type = type;
  op.remote = key;
  op.segments = segs;
  op.num_segments = n;
  return op;
}

// How many of the leading `segs` one sparse op may carry within `caps` (max_segments and
// max_message_size); 0 when the first segment alone is over max_message_size. Suites that post
// a long segment list cut it into ops with this, in order.
inline size_t SparseRun(const Capabilities& caps, std::span<const Segment> segs) {
  size_t n = 0;
  uint64_t bytes = 0;
  while (n < segs.size() && n < caps.max_segments &&
         bytes + segs[n].length <= caps.max_message_size) {
    bytes += segs[n].length;
    ++n;
  }
  return n;
}

// Any contiguous op, spelled field by field (suites that sweep over op types).
inline Op MakeOp(OpType type, Endpoint* ep, const MemoryRegion* local, uint64_t local_offset,
                 uint64_t length, uint64_t context, const RemoteKey* remote = nullptr,
                 uint64_t remote_offset = 0) {
  Op op = SendOp(ep, local, local_offset, length, context);
  op.type = type;
  op.remote = remote;
  op.remote_offset = remote_offset;
  return op;
}

}  // namespace ferry::testing
