// Internal: what every backend provides to the registry, and shared helpers for backends.
// Not for ps/ or models/ (they use transport.h only).
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace ferry {

struct BackendEntry {
  const char* name;
  int priority;
  // Empty when usable here; otherwise why not (no device, library refused to start, ...).
  std::string (*probe)();
  Result<std::unique_ptr<Transport>> (*create)(const TransportOptions& options);
};

// Checks an Op against what the initiator knows: region bounds (with overflow checks), the
// imported descriptor's bounds and access bits, capabilities, and limits. `index` names the Op in
// the message. The target side must enforce the same rules again on what arrives (a descriptor
// can be forged); see CheckRemoteAccess().
Status ValidateOp(const Op& op, const Capabilities& caps, uint64_t max_segments, size_t index);

// Target-side rule, as an HCA applies it: [offset, offset+length) inside a region of `size`
// bytes that grants `needed` access. Used by software backends on every remote request.
Status CheckRemoteAccess(uint64_t size, uint32_t granted, uint64_t offset, uint64_t length,
                         uint32_t needed);

// Splits "host:port" (host may be a bracketed IPv6 literal). Port 0 is allowed.
Status SplitHostPort(const std::string& address, std::string* host, uint16_t* port);

// Parses a boolean/number parameter from TransportOptions::params with a clear error.
Result<uint64_t> ParamUint(const TransportOptions& options, const std::string& key,
                           uint64_t fallback);

}  // namespace ferry
