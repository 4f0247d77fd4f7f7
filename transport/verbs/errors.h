// The one place where ibv_* / rdma_* failures become ferry::Status.
//
// Every call site in transport/verbs/ reports a failure through VerbsError(): the message names
// the call, the errno text and, when a queue pair is involved, its number, e.g.
//   "ibv_modify_qp(RTR) on qp 0x11: Invalid argument (errno 22)".
// Work completions with an error status go through CompletionError() with the same shape.
// Thread-safety: pure functions.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "transport/status.h"

namespace ferry::verbs {

inline constexpr uint32_t kNoQp = 0xffffffffu;

// `err` is an errno value (ibv_* calls return it; rdma_* and allocation calls set errno).
Status VerbsError(std::string_view call, int err, uint32_t qpn = kNoQp);

// For calls that return 0 on success and either -1 with errno or a positive errno value.
inline Status CheckCall(std::string_view call, int rc, uint32_t qpn = kNoQp) {
  if (rc == 0) return Status::Ok();
  return VerbsError(call, rc > 0 ? rc : errno, qpn);
}

// A failed work completion: code chosen from the status (REM_ACCESS_ERR -> kPermissionDenied,
// RETRY_EXC_ERR -> kPeerFailure, ...), message naming the operation, status and QP.
Status CompletionError(std::string_view what, ibv_wc_status status, uint32_t vendor_err,
                       uint32_t qpn);

std::string QpName(uint32_t qpn);

}  // namespace ferry::verbs
