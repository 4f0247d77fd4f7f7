// FlatBuffers frames of transport/schema/wire.fbs, shared by the region-descriptor codec
// (transport.cc: EncodeRemoteRegion / DecodeRemoteRegion) and the handshake (handshake.cc).
// Internal to transport/.
//
// Why FlatBuffers: every control message is verified in place before a single field is read, so
// a malformed or truncated frame from a peer is a kProtocol error, never an out-of-bounds read.
//
// Contract: plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "transport/schema/wire_generated.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::frame {

flatbuffers::Offset<wire::Region> BuildRegion(flatbuffers::FlatBufferBuilder& b,
                                              const RemoteRegion& r);
RemoteRegion ReadRegion(const wire::Region& r);

// Finishes `b` with a Frame holding `body` and returns its bytes.
std::vector<uint8_t> Finish(flatbuffers::FlatBufferBuilder& b, wire::Body type,
                            flatbuffers::Offset<void> body);

// FlatBuffers reads scalars in place and needs the buffer aligned; frames from the network sit at
// any offset of a receive buffer, so a misaligned frame is first copied (control path only).
class AlignedBytes {
 public:
  explicit AlignedBytes(std::span<const uint8_t> bytes);
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  std::span<const uint8_t> bytes_;
  std::vector<uint64_t> storage_;
};

// The verified Frame in `bytes` (which must be 8-byte aligned: see AlignedBytes); frames over
// `max_bytes` are refused before the verifier looks at them.
Result<const wire::Frame*> VerifyFrame(std::span<const uint8_t> bytes, size_t max_bytes);

}  // namespace ferry::frame
