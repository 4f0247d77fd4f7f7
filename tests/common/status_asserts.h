// gtest assertions on Status / Result<T> for every suite: one spelling of "this call must
// succeed", printing the expression and the status it returned when it does not.
//   ASSERT_OK(t->Post(ops));                       // a Status or a Result<T>
//   EXPECT_OK(AllOk(outcomes));                    // the same, not fatal
//   ASSERT_OK_AND_ASSIGN(auto ep, t->Connect(a, timeout));
// Use them in a test body or a void helper (ASSERT_* are fatal), never in a rank's thread of an
// in-process job (tests/ps/job_util.h has Status-returning checks for those).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "transport/status.h"

namespace ferry::testing {

inline std::string StatusText(const Status& s) {
  return s.ToString();
}
template <typename T>
std::string StatusText(const Result<T>& r) {
  return r.status().ToString();
}

}  // namespace ferry::testing

#define FERRY_TEST_CONCAT_(a, b) a##b
#define FERRY_TEST_CONCAT(a, b) FERRY_TEST_CONCAT_(a, b)
// CHECK is ASSERT_TRUE or EXPECT_TRUE.
#define FERRY_TEST_CHECK_OK_(CHECK, expr)                                                      \
  do {                                                                                         \
    auto&& ferry_test_s_ = (expr);                                                             \
    CHECK(ferry_test_s_.ok()) << #expr << ": " << ::ferry::testing::StatusText(ferry_test_s_); \
  } while (0)
#define ASSERT_OK(expr) FERRY_TEST_CHECK_OK_(ASSERT_TRUE, expr)
#define EXPECT_OK(expr) FERRY_TEST_CHECK_OK_(EXPECT_TRUE, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)                             \
  auto tmp = (expr);                                                           \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << ::ferry::testing::StatusText(tmp); \
  lhs = std::move(tmp).value()
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(FERRY_TEST_CONCAT(ferry_test_r_, __LINE__), lhs, expr)
