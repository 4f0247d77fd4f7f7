// Out-of-band connection setup (params {"connect": "oob"}): a TCP control connection.
//
// Sequence (both sides create their QP and move it to INIT first):
//   client                                server
//   TCP connect  ------------------------> accept
//   Handshake frames (Hello, Hello, Welcome, Welcome), each [u32 big-endian length][bytes];
//   the Welcomes' transport_data carries PeerData (QPN, PSN, GID, LID, MTU, buffer size,
//   heartbeat word) -- see verbs_transport.h
//   QP -> RTR (path MTU = min of both active MTUs) -> RTS
//   "ready" frame  <---------------------> "ready" frame
// A side sends "ready" only once its QP is RTR, so the first SEND the peer posts after reading
// it finds a QP able to receive. The TCP connection then stays open: EOF (peer exited or closed
// its endpoint) fails the endpoint, a backstop to QP timeouts and heartbeats.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/common/socket.h"
#include "transport/verbs/errors.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry::verbs {
namespace {

int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

Status WaitFd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  while (true) {
    pollfd p{fd, events, 0};
    int left = MillisLeft(deadline);
    int rc = ::poll(&p, 1, left);
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR) return IoError("poll(" + what + ")", errno);
    if (rc == 0) return Timeout(what + ": timed out");
  }
}

Status SendAll(int fd, const uint8_t* data, size_t len, Clock::time_point deadline) {
  while (len > 0) {
    ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      FERRY_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "control connection send"));
      continue;
    }
    return PeerFailure(std::string("control connection send: ") +
                       (n < 0 ? std::strerror(errno) : "closed"));
  }
  return Status::Ok();
}

Status RecvAll(int fd, uint8_t* data, size_t len, Clock::time_point deadline) {
  while (len > 0) {
    ssize_t n = ::recv(fd, data, len, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return PeerFailure("control connection closed by the peer during setup");
    if (errno == EAGAIN || errno == EINTR) {
      FERRY_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "control connection receive"));
      continue;
    }
    return PeerFailure(std::string("control connection receive: ") + std::strerror(errno));
  }
  return Status::Ok();
}

Status SendFrame(int fd, const std::vector<uint8_t>& frame, Clock::time_point deadline) {
  uint32_t len = htonl(static_cast<uint32_t>(frame.size()));
  FERRY_RETURN_IF_ERROR(SendAll(fd, reinterpret_cast<uint8_t*>(&len), 4, deadline));
  return SendAll(fd, frame.data(), frame.size(), deadline);
}

Result<std::vector<uint8_t>> RecvFrame(int fd, Clock::time_point deadline) {
  uint32_t len = 0;
  FERRY_RETURN_IF_ERROR(RecvAll(fd, reinterpret_cast<uint8_t*>(&len), 4, deadline));
  len = ntohl(len);
  if (len > kMaxHandshakeFrame) {
    return ProtocolError("control frame of " + std::to_string(len) + " bytes exceeds " +
                         std::to_string(kMaxHandshakeFrame));
  }
  std::vector<uint8_t> frame(len);
  FERRY_RETURN_IF_ERROR(RecvAll(fd, frame.data(), len, deadline));
  return frame;
}

}  // namespace

Result<std::string> VerbsTransport::ListenOob(const std::string& host, uint16_t port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  FERRY_RETURN_IF_ERROR(common::Resolve(host, port, /*passive=*/true, &ss, &len));
  FERRY_ASSIGN_OR_RETURN(common::Listener listener, common::ListenStream(ss, len, 128));
  std::lock_guard<common::MaybeMutex> lock(mu_);
  listen_fd_ = std::move(listener.fd);
  listen_address_ = common::FormatAddress(listener.bound);
  return listen_address_;
}

Result<std::shared_ptr<Endpoint>> VerbsTransport::AcceptOob(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::vector<pollfd> fds;
    {
      std::lock_guard<common::MaybeMutex> lock(mu_);
      if (!listen_fd_) return InvalidArgument("Accept without Listen");
      AcceptPendingOobLocked();
      DriveOobSessionsLocked();
      ProgressLocked();
      if (auto answer = TakeAcceptedLocked()) return *std::move(answer);
      fds = WaitFdsLocked();
    }
    if (Clock::now() >= deadline) {
      return Timeout("accept on " + listen_address_ + ": no peer completed a connection within " +
                     std::to_string(timeout.count()) + " ms");
    }
    (void)::poll(fds.data(), fds.size(), std::min(MillisLeft(deadline) + 1, 20));
  }
}

void VerbsTransport::AcceptPendingOobLocked() {
  // Stops at EAGAIN (nothing pending) or a transient error: try again later.
  (void)common::AcceptEach(listen_fd_.get(), [&](UniqueFd fd, const sockaddr_storage& peer) {
    if (!fatal_.ok() || endpoints_.size() >= options_.max_endpoints) return;  // refuse: close
    common::SetNoDelay(fd.get());
    AcceptOobLocked(std::move(fd), common::FormatAddress(peer));
  });
}

void VerbsTransport::AcceptOobLocked(UniqueFd fd, std::string peer) {
  auto ep = NewEndpointLocked(std::move(peer));
  ep->passive_ = true;
  auto qp = CreateQp(ep.get(), nullptr);
  if (!qp.ok()) {
    DropEndpointLocked(ep.get());
    return;
  }
  ep->qp_ = std::move(qp).value();
  by_qpn_[ep->qpn()] = ep.get();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port_.port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(ep->qp_.get(), &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    DropEndpointLocked(ep.get());
    return;
  }
  FillLocalData(ep.get());
  ep->state_ = VerbsEndpoint::State::kHandshake;
  auto s = std::make_unique<OobSession>();
  s->fd = std::move(fd);
  s->ep = ep;
  s->handshake = std::make_unique<Handshake>(Handshake::Role::kServer, MakeHello(ep->local_));
  // A connection that does not finish its handshake in this time is dropped.
  s->deadline = Clock::now() + HandshakeBound(options_.peer_timeout);
  oob_sessions_.push_back(std::move(s));
}

void VerbsTransport::DriveOobSessionsLocked() {
  for (size_t i = 0; i < oob_sessions_.size();) {
    OobSession* s = oob_sessions_[i].get();
    bool refused = false;
    Status st = StepOobSessionLocked(s, &refused);
    const bool ready = st.ok() && s->ep->state_ == VerbsEndpoint::State::kReady;
    if (st.ok() && !ready) {
      ++i;
      continue;
    }
    if (ready) {
      s->ep->control_fd_ = std::move(s->fd);
      s->ep->last_heard_ = Clock::now();
      accepted_.push_back(s->ep);
      accept_cv_.notify_all();
    } else {
      if (!s->out.empty())
        (void)::send(s->fd.get(), s->out.data(), s->out.size(),
                     MSG_NOSIGNAL | MSG_DONTWAIT);  // the Reject, if any
      if (refused) accept_errors_.push_back(st);
      DropEndpointLocked(s->ep.get());
    }
    oob_sessions_.erase(oob_sessions_.begin() + static_cast<ptrdiff_t>(i));
  }
}

Status VerbsTransport::StepOobSessionLocked(OobSession* s, bool* refused) {
  auto queue = [&](const std::vector<uint8_t>& frame) {
    const uint32_t len = htonl(static_cast<uint32_t>(frame.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(&len);
    s->out.insert(s->out.end(), p, p + 4);
    s->out.insert(s->out.end(), frame.begin(), frame.end());
  };
  auto flush = [&]() -> Status {
    while (!s->out.empty()) {
      ssize_t n = ::send(s->fd.get(), s->out.data(), s->out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        s->out.erase(s->out.begin(), s->out.begin() + n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return Status::Ok();
      } else {
        return PeerFailure(std::string("control connection send: ") + std::strerror(errno));
      }
    }
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(flush());
  uint8_t buf[65536];
  bool eof = false;  // frames that arrived before the EOF still count (the peer may be done)
  while (true) {
    ssize_t n = ::recv(s->fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      s->in.insert(s->in.end(), buf, buf + n);
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EAGAIN || errno == EINTR) break;
    return PeerFailure(std::string("control connection receive: ") + std::strerror(errno));
  }
  while (s->in.size() >= 4) {
    uint32_t len = 0;
    std::memcpy(&len, s->in.data(), 4);
    len = ntohl(len);
    if (len > kMaxHandshakeFrame) {
      return ProtocolError("control frame of " + std::to_string(len) + " bytes exceeds " +
                           std::to_string(kMaxHandshakeFrame));
    }
    if (s->in.size() < 4 + static_cast<size_t>(len)) break;
    std::vector<uint8_t> frame(s->in.begin() + 4, s->in.begin() + 4 + len);
    s->in.erase(s->in.begin(), s->in.begin() + 4 + len);
    if (!s->handshake->done()) {
      Status st = s->handshake->OnFrame(frame);
      while (auto out = s->handshake->TakeOutgoing()) queue(*out);
      if (!st.ok()) {
        *refused = true;
        return st;
      }
      if (s->handshake->done()) {
        VerbsEndpoint* ep = s->ep.get();
        FERRY_RETURN_IF_ERROR(ApplyPeerHello(ep, s->handshake->peer()));
        FERRY_RETURN_IF_ERROR(ConnectQpByHand(ep));  // RTR before telling the peer "ready"
        queue({'R'});
      }
    } else {
      if (frame != std::vector<uint8_t>{'R'}) {
        return ProtocolError("expected the ready frame from " + s->ep->peer_address());
      }
      s->ep->state_ = VerbsEndpoint::State::kReady;
    }
  }
  if (s->ep->state_ == VerbsEndpoint::State::kReady) return Status::Ok();  // EOF: noticed later
  if (eof) return PeerFailure("control connection closed by the peer during setup");
  FERRY_RETURN_IF_ERROR(flush());
  if (Clock::now() > s->deadline) {
    return Timeout("handshake with " + s->ep->peer_address() + " did not finish in time");
  }
  return Status::Ok();
}

Result<std::shared_ptr<Endpoint>> VerbsTransport::ConnectOob(const std::string& host, uint16_t port,
                                                             const std::string& address,
                                                             Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  sockaddr_storage ss{};
  socklen_t len = 0;
  FERRY_RETURN_IF_ERROR(common::Resolve(host, port, /*passive=*/false, &ss, &len));
  FERRY_ASSIGN_OR_RETURN(UniqueFd fd, common::ConnectStream(ss, len, address, deadline));
  auto ep = FinishOob(std::move(fd), Handshake::Role::kClient, address, deadline);
  if (!ep.ok()) return ep.status().Annotate("connect " + address);
  return ep;
}

Result<std::shared_ptr<Endpoint>> VerbsTransport::FinishOob(UniqueFd fd, Handshake::Role role,
                                                            std::string peer,
                                                            Clock::time_point deadline) {
  std::shared_ptr<VerbsEndpoint> ep;
  HelloParams hello;
  {
    std::lock_guard<common::MaybeMutex> lock(mu_);
    if (!fatal_.ok()) return fatal_;
    if (endpoints_.size() >= options_.max_endpoints) {
      return ResourceExhausted("max_endpoints (" + std::to_string(options_.max_endpoints) +
                               ") reached");
    }
    ep = NewEndpointLocked(peer);
    ep->passive_ = role == Handshake::Role::kServer;
    auto qp = CreateQp(ep.get(), nullptr);
    if (!qp.ok()) {
      DropEndpointLocked(ep.get());
      return qp.status();
    }
    ep->qp_ = std::move(qp).value();
    by_qpn_[ep->qpn()] = ep.get();
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port_.port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    Status s = CheckCall(
        "ibv_modify_qp(INIT)",
        ibv_modify_qp(ep->qp_.get(), &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        ep->qpn());
    if (!s.ok()) {
      DropEndpointLocked(ep.get());
      return s;
    }
    FillLocalData(ep.get());
    ep->state_ = VerbsEndpoint::State::kHandshake;
    hello = MakeHello(ep->local_);
  }
  auto fail = [&](Status s) -> Status {
    std::lock_guard<common::MaybeMutex> lock(mu_);
    DropEndpointLocked(ep.get());
    return s;
  };
  Handshake hs(role, std::move(hello));
  while (true) {
    while (auto out = hs.TakeOutgoing()) {
      Status s = SendFrame(fd.get(), *out, deadline);
      if (!s.ok()) return fail(s);
    }
    if (hs.done()) break;
    auto frame = RecvFrame(fd.get(), deadline);
    if (!frame.ok()) return fail(frame.status());
    Status s = hs.OnFrame(*frame);
    if (!s.ok()) {
      while (auto out = hs.TakeOutgoing()) (void)SendFrame(fd.get(), *out, deadline);
      return fail(s);
    }
  }
  {
    std::lock_guard<common::MaybeMutex> lock(mu_);
    Status s = ApplyPeerHello(ep.get(), hs.peer());
    if (s.ok()) s = ConnectQpByHand(ep.get());
    if (!s.ok()) {
      DropEndpointLocked(ep.get());
      return s;
    }
  }
  static const std::vector<uint8_t> kReady = {'R'};
  Status s = SendFrame(fd.get(), kReady, deadline);
  if (!s.ok()) return fail(s);
  auto ready = RecvFrame(fd.get(), deadline);
  if (!ready.ok()) return fail(ready.status());
  if (*ready != kReady) return fail(ProtocolError("expected the ready frame from " + peer));
  std::lock_guard<common::MaybeMutex> lock(mu_);
  ep->control_fd_ = std::move(fd);
  ep->state_ = VerbsEndpoint::State::kReady;
  ep->last_heard_ = Clock::now();
  return std::shared_ptr<Endpoint>(ep);
}

Status VerbsTransport::ConnectQpByHand(VerbsEndpoint* ep) {
  const PeerData& r = ep->peer_;
  const ibv_mtu mtu = static_cast<ibv_mtu>(std::min<uint8_t>(ep->local_.mtu, r.mtu));
  stats_.path_mtu = MtuBytes(mtu);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = r.qpn;
  a.rq_psn = r.psn;
  a.max_dest_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(limits_.max_rd_atom, 16));
  a.min_rnr_timer = 12;  // 0.64 ms between RNR retries
  a.ah_attr.port_num = port_.port;
  a.ah_attr.dlid = r.lid;
  if (port_.link_layer == IBV_LINK_LAYER_ETHERNET || ep->local_.gid.global.interface_id != 0) {
    // RoCE needs a GRH; rxe checks sgid_index against the GID table.
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = r.gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port_.gid_index);
    a.ah_attr.grh.hop_limit = 64;
  }
  FERRY_RETURN_IF_ERROR(
      CheckCall("ibv_modify_qp(RTR)",
                ibv_modify_qp(ep->qp_.get(), &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
                ep->qpn()));
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = AckTimeoutExponent();
  s.retry_cnt = 7;
  s.rnr_retry = 7;  // unlimited: an exhausted receive pool is flow control, not failure
  s.sq_psn = ep->local_.psn;
  s.max_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(limits_.max_init_rd_atom, 16));
  return CheckCall("ibv_modify_qp(RTS)",
                   ibv_modify_qp(ep->qp_.get(), &s,
                                 IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                   ep->qpn());
}

void VerbsTransport::CheckControlSocketsLocked() {
  for (auto& [id, sp] : endpoints_) {
    VerbsEndpoint* ep = sp.get();
    if (ep->state_ != VerbsEndpoint::State::kReady || !ep->control_fd_) continue;
    uint8_t byte = 0;
    ssize_t n = ::recv(ep->control_fd_.get(), &byte, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n > 0) {
      FailEndpointLocked(ep, ProtocolError("peer " + ep->peer_address() +
                                           " sent unexpected bytes on the control connection"));
    } else {
      FailEndpointLocked(ep, PeerFailure("control connection to " + ep->peer_address() +
                                         " closed (the peer exited or closed its endpoint)"));
    }
  }
}

}  // namespace ferry::verbs
