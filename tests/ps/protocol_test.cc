// The data-path protocol (ps/wire/protocol.h) and the control codec (ps/wire/control.h): request
// framing versus content checks, sizes, reply records, the worker hello, half floats (checked
// against the compiler's half type) and the control messages' round trip and rejection of
// damaged input.
#include "ps/wire/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ps/job/checkpoint.h"
#include "ps/store/array_hash_map.h"
#include "ps/wire/control.h"
#include "ps/wire/row_format.h"

namespace ferry::ps {
namespace {

// ---- Sizes ------------------------------------------------------------------------------------

TEST(Protocol, PayloadAndRingBytes) {
  EXPECT_EQ(RequestPayloadBytes(RequestType::kPull, 0, 5, 7), 40u);
  EXPECT_EQ(RequestPayloadBytes(RequestType::kPull, kFlagFp16Rows, 5, 7), 40u);
  EXPECT_EQ(RequestPayloadBytes(RequestType::kPush, 0, 5, 7), 40u + 140u);
  EXPECT_EQ(RequestPayloadBytes(RequestType::kPush, kFlagFp16Grads, 5, 7), 40u + 70u);
  EXPECT_EQ(RequestPayloadBytes(RequestType::kPushPull, 0, 3, 4), 24u + 48u);
  EXPECT_EQ(RequestPayloadBytes(RequestType::kPushPull, kFlagFp16Grads, 3, 4), 24u + 24u);
  // Header + payload rounded up to 64.
  EXPECT_EQ(RequestRingBytes(RequestType::kPull, 0, 1, 4), 128u);               // 64 + 8
  EXPECT_EQ(RequestRingBytes(RequestType::kPull, 0, 8, 4), 128u);               // 64 + 64 exactly
  EXPECT_EQ(RequestRingBytes(RequestType::kPull, 0, 9, 4), 192u);               // 64 + 72
  EXPECT_EQ(RequestRingBytes(RequestType::kPush, 0, 3, 5), 192u);               // 64 + 24 + 60
  EXPECT_EQ(RequestRingBytes(RequestType::kPush, kFlagFp16Grads, 3, 5), 128u);  // 64 + 24 + 30
  for (uint32_t n : {1u, 2u, 100u, 65536u}) {
    for (uint32_t dim : {1u, 3u, 64u}) {
      for (auto type : {RequestType::kPull, RequestType::kPush, RequestType::kPushPull}) {
        const uint64_t ring = RequestRingBytes(type, 0, n, dim);
        EXPECT_EQ(ring % kRequestAlign, 0u);
        EXPECT_GE(ring, 64 + RequestPayloadBytes(type, 0, n, dim));
        EXPECT_LT(ring, 128 + RequestPayloadBytes(type, 0, n, dim));
      }
    }
  }
  EXPECT_EQ(RowWireBytes(5, false), 20u);
  EXPECT_EQ(RowWireBytes(5, true), 10u);
  // Reply slots: [servers][max_outstanding] records rounded up to 4 KiB.
  EXPECT_EQ(ReplySlotsBytes(1, 1), 4096u);
  EXPECT_EQ(ReplySlotsBytes(1, 16), 4096u);
  EXPECT_EQ(ReplySlotsBytes(1, 17), 8192u);
  EXPECT_EQ(ReplySlotsBytes(3, 64), 3u * 64 * 256);
  EXPECT_EQ(ReplySlotOffset(0, 0, 8), 0u);
  EXPECT_EQ(ReplySlotOffset(0, 9, 8), 256u);
  EXPECT_EQ(ReplySlotOffset(2, 3, 8), (2u * 8 + 3) * 256);
  for (uint32_t s = 0; s < 3; ++s) {
    for (uint32_t seq = 0; seq < 100; ++seq) {
      EXPECT_LT(ReplySlotOffset(s, seq, 8) + kReplySlotBytes, ReplySlotsBytes(3, 8) + 1);
    }
  }
}

// The wire's remote row format is what the store lays out for a server's tables, whatever the
// dimension and optimizer (a one-sided read depends on it).
TEST(Protocol, RemoteRowFormatIsTheServersRowLayout) {
  for (Optimizer opt : {Optimizer::kNone, Optimizer::kSgd, Optimizer::kAdagrad, Optimizer::kFtrl,
                        Optimizer::kAdam}) {
    for (uint32_t dim : {1u, 3u, 8u, 17u, 64u}) {
      TableSpec spec;
      spec.dim = dim;
      spec.optimizer.kind = opt;
      const TableOptions o = ServerTableOptions(spec);
      ASSERT_TRUE(o.metadata);
      const RowLayout l = RowLayout::For(dim, o.state_floats, o.metadata);
      EXPECT_EQ(l.embedding_offset, RemoteRowFormat::kEmbeddingOffset);
      const auto versioned = l.Field(RowField::kVersionedEmbedding);
      ASSERT_TRUE(versioned.ok());
      EXPECT_EQ(versioned->offset, RemoteRowFormat::kVersionOffset);
      EXPECT_GE(l.stride, RemoteRowFormat::ReadBytes(dim));
    }
  }
}

TEST(Protocol, ReplyImm) {
  for (uint32_t seq : {0u, 1u, 0xffffffu, 0x1000000u, 0xffffffffu}) {
    for (ReplyKind k : {ReplyKind::kOk, ReplyKind::kError, ReplyKind::kMoved}) {
      const uint32_t imm = ReplyImm(k, seq);
      EXPECT_EQ(ReplyImmKind(imm), k);
      EXPECT_EQ(ReplyImmSeq(imm), seq & 0xffffffu);
    }
  }
}

// ---- ParseRequest ----------------------------------------------------------------------------

class Parse : public ::testing::Test {
 protected:
  static constexpr uint64_t kRing = 4096;
  Parse() : words_(kRing / 8, 0) {}

  std::span<const uint8_t> ring() const {
    return {reinterpret_cast<const uint8_t*>(words_.data()), kRing};
  }
  uint8_t* at(uint64_t offset) { return reinterpret_cast<uint8_t*>(words_.data()) + offset; }

  // Writes a well-formed request at `offset`; `edit` may damage the header before it lands.
  RequestHeader Write(uint64_t offset, RequestType type, uint16_t table, uint32_t n,
                      uint8_t flags = 0) {
    RequestHeader h;
    h.type = static_cast<uint8_t>(type);
    h.flags = flags;
    h.table = table;
    h.seq = 77;
    h.num_keys = n;
    h.dim = table < tables_.size() ? tables_[table].dim : 4;
    h.clock = 3;
    h.dest_offset = limits_.rows_begin;
    h.dest_stride = RowWireBytes(h.dim, (flags & kFlagFp16Rows) != 0);
    h.payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(type, flags, n, h.dim));
    Put(offset, h);
    uint64_t* keys = reinterpret_cast<uint64_t*>(at(offset + 64));
    for (uint32_t i = 0; i < n && offset + 64 + 8 * (i + 1) <= kRing; ++i) keys[i] = 1000 + i;
    return h;
  }
  void Put(uint64_t offset, const RequestHeader& h) { std::memcpy(at(offset), &h, sizeof h); }
  Status Run(uint64_t offset, RequestView* v) {
    return ParseRequest(ring(), offset, tables_, limits_, v);
  }
  // Re-parses after `edit` changed the header at offset 0.
  template <typename Edit>
  Status After(RequestHeader h, Edit edit, RequestView* v) {
    edit(h);
    Put(0, h);
    return Run(0, v);
  }

  std::vector<uint64_t> words_;
  std::vector<TableShape> tables_ = {{4, false}, {3, true}};
  RequestLimits limits_{kRing, 1u << 20, 4096, 16};
};

TEST_F(Parse, WellFormedRequestsPointIntoTheRing) {
  RequestView v;
  RequestHeader h = Write(0, RequestType::kPull, 0, 5);
  ASSERT_TRUE(Run(0, &v).ok());
  EXPECT_EQ(v.offset, 0u);
  EXPECT_EQ(v.type(), RequestType::kPull);
  EXPECT_EQ(v.header.seq, 77u);
  EXPECT_EQ(v.header.num_keys, 5u);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(v.keys), ring().data() + 64);
  EXPECT_EQ(v.keys[4], 1004u);
  EXPECT_EQ(v.grads, nullptr);
  EXPECT_EQ(std::memcmp(&v.header, &h, sizeof h), 0);

  h = Write(1024, RequestType::kPush, 1, 16);  // the key limit exactly
  ASSERT_TRUE(Run(1024, &v).ok());
  EXPECT_EQ(v.type(), RequestType::kPush);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(v.keys), ring().data() + 1024 + 64);
  EXPECT_EQ(v.grads, ring().data() + 1024 + 64 + 16 * 8);

  Write(2048, RequestType::kPushPull, 1, 3, kFlagFp16Grads | kFlagFp16Rows);
  ASSERT_TRUE(Run(2048, &v).ok());
  EXPECT_NE(v.grads, nullptr);

  // The last request the ring can hold ends exactly at its end.
  const uint64_t last = kRing - 128;
  Write(last, RequestType::kPull, 0, 8);  // 64 + 64 bytes
  EXPECT_TRUE(Run(last, &v).ok());

  // Rows ending exactly at the end of the arena fit.
  h = Write(0, RequestType::kPull, 0, 4);
  h.dest_offset = limits_.arena_bytes - 4 * 16;
  Put(0, h);
  EXPECT_TRUE(Run(0, &v).ok());
  // A wider stride than a row is fine (rows spaced out).
  h.dest_offset = limits_.rows_begin;
  h.dest_stride = 64;
  Put(0, h);
  EXPECT_TRUE(Run(0, &v).ok());
}

TEST_F(Parse, FramingViolationsAreProtocolErrors) {
  RequestView v;
  const RequestHeader good = Write(0, RequestType::kPush, 0, 4);
  struct Case {
    const char* what;
    uint64_t offset;
    void (*edit)(RequestHeader&);
  };
  const Case cases[] = {
      {"unaligned offset", 32, nullptr},
      {"offset at the end", kRing, nullptr},
      {"offset past the end", kRing + 64, nullptr},
      {"huge offset", (uint64_t{1} << 32) * 64 - 64, nullptr},
      {"bad magic", 0, [](RequestHeader& h) { h.magic = 0x12345678; }},
      {"zero magic", 0, [](RequestHeader& h) { h.magic = 0; }},
      {"type 0", 0, [](RequestHeader& h) { h.type = 0; }},
      {"type 4", 0, [](RequestHeader& h) { h.type = 4; }},
      {"payload_bytes + 1", 0, [](RequestHeader& h) { h.payload_bytes += 1; }},
      {"payload_bytes - 8", 0, [](RequestHeader& h) { h.payload_bytes -= 8; }},
      {"payload_bytes 0", 0, [](RequestHeader& h) { h.payload_bytes = 0; }},
      {"num_keys changed", 0, [](RequestHeader& h) { h.num_keys += 1; }},
      {"fp16 grads flag without halves", 0, [](RequestHeader& h) { h.flags = kFlagFp16Grads; }},
      {"payload past the ring", 0,
       [](RequestHeader& h) {
         h.num_keys = 200;  // 200 * (8 + 16) bytes > 4096 - 64
         h.payload_bytes = 4800;
       }},
      // 2^31 keys of width 2^31 - 2: keys + gradients are 2^64 bytes, which wraps to 0 in 64-bit
      // arithmetic; payload_bytes 0 must not pass for that.
      {"payload size overflow", 0,
       [](RequestHeader& h) {
         h.num_keys = 1u << 31;
         h.dim = (1u << 31) - 2;
         h.payload_bytes = 0;
       }},
  };
  for (const Case& c : cases) {
    Put(0, good);
    RequestHeader h = good;
    if (c.edit != nullptr) c.edit(h);
    Put(0, h);
    Status s = Run(c.offset, &v);
    EXPECT_EQ(s.code(), Code::kProtocol) << c.what << ": " << s.ToString();
  }
  // A request whose header fits but whose payload runs past the ring.
  Write(kRing - 64, RequestType::kPull, 0, 1);
  Status s = Run(kRing - 64, &v);
  EXPECT_EQ(s.code(), Code::kProtocol) << s.ToString();
  EXPECT_NE(s.message().find("past the end"), std::string::npos) << s.message();
}

TEST_F(Parse, ContentErrorsNameTheProblemAndKeepTheSeq) {
  struct Case {
    const char* what;
    RequestType type;
    uint16_t table;
    uint8_t flags;
    void (*edit)(RequestHeader&);
    Code code;
    const char* text;
  };
  const Case cases[] = {
      {"unknown table", RequestType::kPull, 2, 0, nullptr, Code::kNotFound, "table 2 does not"},
      {"table 65535", RequestType::kPush, 65535, 0, nullptr, Code::kNotFound, "does not exist"},
      {"wrong width", RequestType::kPush, 0, 0,
       [](RequestHeader& h) {
         h.dim = 5;
         h.payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(RequestType::kPush, 0, 4, 5));
       },
       Code::kInvalidArgument, "width 4, the request says 5"},
      {"unknown flag", RequestType::kPull, 0, 0, [](RequestHeader& h) { h.flags = 0x80; },
       Code::kInvalidArgument, "flags"},
      {"no keys", RequestType::kPull, 0, 0,
       [](RequestHeader& h) {
         h.num_keys = 0;
         h.payload_bytes = 0;
       },
       Code::kInvalidArgument, "no key"},
      {"too many keys", RequestType::kPull, 0, 0,
       [](RequestHeader& h) {
         h.num_keys = 17;
         h.payload_bytes = 17 * 8;
       },
       Code::kResourceExhausted, "limit is 16"},
      {"fp16 rows without a mirror", RequestType::kPull, 0, kFlagFp16Rows, nullptr,
       Code::kInvalidArgument, "no fp16 mirror"},
      {"fp16 rows on a push", RequestType::kPush, 1, kFlagFp16Rows, nullptr, Code::kInvalidArgument,
       "fp16 rows requested on a push"},
      {"read-only on a push-pull", RequestType::kPushPull, 0, kFlagReadOnly, nullptr,
       Code::kInvalidArgument, "read-only requested on a push"},
      {"stride shorter than a row", RequestType::kPull, 0, 0,
       [](RequestHeader& h) { h.dest_stride = 15; }, Code::kInvalidArgument, "stride"},
      {"fp16 stride shorter than a half row", RequestType::kPull, 1, kFlagFp16Rows,
       [](RequestHeader& h) { h.dest_stride = 5; }, Code::kInvalidArgument, "stride"},
      {"rows over the reply slots", RequestType::kPull, 0, 0,
       [](RequestHeader& h) { h.dest_offset = 4096 - 64; }, Code::kOutOfRange, "outside"},
      {"rows at offset 0", RequestType::kPushPull, 0, 0,
       [](RequestHeader& h) { h.dest_offset = 0; }, Code::kOutOfRange, "outside"},
      {"rows past the arena", RequestType::kPull, 0, 0,
       [](RequestHeader& h) { h.dest_offset = (1u << 20) - 4 * 16 + 4; }, Code::kOutOfRange,
       "outside"},
      {"rows far past the arena", RequestType::kPull, 0, 0,
       [](RequestHeader& h) { h.dest_offset = UINT64_MAX - 8; }, Code::kOutOfRange, "outside"},
      {"huge stride", RequestType::kPull, 0, 0,
       [](RequestHeader& h) { h.dest_stride = UINT32_MAX; }, Code::kOutOfRange, "outside"},
  };
  for (const Case& c : cases) {
    std::fill(words_.begin(), words_.end(), 0);
    RequestHeader h = Write(0, c.type, c.table, 4, c.flags);
    if (c.edit != nullptr) c.edit(h);
    h.seq = 4242;
    RequestView v;
    Status s = After(
        h, [](RequestHeader&) {}, &v);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.text), std::string::npos) << c.what << ": " << s.message();
    EXPECT_EQ(v.header.seq, 4242u) << c.what << ": the seq names the request to answer";
  }
}

// ---- Reply records and the hello ---------------------------------------------------------------

TEST(Protocol, ErrorRecordsRoundTripAndAreChecked) {
  ReplyRecord r;
  MakeErrorRecord(9, NotFound("table 3 does not exist"), &r);
  EXPECT_EQ(r.magic, kReplyMagic);
  EXPECT_EQ(r.seq, 9u);
  Status s = DecodeErrorRecord(r, 9);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "table 3 does not exist");
  // Seqs compare modulo 2^24, as the notification carries them.
  EXPECT_EQ(DecodeErrorRecord(r, 9 + (1u << 24)).code(), Code::kNotFound);
  // Long texts are cut to the slot.
  MakeErrorRecord(1, InvalidArgument(std::string(1000, 'x')), &r);
  EXPECT_EQ(r.text_bytes, sizeof(r.text));
  s = DecodeErrorRecord(r, 1);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), std::string(sizeof(r.text), 'x'));
  // Malformed records are protocol errors.
  MakeErrorRecord(5, OutOfRange("x"), &r);
  EXPECT_EQ(DecodeErrorRecord(r, 6).code(), Code::kProtocol);
  ReplyRecord bad = r;
  bad.magic = kRequestMagic;
  EXPECT_EQ(DecodeErrorRecord(bad, 5).code(), Code::kProtocol);
  bad = r;
  bad.code = 0;
  EXPECT_EQ(DecodeErrorRecord(bad, 5).code(), Code::kProtocol);
  bad = r;
  bad.code = static_cast<uint8_t>(Code::kInternal) + 1;
  EXPECT_EQ(DecodeErrorRecord(bad, 5).code(), Code::kProtocol);
  bad = r;
  bad.text_bytes = sizeof(r.text) + 1;
  EXPECT_EQ(DecodeErrorRecord(bad, 5).code(), Code::kProtocol);
}

TEST(Protocol, Hellos) {
  for (uint32_t i : {0u, 1u, 65535u, UINT32_MAX}) {
    auto d = DecodeHello(EncodeWorkerHello(i));
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->server);
    EXPECT_EQ(d->index, i);
    auto s = DecodeHello(EncodeServerHello(i));
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(s->server);
    EXPECT_EQ(s->index, i);
  }
  std::vector<uint8_t> h = EncodeWorkerHello(3);
  for (size_t n : {0u, 4u, 7u}) {
    EXPECT_EQ(DecodeHello(std::span<const uint8_t>(h.data(), n)).status().code(), Code::kProtocol);
  }
  std::vector<uint8_t> longer = h;
  longer.push_back(0);
  EXPECT_EQ(DecodeHello(longer).status().code(), Code::kProtocol);
  std::vector<uint8_t> bad = h;
  bad[0] ^= 1;
  EXPECT_EQ(DecodeHello(bad).status().code(), Code::kProtocol);
}

// ---- Forwarded pushes (replicas) ----------------------------------------------------------------

std::vector<uint8_t> ForwardRing(const ForwardHeader& h, size_t ring_bytes = 4096) {
  std::vector<uint8_t> ring(ring_bytes, 0);
  std::memcpy(ring.data(), &h, sizeof h);
  return ring;
}

ForwardHeader GoodForward() {
  ForwardHeader h;
  h.table = 1;
  h.dim = 8;
  h.num_keys = 3;
  h.worker = 1;
  h.shard = 2;
  h.push_id = 9;
  h.payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(RequestType::kPush, 0, 3, 8));
  return h;
}

TEST(Protocol, ForwardParsesIntoAPushView) {
  const TableShape tables[] = {{4, false}, {8, false}};
  const ForwardLimits limits{4096, 16, 2, 3};
  std::vector<uint8_t> ring = ForwardRing(GoodForward());
  ForwardView v;
  ASSERT_TRUE(ParseForward(ring, 0, tables, limits, &v).ok());
  EXPECT_EQ(v.push.type(), RequestType::kPush);
  EXPECT_EQ(v.push.header.table, 1u);
  EXPECT_EQ(v.push.header.push_id, 9u);
  EXPECT_EQ(v.push.header.shard, 2u);
  EXPECT_EQ(v.push.keys, reinterpret_cast<const uint64_t*>(ring.data() + 64));
  EXPECT_EQ(v.push.grads, ring.data() + 64 + 3 * 8);
}

TEST(Protocol, BadForwardsAreProtocolErrorsNeverReadsOutside) {
  const TableShape tables[] = {{4, false}, {8, false}};
  const ForwardLimits limits{4096, 16, 2, 3};
  auto refused = [&](ForwardHeader h, uint64_t offset = 0, size_t ring_bytes = 4096) {
    std::vector<uint8_t> ring = ForwardRing(h, ring_bytes);
    ForwardView v;
    return ParseForward(ring, offset, tables, limits, &v).code() == Code::kProtocol;
  };
  ForwardHeader h = GoodForward();
  EXPECT_TRUE(refused(h, 32));             // unaligned
  EXPECT_TRUE(refused(h, 4096));           // past the ring
  EXPECT_TRUE(refused(h, 0, 64 + 3 * 8));  // payload runs past the end
  h.magic ^= 1;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.table = 2;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.dim = 4;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.worker = 2;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.shard = 3;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.push_id = 0;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.num_keys = 17;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.payload_bytes += 4;
  EXPECT_TRUE(refused(h));
  h = GoodForward();
  h.flags = kFlagFp16Rows;
  EXPECT_TRUE(refused(h));
}

// ---- Half floats ------------------------------------------------------------------------------

// The compiler's IEEE half: _Float16 (GCC 12; clang from 15 on x86), else clang 14's __fp16 (a
// storage-only half with the same conversions, round to nearest even).
#if defined(__FLT16_MAX__)
using CompilerHalf = _Float16;
#else
using CompilerHalf = __fp16;
#endif

uint16_t RefHalf(float f) {  // the compiler's conversion (round to nearest even)
  const CompilerHalf h = static_cast<CompilerHalf>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float RefFloat(uint16_t u) {
  CompilerHalf h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool IsNanHalf(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if (IsNanHalf(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
      const uint16_t back = FloatToHalf(f);
      ASSERT_TRUE(IsNanHalf(back)) << std::hex << h << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u);
      continue;
    }
    ASSERT_EQ(Bits(f), Bits(RefFloat(h))) << "half 0x" << std::hex << h;
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
  }
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x7c00), INFINITY);
  EXPECT_EQ(HalfToFloat(0xfc00), -INFINITY);
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);
}

// Every rounding decision: for each pair of neighbouring halves, the floats at, just below and
// just above their midpoint (ties go to the even half), plus the edges of the range.
TEST(Half, RoundsToNearestEvenLikeFloat16) {
  std::vector<float> probes;
  for (uint32_t i = 0; i < 0x7c00; ++i) {
    const float lo = RefFloat(static_cast<uint16_t>(i));
    const float hi = RefFloat(static_cast<uint16_t>(i + 1));  // 0x7c00 is inf
    const float mid = std::isinf(hi) ? 65520.0f : static_cast<float>((double{lo} + hi) / 2);
    for (float f : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                    std::nextafter(lo, INFINITY)}) {
      probes.push_back(f);
      probes.push_back(-f);
    }
  }
  for (float f :
       {0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
        std::ldexp(1.0f, -25), std::nextafter(std::ldexp(1.0f, -25), 1.0f), std::ldexp(1.0f, -26),
        std::ldexp(3.0f, -26), 65504.0f, 65519.0f, 65520.0f, std::nextafter(65520.0f, 0.0f), 1e10f,
        std::numeric_limits<float>::max(), INFINITY}) {
    probes.push_back(f);
    probes.push_back(-f);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) probes.push_back(f);
  }
  size_t checked = 0;
  for (float f : probes) {
    ASSERT_EQ(FloatToHalf(f), RefHalf(f)) << "float " << f << " (0x" << std::hex << Bits(f) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 300000u);
  // NaNs stay NaNs with their sign.
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu, 0x7fa00000u}) {
    const uint16_t h = FloatToHalf(FromBits(bits));
    EXPECT_TRUE(IsNanHalf(h)) << std::hex << bits;
    EXPECT_EQ((h & 0x8000u) != 0, (bits & 0x80000000u) != 0);
  }
}

// ---- Control messages --------------------------------------------------------------------------

ControlMessage FullMessage(ControlKind kind) {
  ControlMessage m;
  m.kind = kind;
  m.rank = 0xfedcba98u;
  m.role = Role::kWorker;
  m.index = 4097;
  m.value = 0x0123456789abcdefull;
  m.value2 = UINT64_MAX - 5;
  static constexpr char kText[] = "failure: \xc3\xa9t\xc3\xa9 \0 after a NUL";
  m.text = std::string(kText, sizeof kText - 1);  // the NUL inside included
  m.members.push_back({0, Role::kServer, 0, "10.0.0.1:40000", "node-a", 1234});
  m.members.push_back({7, Role::kWorker, 3, "", std::string(300, 'h'), UINT32_MAX});
  for (int i = 0; i < 1000; ++i) m.data.push_back(static_cast<uint8_t>(i * 7));
  return m;
}

void ExpectSame(const ControlMessage& a, const ControlMessage& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.value2, b.value2);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.members, b.members);
  EXPECT_EQ(a.data, b.data);
}

// The kinds ControlKindName knows: 1..last, without gaps.
int LastKnownKind() {
  int last = 0;
  while (last < 255 && ControlKindName(static_cast<ControlKind>(last + 1)) != "?") ++last;
  return last;
}

// A kMoved reply (elastic jobs): the version to wait past, checked like an error record.
TEST(Protocol, MovedRecordsRoundTripAndAreChecked) {
  ReplyRecord r;
  MakeMovedRecord(7, 41, &r);
  auto v = DecodeMovedRecord(r, 7);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 41u);
  EXPECT_EQ(DecodeMovedRecord(r, 8).status().code(), Code::kProtocol);
  ReplyRecord bad = r;
  bad.text_bytes = 5;
  EXPECT_EQ(DecodeMovedRecord(bad, 7).status().code(), Code::kProtocol);
  MakeErrorRecord(7, NotFound("x"), &bad);  // an error record is no moved record
  EXPECT_EQ(DecodeMovedRecord(bad, 7).status().code(), Code::kProtocol);
  bad = r;
  bad.magic = kRequestMagic;
  EXPECT_EQ(DecodeMovedRecord(bad, 7).status().code(), Code::kProtocol);
}

TEST(Control, EveryKindRoundTripsEveryField) {
  const int last = LastKnownKind();
  ASSERT_GE(last, static_cast<int>(ControlKind::kFailure));
  for (int k = last + 1; k < 256; ++k) {
    EXPECT_EQ(ControlKindName(static_cast<ControlKind>(k)), "?") << "a gap before kind " << k;
  }
  for (int k = 1; k <= last; ++k) {
    const auto kind = static_cast<ControlKind>(k);
    const ControlMessage m = FullMessage(kind);
    auto d = DecodeControl(EncodeControl(m));
    ASSERT_TRUE(d.ok()) << ControlKindName(kind) << ": " << d.status().ToString();
    ExpectSame(*d, m);
  }
  // Empty fields and defaults.
  ControlMessage empty;
  auto d = DecodeControl(EncodeControl(empty));
  ASSERT_TRUE(d.ok());
  ExpectSame(*d, empty);
  // A gather chunk of kGatherChunk bytes fits a control message.
  ControlMessage big;
  big.kind = ControlKind::kGather;
  big.data.assign(kGatherChunk, 0xab);
  const auto bytes = EncodeControl(big);
  EXPECT_LE(bytes.size(), kMaxControlMessage);
  d = DecodeControl(bytes);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->data, big.data);
}

TEST(Control, WorkerSetsRoundTripAndRefuseBadIndicesOrLengths) {
  const std::vector<uint32_t> set = {0, 2, 65534};
  auto d = DecodeWorkerSet(EncodeWorkerSet(set), 65535);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, set);
  EXPECT_TRUE(DecodeWorkerSet({}, 1).ok());
  EXPECT_EQ(DecodeWorkerSet(EncodeWorkerSet(set), 3).status().code(), Code::kProtocol);
  std::vector<uint8_t> odd = EncodeWorkerSet(set);
  odd.pop_back();
  EXPECT_EQ(DecodeWorkerSet(odd, 65535).status().code(), Code::kProtocol);
}

TEST(Control, MoveListsRoundTripAndRefuseBadShardsServersOrLengths) {
  const std::vector<ShardMove> moves = {{0, 1, 2}, {5, 2, 0}};
  auto d = DecodeMoves(EncodeMoves(moves), 6, 3);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, moves);
  EXPECT_TRUE(DecodeMoves({}, 1, 1).ok());
  EXPECT_EQ(DecodeMoves(EncodeMoves(moves), 5, 3).status().code(), Code::kProtocol);  // shard 5
  EXPECT_EQ(DecodeMoves(EncodeMoves(moves), 6, 2).status().code(), Code::kProtocol);  // server 2
  const std::vector<uint8_t> whole = EncodeMoves(moves);
  ASSERT_EQ(whole.size(), 24u);
  // Cut inside the second move (a copy, not resize: gcc -O1 with the sanitizers warns on a
  // resize to size() - 4 that it cannot bound).
  const std::vector<uint8_t> cut(whole.begin(), whole.begin() + 20);
  EXPECT_EQ(DecodeMoves(cut, 6, 3).status().code(), Code::kProtocol);
}

TEST(Control, RefusesGarbageAndTruncation) {
  EXPECT_EQ(DecodeControl({}).status().code(), Code::kProtocol);
  std::vector<uint8_t> seven(7, 0);
  EXPECT_EQ(DecodeControl(seven).status().code(), Code::kProtocol);
  std::vector<uint8_t> huge(kMaxControlMessage + 1, 0);
  EXPECT_EQ(DecodeControl(huge).status().code(), Code::kProtocol);
  // Unknown kinds and roles.
  for (int k : {0, LastKnownKind() + 1, 200, 255}) {
    ControlMessage m = FullMessage(ControlKind::kReady);
    m.kind = static_cast<ControlKind>(k);
    EXPECT_EQ(DecodeControl(EncodeControl(m)).status().code(), Code::kProtocol) << k;
  }
  ControlMessage m = FullMessage(ControlKind::kMembership);
  m.role = static_cast<Role>(2);
  EXPECT_EQ(DecodeControl(EncodeControl(m)).status().code(), Code::kProtocol);
  m = FullMessage(ControlKind::kMembership);
  m.members[1].role = static_cast<Role>(9);
  EXPECT_EQ(DecodeControl(EncodeControl(m)).status().code(), Code::kProtocol);
  // Every truncation is refused, or (when only trailing padding went) decodes to the original.
  const ControlMessage full = FullMessage(ControlKind::kFailure);
  const std::vector<uint8_t> bytes = EncodeControl(full);
  size_t refused = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = DecodeControl(std::span<const uint8_t>(bytes.data(), n));
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), Code::kProtocol);
      ++refused;
      continue;
    }
    ExpectSame(*d, full);
  }
  EXPECT_GE(refused, bytes.size() - 8);
  // Damaged bytes never crash the decoder (a verified buffer may still decode to something).
  std::mt19937 rng(3);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> b = bytes;
    b[i] ^= static_cast<uint8_t>(1u << (rng() % 8));
    (void)DecodeControl(b);
  }
  // Random garbage of every small size.
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b(8 + rng() % 200);
    for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
    accepted += DecodeControl(b).ok();
  }
  EXPECT_LT(accepted, 200u);
}

}  // namespace
}  // namespace ferry::ps
