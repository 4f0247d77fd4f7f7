#include "transport/ucx/errors.h"

#include <string>

namespace ferry::ucx {

Code CodeFromUcs(ucs_status_t status) {
  switch (status) {
    case UCS_OK:
    case UCS_INPROGRESS:
      return Code::kOk;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return Code::kInvalidArgument;
    case UCS_ERR_UNSUPPORTED:
      return Code::kUnsupported;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_OUT_OF_RANGE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return Code::kOutOfRange;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_BUSY:
      return Code::kResourceExhausted;
    case UCS_ERR_NO_ELEM:
    case UCS_ERR_NO_DEVICE:
      return Code::kNotFound;
    case UCS_ERR_TIMED_OUT:
      return Code::kTimeout;
    case UCS_ERR_CANCELED:
      return Code::kCancelled;
    case UCS_ERR_REJECTED:
      return Code::kPermissionDenied;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return Code::kPeerFailure;
    case UCS_ERR_IO_ERROR:
      return Code::kIoError;
    default:
      if (UCS_IS_LINK_ERROR(status) || UCS_IS_ENDPOINT_ERROR(status)) return Code::kPeerFailure;
      return Code::kInternal;
  }
}

Status UcsError(std::string_view call, ucs_status_t status) {
  Code code = CodeFromUcs(status);
  if (code == Code::kOk) code = Code::kInternal;  // a caller asked for an error from success
  std::string msg(call);
  msg += ": ";
  msg += ucs_status_string(status);
  msg += " (ucs status " + std::to_string(static_cast<int>(status)) + ")";
  return Status(code, std::move(msg));
}

}  // namespace ferry::ucx
