// Handshake frames arrive from unauthenticated peers. The input is split into frames by a one-byte
// length prefix each and fed to a client and to a server state machine, with and without a secret.
#include <cstdint>
#include <span>

#include "transport/handshake.h"

namespace {

void Feed(ferry::Handshake::Role role, const char* secret, const uint8_t* data, size_t size) {
  ferry::HelloParams params;
  params.backend = "tcp";
  params.secret = secret;
  params.regions.push_back({0x1000, 4096, ferry::kAccessRemote, 3, {1, 2, 3, 4}});
  ferry::Handshake hs(role, params);
  while (hs.TakeOutgoing()) {
  }
  size_t pos = 0;
  while (pos < size) {
    size_t len = data[pos++];
    if (len > size - pos) len = size - pos;
    ferry::Status s = hs.OnFrame(std::span<const uint8_t>(data + pos, len));
    pos += len;
    while (hs.TakeOutgoing()) {
    }
    if (!s.ok()) break;
  }
  // Without the secret a peer must never complete a handshake that requires one.
  if (secret[0] != '\0' && hs.done()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Feed(ferry::Handshake::Role::kServer, "", data, size);
  Feed(ferry::Handshake::Role::kClient, "", data, size);
  Feed(ferry::Handshake::Role::kServer, "s3cret", data, size);
  Feed(ferry::Handshake::Role::kClient, "s3cret", data, size);
  return 0;
}
