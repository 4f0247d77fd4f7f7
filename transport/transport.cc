// What transport.h declares: the one checked Post of every backend, OpTypeName, the
// region-descriptor codec (FlatBuffers, frame.h) and the public walk of the backend list.
#include "transport/transport.h"

#include <algorithm>
#include <string>

#include "transport/backend.h"
#include "transport/frame.h"
#include "transport/handshake.h"

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

std::string_view OpTypeName(OpType type) {
  switch (type) {
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
    case OpType::kWrite:
      return "write";
    case OpType::kRead:
      return "read";
    case OpType::kSparseWrite:
      return "sparse_write";
    case OpType::kSparseRead:
      return "sparse_read";
    case OpType::kNotify:
      return "notify";
  }
  return "unknown";
}

std::vector<uint8_t> EncodeRemoteRegion(const RemoteRegion& region) {
  flatbuffers::FlatBufferBuilder b(64 + region.rkey.size());
  auto r = frame::BuildRegion(b, region);
  return frame::Finish(b, wire::Body::Region, r.Union());
}

Result<RemoteRegion> DecodeRemoteRegion(std::span<const uint8_t> bytes) {
  frame::AlignedBytes aligned(bytes);
  FERRY_ASSIGN_OR_RETURN(const wire::Frame* f,
                         frame::VerifyFrame(aligned.bytes(), kMaxHandshakeFrame));
  const wire::Region* r = f->body_as_Region();
  if (r == nullptr) return ProtocolError("frame is not a region descriptor");
  return frame::ReadRegion(*r);
}

std::vector<BackendInfo> ListBackends() {
  std::vector<BackendInfo> out;
  for (const BackendEntry* e : CompiledBackends()) {
    std::string why = e->probe();
    out.push_back({e->name, e->priority, why.empty(), why});
  }
  const char* known[] = {"verbs", "ucx"};
  for (const char* name : known) {
    bool present =
        std::any_of(out.begin(), out.end(), [&](const BackendInfo& b) { return b.name == name; });
    if (!present) out.push_back({name, 0, false, "not built (meson feature disabled or missing)"});
  }
  return out;
}

Result<std::unique_ptr<Transport>> CreateTransport(std::string_view name,
                                                   const TransportOptions& options) {
  for (const BackendEntry* e : CompiledBackends()) {
    if (name == e->name) return e->create(options);
  }
  for (const BackendInfo& b : ListBackends()) {
    if (name == b.name) return Unsupported("backend '" + std::string(name) + "': " + b.reason);
  }
  return NotFound("no backend named '" + std::string(name) + "' (known: verbs, ucx, tcp)");
}

Result<std::unique_ptr<Transport>> CreateBestTransport(const TransportOptions& options) {
  std::string tried;
  for (const BackendEntry* e : CompiledBackends()) {
    if (!e->probe().empty()) continue;
    auto t = e->create(options);
    if (t.ok()) return t;
    tried += std::string(e->name) + ": " + t.status().ToString() + "; ";
  }
  return NotFound("no transport could be created: " + tried);
}

}  // namespace ferry
