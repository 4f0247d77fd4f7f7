// Building and verifying FlatBuffers frames (see frame.h).
#include "transport/frame.h"

#include <cstring>
#include <string>

namespace ferry::frame {

flatbuffers::Offset<wire::Region> BuildRegion(flatbuffers::FlatBufferBuilder& b,
                                              const RemoteRegion& r) {
  auto rkey = b.CreateVector(r.rkey);
  return wire::CreateRegion(b, r.addr, r.length, r.access, r.epoch, rkey);
}

RemoteRegion ReadRegion(const wire::Region& r) {
  RemoteRegion out;
  out.addr = r.addr();
  out.length = r.length();
  out.access = r.access();
  out.epoch = r.epoch();
  if (r.rkey()) out.rkey.assign(r.rkey()->begin(), r.rkey()->end());
  return out;
}

std::vector<uint8_t> Finish(flatbuffers::FlatBufferBuilder& b, wire::Body type,
                            flatbuffers::Offset<void> body) {
  b.Finish(wire::CreateFrame(b, type, body));
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

AlignedBytes::AlignedBytes(std::span<const uint8_t> bytes) : bytes_(bytes) {
  if (!bytes.empty() && reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint64_t) != 0) {
    storage_.resize((bytes.size() + 7) / 8);
    std::memcpy(storage_.data(), bytes.data(), bytes.size());
    bytes_ =
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(storage_.data()), bytes.size());
  }
}

Result<const wire::Frame*> VerifyFrame(std::span<const uint8_t> bytes, size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return ProtocolError("control frame of " + std::to_string(bytes.size()) +
                         " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  flatbuffers::Verifier v(bytes.data(), bytes.size());
  if (bytes.size() < 8 || !wire::VerifyFrameBuffer(v)) {
    return ProtocolError("control frame failed verification (" + std::to_string(bytes.size()) +
                         " bytes)");
  }
  return wire::GetFrame(bytes.data());
}

}  // namespace ferry::frame
