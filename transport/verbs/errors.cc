#include "transport/verbs/errors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ferry::verbs {

std::string QpName(uint32_t qpn) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "qp 0x%x", qpn);
  return buf;
}

Status VerbsError(std::string_view call, int err, uint32_t qpn) {
  std::string msg(call);
  if (qpn != kNoQp) msg += " on " + QpName(qpn);
  msg += ": ";
  msg += err != 0 ? std::strerror(err) : "failed without an errno";
  msg += " (errno " + std::to_string(err) + ")";
  Code code = Code::kIoError;
  switch (err) {
    case ENOMEM:
    case ENOSPC:
    case EAGAIN: code = Code::kResourceExhausted; break;
    case EPERM:
    case EACCES: code = Code::kPermissionDenied; break;
    case ETIMEDOUT: code = Code::kTimeout; break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH: code = Code::kPeerFailure; break;
    case ENODEV:
    case ENOENT: code = Code::kNotFound; break;
    case EINVAL: code = Code::kInvalidArgument; break;
    default: break;
  }
  if (err == ENOMEM && call.find("reg_mr") != std::string_view::npos) {
    msg += "; pinned memory is limited by RLIMIT_MEMLOCK: raise it with `ulimit -l unlimited` "
           "(systemd: LimitMEMLOCK=infinity)";
  }
  return Status(code, std::move(msg));
}

Status CompletionError(std::string_view what, ibv_wc_status status, uint32_t vendor_err,
                       uint32_t qpn) {
  Code code = Code::kIoError;
  std::string hint;
  switch (status) {
    case IBV_WC_REM_ACCESS_ERR:
      code = Code::kPermissionDenied;
      hint = ": the peer's HCA refused the access (bad or deregistered key, range outside the "
             "region, or a missing access right)";
      break;
    case IBV_WC_RETRY_EXC_ERR:
      code = Code::kPeerFailure;
      hint = ": the peer stopped acknowledging (dead process, port down or unreachable)";
      break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      code = Code::kPeerFailure;
      hint = ": the peer posted no receive buffer in time";
      break;
    case IBV_WC_WR_FLUSH_ERR: code = Code::kCancelled; break;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_BAD_RESP_ERR: code = Code::kProtocol; break;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR: code = Code::kPermissionDenied; break;
    case IBV_WC_LOC_LEN_ERR: code = Code::kOutOfRange; break;
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_FATAL_ERR: code = Code::kPeerFailure; break;
    default: break;
  }
  std::string msg(what);
  msg += " failed on " + QpName(qpn) + ": " + ibv_wc_status_str(status) + " (status " +
         std::to_string(static_cast<int>(status)) + ", vendor error 0x";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%x", vendor_err);
  msg += buf;
  msg += ")" + hint;
  return Status(code, std::move(msg));
}

}  // namespace ferry::verbs
