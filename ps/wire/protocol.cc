// Request framing and checks, reply records, half floats (see protocol.h).
#include "ps/wire/protocol.h"

#include <algorithm>

namespace ferry::ps {

std::string_view RequestTypeName(RequestType type) {
  switch (type) {
    case RequestType::kPull:
      return "pull";
    case RequestType::kPush:
      return "push";
    case RequestType::kPushPull:
      return "push-pull";
  }
  return "?";
}

uint64_t RequestPayloadBytes(RequestType type, uint8_t flags, uint32_t num_keys, uint32_t dim) {
  uint64_t per_key = 8;
  if (type == RequestType::kPush || type == RequestType::kPushPull) {
    const uint64_t elem = (flags & kFlagFp16Grads) ? 2 : 4;
    per_key += uint64_t{dim} * elem;
  }
  // A header straight from the wire may claim 2^32 keys of width 2^32: saturate rather than
  // wrap, so that such a size never matches payload_bytes (or fits a ring) by accident.
  if (num_keys != 0 && per_key > UINT64_MAX / num_keys) return UINT64_MAX;
  return uint64_t{num_keys} * per_key;
}

uint64_t RequestRingBytes(RequestType type, uint8_t flags, uint32_t num_keys, uint32_t dim) {
  const uint64_t payload = RequestPayloadBytes(type, flags, num_keys, dim);
  constexpr uint64_t kMax = UINT64_MAX / kRequestAlign * kRequestAlign;
  if (payload > kMax - 2 * kRequestAlign) return kMax;  // saturated: fits no ring
  const uint64_t raw = sizeof(RequestHeader) + payload;
  return (raw + kRequestAlign - 1) / kRequestAlign * kRequestAlign;
}

namespace {

// Framing of a request whose header was read at `offset`: everything here is a protocol
// violation (the worker's ring is no longer trustworthy).
Status CheckFrame(std::span<const uint8_t> ring, uint64_t offset, const RequestHeader& h) {
  if (h.magic != kRequestMagic) {
    return ProtocolError("request at ring offset " + std::to_string(offset) +
                         " has a bad magic (not a ferry request, or written over)");
  }
  const auto type = static_cast<RequestType>(h.type);
  if (type != RequestType::kPull && type != RequestType::kPush && type != RequestType::kPushPull) {
    return ProtocolError("request type " + std::to_string(h.type) + " is unknown");
  }
  const uint64_t payload = RequestPayloadBytes(type, h.flags, h.num_keys, h.dim);
  if (h.payload_bytes != payload) {
    return ProtocolError("request payload_bytes " + std::to_string(h.payload_bytes) +
                         " does not match " + std::to_string(h.num_keys) + " keys of width " +
                         std::to_string(h.dim) + " (" + std::to_string(payload) + ")");
  }
  if (ring.size() - offset - sizeof(RequestHeader) < payload) {
    return ProtocolError("request payload of " + std::to_string(payload) +
                         " bytes runs past the end of the staging ring");
  }
  return Status::Ok();
}

// Where a pull's rows go: inside the worker's row area, rows not overlapping.
Status CheckRowDestination(const RequestHeader& h, const TableShape& t,
                           const RequestLimits& limits) {
  const bool fp16 = (h.flags & kFlagFp16Rows) != 0;
  if (fp16 && !t.fp16_rows) {
    return InvalidArgument("table " + std::to_string(h.table) + " keeps no fp16 mirror");
  }
  const uint64_t row = RowWireBytes(t.dim, fp16);
  if (h.dest_stride < row) {
    return InvalidArgument("destination stride " + std::to_string(h.dest_stride) +
                           " is shorter than a row (" + std::to_string(row) + " bytes)");
  }
  const uint64_t span = uint64_t{h.num_keys - 1} * h.dest_stride + row;
  if (h.dest_offset < limits.rows_begin || h.dest_offset > limits.arena_bytes ||
      limits.arena_bytes - h.dest_offset < span) {
    return OutOfRange("destination [" + std::to_string(h.dest_offset) + ", +" +
                      std::to_string(span) + ") is outside the worker's row area [" +
                      std::to_string(limits.rows_begin) + ", " +
                      std::to_string(limits.arena_bytes) + ")");
  }
  return Status::Ok();
}

// Where a want-slots pull's SlotReply goes: aligned, large enough, inside the row area.
Status CheckSlotReplyArea(const RequestHeader& h, const RequestLimits& limits) {
  const uint64_t need = SlotReplyBytes(h.num_keys, 0);
  if (h.slots_offset % 8 != 0 || h.slots_bytes < need || h.slots_offset < limits.rows_begin ||
      h.slots_offset > limits.arena_bytes || limits.arena_bytes - h.slots_offset < h.slots_bytes) {
    return OutOfRange(
        "slot reply [" + std::to_string(h.slots_offset) + ", +" + std::to_string(h.slots_bytes) +
        ") is unaligned, shorter than the " + std::to_string(need) + " bytes " +
        std::to_string(h.num_keys) + " slots need, or outside the worker's row area [" +
        std::to_string(limits.rows_begin) + ", " + std::to_string(limits.arena_bytes) + ")");
  }
  return Status::Ok();
}

// Content: the request is framed; what it asks may still be refused with an error reply.
Status CheckContent(const RequestHeader& h, std::span<const TableShape> tables,
                    const RequestLimits& limits) {
  if (h.table >= tables.size()) {
    return NotFound("table " + std::to_string(h.table) + " does not exist (the job has " +
                    std::to_string(tables.size()) + ")");
  }
  const TableShape& t = tables[h.table];
  if (h.dim != t.dim) {
    return InvalidArgument("table " + std::to_string(h.table) + " has width " +
                           std::to_string(t.dim) + ", the request says " + std::to_string(h.dim));
  }
  if ((h.flags & ~(kFlagFp16Grads | kFlagFp16Rows | kFlagWantSlots | kFlagReadOnly)) != 0) {
    return InvalidArgument("request flags 0x" + std::to_string(h.flags) + " are unknown");
  }
  if (h.num_keys == 0) return InvalidArgument("request carries no key");
  if (h.num_keys > limits.max_keys) {
    return ResourceExhausted("request carries " + std::to_string(h.num_keys) +
                             " keys, the limit is " + std::to_string(limits.max_keys));
  }
  const auto type = static_cast<RequestType>(h.type);
  if (type == RequestType::kPull || type == RequestType::kPushPull) {
    FERRY_RETURN_IF_ERROR(CheckRowDestination(h, t, limits));
  } else if ((h.flags & kFlagFp16Rows) != 0) {
    return InvalidArgument("fp16 rows requested on a push");
  }
  if ((h.flags & kFlagWantSlots) != 0) {
    if (type != RequestType::kPull) return InvalidArgument("slots requested on a push");
    FERRY_RETURN_IF_ERROR(CheckSlotReplyArea(h, limits));
  }
  if ((h.flags & kFlagReadOnly) != 0 && type != RequestType::kPull) {
    return InvalidArgument("read-only requested on a push");
  }
  return Status::Ok();
}

}  // namespace

Status ParseRequest(std::span<const uint8_t> ring, uint64_t offset,
                    std::span<const TableShape> tables, const RequestLimits& limits,
                    RequestView* out) {
  *out = RequestView{};
  if (offset % kRequestAlign != 0 || offset > ring.size() ||
      ring.size() - offset < sizeof(RequestHeader)) {
    return ProtocolError("request at ring offset " + std::to_string(offset) + " is outside the " +
                         std::to_string(ring.size()) + "-byte staging ring");
  }
  RequestView& v = *out;
  v.offset = offset;
  std::memcpy(&v.header, ring.data() + offset, sizeof v.header);
  FERRY_RETURN_IF_ERROR(CheckFrame(ring, offset, v.header));
  FERRY_RETURN_IF_ERROR(CheckContent(v.header, tables, limits));
  const uint8_t* base = ring.data() + offset + sizeof(RequestHeader);
  v.keys = reinterpret_cast<const uint64_t*>(base);  // 64-byte aligned: offset % 64 == 0
  if (static_cast<RequestType>(v.header.type) != RequestType::kPull) {
    v.grads = base + uint64_t{v.header.num_keys} * 8;
  }
  return Status::Ok();
}

Status ReadSlotReply(std::span<const uint8_t> area, uint32_t seq, uint32_t num_keys,
                     SlotReplyView* out) {
  *out = SlotReplyView{};
  if (area.size() < sizeof(SlotReplyHeader)) return NotFound("no slot reply (no room for one)");
  SlotReplyHeader& h = out->header;
  std::memcpy(&h, area.data(), sizeof h);
  if (h.magic != kSlotsMagic || h.seq != seq) {
    return NotFound("no slot reply for request " + std::to_string(seq));
  }
  const uint64_t descriptors = uint64_t{h.rows_descriptor_bytes} + h.status_descriptor_bytes;
  if (h.num_keys != num_keys || SlotReplyBytes(num_keys, descriptors) > area.size()) {
    return ProtocolError(
        "slot reply for request " + std::to_string(seq) + " claims " + std::to_string(h.num_keys) +
        " slots (" + std::to_string(num_keys) + " asked) and " + std::to_string(descriptors) +
        " descriptor bytes: more than the " + std::to_string(area.size()) + " bytes set aside");
  }
  if (h.row_stride == 0 || h.row_stride % 8 != 0 || h.status_offset % 8 != 0) {
    return ProtocolError("slot reply for request " + std::to_string(seq) +
                         " has a bad row stride or status offset");
  }
  const uint8_t* p = area.data() + sizeof(SlotReplyHeader);
  out->slots = p;
  p += uint64_t{num_keys} * 4;
  out->rows_descriptor = std::span<const uint8_t>(p, h.rows_descriptor_bytes);
  p += h.rows_descriptor_bytes;
  out->status_descriptor = std::span<const uint8_t>(p, h.status_descriptor_bytes);
  return Status::Ok();
}

void MakeErrorRecord(uint32_t seq, const Status& status, ReplyRecord* out) {
  *out = ReplyRecord{};
  out->seq = seq;
  out->code = static_cast<uint8_t>(status.code());
  const std::string& m = status.message();
  out->text_bytes = static_cast<uint32_t>(std::min(m.size(), sizeof(out->text)));
  if (out->text_bytes != 0)
    std::memcpy(out->text, m.data(), out->text_bytes);  // data() may be null when empty
}

Status DecodeErrorRecord(const ReplyRecord& r, uint32_t expected_seq) {
  if (r.magic != kReplyMagic || (r.seq & 0xffffffu) != (expected_seq & 0xffffffu)) {
    return ProtocolError("server error reply for request " + std::to_string(expected_seq) +
                         " is malformed");
  }
  if (r.text_bytes > sizeof(r.text) || r.code == 0 ||
      r.code > static_cast<uint8_t>(Code::kInternal)) {
    return ProtocolError("server error reply for request " + std::to_string(expected_seq) +
                         " has a bad code or length");
  }
  return Status(static_cast<Code>(r.code), std::string(r.text, r.text_bytes));
}

void MakeMovedRecord(uint32_t seq, uint32_t retry_after, ReplyRecord* out) {
  *out = ReplyRecord{};
  out->seq = seq;
  out->text_bytes = 4;
  std::memcpy(out->text, &retry_after, 4);
}

Result<uint32_t> DecodeMovedRecord(const ReplyRecord& r, uint32_t expected_seq) {
  if (r.magic != kReplyMagic || (r.seq & 0xffffffu) != (expected_seq & 0xffffffu) || r.code != 0 ||
      r.text_bytes != 4) {
    return ProtocolError("server \"moved\" reply for request " + std::to_string(expected_seq) +
                         " is malformed");
  }
  uint32_t v = 0;
  std::memcpy(&v, r.text, 4);
  return v;
}

namespace {

constexpr uint32_t kWorkerHelloMagic = 0x314b5746;  // "FWK1"
constexpr uint32_t kServerHelloMagic = 0x31565346;  // "FSV1"

std::vector<uint8_t> EncodeHello(uint32_t magic, uint32_t index) {
  std::vector<uint8_t> out(8);
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &index, 4);
  return out;
}

}  // namespace

std::vector<uint8_t> EncodeWorkerHello(uint32_t worker_index) {
  return EncodeHello(kWorkerHelloMagic, worker_index);
}

std::vector<uint8_t> EncodeServerHello(uint32_t server_index) {
  return EncodeHello(kServerHelloMagic, server_index);
}

Result<Hello> DecodeHello(std::span<const uint8_t> bytes) {
  uint32_t magic = 0;
  Hello h;
  if (bytes.size() != 8) return ProtocolError("data connection hello has the wrong size");
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&h.index, bytes.data() + 4, 4);
  if (magic != kWorkerHelloMagic && magic != kServerHelloMagic) {
    return ProtocolError("data connection hello has a bad magic");
  }
  h.server = magic == kServerHelloMagic;
  return h;
}

namespace {

// The push RequestView of a checked forward (or row record) at `offset`; its keys follow the
// header.
void ForwardPushView(const ForwardHeader& h, uint64_t offset, const uint8_t* base, RequestView* v) {
  v->offset = offset;
  v->header.type = static_cast<uint8_t>(RequestType::kPush);
  v->header.flags = h.flags;
  v->header.table = h.table;
  v->header.seq = h.seq;
  v->header.num_keys = h.num_keys;
  v->header.dim = h.dim;
  v->header.clock = h.clock;
  v->header.payload_bytes = h.payload_bytes;
  v->header.push_id = h.push_id;
  v->header.shard = h.shard;
  v->keys = reinterpret_cast<const uint64_t*>(base);
}

// The rest of ParseForward for a row record (its header is in out->header).
Status ParseRecord(std::span<const uint8_t> ring, uint64_t offset,
                   std::span<const TableShape> tables, const ForwardLimits& limits,
                   ForwardView* out) {
  const ForwardHeader& h = out->header;
  auto bad = [&](const std::string& what) {
    return ProtocolError("row record at ring offset " + std::to_string(offset) + ": " + what);
  };
  if ((h.flags & ~(kForwardRecord | kForwardApplyStaged | kForwardClockDone)) != 0) {
    return bad("unknown flags");
  }
  if (h.table >= tables.size()) return bad("table " + std::to_string(h.table) + " unknown");
  if (h.num_keys > limits.max_keys) {
    return bad(std::to_string(h.num_keys) + " keys (limit " + std::to_string(limits.max_keys) +
               ")");
  }
  if (h.shard >= limits.shards) return bad("shard " + std::to_string(h.shard) + " unknown");
  if (h.op_id == 0) return bad("record number 0");
  if ((h.flags & kForwardApplyStaged) != 0) {
    if (h.worker >= limits.workers) return bad("worker " + std::to_string(h.worker) + " unknown");
    if (h.push_id == 0) return bad("push number 0");
  }
  const uint64_t payload = RecordPayloadBytes(h.num_keys);
  if (h.payload_bytes != payload) return bad("payload_bytes does not match its keys");
  if (ring.size() - offset - sizeof(ForwardHeader) < payload) {
    return bad("payload runs past the end of the forward ring");
  }
  const uint8_t* base = ring.data() + offset + sizeof(ForwardHeader);
  const uint8_t* ops = base + uint64_t{h.num_keys} * 8;
  for (uint32_t i = 0; i < h.num_keys; ++i) {
    if (ops[i] != static_cast<uint8_t>(RowOp::kCreate) &&
        ops[i] != static_cast<uint8_t>(RowOp::kEvict)) {
      return bad("unknown row operation " + std::to_string(ops[i]));
    }
  }
  ForwardPushView(h, offset, base, &out->push);
  out->ops = ops;
  return Status::Ok();
}

// The rest of ParseForward for a copy forward (its header is in out->header). A kCopyRows'
// row width is checked against the table by whoever applies it (the layout is the server's).
Status ParseCopy(std::span<const uint8_t> ring, uint64_t offset, std::span<const TableShape> tables,
                 const ForwardLimits& limits, ForwardView* out) {
  const ForwardHeader& h = out->header;
  auto bad = [&](const std::string& what) {
    return ProtocolError("copy forward at ring offset " + std::to_string(offset) + ": " + what);
  };
  if (h.flags != kForwardCopy) return bad("unknown flags");
  if (h.shard >= limits.shards) return bad("shard " + std::to_string(h.shard) + " unknown");
  uint64_t payload = 0;
  switch (static_cast<CopyKind>(h.reserved0)) {
    case CopyKind::kRows:
      if (h.table >= tables.size()) return bad("table " + std::to_string(h.table) + " unknown");
      if (h.num_keys == 0 || h.num_keys > limits.max_copy_rows) {
        return bad(std::to_string(h.num_keys) + " rows (limit " +
                   std::to_string(limits.max_copy_rows) + ")");
      }
      if (h.dim < 4 || h.dim % 2 != 0) return bad("row width " + std::to_string(h.dim));
      payload = uint64_t{h.num_keys} * h.dim * 4;
      break;
    case CopyKind::kWatermark:
      // Per worker at least upto and a count.
      if (h.num_keys < 2 * limits.workers) return bad("a watermark without every worker");
      payload = uint64_t{h.num_keys} * 8;
      break;
    case CopyKind::kEnd:
      if (h.num_keys != 0) return bad("an end with a payload");
      break;
    default:
      return bad("unknown copy kind " + std::to_string(h.reserved0));
  }
  if (h.payload_bytes != payload) return bad("payload_bytes does not match its rows or words");
  if (ring.size() - offset - sizeof(ForwardHeader) < payload) {
    return bad("payload runs past the end of the forward ring");
  }
  out->payload = ring.data() + offset + sizeof(ForwardHeader);
  return Status::Ok();
}

}  // namespace

Status ParseForward(std::span<const uint8_t> ring, uint64_t offset,
                    std::span<const TableShape> tables, const ForwardLimits& limits,
                    ForwardView* out) {
  *out = ForwardView{};
  if (offset % kRequestAlign != 0 || offset > ring.size() ||
      ring.size() - offset < sizeof(ForwardHeader)) {
    return ProtocolError("forward at ring offset " + std::to_string(offset) + " is outside the " +
                         std::to_string(ring.size()) + "-byte forward ring");
  }
  ForwardHeader& h = out->header;
  std::memcpy(&h, ring.data() + offset, sizeof h);
  auto bad = [&](const std::string& what) {
    return ProtocolError("forward at ring offset " + std::to_string(offset) + ": " + what);
  };
  if (h.magic != kForwardMagic) return bad("bad magic (not a forward, or written over)");
  if ((h.flags & kForwardRecord) != 0) return ParseRecord(ring, offset, tables, limits, out);
  if ((h.flags & kForwardCopy) != 0) return ParseCopy(ring, offset, tables, limits, out);
  if ((h.flags & ~kFlagFp16Grads) != 0) return bad("unknown flags");
  if (h.table >= tables.size()) return bad("table " + std::to_string(h.table) + " unknown");
  if (h.dim != tables[h.table].dim) return bad("width differs from the table's");
  if (h.num_keys == 0 || h.num_keys > limits.max_keys) {
    return bad(std::to_string(h.num_keys) + " keys (limit " + std::to_string(limits.max_keys) +
               ")");
  }
  if (h.worker >= limits.workers) return bad("worker " + std::to_string(h.worker) + " unknown");
  if (h.shard >= limits.shards) return bad("shard " + std::to_string(h.shard) + " unknown");
  if (h.push_id == 0) return bad("push number 0");
  const uint64_t payload = RequestPayloadBytes(RequestType::kPush, h.flags, h.num_keys, h.dim);
  if (h.payload_bytes != payload) return bad("payload_bytes does not match keys and width");
  if (ring.size() - offset - sizeof(ForwardHeader) < payload) {
    return bad("payload runs past the end of the forward ring");
  }
  const uint8_t* base = ring.data() + offset + sizeof(ForwardHeader);
  ForwardPushView(h, offset, base, &out->push);
  out->push.grads = base + uint64_t{h.num_keys} * 8;
  return Status::Ok();
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half, or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to 0
    // value = mant * 2^(e-150); in units of the half's 2^-24 that is mant >> (126 - e).
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t out = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (out & 1u))) ++out;  // may carry into the first normal
    return static_cast<uint16_t>(sign | out);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (uint32_t{h} & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    x = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace ferry::ps
