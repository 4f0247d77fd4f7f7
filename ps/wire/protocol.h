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
//   pull with kFlagWantSlots (one-sided pulls, docs/ps.md): the same rows write WITHOUT a
//                     notification; once it has completed on the server (its bytes are in the
//                     arena), a SlotReply into arena[slots_offset] WITH imm = ReplyImm(kOk, seq).
//                     The notified write is the last to land, so a worker that saw it sees both.
//                     A server short of scratch space answers as for a plain pull (no SlotReply:
//                     slots are a hint);
//   push:             an 8-byte ReplyRecord prefix into the reply slot, imm = ReplyImm(kOk, seq);
//   error:            a ReplyRecord with the reason into the reply slot, imm = ReplyImm(kError,
//   seq).
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
  kFlagWantSlots = 1u << 2,  // pull only: also answer each key's slot (SlotReply, below)
  // Pull only: read, never create. A key the table does not hold is not inserted and not counted
  // as a sighting (admission, eviction scores); it reads as zeros, as a refused key does.
  kFlagReadOnly = 1u << 3,
};

struct RequestHeader {
  uint32_t magic = kRequestMagic;
  uint8_t type = 0;   // RequestType
  uint8_t flags = 0;  // RequestFlags
  uint16_t table = 0;
  uint32_t seq = 0;  // per (worker, server): 0, 1, 2, ... in posting order
  uint32_t num_keys = 0;
  uint32_t dim = 0;            // the table's width as the worker knows it
  uint32_t clock = 0;          // the worker's clock when posted
  uint64_t dest_offset = 0;    // rows: arena offset of the first row
  uint32_t dest_stride = 0;    // rows: bytes between consecutive rows in the arena
  uint32_t payload_bytes = 0;  // keys + gradients after the header
  // kFlagWantSlots: where the SlotReply goes (arena offset, 8-aligned, inside the row area) and
  // how many bytes the worker set aside there; the rows epoch the worker holds a descriptor of
  // (0: none), so the server sends descriptors only when they changed.
  uint64_t slots_offset = 0;
  union {
    uint64_t known_epoch = 0;  // pulls with kFlagWantSlots
    // Push types: the push's number in this worker's stream of pushes to `shard` (1, 2, ...).
    // With replicas a push may reach a shard twice (re-sent to a new head after a failure, and
    // forwarded by the old one): every member of the chain applies each number once.
    uint64_t push_id;
  };
  uint32_t slots_bytes = 0;
  // The shard the keys belong to (Partition::ServerOf); equal to the receiving server's index
  // without replicas. With replicas (chain.h) a server serves each shard it hosts.
  uint16_t shard = 0;
  uint8_t reserved[2] = {};
};
static_assert(sizeof(RequestHeader) == kRequestAlign);

// Bytes after the header for a request of this shape (keys, then gradients for push types);
// saturates at UINT64_MAX (and RequestRingBytes at its largest aligned value) instead of wrapping.
uint64_t RequestPayloadBytes(RequestType type, uint8_t flags, uint32_t num_keys, uint32_t dim);
// Header + payload, rounded up to kRequestAlign: the ring space a request occupies.
uint64_t RequestRingBytes(RequestType type, uint8_t flags, uint32_t num_keys, uint32_t dim);
// Bytes of one row in the arena for a pull of this table width.
inline uint32_t RowWireBytes(uint32_t dim, bool fp16) {
  return dim * (fp16 ? 2u : 4u);
}

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
  uint64_t offset = 0;             // of the header in the ring
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
// kMoved (elastic jobs): the shard is not served here now (its head drains it for a move, or it
// moved away); the worker sends the request again, with the same push id, once its chains are
// newer than the record's retry_after (MakeMovedRecord).
enum class ReplyKind : uint8_t { kOk = 1, kError = 2, kMoved = 3 };
inline uint32_t ReplyImm(ReplyKind kind, uint32_t seq) {
  return (static_cast<uint32_t>(kind) << 28) | (seq & 0xffffffu);
}
inline ReplyKind ReplyImmKind(uint32_t imm) {
  return static_cast<ReplyKind>(imm >> 28);
}
inline uint32_t ReplyImmSeq(uint32_t imm) {
  return imm & 0xffffffu;
}

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
// A kMoved reply's record: code 0 and the ChainMap version the worker's must exceed before it
// sends the request again (4 bytes of text). Decode: kProtocol if malformed or another seq.
void MakeMovedRecord(uint32_t seq, uint32_t retry_after, ReplyRecord* out);
Result<uint32_t> DecodeMovedRecord(const ReplyRecord& record, uint32_t expected_seq);

// What a data connection says in its handshake (TransportOptions::hello_info): a worker's
// (every worker connects to every server), or a server's (with replicas, each server connects
// to the next replicas-1 servers, its successors in the chains: chain.h).
struct Hello {
  bool server = false;
  uint32_t index = 0;
};
std::vector<uint8_t> EncodeWorkerHello(uint32_t worker_index);
std::vector<uint8_t> EncodeServerHello(uint32_t server_index);
// kProtocol for anything but the two encodings above (fuzzed).
Result<Hello> DecodeHello(std::span<const uint8_t> bytes);

// The worker arena's reply-slot area: [servers][max_outstanding] slots, rounded up to 4 KiB.
inline uint64_t ReplySlotsBytes(uint32_t servers, uint32_t max_outstanding) {
  return (uint64_t{servers} * max_outstanding * kReplySlotBytes + 4095) / 4096 * 4096;
}
inline uint64_t ReplySlotOffset(uint32_t server, uint32_t seq, uint32_t max_outstanding) {
  return (uint64_t{server} * max_outstanding + seq % max_outstanding) * kReplySlotBytes;
}

// ---- One-sided pulls (docs/ps.md, "One-sided pulls") -----------------------------------------
//
// What a server writes at arena[slots_offset] for a pull with kFlagWantSlots:
//
//   struct SlotReply {
//     SlotReplyHeader header;               // 48 bytes
//     uint32_t slots[num_keys];             // slot of keys[i] in the table, kNoSlot if refused
//     uint8_t  rows_descriptor[rows_descriptor_bytes];      // EncodeRemoteRegion, or absent
//     uint8_t  status_descriptor[status_descriptor_bytes];  // EncodeRemoteRegion, or absent
//   };
//
// A worker reads row `slot` of the table as [slot * row_stride, + embedding_offset + 4 * dim) of
// the rows region: key word, metadata, embedding. The descriptors are sent when the request's
// known_epoch differs from `epoch` (and fit into slots_bytes); the status region holds one
// uint64_t reuse generation per table, at status_offset, that the server increments before it
// may erase any row of the table (so a slot could be handed to another key).
inline constexpr uint32_t kSlotsMagic = 0x314c5346;  // "FSL1"
inline constexpr uint32_t kNoSlotValue = 0xffffffffu;
// Upper bound a worker sets aside for the two descriptors (ucx packs its keys in a few hundred
// bytes; verbs and tcp in tens).
inline constexpr uint32_t kSlotsDescriptorRoom = 4096;

enum SlotReplyFlags : uint32_t {
  // The table may erase rows (a max_rows bound evicts): slots can be reused by other keys. A
  // worker must read the reuse generation after its rows and find it unchanged.
  kSlotsMayReuse = 1u << 0,
  // The rows registration never changes while the job runs (no growth possible): a read with
  // this descriptor can never be refused as stale.
  kSlotsStableRegion = 1u << 1,
};

struct SlotReplyHeader {
  uint32_t magic = kSlotsMagic;
  uint32_t seq = 0;         // the request's
  uint64_t epoch = 0;       // registration epoch of the rows when the slots were resolved
  uint64_t generation = 0;  // the table's reuse generation then
  uint32_t num_keys = 0;
  uint32_t flags = 0;       // SlotReplyFlags
  uint32_t row_stride = 0;  // bytes between slots in the rows region
  uint32_t embedding_offset = 0;
  uint16_t rows_descriptor_bytes = 0;
  uint16_t status_descriptor_bytes = 0;
  uint32_t status_offset = 0;  // of this table's generation word in the status region
};
static_assert(sizeof(SlotReplyHeader) == 48);

// Header + slots + descriptors, rounded up to 8.
inline uint64_t SlotReplyBytes(uint32_t num_keys, uint64_t descriptor_bytes) {
  return (sizeof(SlotReplyHeader) + uint64_t{num_keys} * 4 + descriptor_bytes + 7) / 8 * 8;
}

// A SlotReply read back in place (pointers into the arena).
struct SlotReplyView {
  SlotReplyHeader header;
  const uint8_t* slots = nullptr;            // num_keys little uint32_t, unaligned-safe reads only
  std::span<const uint8_t> rows_descriptor;  // empty if absent
  std::span<const uint8_t> status_descriptor;  // empty if absent
  uint32_t slot(size_t i) const {
    uint32_t s;
    std::memcpy(&s, slots + i * 4, 4);
    return s;
  }
};

// Checks the SlotReply in `area` (the bytes the worker set aside) against what the worker asked:
// kNotFound when the server wrote none (no magic or another seq: it answered as a plain pull);
// kProtocol when it is malformed (counts or lengths past the area).
Status ReadSlotReply(std::span<const uint8_t> area, uint32_t seq, uint32_t num_keys,
                     SlotReplyView* out);

// ---- Replication: forwarded pushes (chain.h, docs/ps.md "Replicas") -------------------------
//
// With JobSpec::replicas R > 1 every server advertises, after its worker rings and table rows,
// one forward ring per predecessor (the servers 1..R-1 places before it) and an ack word:
//
//   server j, for predecessor j-d (d = 1..R-1): forward ring d (remote-write), forward_ring_bytes
//     +-------------------+------------------+----------------------------+-- ... --+
//     | ForwardHeader 64  | keys[n] (8 B)    | grads[n][dim] (4|2 B)      |  next   |
//     +-------------------+------------------+----------------------------+-- ... --+
//   server j: ack word (remote-write, kAckBytes): its successors write acks here
//
// A member that accepted a push (applied it, or staged it under BSP) forwards it to its
// successor as ONE sparse write (the header from a scratch area, the keys and gradients straight
// from where they arrived: the worker's staging ring, or its own forward ring), imm = ring offset
// / 64. The successor parses it (ParseForward), applies it once per (shard, worker, push_id), and
// forwards it on, or, as the tail, acknowledges it: an 8-byte write into the predecessor's ack
// word with imm = ReplyImm(kOk, forward seq). Acks travel back up; the head answers the worker
// when its successor acknowledged. Forward seqs count per (predecessor, successor) pair.
//
// Row records (tables with admission, a max_rows bound or tick eviction; server_replication.cc):
// only a chain's head decides which keys get rows and which rows go, and sends each batch of
// decisions down the chain in the same forward ring, in its order with the pushes, as a record:
//
//     | ForwardHeader 64 (flags kForwardRecord) | keys[n] (8 B) | ops[n] (1 B: RowOp) |  next  |
//
// applied by every member in ring order, once per (shard, op_id) (the head numbers its records
// per shard: 1, 2, ...), forwarded on and acknowledged like a push. With kForwardApplyStaged
// (BSP) the member then applies its staged push (worker, push_id), as the head just did; with
// kForwardClockDone the head applied every staged push of that shard before `clock`.
//
// Repairs (JobSpec::spares, chain.h "Repairs"): the live tail before a joining spare copies it
// each adopted shard in the same ring, ahead of every push it accepts later, as copy forwards
// (flags kForwardCopy, the kind in reserved0):
//
//     kCopyRows       | ForwardHeader 64 | rows[n][dim * 4 B]: whole rows (key, meta, values,
//                                          optimizer state) of `table`, dim = row stride / 4 |
//     kCopyWatermark  | ForwardHeader 64 | u64[n]: per worker: upto, count, count push ids |
//                       (header op_id: the last row record applied; clock: the head's last
//                       kForwardClockDone, both 0 for tables without row records)
//     kCopyEnd        | ForwardHeader 64 |                 (the shard's copy is complete)
//
// The rows are the source's at the kChainRepair; under BSP its staged pushes follow as ordinary
// forwards, then the watermark (the push ids the rows and those pushes hold), then the end.
inline constexpr uint32_t kForwardMagic = 0x31574646;  // "FFW1"
inline constexpr uint64_t kAckBytes = 64;
inline constexpr uint8_t kForwardRecord = 1u << 5;
inline constexpr uint8_t kForwardApplyStaged = 1u << 6;
inline constexpr uint8_t kForwardClockDone = 1u << 7;
inline constexpr uint8_t kForwardCopy = 1u << 4;
enum class CopyKind : uint8_t { kRows = 1, kWatermark = 2, kEnd = 3 };
enum class RowOp : uint8_t { kCreate = 1, kEvict = 2 };

// A forward's imm: its ring offset / 64, and in the top 4 bits which of a spare's rings it is in
// (the adopted slot + 1; 0 for a shard server's ring, which the sender's distance names).
inline uint32_t ForwardImm(uint32_t ring_tag, uint64_t offset) {
  return ring_tag << 28 | static_cast<uint32_t>(offset / kRequestAlign);
}
inline uint32_t ForwardImmRing(uint32_t imm) {
  return imm >> 28;
}
inline uint64_t ForwardImmOffset(uint32_t imm) {
  return uint64_t{imm & 0x0fffffffu} * kRequestAlign;
}

struct ForwardHeader {
  uint32_t magic = kForwardMagic;
  uint8_t flags = 0;      // kFlagFp16Grads (pushes), or kForwardRecord [| kForwardApplyStaged |
                          // kForwardClockDone]
  uint8_t reserved0 = 0;  // kForwardCopy: its CopyKind
  uint16_t table = 0;
  uint32_t seq = 0;  // per (sender, receiver): 0, 1, 2, ... in posting order
  uint32_t num_keys = 0;
  uint32_t dim = 0;
  uint32_t clock = 0;   // the pushing worker's clock (BSP applies it at that boundary)
  uint32_t worker = 0;  // whose push it is
  uint16_t shard = 0;
  uint16_t reserved1 = 0;
  uint64_t push_id = 0;  // the worker's number for it (RequestHeader::push_id)
  uint32_t payload_bytes = 0;
  uint32_t reserved2 = 0;
  uint64_t op_id = 0;  // records: the head's number for it in its shard (from 1)
  uint8_t reserved[8] = {};
};
static_assert(sizeof(ForwardHeader) == kRequestAlign);

struct ForwardLimits {
  uint64_t ring_bytes = 0;
  uint32_t max_keys = 0;
  uint32_t workers = 0;
  uint32_t shards = 0;         // JobSpec::num_shards()
  uint32_t max_copy_rows = 0;  // rows in one kCopyRows (0: copies refused)
};

// A forwarded push parsed in place: `push` is a push RequestView of it (header.type kPush,
// table, flags, num_keys, dim, clock, push_id, shard; keys and grads point into the ring).
struct ForwardView {
  ForwardHeader header;
  RequestView push;
  // Records (header.flags & kForwardRecord): push.keys holds its header.num_keys keys, `ops`
  // their RowOps (each checked); push.grads is null.
  const uint8_t* ops = nullptr;
  // Copies (header.flags & kForwardCopy): the payload (rows or watermark words), checked to lie
  // in the ring; push is not filled in.
  const uint8_t* payload = nullptr;
};
inline uint64_t RecordPayloadBytes(uint32_t n) {
  return uint64_t{n} * 9;
}

// Locates and checks the forward at `offset` of a forward ring. Every violation is kProtocol:
// forwards come from a server of the same job, so a bad one is a bug or a corrupted peer and the
// link is closed. Never reads outside `ring` (fuzzed).
Status ParseForward(std::span<const uint8_t> ring, uint64_t offset,
                    std::span<const TableShape> tables, const ForwardLimits& limits,
                    ForwardView* out);

// IEEE binary16 conversion (round to nearest even), portable (no F16C needed).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

}  // namespace ferry::ps
