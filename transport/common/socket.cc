// Stream-socket helpers (see socket.h). Moved here from the three backends, which each had a
// copy of the resolver, the address formatter and the accept loop.
#include "transport/common/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace ferry::common {

Status SplitHostPort(const std::string& address, std::string* host, uint16_t* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return InvalidArgument("address '" + address + "' is not host:port");
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return InvalidArgument("address '" + address + "' has no host");
  unsigned value = 0;
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || value > 65535) {
    return InvalidArgument("address '" + address + "' has a bad port");
  }
  *host = h;
  *port = static_cast<uint16_t>(value);
  return Status::Ok();
}

Status Resolve(const std::string& host, uint16_t port, bool passive, sockaddr_storage* out,
               socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return InvalidArgument("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status::Ok();
}

std::string FormatAddress(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (ss.ss_family != AF_INET6) return "unknown";
  const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
  // Built by appending: GCC 12 at -O3 reports a false -Wrestrict for "[" + std::string(...).
  std::string out = "[";
  out += host;
  out += "]:";
  out += std::to_string(ntohs(a->sin6_port));
  return out;
}

Result<Listener> ListenStream(const sockaddr_storage& addr, socklen_t len, int backlog) {
  Listener l;
  l.fd = UniqueFd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!l.fd) return IoError("socket", errno);
  int one = 1;
  (void)setsockopt(l.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(l.fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return IoError("bind " + FormatAddress(addr), errno);
  }
  if (::listen(l.fd.get(), backlog) != 0) return IoError("listen", errno);
  socklen_t blen = sizeof(l.bound);
  if (getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&l.bound), &blen) != 0) {
    return IoError("getsockname", errno);
  }
  l.port = l.bound.ss_family == AF_INET6
               ? ntohs(reinterpret_cast<const sockaddr_in6*>(&l.bound)->sin6_port)
               : ntohs(reinterpret_cast<const sockaddr_in*>(&l.bound)->sin_port);
  return l;
}

Result<UniqueFd> ConnectStream(const sockaddr_storage& addr, socklen_t len,
                               const std::string& address,
                               std::chrono::steady_clock::time_point deadline) {
  UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return IoError("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    if (errno != EINPROGRESS)
      return PeerFailure("connect " + address + ": " + std::strerror(errno));
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return Timeout("connect " + address + ": no TCP connection in time");
      pollfd pfd{fd.get(), POLLOUT, 0};
      const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      if (rc > 0) break;
      if (rc < 0 && errno != EINTR) return IoError("poll", errno);
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    (void)getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) return PeerFailure("connect " + address + ": " + std::strerror(err));
  }
  SetNoDelay(fd.get());
  return fd;
}

int AcceptOne(int listen_fd, sockaddr_storage* peer) {
  socklen_t len = sizeof(*peer);
  const int fd =
      accept4(listen_fd, reinterpret_cast<sockaddr*>(peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

void SetNoDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status SocketError(const std::string& what, int err) {
  if (err == ECONNREFUSED || err == ECONNRESET || err == EPIPE || err == EHOSTUNREACH ||
      err == ENETUNREACH || err == ETIMEDOUT) {
    return PeerFailure(what + ": " + std::strerror(err));
  }
  return IoError(what, err);
}

}  // namespace ferry::common
