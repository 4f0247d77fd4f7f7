// The creation-time rule of ThreadMode::kSingle, shared by every backend (maybe_mutex.h).
#include "transport/common/maybe_mutex.h"

#include <string>

namespace ferry::common {

Status CheckThreadMode(const TransportOptions& options, std::string_view backend) {
  if (options.thread_mode == ThreadMode::kSingle && options.progress_thread) {
    return InvalidArgument(std::string(backend) +
                           ": thread_mode kSingle promises that only the caller's thread calls "
                           "into the transport, but progress_thread starts a second one; drop "
                           "one of the two options");
  }
  return Status::Ok();
}

}  // namespace ferry::common
