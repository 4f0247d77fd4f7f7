// Backend-agnostic connection handshake (schema: transport/schema/wire.fbs).
//
// A backend moves the frames (each one a length-delimited byte string it frames itself) and
// feeds what arrives to OnFrame(); this class decides what to send, verifies every frame, checks
// protocol version, backend name and the shared-secret proof, and collects the peer's regions.
//
// Contract: single-threaded (one instance per connection attempt, owned by the backend).
// Frames larger than kMaxHandshakeFrame or that fail verification end the handshake with
// Code::kProtocol; a wrong secret ends it with Code::kPermissionDenied after sending a Reject.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry {

// 2: sparse requests carry packed segment tables (tcp's kFramePackedTable, ucx's emulated
// one-sided requests; transport/common/segment_codec.h).
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr size_t kMaxHandshakeFrame = 1u << 20;
// How long an accepted connection may take to complete its handshake, on every backend:
// peer_timeout, but never less than this. A hello segment lost right after a retransmitted SYN
// waits for Linux's 3 s fallback RTO (6 s more if lost again), longer than a short peer_timeout:
// CI saw a 10 %-loss namespace drop such a peer at 2 s. Silent connections still go within it.
inline constexpr Millis kHandshakeFloor{10000};
inline Millis HandshakeBound(Millis peer_timeout) {
  return std::max(peer_timeout, kHandshakeFloor);
}

struct HelloParams {
  std::string backend;
  std::string secret;
  std::vector<RemoteRegion> regions;
  std::vector<uint8_t> info;
  std::vector<uint8_t> transport_data;  // e.g. verbs QPN/PSN/GID for the out-of-band mode
  uint64_t max_message_size = 0;
  uint64_t max_segments = 0;
};

struct PeerHello {
  std::vector<RemoteRegion> regions;
  std::vector<uint8_t> info;
  std::vector<uint8_t> transport_data;
  uint64_t max_message_size = 0;
  uint64_t max_segments = 0;
};

class Handshake {
 public:
  enum class Role { kClient, kServer };
  Handshake(Role role, HelloParams params);

  // The next frame to send, if the protocol wants one now. Call after construction and after
  // every OnFrame(); send frames in the order returned.
  std::optional<std::vector<uint8_t>> TakeOutgoing();
  // Consumes one frame from the peer. A non-ok status ends the handshake (a Reject frame may
  // still be waiting in TakeOutgoing()).
  Status OnFrame(std::span<const uint8_t> frame);

  bool done() const { return state_ == State::kDone; }
  const PeerHello& peer() const { return peer_; }

 private:
  enum class State { kSendHello, kWaitHello, kSendWelcome, kWaitWelcome, kDone, kFailed };
  Status Fail(Status s);

  Role role_;
  HelloParams params_;
  State state_;
  std::vector<uint8_t> my_nonce_;
  std::vector<uint8_t> peer_nonce_;
  std::vector<std::vector<uint8_t>> outgoing_;
  PeerHello peer_;
};

}  // namespace ferry
