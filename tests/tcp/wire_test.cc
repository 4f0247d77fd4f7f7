// The tcp frame header (transport/tcp/wire.h): byte layout, round trips and validation.
#include "transport/tcp/wire.h"

#include <gtest/gtest.h>

#include <random>

namespace ferry::tcp {
namespace {

const WireLimits kLimits{1u << 20, 1000};

TEST(TcpWire, LayoutMatchesThePseudoStruct) {
  FrameHeader h;
  h.kind = FrameKind::kSparseWrite;
  h.flags = kFrameNotify;
  h.imm = 0x04030201;
  h.req_id = 0x1112131415161718ull;
  h.key = 0x2122232425262728ull;
  h.arg = 0x3132333435363738ull;
  h.length = 0x4142434445464748ull;
  uint8_t b[kHeaderSize];
  EncodeHeader(h, b);
  EXPECT_EQ(b[0], 5);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 0);
  EXPECT_EQ(b[3], 0);
  EXPECT_EQ(b[4], 0x01);  // little-endian imm
  EXPECT_EQ(b[7], 0x04);
  EXPECT_EQ(b[8], 0x18);  // req_id LSB first
  EXPECT_EQ(b[15], 0x11);
  EXPECT_EQ(b[16], 0x28);
  EXPECT_EQ(b[24], 0x38);
  EXPECT_EQ(b[32], 0x48);
  EXPECT_EQ(b[39], 0x41);
}

TEST(TcpWire, RandomHeadersRoundTrip) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    FrameHeader h;
    h.kind = static_cast<FrameKind>(rng() % 256);
    h.flags = static_cast<uint8_t>(rng());
    h.reserved = static_cast<uint16_t>(rng());
    h.imm = static_cast<uint32_t>(rng());
    h.req_id = rng();
    h.key = rng();
    h.arg = rng();
    h.length = rng();
    uint8_t b[kHeaderSize];
    EncodeHeader(h, b);
    EXPECT_EQ(DecodeHeader(b), h);
  }
}

FrameHeader Valid(FrameKind kind) {
  FrameHeader h;
  h.kind = kind;
  switch (kind) {
    case FrameKind::kMessage:
      h.length = 10;
      break;
    case FrameKind::kWrite:
      h.req_id = 1;
      h.key = 9;
      h.arg = 5;
      h.length = 10;
      break;
    case FrameKind::kRead:
      h.req_id = 1;
      h.key = 9;
      h.length = 10;
      break;
    case FrameKind::kReadResponse:
      h.req_id = 1;
      h.length = 10;
      break;
    case FrameKind::kSparseWrite:
    case FrameKind::kSparseRead:
      h.req_id = 1;
      h.key = 9;
      h.arg = 3;
      h.length = 10;
      break;
    case FrameKind::kResponse:
      h.req_id = 1;
      h.imm = 3;
      h.length = 20;
      break;
    case FrameKind::kHeartbeat:
      break;
  }
  return h;
}

TEST(TcpWire, ValidHeadersOfEveryKindPass) {
  for (int k = 1; k <= 8; ++k) {
    FrameHeader h = Valid(static_cast<FrameKind>(k));
    EXPECT_TRUE(ValidateHeader(h, kLimits).ok()) << FrameKindName(h.kind);
  }
  FrameHeader w = Valid(FrameKind::kWrite);
  w.flags = kFrameNotify;
  w.imm = 77;
  EXPECT_TRUE(ValidateHeader(w, kLimits).ok());
}

void ExpectProtocol(const FrameHeader& h, const std::string& needle) {
  Status s = ValidateHeader(h, kLimits);
  EXPECT_EQ(s.code(), Code::kProtocol) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(TcpWire, HostileHeadersAreRejected) {
  FrameHeader h = Valid(FrameKind::kMessage);
  h.kind = static_cast<FrameKind>(0);
  ExpectProtocol(h, "unknown frame kind 0");
  h.kind = static_cast<FrameKind>(99);
  ExpectProtocol(h, "unknown frame kind 99");

  h = Valid(FrameKind::kMessage);
  h.length = kLimits.max_message_size + 1;
  ExpectProtocol(h, "exceeds the limit");
  h = Valid(FrameKind::kWrite);
  h.length = ~0ull;
  ExpectProtocol(h, "exceeds the limit");

  h = Valid(FrameKind::kMessage);
  h.reserved = 1;
  ExpectProtocol(h, "reserved");
  h = Valid(FrameKind::kRead);
  h.flags = kFrameNotify;
  ExpectProtocol(h, "flags");
  h = Valid(FrameKind::kWrite);
  h.imm = 5;  // without the notify flag
  ExpectProtocol(h, "imm");

  h = Valid(FrameKind::kSparseWrite);
  h.arg = 0;
  ExpectProtocol(h, "segment count 0");
  h.arg = kLimits.max_segments + 1;
  ExpectProtocol(h, "segment count");
  h = Valid(FrameKind::kSparseRead);
  h.arg = ~0ull;
  ExpectProtocol(h, "segment count");

  // Packed tables (protocol 2): arg = segments | table bytes << 32, the bytes bounded by the
  // count before any buffer is sized by them; the flag belongs to sparse requests only.
  h = Valid(FrameKind::kSparseWrite);
  h.flags = kFramePackedTable;
  h.arg = 3 | (uint64_t{16 + 3} << 32);
  EXPECT_TRUE(ValidateHeader(h, kLimits).ok());
  EXPECT_EQ(SparseCount(h), 3u);
  EXPECT_EQ(SparseTableBytes(h), 19u);
  h.arg = 3 | (uint64_t{16 + 2} << 32);
  ExpectProtocol(h, "packed table of 18 bytes");
  h.arg = 3 | (uint64_t{16 + 3 * 20 + 1} << 32);
  ExpectProtocol(h, "packed table");
  h.arg = uint64_t{19} << 32;
  ExpectProtocol(h, "segment count 0");
  h = Valid(FrameKind::kWrite);
  h.flags = kFramePackedTable;
  ExpectProtocol(h, "flags");
  h = Valid(FrameKind::kResponse);
  h.imm = 200;
  ExpectProtocol(h, "status code");
  h = Valid(FrameKind::kResponse);
  h.length = kMaxErrorText + 1;
  ExpectProtocol(h, "exceeds");

  h = Valid(FrameKind::kHeartbeat);
  h.length = 1;
  ExpectProtocol(h, "length");
  h = Valid(FrameKind::kHeartbeat);
  h.key = 1;
  ExpectProtocol(h, "key");
  h = Valid(FrameKind::kMessage);
  h.req_id = 3;
  ExpectProtocol(h, "req_id");
}

}  // namespace
}  // namespace ferry::tcp
