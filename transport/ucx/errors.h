// The one place where a ucs_status_t becomes a ferry::Status.
//
// Every ucp_* failure in this backend goes through UcsError(), which names the UCX call, keeps
// UCX's own status string and maps the status onto Ferry's error codes (peer failures, timeouts,
// truncation, resource exhaustion, ...). Thread-safety: pure functions.
#pragma once

#include <ucs/type/status.h>

#include <string_view>

#include "transport/status.h"

namespace ferry::ucx {

// The Ferry code a UCX status maps to (kOk for UCS_OK and UCS_INPROGRESS).
Code CodeFromUcs(ucs_status_t status);

// "<call>: <ucs_status_string> (UCS_ERR_...)" with the mapped code.
Status UcsError(std::string_view call, ucs_status_t status);

}  // namespace ferry::ucx
