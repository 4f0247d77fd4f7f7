// The one checked Post of every backend.
#include "transport/transport.h"

#include "transport/backend.h"

namespace ferry {

Status Transport::Post(std::span<const Op> ops) {
  // Op by op, the shared rules (ValidateOp) and then the backend's ownership hook, so that the
  // error names the first offending Op whichever check it fails. Nothing allocates on success.
  const Capabilities& caps = capabilities();
  for (size_t i = 0; i < ops.size(); ++i) {
    FERRY_RETURN_IF_ERROR(ValidateOp(ops[i], caps, caps.max_segments, i));
    FERRY_RETURN_IF_ERROR(CheckOwnership(ops[i], i));
  }
  return PostValidated(ops);
}

}  // namespace ferry
