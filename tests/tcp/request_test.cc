// Pure pieces of the tcp data path: the request header built for a one-sided op
// (RequestHeader, wire.h) and the initiator's check of a reply (CheckReply, tcp_transport.h).
#include <gtest/gtest.h>

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/wire.h"

namespace ferry::tcp {
namespace {

const WireLimits kRequestLimits{1u << 20, 1000};

TEST(TcpRequest, KindLengthAndArgFollowTheOp) {
  Segment segs[3] = {{0, 0, 8}, {8, 64, 8}, {16, 128, 8}};
  struct Case {
    OpType type;
    FrameKind kind;
  };
  for (const Case& k :
       {Case{OpType::kWrite, FrameKind::kWrite}, Case{OpType::kRead, FrameKind::kRead},
        Case{OpType::kSparseWrite, FrameKind::kSparseWrite},
        Case{OpType::kSparseRead, FrameKind::kSparseRead}}) {
    Op op;
    op.type = k.type;
    op.remote_offset = 40;
    op.length = 24;
    op.segments = segs;
    op.num_segments = 3;
    const bool sparse = k.type == OpType::kSparseWrite || k.type == OpType::kSparseRead;
    FrameHeader h = RequestHeader(op, /*req_id=*/5, /*key=*/9, /*bytes=*/24);
    EXPECT_EQ(h.kind, k.kind);
    EXPECT_EQ(h.req_id, 5u);
    EXPECT_EQ(h.key, 9u);
    EXPECT_EQ(h.length, 24u);
    EXPECT_EQ(h.arg, sparse ? 3u : 40u);
    EXPECT_EQ(h.flags, 0u);
    EXPECT_EQ(h.imm, 0u);
    EXPECT_TRUE(ValidateHeader(h, kRequestLimits).ok()) << FrameKindName(h.kind);
  }
}

TEST(TcpRequest, NotifyOnlyOnWrites) {
  for (OpType t : {OpType::kWrite, OpType::kSparseWrite, OpType::kRead, OpType::kSparseRead}) {
    Op op;
    op.type = t;
    op.flags = kOpNotify;
    op.imm = 77;
    op.num_segments = 1;
    FrameHeader h = RequestHeader(op, 1, 1, 8);
    const bool write = t == OpType::kWrite || t == OpType::kSparseWrite;
    EXPECT_EQ(h.flags, write ? kFrameNotify : 0u);
    EXPECT_EQ(h.imm, write ? 77u : 0u);
  }
}

PendingOp Pending(uint64_t req_id, OpType type, uint64_t bytes) {
  PendingOp p;
  p.req_id = req_id;
  p.type = type;
  p.bytes = bytes;
  return p;
}

FrameHeader Reply(FrameKind kind, uint64_t req_id, uint64_t length, uint32_t code) {
  FrameHeader h;
  h.kind = kind;
  h.req_id = req_id;
  h.length = length;
  h.imm = code;
  return h;
}

TEST(TcpReply, MatchingRepliesPass) {
  const PendingOp write = Pending(3, OpType::kWrite, 100);
  const PendingOp read = Pending(4, OpType::kSparseRead, 100);
  EXPECT_TRUE(CheckReply(&write, Reply(FrameKind::kResponse, 3, 0, 0), "peer").ok());
  EXPECT_TRUE(CheckReply(&write, Reply(FrameKind::kResponse, 3, 5, 9), "peer").ok());
  EXPECT_TRUE(CheckReply(&read, Reply(FrameKind::kResponse, 4, 5, 9), "peer").ok());
  EXPECT_TRUE(CheckReply(&read, Reply(FrameKind::kReadResponse, 4, 100, 0), "peer").ok());
}

void ExpectRefused(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), Code::kProtocol) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("peer"), std::string::npos) << s.message();
}

TEST(TcpReply, MismatchedRepliesAreProtocolErrors) {
  const PendingOp write = Pending(3, OpType::kWrite, 100);
  const PendingOp read = Pending(4, OpType::kRead, 100);
  ExpectRefused(CheckReply(nullptr, Reply(FrameKind::kResponse, 3, 0, 0), "peer"),
                "does not answer the oldest outstanding request");
  ExpectRefused(CheckReply(&write, Reply(FrameKind::kResponse, 2, 0, 0), "peer"),
                "does not answer the oldest outstanding request");
  ExpectRefused(CheckReply(&read, Reply(FrameKind::kResponse, 4, 0, 0), "peer"),
                "empty success response to a read");
  ExpectRefused(CheckReply(&write, Reply(FrameKind::kReadResponse, 3, 100, 0), "peer"),
                "does not match request 3");
  ExpectRefused(CheckReply(&read, Reply(FrameKind::kReadResponse, 4, 99, 0), "peer"),
                "does not match request 4");
}

}  // namespace
}  // namespace ferry::tcp
