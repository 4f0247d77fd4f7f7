// Status and Result<T>: the error model of every library path in Ferry.
//
// Contract:
//  - No exceptions cross the library boundary; runtime failures are returned as a Status.
//  - A message names what failed and, where it helps, what to do about it.
//  - Status is cheap to copy when ok (no allocation); error messages allocate.
//  - Thread-safety: value types, no shared state.
#pragma once

// Every public header includes this one: say what is wrong before the first std::span error.
#if __cplusplus < 202002L
#error "Ferry's headers need C++20: compile with -std=c++20 (or later)"
#endif

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ferry {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument,    // caller passed something malformed
  kUnsupported,        // the backend lacks the capability
  kOutOfRange,         // remote/local access outside a registered region
  kPermissionDenied,   // wrong key, missing access right, authentication failure
  kNotFound,           // no such region/endpoint/device
  kStale,              // a descriptor refers to an older registration (epoch mismatch)
  kTimeout,            // a bounded wait expired
  kPeerFailure,        // the peer died, vanished or closed the connection
  kResourceExhausted,  // a configured limit or a pool is exhausted
  kProtocol,           // a peer sent bytes that do not parse or violate the protocol
  kIoError,            // a system call failed
  kCancelled,          // the operation was cancelled by a local close
  kInternal,           // a broken invariant inside Ferry (a bug)
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "PeerFailure: connection reset by peer 127.0.0.1:4000"
  std::string ToString() const;

  // Prefixes the message with context ("connect 127.0.0.1:4000: ...").
  Status Annotate(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status Stale(std::string m) { return {Code::kStale, std::move(m)}; }
inline Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
inline Status PeerFailure(std::string m) { return {Code::kPeerFailure, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status ProtocolError(std::string m) { return {Code::kProtocol, std::move(m)}; }
inline Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
// errno-carrying system call failure: "what: strerror(err)".
Status IoError(std::string_view what, int err);

// Result<T>: either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "Result constructed from ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ferry

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)

#define FERRY_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::ferry::Status ferry_status_ = (expr);    \
    if (!ferry_status_.ok()) return ferry_status_; \
  } while (0)

#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(ferry_result_, __LINE__), lhs, expr)
