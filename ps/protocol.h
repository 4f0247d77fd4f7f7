// The parameter server's data-path protocol: what a worker writes into a server's memory, what a
// server writes back, and how both sides check it. Every transfer is a one-sided write with a
// notification (kOpNotify): no two-sided messages, no packing.
//
// Memory each side registers:
//
//   server, per worker w: the staging ring (remote-write), staging_bytes
//     +-----------+------------------+--------------------------+-- ... --+
//     | header 64 | keys[n] (8 B)    | grads[n][dim] (4|2 B)    |  next   |   requests at
//     +-----------+------------------+--------------------------+-- ... --+   64-byte offsets
//
//   worker: the arena (remote-write), arena_bytes
//     +------------------------------------------+--------------------------------------+
//     | reply slots [servers][max_outstanding]   | rows: pulled rows land here           |
//     | (kReplySlotBytes each: ReplyRecord)      | (a kernel reads them in place)        |
//     +------------------------------------------+--------------------------------------+
//
// A request: the worker writes header + keys (+ gradients) into its ring on the owning server,
// as ONE sparse write out of its registered send buffer (segments: header, keys, gradients) with
// imm = ring offset / 64. The server parses it in place (ParseRequest), then replies:
//   pull / push-pull: ONE sparse write of the rows straight out of the table's rows buffer
//                     into arena[dest_offset + i * dest_stride], imm = ReplyImm(kOk, seq);
//   push:             an 8-byte ReplyRecord prefix into the reply slot, imm = ReplyImm(kOk, seq);
//   error:            a ReplyRecord with the reason into the reply slot, imm = ReplyImm(kError, seq).
// The reply slot of a request is [server][seq % max_outstanding]; a worker never has more than
// max_outstanding requests in flight per server, so slots are never overwritten before read.
//
// Errors: a request that cannot be located or framed (offset outside the ring, bad magic, a
// payload running past the ring), or that does not carry the next seq, is a protocol violation
// (kProtocol): the server closes that worker's endpoint. So is a BSP push rewritten in the ring
// before its clock was applied. A well-framed request that asks for something wrong (unknown
// table, wrong width, too many keys, rows outside the worker's arena) gets an error reply and
// touches nothing.
//
// Byte order: the host's; ranks of one job share an architecture (the handshake checks the
// backend and version, the header magic catches the rest).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry::ps {

inline constexpr uint32_t kRequestMagic = 0x31515246;  // "FRQ1"
inline constexpr uint32_t kReplyMagic = 0x31505246;    // "FRP1"
inline constexpr uint64_t kRequestAlign = 64;
inline constexpr uint32_t kReplySlotBytes = 256;

enum class RequestType : uint8_t {
  kPull = 1,      // rows of keys -> arena
  kPush = 2,      // apply gradients to keys' rows
  kPushPull = 3,  // apply, then rows -> arena
};
std::string_view RequestTypeName(RequestType type);

enum RequestFlags : uint8_t {
  kFlagNone = 0,
  kFlagFp16Grads = 1u << 0,  // gradients are IEEE half floats
  kFlagFp16Rows = 1u << 1,   // ship the table's fp16 weight mirror (dest_stride >= 2 * dim)
};

struct RequestHeader {
  uint32_t magic = kRequestMagic;
  uint8_t type = 0;   // RequestType
  uint8_t flags = 0;  // RequestFlags
  uint16_t table = 0;
  uint32_t seq = 0;   // per (worker, server): 0, 1, 2, ... in posting order
  uint32_t num_keys = 0;
  uint32_t dim = 0;    // the table's width as the worker knows it
  uint32_t clock = 0;  // the worker's clock when posted
  uint64_t dest_offset = 0;   // rows: arena offset of the first row
  uint32_t dest_stride = 0;   // rows: bytes between consecutive rows in the arena
  uint32_t payload_bytes = 0; // keys + gradients after the header
  uint8_t reserved[24] = {};
};
static_assert(sizeof(RequestHeader) == kRequestAlign);

// Bytes after the header for a request of this shape (keys, then gradients for push types);
// saturates at UINT64_MAX (and RequestRingBytes at its largest aligned value) instead of wrapping.
uint64_t RequestPayloadBytes(RequestType type, uint8_t flags, uint32_t num_keys, uint32_t dim);
// Header + payload, rounded up to kRequestAlign: the ring space a request occupies.
uint64_t RequestRingBytes(RequestType type, uint8_t flags, uint32_t num_keys, uint32_t dim);
// Bytes of one row in the arena for a pull of this table width.
inline uint32_t RowWireBytes(uint32_t dim, bool fp16) { return dim * (fp16 ? 2u : 4u); }

struct TableShape {
  uint32_t dim = 0;
  bool fp16_rows = false;  // the table keeps an fp16 mirror (pulls may ask for it)
};

struct RequestLimits {
  uint64_t ring_bytes = 0;
  uint64_t arena_bytes = 0;  // the worker's arena length (its registered descriptor)
  uint64_t rows_begin = 0;   // first arena byte rows may land on (after the reply slots)
  uint32_t max_keys = 0;
};

// A request parsed in place: pointers into the ring.
struct RequestView {
  RequestHeader header;
  uint64_t offset = 0;  // of the header in the ring
  const uint64_t* keys = nullptr;  // num_keys
  const uint8_t* grads = nullptr;  // num_keys * dim floats (or halves), push types only
  RequestType type() const { return static_cast<RequestType>(header.type); }
};

// Locates and checks the request at `offset` of `ring` (imm * 64). kProtocol for framing
// violations (close the peer); kNotFound (table), kInvalidArgument (width, flags, stride) and
// kResourceExhausted / kOutOfRange (key count, arena range) for bad requests (reply an error):
// out->header is then filled in (its seq names the request to answer). On success `out` points
// into the ring.
Status ParseRequest(std::span<const uint8_t> ring, uint64_t offset,
                    std::span<const TableShape> tables, const RequestLimits& limits,
                    RequestView* out);

// Reply notification: bits 31..28 kind, 23..0 the request's seq (mod 2^24).
enum class ReplyKind : uint8_t { kOk = 1, kError = 2 };
inline uint32_t ReplyImm(ReplyKind kind, uint32_t seq) {
  return (static_cast<uint32_t>(kind) << 28) | (seq & 0xffffffu);
}
inline ReplyKind ReplyImmKind(uint32_t imm) { return static_cast<ReplyKind>(imm >> 28); }
inline uint32_t ReplyImmSeq(uint32_t imm) { return imm & 0xffffffu; }

// What the server writes into a reply slot. An ok push ack writes only the first 8 bytes.
struct ReplyRecord {
  uint32_t magic = kReplyMagic;
  uint32_t seq = 0;
  uint8_t code = 0;  // ferry::Code of the error
  uint8_t reserved[3] = {};
  uint32_t text_bytes = 0;
  char text[kReplySlotBytes - 16] = {};
};
static_assert(sizeof(ReplyRecord) == kReplySlotBytes);

// Fills an error record (text truncated to fit).
void MakeErrorRecord(uint32_t seq, const Status& status, ReplyRecord* out);
// Reads an error record back; kProtocol if it is malformed or names another seq.
Status DecodeErrorRecord(const ReplyRecord& record, uint32_t expected_seq);

// What a worker's data connection says in its handshake (TransportOptions::hello_info).
std::vector<uint8_t> EncodeWorkerHello(uint32_t worker_index);
Result<uint32_t> DecodeWorkerHello(std::span<const uint8_t> bytes);

// The worker arena's reply-slot area: [servers][max_outstanding] slots, rounded up to 4 KiB.
inline uint64_t ReplySlotsBytes(uint32_t servers, uint32_t max_outstanding) {
  return (uint64_t{servers} * max_outstanding * kReplySlotBytes + 4095) / 4096 * 4096;
}
inline uint64_t ReplySlotOffset(uint32_t server, uint32_t seq, uint32_t max_outstanding) {
  return (uint64_t{server} * max_outstanding + seq % max_outstanding) * kReplySlotBytes;
}

// IEEE binary16 conversion (round to nearest even), portable (no F16C needed).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

}  // namespace ferry::ps
