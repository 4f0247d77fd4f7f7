// Region descriptors arrive from peers (in handshakes and application messages).
#include <cstdint>
#include <span>

#include "transport/transport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = ferry::DecodeRemoteRegion(std::span<const uint8_t>(data, size));
  if (r.ok()) {
    // A decoded descriptor must re-encode and decode to the same value.
    auto again = ferry::DecodeRemoteRegion(ferry::EncodeRemoteRegion(*r));
    if (!again.ok() || !(*again == *r)) __builtin_trap();
  }
  return 0;
}
