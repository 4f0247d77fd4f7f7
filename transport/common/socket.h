// Stream-socket plumbing shared by the backends' control connections: tcp's data connections,
// ucx's and verbs' (oob mode) handshake connections.
//
// Contract: plain functions, no state; thread-safe. Errors are Status values naming the call;
// callers prefix their backend ("tcp listen: ..."). Nothing here blocks except getaddrinfo
// (name resolution of a host name; numeric addresses resolve at once).
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

#include "transport/common/fd.h"
#include "transport/status.h"

namespace ferry::common {

// Splits "host:port" (host may be a bracketed IPv6 literal). Port 0 is allowed.
Status SplitHostPort(const std::string& address, std::string* host, uint16_t* port);

// Resolves host (numeric or a name such as localhost) and port to the first stream address.
Status Resolve(const std::string& host, uint16_t port, bool passive, sockaddr_storage* out,
               socklen_t* len);

// "a.b.c.d:port" or "[v6]:port" ("unknown" for any other family).
std::string FormatAddress(const sockaddr_storage& ss);

// A bound, listening, non-blocking, close-on-exec socket (SO_REUSEADDR).
struct Listener {
  UniqueFd fd;
  sockaddr_storage bound{};  // getsockname: the port chosen for port 0
  uint16_t port = 0;         // bound port
};
Result<Listener> ListenStream(const sockaddr_storage& addr, socklen_t len, int backlog);

// Connects a non-blocking, close-on-exec stream socket to `addr` (named `address` in errors),
// waiting up to `deadline` for the TCP connection; sets TCP_NODELAY. Blocks (poll) until then.
// Refused / unreachable: kPeerFailure; no connection in time: kTimeout.
Result<UniqueFd> ConnectStream(const sockaddr_storage& addr, socklen_t len,
                               const std::string& address,
                               std::chrono::steady_clock::time_point deadline);

// Accepts every pending connection of a non-blocking listener as non-blocking, close-on-exec
// sockets and hands each to fn(UniqueFd, const sockaddr_storage& peer). Returns 0 once the
// queue is empty (EAGAIN), or the errno that stopped it (EMFILE, ...: the listener stays, the
// next readiness event retries). EINTR and ECONNABORTED are retried.
template <typename F>
int AcceptEach(int listen_fd, F&& fn);

// TCP_NODELAY (control frames and small messages must not wait for Nagle).
void SetNoDelay(int fd);

// A socket call's errno as a Status: connection-level errors (refused, reset, unreachable,
// timed out, broken pipe) are kPeerFailure, the rest kIoError.
Status SocketError(const std::string& what, int err);

// ---- implementation ----

int AcceptOne(int listen_fd, sockaddr_storage* peer);  // socket.cc: accept4, or -errno

template <typename F>
int AcceptEach(int listen_fd, F&& fn) {
  for (;;) {
    sockaddr_storage peer{};
    const int fd = AcceptOne(listen_fd, &peer);
    if (fd >= 0) {
      fn(UniqueFd(fd), static_cast<const sockaddr_storage&>(peer));
      continue;
    }
    const int err = -fd;
    if (err == EINTR || err == ECONNABORTED) continue;
    return err == EAGAIN || err == EWOULDBLOCK ? 0 : err;
  }
}

}  // namespace ferry::common
