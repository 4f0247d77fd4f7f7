#include "transport/status.h"

#include <cstring>

namespace ferry {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "Ok";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kUnsupported: return "Unsupported";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kPermissionDenied: return "PermissionDenied";
    case Code::kNotFound: return "NotFound";
    case Code::kStale: return "Stale";
    case Code::kTimeout: return "Timeout";
    case Code::kPeerFailure: return "PeerFailure";
    case Code::kResourceExhausted: return "ResourceExhausted";
    case Code::kProtocol: return "Protocol";
    case Code::kIoError: return "IoError";
    case Code::kCancelled: return "Cancelled";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "Ok";
  std::string s(CodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

Status IoError(std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  return Status(Code::kIoError, std::move(m));
}

}  // namespace ferry
