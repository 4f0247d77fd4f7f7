// The tcp backend's data protocol: fixed-size little-endian frame headers.
//
// Contract: plain functions, no state, thread-safe. Everything decoded from the wire is hostile
// until ValidateHeader() has accepted it; later checks (keys, region bounds, request ids) are the
// data path's job.
//
// Stream layout on an established connection (after the handshake, whose frames are
// `u32 LE length | FlatBuffers bytes`, see transport/handshake.h):
//
//   frame := FrameHeader [segment table] [payload]
//
//   struct FrameHeader {           // 40 bytes, little-endian, no padding
//     uint8_t  kind;               //  0  FrameKind
//     uint8_t  flags;              //  1  kFrameNotify on (sparse) writes, kFramePackedTable on
//                                  //     sparse requests, else 0
//     uint16_t reserved;           //  2  must be 0
//     uint32_t imm;                //  4  writes with kFrameNotify: the immediate;
//                                  //     kResponse: the Code (0 = ok); else 0
//     uint64_t req_id;             //  8  initiator's id of a one-sided request / its reply
//     uint64_t key;                // 16  target's registration key (requests), else 0
//     uint64_t arg;                // 24  contiguous requests: remote offset;
//                                  //     sparse requests: number of segments, with
//                                  //     kFramePackedTable: segments | table bytes << 32;
//                                  //     else 0
//     uint64_t length;             // 32  payload bytes, see the table below
//   };
//
//   struct WireSegment {           // 24 bytes, the in-memory ferry::Segment, sent as is
//     uint64_t local_offset;       //  0  the initiator's offset; ignored by the target
//     uint64_t remote_offset;      //  8  offset inside the target region
//     uint64_t length;             // 16
//   };
//
//   kind            table              payload                    length means
//   kMessage        -                  message bytes              message size
//   kWrite          -                  bytes for [arg, +length)   bytes written
//   kRead           -                  -                          bytes requested
//   kReadResponse   -                  the bytes read             == bytes requested
//   kSparseWrite    the table (below)  Σ segment lengths bytes    Σ segment lengths
//   kSparseRead     the table (below)  -                          Σ segment lengths
//   kResponse       -                  error text (UTF-8)         text size (≤ kMaxErrorText)
//   kHeartbeat      -                  -                          0 (every field 0)
//
// Replies: a write is answered by kResponse once its bytes have landed (code 0) or were refused;
// a read by kReadResponse or by kResponse with an error code. The target handles requests in
// stream order, so replies arrive in request order and req_id must match the oldest request.
//
// The table of a sparse request is either arg × WireSegment, the caller's Segment array itself
// (zero copy on the initiator; the static_asserts below pin its layout), or, with
// kFramePackedTable, the packed table of transport/common/segment_codec.h (3-4 bytes a row for
// scattered rows of one size instead of 24: what Ferry sends since protocol version 2; at 64 B
// rows the 24-byte entries were 37 % more bytes through both kernel copies, tcp-profile.md).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::tcp {

static_assert(std::endian::native == std::endian::little,
              "the tcp wire format is little-endian and stored with memcpy");
static_assert(sizeof(Segment) == 24 && offsetof(Segment, local_offset) == 0 &&
                  offsetof(Segment, remote_offset) == 8 && offsetof(Segment, length) == 16,
              "WireSegment is ferry::Segment byte for byte");

inline constexpr size_t kHeaderSize = 40;
inline constexpr size_t kWireSegmentSize = sizeof(Segment);
inline constexpr uint64_t kMaxErrorText = 4096;

enum class FrameKind : uint8_t {
  kMessage = 1,
  kWrite = 2,
  kRead = 3,
  kReadResponse = 4,
  kSparseWrite = 5,
  kSparseRead = 6,
  kResponse = 7,
  kHeartbeat = 8,
};

inline constexpr uint8_t kFrameNotify = 1u << 0;
inline constexpr uint8_t kFramePackedTable = 1u << 1;

struct FrameHeader {
  FrameKind kind = FrameKind::kHeartbeat;
  uint8_t flags = 0;
  uint16_t reserved = 0;
  uint32_t imm = 0;
  uint64_t req_id = 0;
  uint64_t key = 0;
  uint64_t arg = 0;
  uint64_t length = 0;

  bool operator==(const FrameHeader&) const = default;
};

// Limits this side applies to what a peer sends (TransportOptions).
struct WireLimits {
  uint64_t max_message_size = 0;
  uint64_t max_segments = 0;
};

// A sparse request's segment count and table bytes (from arg and flags of its header).
inline uint64_t SparseCount(const FrameHeader& h) {
  return (h.flags & kFramePackedTable) ? (h.arg & 0xffffffffu) : h.arg;
}
inline uint64_t SparseTableBytes(const FrameHeader& h) {
  return (h.flags & kFramePackedTable) ? (h.arg >> 32) : h.arg * kWireSegmentSize;
}

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderSize]);
// Decodes without judging; ValidateHeader() decides.
FrameHeader DecodeHeader(const uint8_t in[kHeaderSize]);
// Checks kind, reserved bits, flags and every field against the kind and the limits. A failure
// is Code::kProtocol naming the field.
Status ValidateHeader(const FrameHeader& h, const WireLimits& limits);
const char* FrameKindName(FrameKind kind);

// The request frame of a one-sided op (kWrite, kRead, kSparseWrite, kSparseRead by op.type; any
// other type is taken for kSparseRead): `bytes` is its length (Σ segment lengths when sparse),
// arg the remote offset or the segment count, kFrameNotify and imm on a write with kOpNotify.
// The sender adds kFramePackedTable (and the table size in arg) when it packs the table.
FrameHeader RequestHeader(const Op& op, uint64_t req_id, uint64_t key, uint64_t bytes);

// Target side of a sparse request, once its segment table has arrived (the receive path calls
// SegmentTableTotal, then common::CheckSegmentsInRegion, whose failure is answered with a
// refusal, not a connection failure; tests/fuzz/fuzz_tcp_frames.cc drives both without
// sockets): Σ segment lengths, Code::kProtocol if it overflows or differs from the header's
// `length` (the initiator sums the same table).
Result<uint64_t> SegmentTableTotal(FrameKind kind, std::span<const Segment> table,
                                   uint64_t header_length);

}  // namespace ferry::tcp
