// The handshake state machine (handshake.h); frames are built and verified by frame.h.
#include "transport/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "transport/frame.h"

namespace ferry {
namespace {

using frame::AlignedBytes;
using frame::BuildRegion;
using frame::Finish;
using frame::ReadRegion;
using frame::VerifyFrame;

constexpr uint32_t kMagic = 0x59525246;  // "FRRY" little-endian
constexpr size_t kNonceBytes = 16;

std::vector<uint8_t> Bytes(const flatbuffers::Vector<uint8_t>* v) {
  return v ? std::vector<uint8_t>(v->begin(), v->end()) : std::vector<uint8_t>();
}

// HMAC-SHA256(secret, label | first | second). Empty when no secret is configured.
std::vector<uint8_t> Proof(const std::string& secret, char label, const std::vector<uint8_t>& first,
                           const std::vector<uint8_t>& second) {
  if (secret.empty()) return {};
  std::vector<uint8_t> msg;
  msg.push_back(static_cast<uint8_t>(label));
  msg.insert(msg.end(), first.begin(), first.end());
  msg.insert(msg.end(), second.begin(), second.end());
  std::vector<uint8_t> mac(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
       mac.data(), &len);
  mac.resize(len);
  return mac;
}

bool ProofMatches(const std::vector<uint8_t>& expected, const std::vector<uint8_t>& got) {
  if (expected.size() != got.size()) return false;
  if (expected.empty()) return true;
  return CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

}  // namespace

Handshake::Handshake(Role role, HelloParams params)
    : role_(role),
      params_(std::move(params)),
      state_(role == Role::kClient ? State::kSendHello : State::kWaitHello),
      my_nonce_(kNonceBytes) {
  if (RAND_bytes(my_nonce_.data(), static_cast<int>(my_nonce_.size())) != 1) {
    state_ = State::kFailed;  // OnFrame()/TakeOutgoing() report it
  }
  if (state_ == State::kSendHello) {
    flatbuffers::FlatBufferBuilder b(128);
    auto hello = wire::CreateHello(b, kMagic, kProtocolVersion, b.CreateString(params_.backend),
                                   b.CreateVector(my_nonce_));
    outgoing_.push_back(Finish(b, wire::Body::Hello, hello.Union()));
    state_ = State::kWaitHello;
  }
}

std::optional<std::vector<uint8_t>> Handshake::TakeOutgoing() {
  if (outgoing_.empty()) return std::nullopt;
  std::vector<uint8_t> f = std::move(outgoing_.front());
  outgoing_.erase(outgoing_.begin());
  return f;
}

Status Handshake::Fail(Status s) {
  state_ = State::kFailed;
  flatbuffers::FlatBufferBuilder b(128);
  auto rej = wire::CreateReject(b, b.CreateString(s.message()));
  outgoing_.push_back(Finish(b, wire::Body::Reject, rej.Union()));
  return s;
}

Status Handshake::OnFrame(std::span<const uint8_t> bytes) {
  if (state_ == State::kFailed) return Internal("handshake already failed");
  if (state_ == State::kDone) return ProtocolError("unexpected control frame after handshake");
  AlignedBytes aligned(bytes);
  auto frame_or = VerifyFrame(aligned.bytes(), kMaxHandshakeFrame);
  if (!frame_or.ok()) return Fail(frame_or.status());
  const wire::Frame* frame = *frame_or;
  if (const wire::Reject* rej = frame->body_as_Reject()) {
    state_ = State::kFailed;
    std::string reason = rej->reason() ? rej->reason()->str() : "no reason given";
    Code code =
        reason.find("secret") != std::string::npos ? Code::kPermissionDenied : Code::kProtocol;
    return Status(code, "peer refused the connection: " + reason);
  }

  if (state_ == State::kWaitHello) {
    const wire::Hello* h = frame->body_as_Hello();
    if (h == nullptr) return Fail(ProtocolError("expected Hello"));
    if (h->magic() != kMagic) return Fail(ProtocolError("not a Ferry peer (bad magic)"));
    if (h->version() != kProtocolVersion) {
      return Fail(ProtocolError("protocol version " + std::to_string(h->version()) +
                                " is not supported (this side speaks " +
                                std::to_string(kProtocolVersion) + ")"));
    }
    std::string backend = h->backend() ? h->backend()->str() : "";
    if (backend != params_.backend) {
      return Fail(ProtocolError("peer uses backend '" + backend + "', this side '" +
                                params_.backend + "'"));
    }
    peer_nonce_ = Bytes(h->nonce());
    if (peer_nonce_.size() != kNonceBytes) return Fail(ProtocolError("bad nonce length"));
    flatbuffers::FlatBufferBuilder b(256);
    if (role_ == Role::kServer) {
      // Prove the secret over the client's nonce, then wait for the client's proof.
      auto proof = Proof(params_.secret, 'S', peer_nonce_, my_nonce_);
      auto hello = wire::CreateHello(b, kMagic, kProtocolVersion, b.CreateString(params_.backend),
                                     b.CreateVector(my_nonce_), b.CreateVector(proof));
      outgoing_.push_back(Finish(b, wire::Body::Hello, hello.Union()));
      state_ = State::kWaitWelcome;
      return Status::Ok();
    }
    // Client: check the server's proof before revealing anything.
    if (!ProofMatches(Proof(params_.secret, 'S', my_nonce_, peer_nonce_), Bytes(h->proof()))) {
      return Fail(PermissionDenied("server failed to prove the shared secret"));
    }
    state_ = State::kSendWelcome;
  } else if (state_ == State::kWaitWelcome) {
    const wire::Welcome* w = frame->body_as_Welcome();
    if (w == nullptr) return Fail(ProtocolError("expected Welcome"));
    if (role_ == Role::kServer &&
        !ProofMatches(Proof(params_.secret, 'C', peer_nonce_, my_nonce_), Bytes(w->proof()))) {
      return Fail(PermissionDenied("client failed to prove the shared secret"));
    }
    if (w->regions()) {
      for (const wire::Region* r : *w->regions()) peer_.regions.push_back(ReadRegion(*r));
    }
    peer_.info = Bytes(w->info());
    peer_.transport_data = Bytes(w->transport_data());
    peer_.max_message_size = w->max_message_size();
    peer_.max_segments = w->max_segments();
    state_ = role_ == Role::kServer ? State::kSendWelcome : State::kDone;
    if (state_ == State::kDone) return Status::Ok();
  } else {
    return Fail(ProtocolError("unexpected control frame"));
  }

  // kSendWelcome: both roles send their Welcome now.
  flatbuffers::FlatBufferBuilder b(256);
  std::vector<flatbuffers::Offset<wire::Region>> regions;
  for (const auto& r : params_.regions) regions.push_back(BuildRegion(b, r));
  auto proof = role_ == Role::kClient ? Proof(params_.secret, 'C', my_nonce_, peer_nonce_)
                                      : std::vector<uint8_t>();
  auto welcome = wire::CreateWelcome(
      b, b.CreateVector(proof), b.CreateVector(regions), b.CreateVector(params_.info),
      b.CreateVector(params_.transport_data), params_.max_message_size, params_.max_segments);
  outgoing_.push_back(Finish(b, wire::Body::Welcome, welcome.Union()));
  state_ = role_ == Role::kServer ? State::kDone : State::kWaitWelcome;
  return Status::Ok();
}

}  // namespace ferry
