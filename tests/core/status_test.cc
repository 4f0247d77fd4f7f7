// Status, Result<T> and the FERRY_* macros.
#include "transport/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "tests/common/print.h"

namespace ferry {
namespace {

constexpr Code kAllCodes[] = {Code::kOk,
                              Code::kInvalidArgument,
                              Code::kUnsupported,
                              Code::kOutOfRange,
                              Code::kPermissionDenied,
                              Code::kNotFound,
                              Code::kStale,
                              Code::kTimeout,
                              Code::kPeerFailure,
                              Code::kResourceExhausted,
                              Code::kProtocol,
                              Code::kIoError,
                              Code::kCancelled,
                              Code::kInternal};

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.ToString(), "Ok");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, CodeNamesAreDistinctAndKnown) {
  std::set<std::string> names;
  for (Code c : kAllCodes) {
    std::string name(CodeName(c));
    EXPECT_NE(name, "Unknown") << static_cast<int>(c);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(CodeName(static_cast<Code>(200)), "Unknown");
}

TEST(StatusTest, HelpersSetCodeAndMessage) {
  EXPECT_EQ(InvalidArgument("a").code(), Code::kInvalidArgument);
  EXPECT_EQ(Unsupported("a").code(), Code::kUnsupported);
  EXPECT_EQ(OutOfRange("a").code(), Code::kOutOfRange);
  EXPECT_EQ(PermissionDenied("a").code(), Code::kPermissionDenied);
  EXPECT_EQ(NotFound("a").code(), Code::kNotFound);
  EXPECT_EQ(Stale("a").code(), Code::kStale);
  EXPECT_EQ(Timeout("a").code(), Code::kTimeout);
  EXPECT_EQ(PeerFailure("a").code(), Code::kPeerFailure);
  EXPECT_EQ(ResourceExhausted("a").code(), Code::kResourceExhausted);
  EXPECT_EQ(ProtocolError("a").code(), Code::kProtocol);
  EXPECT_EQ(Cancelled("a").code(), Code::kCancelled);
  EXPECT_EQ(Internal("a").code(), Code::kInternal);
  Status s = PeerFailure("connection reset by peer 127.0.0.1:4000");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "connection reset by peer 127.0.0.1:4000");
  EXPECT_EQ(s.ToString(), "PeerFailure: connection reset by peer 127.0.0.1:4000");
  EXPECT_EQ(Status(Code::kTimeout, "").ToString(), "Timeout");
}

TEST(StatusTest, IoErrorCarriesStrerror) {
  Status s = IoError("open /nonexistent", ENOENT);
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_EQ(s.message(), "open /nonexistent: No such file or directory");
}

TEST(StatusTest, AnnotatePrefixesErrorsOnly) {
  Status s = NotFound("no region 7").Annotate("connect 127.0.0.1:4000");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "connect 127.0.0.1:4000: no region 7");
  Status ok = Status::Ok().Annotate("context");
  EXPECT_TRUE(ok.ok());
  EXPECT_TRUE(ok.message().empty());
}

TEST(ResultTest, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(r.value(), 42);
  *r = 7;
  EXPECT_EQ(r.value(), 7);
}

TEST(ResultTest, HoldsError) {
  Result<std::string> r = Timeout("waited 5 s");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  EXPECT_EQ(r.status().message(), "waited 5 s");
}

TEST(ResultTest, OkStatusBecomesInternalError) {
  Result<int> r = Status::Ok();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r.value(), 5);
  std::unique_ptr<int> taken = std::move(r).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 5);
  Result<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);
}

Status FailIf(bool fail) {
  return fail ? OutOfRange("asked to fail") : Status::Ok();
}

Status Chain(bool fail, int* reached) {
  FERRY_RETURN_IF_ERROR(FailIf(fail));
  *reached = 1;
  return Status::Ok();
}

Result<int> Half(int v) {
  if (v % 2) return InvalidArgument(std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  FERRY_ASSIGN_OR_RETURN(int h, Half(v));
  FERRY_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusMacrosTest, ReturnIfError) {
  int reached = 0;
  Status s = Chain(true, &reached);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(Chain(false, &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, AssignOrReturn) {
  Result<int> ok = Quarter(12);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 3);
  Result<int> first = Quarter(3);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(), "3 is odd");
  Result<int> second = Quarter(6);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "3 is odd");
}

}  // namespace
}  // namespace ferry
