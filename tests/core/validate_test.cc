// ValidateOp and ParamUint (transport/backend.h), common::CheckRemoteAccess
// (transport/common/segment_check.h) and common::SplitHostPort (transport/common/socket.h): the
// checks every backend runs before posting or on what arrives. Uses fake regions and keys; nothing
// is registered.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/common/print.h"
#include "tests/core/fakes.h"
#include "transport/backend.h"
#include "transport/common/segment_check.h"
#include "transport/common/socket.h"

namespace ferry {
namespace {

using common::CheckRemoteAccess;
using testing_fakes::FakeEndpoint;
using testing_fakes::FakeKey;
using testing_fakes::FakeRegion;
using common::SplitHostPort;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

Capabilities AllCaps() {
  Capabilities c;
  c.send_recv = c.write = c.read = c.sparse_write = c.sparse_read = c.notify = true;
  c.shared_recv = true;
  c.target_checks = true;
  c.max_message_size = 1ull << 30;
  c.max_segments = 1000;
  return c;
}

class ValidateOpTest : public ::testing::Test {
 protected:
  Op Contig(OpType type, uint64_t local_offset, uint64_t length, uint64_t remote_offset = 0) {
    Op op;
    op.type = type;
    op.ep = &ep_;
    op.local = &local_;
    op.local_offset = local_offset;
    op.length = length;
    op.remote = &remote_;
    op.remote_offset = remote_offset;
    return op;
  }
  Op Sparse(OpType type, const std::vector<Segment>& segs) {
    Op op;
    op.type = type;
    op.ep = &ep_;
    op.local = &local_;
    op.remote = &remote_;
    op.segments = segs.data();
    op.num_segments = segs.size();
    return op;
  }
  Code Check(const Op& op, uint64_t max_segments = 1u << 20) {
    return ValidateOp(op, caps_, max_segments, 3).code();
  }

  Capabilities caps_ = AllCaps();
  FakeEndpoint ep_;
  FakeRegion local_{4096, kAccessLocal};
  FakeKey remote_{8192, kAccessRemote};
};

TEST_F(ValidateOpTest, AcceptsInBoundsOps) {
  for (OpType t : {OpType::kSend, OpType::kRecv, OpType::kWrite, OpType::kRead}) {
    EXPECT_EQ(Check(Contig(t, 0, 4096)), Code::kOk) << OpTypeName(t);
    EXPECT_EQ(Check(Contig(t, 4095, 1, 8191)), Code::kOk) << OpTypeName(t);
    EXPECT_EQ(Check(Contig(t, 4096, 0, 8192)), Code::kOk) << "empty op at the end";
  }
  std::vector<Segment> segs = {{0, 0, 4096}, {1, 8191, 1}, {4096, 8192, 0}, {100, 3, 17}};
  EXPECT_EQ(Check(Sparse(OpType::kSparseWrite, segs)), Code::kOk);
  EXPECT_EQ(Check(Sparse(OpType::kSparseRead, segs)), Code::kOk);
  Op notify = Contig(OpType::kWrite, 0, 16);
  notify.flags = kOpNotify;
  EXPECT_EQ(Check(notify), Code::kOk);
  Op sparse_notify = Sparse(OpType::kSparseWrite, segs);
  sparse_notify.flags = kOpNotify;
  EXPECT_EQ(Check(sparse_notify), Code::kOk);
}

TEST_F(ValidateOpTest, LocalBoundsAndOverflow) {
  for (OpType t : {OpType::kSend, OpType::kRecv, OpType::kWrite, OpType::kRead}) {
    SCOPED_TRACE(std::string(OpTypeName(t)));
    EXPECT_EQ(Check(Contig(t, 0, 4097)), Code::kOutOfRange);
    EXPECT_EQ(Check(Contig(t, 4096, 1)), Code::kOutOfRange);
    EXPECT_EQ(Check(Contig(t, 4097, 0)), Code::kOutOfRange);
    EXPECT_EQ(Check(Contig(t, kMax, 2)), Code::kOutOfRange) << "offset + length wraps";
    EXPECT_EQ(Check(Contig(t, 2, kMax)), Code::kOutOfRange) << "offset + length wraps";
    EXPECT_EQ(Check(Contig(t, kMax, kMax)), Code::kOutOfRange);
  }
}

TEST_F(ValidateOpTest, RemoteBoundsAndOverflow) {
  for (OpType t : {OpType::kWrite, OpType::kRead}) {
    SCOPED_TRACE(std::string(OpTypeName(t)));
    EXPECT_EQ(Check(Contig(t, 0, 2, 8191)), Code::kOutOfRange);
    EXPECT_EQ(Check(Contig(t, 0, 0, 8193)), Code::kOutOfRange);
    EXPECT_EQ(Check(Contig(t, 0, 16, kMax - 7)), Code::kOutOfRange) << "remote offset wraps";
    EXPECT_EQ(Check(Contig(t, 0, 1, kMax)), Code::kOutOfRange);
  }
}

TEST_F(ValidateOpTest, AccessRights) {
  FakeKey read_only(8192, kAccessRemoteRead), write_only(8192, kAccessRemoteWrite),
      local_only(8192, kAccessLocal);
  std::vector<Segment> segs = {{0, 0, 8}};
  struct Case {
    const RemoteKey* key;
    OpType type;
    Code want;
  } cases[] = {
      {&read_only, OpType::kRead, Code::kOk},
      {&read_only, OpType::kWrite, Code::kPermissionDenied},
      {&read_only, OpType::kSparseRead, Code::kOk},
      {&read_only, OpType::kSparseWrite, Code::kPermissionDenied},
      {&write_only, OpType::kWrite, Code::kOk},
      {&write_only, OpType::kRead, Code::kPermissionDenied},
      {&write_only, OpType::kSparseWrite, Code::kOk},
      {&write_only, OpType::kSparseRead, Code::kPermissionDenied},
      {&local_only, OpType::kRead, Code::kPermissionDenied},
      {&local_only, OpType::kWrite, Code::kPermissionDenied},
      {&local_only, OpType::kSparseRead, Code::kPermissionDenied},
      {&local_only, OpType::kSparseWrite, Code::kPermissionDenied},
  };
  for (const Case& c : cases) {
    bool sparse = c.type == OpType::kSparseRead || c.type == OpType::kSparseWrite;
    Op op = sparse ? Sparse(c.type, segs) : Contig(c.type, 0, 8);
    op.remote = c.key;
    EXPECT_EQ(Check(op), c.want) << OpTypeName(c.type) << " with access " << c.key->region().access;
  }
}

TEST_F(ValidateOpTest, MissingPiecesAreInvalid) {
  Op no_ep = Contig(OpType::kWrite, 0, 8);
  no_ep.ep = nullptr;
  EXPECT_EQ(Check(no_ep), Code::kInvalidArgument);
  Op no_send_ep = Contig(OpType::kSend, 0, 8);
  no_send_ep.ep = nullptr;
  EXPECT_EQ(Check(no_send_ep), Code::kInvalidArgument);
  Op no_local = Contig(OpType::kSend, 0, 8);
  no_local.local = nullptr;
  EXPECT_EQ(Check(no_local), Code::kInvalidArgument);
  Op no_remote = Contig(OpType::kRead, 0, 8);
  no_remote.remote = nullptr;
  EXPECT_EQ(Check(no_remote), Code::kInvalidArgument);
  std::vector<Segment> none;
  EXPECT_EQ(Check(Sparse(OpType::kSparseWrite, none)), Code::kInvalidArgument);
  std::vector<Segment> one = {{0, 0, 1}};
  Op null_segments = Sparse(OpType::kSparseRead, one);
  null_segments.segments = nullptr;
  EXPECT_EQ(Check(null_segments), Code::kInvalidArgument);
  Op notify_op = Contig(OpType::kWrite, 0, 8);
  notify_op.type = OpType::kNotify;
  EXPECT_EQ(Check(notify_op), Code::kInvalidArgument);
}

TEST_F(ValidateOpTest, SharedRecvNeedsTheCapability) {
  Op shared = Contig(OpType::kRecv, 0, 64);
  shared.ep = nullptr;
  EXPECT_EQ(Check(shared), Code::kOk);
  caps_.shared_recv = false;
  EXPECT_NE(Check(shared), Code::kOk);
}

TEST_F(ValidateOpTest, NotifyRules) {
  Op read = Contig(OpType::kRead, 0, 8);
  read.flags = kOpNotify;
  EXPECT_EQ(Check(read), Code::kInvalidArgument);
  Op send = Contig(OpType::kSend, 0, 8);
  send.flags = kOpNotify;
  EXPECT_EQ(Check(send), Code::kInvalidArgument);
  caps_.notify = false;
  Op write = Contig(OpType::kWrite, 0, 8);
  write.flags = kOpNotify;
  EXPECT_EQ(Check(write), Code::kUnsupported);
  write.flags = kOpNone;
  EXPECT_EQ(Check(write), Code::kOk);
}

TEST_F(ValidateOpTest, MissingCapabilitiesAreUnsupported) {
  std::vector<Segment> segs = {{0, 0, 8}};
  struct Case {
    bool Capabilities::*flag;
    Op op;
  } cases[] = {
      {&Capabilities::send_recv, Contig(OpType::kSend, 0, 8)},
      {&Capabilities::send_recv, Contig(OpType::kRecv, 0, 8)},
      {&Capabilities::write, Contig(OpType::kWrite, 0, 8)},
      {&Capabilities::read, Contig(OpType::kRead, 0, 8)},
      {&Capabilities::sparse_write, Sparse(OpType::kSparseWrite, segs)},
      {&Capabilities::sparse_read, Sparse(OpType::kSparseRead, segs)},
  };
  for (const Case& c : cases) {
    caps_ = AllCaps();
    EXPECT_EQ(Check(c.op), Code::kOk) << OpTypeName(c.op.type);
    caps_.*c.flag = false;
    Status s = ValidateOp(c.op, caps_, 1u << 20, 5);
    EXPECT_EQ(s.code(), Code::kUnsupported) << OpTypeName(c.op.type);
    EXPECT_NE(s.message().find("op 5"), std::string::npos) << s.message();
  }
}

TEST_F(ValidateOpTest, MessageSizeLimit) {
  caps_.max_message_size = 100;
  EXPECT_EQ(Check(Contig(OpType::kSend, 0, 100)), Code::kOk);
  EXPECT_EQ(Check(Contig(OpType::kSend, 0, 101)), Code::kInvalidArgument);
  EXPECT_EQ(Check(Contig(OpType::kWrite, 0, 101)), Code::kInvalidArgument);
  std::vector<Segment> segs = {{0, 0, 60}, {60, 60, 40}};
  EXPECT_EQ(Check(Sparse(OpType::kSparseWrite, segs)), Code::kOk);
  segs.push_back({0, 200, 1});
  EXPECT_EQ(Check(Sparse(OpType::kSparseWrite, segs)), Code::kInvalidArgument)
      << "sparse total counts against the message size limit";
}

// Segment lengths whose sum wraps around 2^64 must not slip under the message size limit.
TEST_F(ValidateOpTest, SparseTotalOverflowIsCaught) {
  FakeRegion huge_local(size_t{1} << 63, kAccessLocal);
  FakeKey huge_remote(uint64_t{1} << 63, kAccessRemote);
  std::vector<Segment> segs = {{0, 0, uint64_t{1} << 63}, {0, 0, uint64_t{1} << 63}};
  Op op = Sparse(OpType::kSparseWrite, segs);
  op.local = &huge_local;
  op.remote = &huge_remote;
  EXPECT_NE(Check(op), Code::kOk);
}

TEST_F(ValidateOpTest, SegmentCountLimitIsTheSmallerOfBoth) {
  std::vector<Segment> segs(11, Segment{0, 0, 1});
  EXPECT_EQ(Check(Sparse(OpType::kSparseRead, segs), 11), Code::kOk);
  EXPECT_EQ(Check(Sparse(OpType::kSparseRead, segs), 10), Code::kInvalidArgument);
  caps_.max_segments = 10;
  EXPECT_EQ(Check(Sparse(OpType::kSparseRead, segs), 1000), Code::kInvalidArgument);
  segs.resize(10);
  EXPECT_EQ(Check(Sparse(OpType::kSparseRead, segs), 1000), Code::kOk);
}

TEST_F(ValidateOpTest, SegmentBoundsAndOverflow) {
  const std::vector<std::vector<Segment>> bad = {
      {{0, 0, 4097}},                        // local too long
      {{4096, 0, 1}},                        // local offset at the end
      {{0, 8192, 1}},                        // remote offset at the end
      {{0, 8000, 193}},                      // remote too long
      {{kMax, 0, 2}},                        // local offset wraps
      {{0, kMax, 2}},                        // remote offset wraps
      {{1, 1, kMax}},                        // length wraps both
      {{0, 0, 8}, {0, 0, 8}, {0, 8190, 3}},  // only the last is bad
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    for (OpType t : {OpType::kSparseWrite, OpType::kSparseRead}) {
      Status s = ValidateOp(Sparse(t, bad[i]), caps_, 1u << 20, 0);
      EXPECT_EQ(s.code(), Code::kOutOfRange) << "case " << i << " " << OpTypeName(t);
    }
  }
  Status s = ValidateOp(Sparse(OpType::kSparseWrite, bad.back()), caps_, 1u << 20, 0);
  EXPECT_NE(s.message().find("segment 2"), std::string::npos) << s.message();
}

TEST_F(ValidateOpTest, ErrorNamesTheOpIndex) {
  Status s = ValidateOp(Contig(OpType::kWrite, 0, 5000), caps_, 1u << 20, 17);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("op 17"), std::string::npos) << s.message();
  s = ValidateOp(Contig(OpType::kRead, 0, 8, 8190), caps_, 1u << 20, 4);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("op 4"), std::string::npos) << s.message();
}

TEST(CheckRemoteAccessTest, BoundsAndRights) {
  EXPECT_TRUE(CheckRemoteAccess(100, kAccessRemote, 0, 100, kAccessRemoteWrite).ok());
  EXPECT_TRUE(CheckRemoteAccess(100, kAccessRemote, 100, 0, kAccessRemoteRead).ok());
  EXPECT_TRUE(CheckRemoteAccess(0, kAccessRemote, 0, 0, kAccessRemoteRead).ok());
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemote, 1, 100, kAccessRemoteRead).code(),
            Code::kOutOfRange);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemote, 101, 0, kAccessRemoteRead).code(),
            Code::kOutOfRange);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemote, kMax, 2, kAccessRemoteRead).code(),
            Code::kOutOfRange);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemote, 50, kMax - 10, kAccessRemoteRead).code(),
            Code::kOutOfRange);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemoteRead, 0, 1, kAccessRemoteWrite).code(),
            Code::kPermissionDenied);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemoteWrite, 0, 1, kAccessRemoteRead).code(),
            Code::kPermissionDenied);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessLocal, 0, 1, kAccessRemoteRead).code(),
            Code::kPermissionDenied);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemote, 0, 1, kAccessRemote).code(), Code::kOk);
  EXPECT_EQ(CheckRemoteAccess(100, kAccessRemoteRead, 0, 1, kAccessRemote).code(),
            Code::kPermissionDenied);
}

TEST(SplitHostPortTest, Accepts) {
  struct Case {
    std::string in, host;
    uint16_t port;
  } cases[] = {
      {"127.0.0.1:0", "127.0.0.1", 0},
      {"localhost:4000", "localhost", 4000},
      {"[::1]:65535", "::1", 65535},
      {"[fe80::1%lo]:1", "fe80::1%lo", 1},
      {"h:00080", "h", 80},
  };
  for (const Case& c : cases) {
    std::string host = "unchanged";
    uint16_t port = 1234;
    Status s = SplitHostPort(c.in, &host, &port);
    ASSERT_TRUE(s.ok()) << c.in << ": " << s.ToString();
    EXPECT_EQ(host, c.host) << c.in;
    EXPECT_EQ(port, c.port) << c.in;
  }
}

TEST(SplitHostPortTest, Rejects) {
  const std::vector<std::string> bad_inputs = {"",
                                               ":",
                                               "127.0.0.1",
                                               "127.0.0.1:",
                                               ":80",
                                               "[]:80",
                                               "h:65536",
                                               "h:-1",
                                               "h:+1",
                                               "h:80x",
                                               "h: 80",
                                               "h:0x10",
                                               "h:99999999999999999999",
                                               std::string("h:8\0", 4)};
  for (const std::string& bad : bad_inputs) {
    std::string host = "unchanged";
    uint16_t port = 1234;
    Status s = SplitHostPort(bad, &host, &port);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << "'" << bad << "'";
    EXPECT_EQ(host, "unchanged") << "output written on error for '" << bad << "'";
    EXPECT_EQ(port, 1234) << "'" << bad << "'";
  }
}

TEST(ParamUintTest, ParsesOrExplains) {
  TransportOptions o;
  o.params = {{"n", "42"},     {"big", "18446744073709551615"},  {"neg", "-1"},
              {"word", "yes"}, {"over", "18446744073709551616"}, {"empty", ""},
              {"trail", "5k"}};
  auto n = ParamUint(o, "n", 7);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 42u);
  auto fallback = ParamUint(o, "absent", 7);
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(*fallback, 7u);
  auto big = ParamUint(o, "big", 0);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, kMax);
  for (const char* key : {"neg", "word", "over", "empty", "trail"}) {
    auto r = ParamUint(o, key, 0);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

TEST(OpTypeNameTest, AllNamed) {
  EXPECT_EQ(OpTypeName(OpType::kSend), "send");
  EXPECT_EQ(OpTypeName(OpType::kRecv), "recv");
  EXPECT_EQ(OpTypeName(OpType::kWrite), "write");
  EXPECT_EQ(OpTypeName(OpType::kRead), "read");
  EXPECT_EQ(OpTypeName(OpType::kSparseWrite), "sparse_write");
  EXPECT_EQ(OpTypeName(OpType::kSparseRead), "sparse_read");
  EXPECT_EQ(OpTypeName(OpType::kNotify), "notify");
}

}  // namespace
}  // namespace ferry
