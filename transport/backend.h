// Internal: what every backend provides to the registry, and shared helpers for backends.
// Not for ps/ or models/ (they use transport.h only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ferry {

struct BackendEntry {
  const char* name;
  int priority;
  // Empty when usable here; otherwise why not (no device, library refused to start, ...).
  std::string (*probe)();
  Result<std::unique_ptr<Transport>> (*create)(const TransportOptions& options);
};

// Each backend's entry, defined in its setup.cc.
const BackendEntry& VerbsBackendEntry();
const BackendEntry& UcxBackendEntry();
const BackendEntry& TcpBackendEntry();

// The one explicit list of the backends compiled in, highest priority first (backend.cc). The
// public ListBackends / CreateTransport / CreateBestTransport (transport.h) walk it.
std::vector<const BackendEntry*> CompiledBackends();

// Checks an Op against what the initiator knows: region bounds (with overflow checks), the
// imported descriptor's bounds and access bits, capabilities, and limits. `index` names the Op in
// the message. The target side must enforce the same rules again on what arrives (a descriptor
// can be forged); see common/segment_check.h.
Status ValidateOp(const Op& op, const Capabilities& caps, uint64_t max_segments, size_t index);

// The failures of a Transport::CheckOwnership hook, worded once for every backend. Built only
// on the failure path (a string per posted Op would allocate on the data path).
enum class Foreign : uint8_t {
  kEndpoint,     // op.ep was made by another transport (or its transport is gone)
  kLocalRegion,  // op.local was registered with another transport
  kRemoteKey,    // op.remote was not imported on op.ep
};
Status ForeignError(const Op& op, size_t index, Foreign what);
// A send larger than the peer's max_message_size (from its handshake) is refused.
Status CheckPeerMessageLimit(const Op& op, size_t index, uint64_t peer_max_message);

// Parses a boolean/number parameter from TransportOptions::params with a clear error.
Result<uint64_t> ParamUint(const TransportOptions& options, const std::string& key,
                           uint64_t fallback);

}  // namespace ferry
