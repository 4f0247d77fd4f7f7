// Encoding and validation of the tcp frame header (layout drawn in wire.h).
#include "transport/tcp/wire.h"

#include <limits>
#include <string>

#include "transport/common/bytes.h"
#include "transport/common/segment_codec.h"

namespace ferry::tcp {
namespace {

using common::GetLe16;
using common::GetLe32;
using common::GetLe64;
using common::PutLe16;
using common::PutLe32;
using common::PutLe64;

Status Bad(const FrameHeader& h, const std::string& what) {
  return ProtocolError(std::string("bad ") + FrameKindName(h.kind) + " frame: " + what);
}

// Fields a kind does not use must be zero, so that garbage is caught early.
Status RequireZero(const FrameHeader& h, bool imm, bool req_id, bool key, bool arg) {
  if (imm && h.imm != 0) return Bad(h, "imm must be 0");
  if (req_id && h.req_id != 0) return Bad(h, "req_id must be 0");
  if (key && h.key != 0) return Bad(h, "key must be 0");
  if (arg && h.arg != 0) return Bad(h, "arg must be 0");
  return Status::Ok();
}

Status CheckLength(const FrameHeader& h, uint64_t limit) {
  if (h.length > limit) {
    return Bad(
        h, "length " + std::to_string(h.length) + " exceeds the limit of " + std::to_string(limit));
  }
  return Status::Ok();
}

Status CheckSegments(const FrameHeader& h, const WireLimits& limits) {
  const uint64_t count = SparseCount(h);
  if (count == 0 || count > limits.max_segments) {
    return Bad(h, "segment count " + std::to_string(count) + " outside [1, " +
                      std::to_string(limits.max_segments) + "]");
  }
  if (h.flags & kFramePackedTable) {
    // A packed table takes 1 to kPackedMaxEntry bytes a segment after its header: the bound is
    // checked before a byte of it is read, so the receive buffer is sized by the count.
    const uint64_t bytes = SparseTableBytes(h);
    if (bytes < common::kPackedHeaderSize + count ||
        bytes > common::kPackedHeaderSize + count * common::kPackedMaxEntry) {
      return Bad(h, "packed table of " + std::to_string(bytes) + " bytes for " +
                        std::to_string(count) + " segments");
    }
  }
  return Status::Ok();
}

}  // namespace

const char* FrameKindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kMessage:
      return "message";
    case FrameKind::kWrite:
      return "write";
    case FrameKind::kRead:
      return "read";
    case FrameKind::kReadResponse:
      return "read-response";
    case FrameKind::kSparseWrite:
      return "sparse-write";
    case FrameKind::kSparseRead:
      return "sparse-read";
    case FrameKind::kResponse:
      return "response";
    case FrameKind::kHeartbeat:
      return "heartbeat";
  }
  return "unknown";
}

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderSize]) {
  out[0] = static_cast<uint8_t>(h.kind);
  out[1] = h.flags;
  PutLe16(out + 2, h.reserved);
  PutLe32(out + 4, h.imm);
  PutLe64(out + 8, h.req_id);
  PutLe64(out + 16, h.key);
  PutLe64(out + 24, h.arg);
  PutLe64(out + 32, h.length);
}

FrameHeader DecodeHeader(const uint8_t in[kHeaderSize]) {
  FrameHeader h;
  h.kind = static_cast<FrameKind>(in[0]);
  h.flags = in[1];
  h.reserved = GetLe16(in + 2);
  h.imm = GetLe32(in + 4);
  h.req_id = GetLe64(in + 8);
  h.key = GetLe64(in + 16);
  h.arg = GetLe64(in + 24);
  h.length = GetLe64(in + 32);
  return h;
}

Status ValidateHeader(const FrameHeader& h, const WireLimits& limits) {
  const uint8_t raw_kind = static_cast<uint8_t>(h.kind);
  if (raw_kind < static_cast<uint8_t>(FrameKind::kMessage) ||
      raw_kind > static_cast<uint8_t>(FrameKind::kHeartbeat)) {
    return ProtocolError("unknown frame kind " + std::to_string(raw_kind));
  }
  if (h.reserved != 0) return Bad(h, "reserved field is not 0");
  const bool is_write = h.kind == FrameKind::kWrite || h.kind == FrameKind::kSparseWrite;
  const bool is_sparse = h.kind == FrameKind::kSparseWrite || h.kind == FrameKind::kSparseRead;
  const uint8_t allowed = (is_write ? kFrameNotify : 0) | (is_sparse ? kFramePackedTable : 0);
  if (h.flags & ~allowed) {
    return Bad(h, "flags 0x" + std::to_string(h.flags) + " not allowed");
  }
  if (is_write && !(h.flags & kFrameNotify) && h.imm != 0) {
    return Bad(h, "imm without the notify flag");
  }
  switch (h.kind) {
    case FrameKind::kMessage:
      FERRY_RETURN_IF_ERROR(RequireZero(h, true, true, true, true));
      return CheckLength(h, limits.max_message_size);
    case FrameKind::kWrite:
    case FrameKind::kRead:
      if (h.kind == FrameKind::kRead)
        FERRY_RETURN_IF_ERROR(RequireZero(h, true, false, false, false));
      return CheckLength(h, limits.max_message_size);
    case FrameKind::kReadResponse:
      FERRY_RETURN_IF_ERROR(RequireZero(h, true, false, true, true));
      return CheckLength(h, limits.max_message_size);
    case FrameKind::kSparseWrite:
    case FrameKind::kSparseRead:
      if (h.kind == FrameKind::kSparseRead) {
        FERRY_RETURN_IF_ERROR(RequireZero(h, true, false, false, false));
      }
      FERRY_RETURN_IF_ERROR(CheckSegments(h, limits));
      return CheckLength(h, limits.max_message_size);
    case FrameKind::kResponse:
      FERRY_RETURN_IF_ERROR(RequireZero(h, false, false, true, true));
      if (h.imm > static_cast<uint32_t>(Code::kInternal)) {
        return Bad(h, "status code " + std::to_string(h.imm) + " unknown");
      }
      return CheckLength(h, kMaxErrorText);
    case FrameKind::kHeartbeat:
      FERRY_RETURN_IF_ERROR(RequireZero(h, true, true, true, true));
      if (h.length != 0) return Bad(h, "length must be 0");
      return Status::Ok();
  }
  return ProtocolError("unknown frame kind " + std::to_string(raw_kind));
}

Result<uint64_t> SegmentTableTotal(FrameKind kind, std::span<const Segment> table,
                                   uint64_t header_length) {
  uint64_t total = 0;
  for (const Segment& s : table) {
    if (s.length > std::numeric_limits<uint64_t>::max() - total) {
      total = std::numeric_limits<uint64_t>::max();
      break;
    }
    total += s.length;
  }
  if (total != header_length) {
    return ProtocolError(std::string(FrameKindName(kind)) + ": segment lengths sum to " +
                         std::to_string(total) + " but the header says " +
                         std::to_string(header_length));
  }
  return total;
}

FrameHeader RequestHeader(const Op& op, uint64_t req_id, uint64_t key, uint64_t bytes) {
  const bool sparse = op.type == OpType::kSparseWrite || op.type == OpType::kSparseRead;
  const bool write = op.type == OpType::kWrite || op.type == OpType::kSparseWrite;
  FrameHeader h;
  h.req_id = req_id;
  h.key = key;
  h.length = bytes;
  if (write && (op.flags & kOpNotify)) {
    h.flags = kFrameNotify;
    h.imm = op.imm;
  }
  switch (op.type) {
    case OpType::kWrite:
      h.kind = FrameKind::kWrite;
      break;
    case OpType::kRead:
      h.kind = FrameKind::kRead;
      break;
    case OpType::kSparseWrite:
      h.kind = FrameKind::kSparseWrite;
      break;
    default:
      h.kind = FrameKind::kSparseRead;
      break;
  }
  h.arg = sparse ? op.num_segments : op.remote_offset;
  return h;
}

}  // namespace ferry::tcp
