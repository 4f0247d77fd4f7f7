// Shared rules for backends: the explicit backend list, ValidateOp, the ownership errors of
// Transport::CheckOwnership hooks, and parameter parsing.
#include "transport/backend.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "ferry_config.h"
#include "transport/common/segment_check.h"

namespace ferry {
namespace {

bool InBounds(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

std::string OpName(size_t index) {
  return "op " + std::to_string(index);
}

std::string Who(const Op& op, size_t index) {
  return OpName(index) + " (" + std::string(OpTypeName(op.type)) + ")";
}

// Every check below builds its message (Who) only on the error path: a std::string would
// allocate on every posted op.

// The op's type and flags against what the backend offers.
Status CheckKind(const Op& op, const Capabilities& caps, size_t index) {
  bool supported = true;
  switch (op.type) {
    case OpType::kSend:
    case OpType::kRecv:
      supported = caps.send_recv;
      break;
    case OpType::kWrite:
      supported = caps.write;
      break;
    case OpType::kRead:
      supported = caps.read;
      break;
    case OpType::kSparseWrite:
      supported = caps.sparse_write;
      break;
    case OpType::kSparseRead:
      supported = caps.sparse_read;
      break;
    case OpType::kNotify:
      return InvalidArgument(Who(op, index) + ": kNotify is a completion type, not an op");
  }
  if (!supported) return Unsupported(Who(op, index) + ": not supported by this backend");
  if ((op.flags & kOpNotify) && op.type != OpType::kWrite && op.type != OpType::kSparseWrite) {
    return InvalidArgument(Who(op, index) + ": kOpNotify applies to writes only");
  }
  if ((op.flags & kOpNotify) && !caps.notify) {
    return Unsupported(Who(op, index) + ": write notifications not supported by this backend");
  }
  return Status::Ok();
}

// A contiguous op's local range and length.
Status CheckContiguousLocal(const Op& op, const Capabilities& caps, size_t index) {
  const uint64_t local_size = op.local->size();
  if (!InBounds(op.local_offset, op.length, local_size)) {
    return OutOfRange(Who(op, index) + ": local [" + std::to_string(op.local_offset) + ", +" +
                      std::to_string(op.length) + ") outside a region of " +
                      std::to_string(local_size) + " bytes");
  }
  if (op.length > caps.max_message_size) {
    return InvalidArgument(Who(op, index) + ": length " + std::to_string(op.length) +
                           " exceeds the maximum of " + std::to_string(caps.max_message_size));
  }
  return Status::Ok();
}

// A sparse op's segment list: its count, the remote region's rights (`needed`), every segment's
// local and remote range, and the total.
Status CheckSparse(const Op& op, const Capabilities& caps, uint64_t max_segments, uint32_t needed,
                   size_t index) {
  if (op.num_segments == 0 || op.segments == nullptr) {
    return InvalidArgument(Who(op, index) + ": empty segment list");
  }
  const uint64_t limit = std::min<uint64_t>(max_segments, caps.max_segments);
  if (op.num_segments > limit) {
    return InvalidArgument(Who(op, index) + ": " + std::to_string(op.num_segments) +
                           " segments exceed the limit of " + std::to_string(limit));
  }
  const RemoteRegion& rr = op.remote->region();
  if ((rr.access & needed) != needed) {
    return PermissionDenied(Who(op, index) + (needed & kAccessRemoteWrite
                                                  ? ": remote region does not grant remote write"
                                                  : ": remote region does not grant remote read"));
  }
  const uint64_t local_size = op.local->size();
  uint64_t total = 0;
  for (size_t i = 0; i < op.num_segments; ++i) {
    const Segment& s = op.segments[i];
    if (!InBounds(s.local_offset, s.length, local_size) ||
        !InBounds(s.remote_offset, s.length, rr.length)) {
      return OutOfRange(Who(op, index) + ": segment " + std::to_string(i) + " [local " +
                        std::to_string(s.local_offset) + ", remote " +
                        std::to_string(s.remote_offset) + ", +" + std::to_string(s.length) +
                        ") outside its region");
    }
    // Checked per segment so that the sum cannot wrap around 2^64.
    if (s.length > caps.max_message_size - total) {
      return InvalidArgument(Who(op, index) + ": segments up to " + std::to_string(i) +
                             " exceed the maximum of " + std::to_string(caps.max_message_size) +
                             " bytes in one sparse op");
    }
    total += s.length;
  }
  return Status::Ok();
}

}  // namespace

std::vector<const BackendEntry*> CompiledBackends() {
  std::vector<const BackendEntry*> entries;
#if FERRY_HAVE_VERBS
  entries.push_back(&VerbsBackendEntry());
#endif
#if FERRY_HAVE_UCX
  entries.push_back(&UcxBackendEntry());
#endif
  entries.push_back(&TcpBackendEntry());
  std::stable_sort(
      entries.begin(), entries.end(),
      [](const BackendEntry* a, const BackendEntry* b) { return a->priority > b->priority; });
  return entries;
}

Status ValidateOp(const Op& op, const Capabilities& caps, uint64_t max_segments, size_t index) {
  FERRY_RETURN_IF_ERROR(CheckKind(op, caps, index));
  if (op.ep == nullptr && !(op.type == OpType::kRecv && caps.shared_recv)) {
    return InvalidArgument(Who(op, index) + ": no endpoint");
  }
  if (op.local == nullptr) return InvalidArgument(Who(op, index) + ": no local region");
  const bool sparse = op.type == OpType::kSparseWrite || op.type == OpType::kSparseRead;
  const bool one_sided = op.type != OpType::kSend && op.type != OpType::kRecv;
  if (!sparse) FERRY_RETURN_IF_ERROR(CheckContiguousLocal(op, caps, index));
  if (!one_sided) return Status::Ok();
  if (op.remote == nullptr) return InvalidArgument(Who(op, index) + ": no remote key");
  const RemoteRegion& rr = op.remote->region();
  const uint32_t needed = (op.type == OpType::kWrite || op.type == OpType::kSparseWrite)
                              ? kAccessRemoteWrite
                              : kAccessRemoteRead;
  if (!sparse) {
    Status s = common::CheckRemoteAccess(rr.length, rr.access, op.remote_offset, op.length, needed);
    // Annotated only on failure: Who() allocates (it was built for every contiguous write and
    // read: 3 % of an ucx-shm 8 B write latency run's samples).
    if (!s.ok()) return s.Annotate(Who(op, index));
    return Status::Ok();
  }
  return CheckSparse(op, caps, max_segments, needed, index);
}

Status ForeignError(const Op& op, size_t index, Foreign what) {
  switch (what) {
    case Foreign::kEndpoint:
      return InvalidArgument(Who(op, index) + ": the endpoint does not belong to this transport");
    case Foreign::kLocalRegion:
      return InvalidArgument(Who(op, index) +
                             ": the local region was not registered with this transport");
    case Foreign::kRemoteKey:
      return InvalidArgument(Who(op, index) + ": the remote key was not imported on this endpoint");
  }
  return Internal(Who(op, index) + ": unknown ownership failure");
}

Status CheckPeerMessageLimit(const Op& op, size_t index, uint64_t peer_max_message) {
  if (op.type != OpType::kSend || op.length <= peer_max_message) {
    return Status::Ok();
  }
  return InvalidArgument(Who(op, index) + ": a message of " + std::to_string(op.length) +
                         " bytes exceeds the peer's max_message_size of " +
                         std::to_string(peer_max_message));
}

Result<uint64_t> ParamUint(const TransportOptions& options, const std::string& key,
                           uint64_t fallback) {
  auto it = options.params.find(key);
  if (it == options.params.end()) return fallback;
  uint64_t value = 0;
  const std::string& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return InvalidArgument("parameter " + key + "='" + s + "' is not a number");
  }
  return value;
}

}  // namespace ferry
