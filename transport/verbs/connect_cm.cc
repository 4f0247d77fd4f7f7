// Connection setup through librdmacm (params {"connect": "cm"}, the default).
//
// Active side:  rdma_resolve_addr (source = this port's IPv4 GID address, so the connection
//               uses this transport's device) -> ADDR_RESOLVED -> rdma_resolve_route ->
//               ROUTE_RESOLVED -> rdma_create_qp + rdma_connect -> ESTABLISHED -> handshake.
// Passive side: CONNECT_REQUEST -> rdma_create_qp + rdma_accept -> handshake.
// librdmacm moves the QPs through INIT/RTR/RTS itself (path MTU from the route).
//
// The Ferry handshake then runs over the QP as SEND_WITH_IMM messages tagged kTagHandshake,
// each frame cut into 4 KiB fragments (the smallest receive buffer a peer may have), the last
// one flagged. Only after it succeeds is the endpoint handed out; a failing handshake sends its
// Reject frame and lingers up to 1 s so the peer learns why.
//
// Loopback: rdma_cm cannot route through `lo` ("rdma_resolve_route: No such device"), so a
// loopback listen/connect host (127.x, localhost) is replaced by this port's own IPv4 address
// on both sides; Listen() still reports the loopback host the caller gave (with the bound port).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/common/socket.h"
#include "transport/verbs/errors.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry::verbs {
namespace {

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

Result<sockaddr_in> Ipv4Address(const std::string& host, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return InvalidArgument("'" + host + "' is not an IPv4 address (verbs cm mode needs one)");
  }
  return sa;
}

std::string PeerOf(rdma_cm_id* id) {
  const sockaddr* sa = rdma_get_peer_addr(id);
  if (sa == nullptr || sa->sa_family != AF_INET) return "unknown";
  sockaddr_storage ss{};
  std::memcpy(&ss, sa, sizeof(sockaddr_in));
  return common::FormatAddress(ss);
}

}  // namespace

Result<std::string> VerbsTransport::ListenCm(const std::string& host_in, uint16_t port) {
  std::string host = host_in;
  if (IsLoopback(host) && !port_.ipv4.empty()) host = port_.ipv4;
  FERRY_ASSIGN_OR_RETURN(sockaddr_in sa, Ipv4Address(host, port));
  std::lock_guard<common::MaybeMutex> lock(mu_);
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(cm_channel_.get(), &raw, nullptr, RDMA_PS_TCP) != 0) {
    return VerbsError("rdma_create_id(listen)", errno);
  }
  CmId id(raw);
  if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&sa)) != 0) {
    return VerbsError("rdma_bind_addr(" + host + ":" + std::to_string(port) + ")", errno);
  }
  if (rdma_listen(id.get(), 128) != 0) return VerbsError("rdma_listen", errno);
  const uint16_t bound = ntohs(rdma_get_src_port(id.get()));
  listen_id_ = std::move(id);
  // Report the host the caller asked for: Connect() maps a loopback host the same way.
  listen_address_ = host_in + ":" + std::to_string(bound);
  return listen_address_;
}

// Accept's answer when it has one: the oldest accepted endpoint, else the oldest refused
// handshake, else the transport's failure.
std::optional<Result<std::shared_ptr<Endpoint>>> VerbsTransport::TakeAcceptedLocked() {
  if (!accepted_.empty()) {
    std::shared_ptr<Endpoint> ep = std::move(accepted_.front());
    accepted_.pop_front();
    return ep;
  }
  if (!accept_errors_.empty()) {
    Status s = accept_errors_.front();
    accept_errors_.pop_front();
    return s.Annotate("accept");
  }
  if (!fatal_.ok()) return fatal_;
  return std::nullopt;
}

Result<std::shared_ptr<Endpoint>> VerbsTransport::Accept(Millis timeout) {
  if (config_.mode == ConnectMode::kOob) return AcceptOob(timeout);
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::vector<pollfd> fds;
    {
      std::lock_guard<common::MaybeMutex> lock(mu_);
      if (!listen_id_) return InvalidArgument("Accept without Listen");
      ProgressLocked();
      if (auto answer = TakeAcceptedLocked()) return *std::move(answer);
      fds = WaitFdsLocked();
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return Timeout("accept on " + listen_address_ + ": no peer completed a connection within " +
                     std::to_string(timeout.count()) + " ms");
    }
    SleepOnFds(std::move(fds),
               std::min<Millis>(std::chrono::duration_cast<Millis>(deadline - now) + Millis(1),
                                Millis(20)));
  }
}

Result<std::shared_ptr<Endpoint>> VerbsTransport::ConnectCm(const std::string& host_in,
                                                            uint16_t port,
                                                            const std::string& address,
                                                            Millis timeout) {
  std::string host = host_in;
  if (IsLoopback(host) && !port_.ipv4.empty()) host = port_.ipv4;
  FERRY_ASSIGN_OR_RETURN(sockaddr_in dst, Ipv4Address(host, port));
  const auto deadline = Clock::now() + timeout;
  std::shared_ptr<VerbsEndpoint> ep;
  {
    std::lock_guard<common::MaybeMutex> lock(mu_);
    if (!fatal_.ok()) return fatal_;
    if (endpoints_.size() >= options_.max_endpoints) {
      return ResourceExhausted("connect " + address + ": max_endpoints (" +
                               std::to_string(options_.max_endpoints) + ") reached");
    }
    ep = NewEndpointLocked(address);
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(cm_channel_.get(), &raw, ep.get(), RDMA_PS_TCP) != 0) {
      Status s = VerbsError("rdma_create_id", errno);
      DropEndpointLocked(ep.get());
      return s;
    }
    ep->cm_id_ = CmId(raw);
    uint8_t ack = AckTimeoutExponent();
    (void)rdma_set_option(raw, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof(ack));
    ep->cm_dst_ = dst;
    ep->cm_has_src_ = !port_.ipv4.empty();
    if (ep->cm_has_src_) {
      ep->cm_src_.sin_family = AF_INET;
      inet_pton(AF_INET, port_.ipv4.c_str(), &ep->cm_src_.sin_addr);
    }
    ep->connect_deadline_ = deadline;
    Status s = ResolveAddrLocked(ep.get());
    if (!s.ok()) {
      DropEndpointLocked(ep.get());
      return s;
    }
  }
  while (true) {
    std::vector<pollfd> fds;
    {
      std::lock_guard<common::MaybeMutex> lock(mu_);
      ProgressLocked();
      if (ep->state_ == VerbsEndpoint::State::kReady) return std::shared_ptr<Endpoint>(ep);
      if (ep->state_ == VerbsEndpoint::State::kFailed && !ep->lingering_) {
        Status s = ep->status_;
        DropEndpointLocked(ep.get());
        return s.Annotate("connect " + address);
      }
      if (Clock::now() >= deadline) {
        FailEndpointLocked(
            ep.get(), Timeout("no connection within " + std::to_string(timeout.count()) + " ms"));
        Status s = ep->status_;
        DropEndpointLocked(ep.get());
        return s.Annotate("connect " + address);
      }
      fds = WaitFdsLocked();
    }
    SleepOnFds(std::move(fds), Millis(20));
  }
}

// Address resolution is retried in short attempts: when the neighbour entry becomes valid, the
// kernel does not always wake the pending request (seen on rxe over veth), and it then only
// re-checks at the request's own timeout. Short attempts bound that delay to one second.
Status VerbsTransport::ResolveAddrLocked(VerbsEndpoint* ep) {
  const int ms = static_cast<int>(std::clamp<int64_t>(
      std::chrono::duration_cast<Millis>(ep->connect_deadline_ - Clock::now()).count(), 1, 1000));
  sockaddr* src = ep->cm_has_src_ ? reinterpret_cast<sockaddr*>(&ep->cm_src_) : nullptr;
  if (rdma_resolve_addr(ep->cm_id_.get(), src, reinterpret_cast<sockaddr*>(&ep->cm_dst_), ms) !=
      0) {
    return VerbsError("rdma_resolve_addr(" + ep->peer_address() + ")", errno);
  }
  return Status::Ok();
}

void VerbsTransport::ProcessCmEventsLocked() {
  std::vector<rdma_cm_id*> destroy_after_ack;
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(cm_channel_.get(), &ev) == 0) {
    OnCmEventLocked(ev, &destroy_after_ack);
    rdma_ack_cm_event(ev);
  }
  for (rdma_cm_id* id : destroy_after_ack) rdma_destroy_id(id);
}

rdma_conn_param CmConnParam(const DeviceLimits& limits, const rdma_conn_param* request) {
  // Without a request, the peer's depths do not bound ours: 16 is the cap anyway.
  const uint32_t peer_initiator = request != nullptr ? request->initiator_depth : 16u;
  const uint32_t peer_responder = request != nullptr ? request->responder_resources : 16u;
  rdma_conn_param param{};
  param.responder_resources =
      static_cast<uint8_t>(std::min<uint32_t>({peer_initiator, limits.max_rd_atom, 16u}));
  param.initiator_depth =
      static_cast<uint8_t>(std::min<uint32_t>({peer_responder, limits.max_init_rd_atom, 16u}));
  param.retry_count = 7;
  param.rnr_retry_count = 7;  // unlimited: an exhausted receive pool is flow control
  return param;
}

void VerbsTransport::OnCmEventLocked(rdma_cm_event* ev, std::vector<rdma_cm_id*>* destroy) {
  if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    OnConnectRequestLocked(ev, destroy);
    return;
  }
  auto* ep = static_cast<VerbsEndpoint*>(ev->id->context);
  if (ep == nullptr) return;  // the listener's own events
  switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
      const int ms = static_cast<int>(std::clamp<int64_t>(options_.peer_timeout.count(), 1, 60000));
      if (rdma_resolve_route(ev->id, ms) != 0) {
        FailEndpointLocked(ep, VerbsError("rdma_resolve_route", errno));
      }
      break;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      OnRouteResolvedLocked(ev->id, ep);
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      OnEstablishedLocked(ep);
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
      if (ep->state_ == VerbsEndpoint::State::kConnecting && Clock::now() < ep->connect_deadline_) {
        Status s = ResolveAddrLocked(ep);
        if (!s.ok()) FailEndpointLocked(ep, s);
        break;
      }
      FailEndpointLocked(ep, PeerFailure("rdma_cm address resolution of " + ep->peer_address() +
                                         " failed (status " + std::to_string(ev->status) + ")"));
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
      FailEndpointLocked(
          ep, PeerFailure("peer " + ep->peer_address() + " disconnected (rdma_cm DISCONNECTED)"));
      break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      FailAllLocked(PeerFailure("RDMA device " + port_.device + " was removed"));
      break;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      FailEndpointLocked(
          ep,
          PeerFailure(
              "rdma_cm " + std::string(rdma_event_str(ev->event)) + " (status " +
              std::to_string(ev->status) + ") with " + ep->peer_address() +
              (ev->event == RDMA_CM_EVENT_REJECTED ? ": nobody listens there or it refused" : "")));
      break;
    default:
      break;
  }
}

// Passive side: a refused request (another device, too many endpoints, a failed transport) is
// rejected at once; an accepted one gets its endpoint, QP and server handshake before
// rdma_accept, so the client's first handshake fragment finds a receive queue.
void VerbsTransport::OnConnectRequestLocked(rdma_cm_event* ev, std::vector<rdma_cm_id*>* destroy) {
  rdma_cm_id* id = ev->id;
  const std::string peer = PeerOf(id);
  if (id->verbs != ctx_ || endpoints_.size() >= options_.max_endpoints || !fatal_.ok()) {
    (void)rdma_reject(id, nullptr, 0);
    destroy->push_back(id);
    return;
  }
  auto ep = NewEndpointLocked(peer);
  ep->passive_ = true;
  id->context = ep.get();
  ep->cm_id_ = CmId(id);
  uint8_t ack = AckTimeoutExponent();
  (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof(ack));
  auto qp = CreateQp(ep.get(), id);
  if (!qp.ok()) {
    (void)rdma_reject(id, nullptr, 0);
    (void)ep->cm_id_.release();  // destroyed after the event is acked
    destroy->push_back(id);
    FailEndpointLocked(ep.get(), qp.status());
    return;
  }
  ep->qp_ = std::move(qp).value();
  by_qpn_[ep->qpn()] = ep.get();
  FillLocalData(ep.get());
  ep->handshake_ = std::make_unique<Handshake>(Handshake::Role::kServer, MakeHello(ep->local_));
  ep->state_ = VerbsEndpoint::State::kHandshake;
  rdma_conn_param param = CmConnParam(limits_, &ev->param.conn);
  if (rdma_accept(id, &param) != 0) {
    FailEndpointLocked(ep.get(), VerbsError("rdma_accept(" + peer + ")", errno, ep->qpn()));
  }
}

// Active side: the route must leave through this transport's device (its PD and CQ are there).
void VerbsTransport::OnRouteResolvedLocked(rdma_cm_id* id, VerbsEndpoint* ep) {
  if (id->verbs != ctx_) {
    FailEndpointLocked(
        ep, InvalidArgument("the route to " + ep->peer_address() + " uses RDMA device " +
                            ibv_get_device_name(id->verbs->device) + " but this transport uses " +
                            port_.device + "; pass {\"device\": \"" +
                            ibv_get_device_name(id->verbs->device) + "\"}"));
    return;
  }
  auto qp = CreateQp(ep, id);
  if (!qp.ok()) {
    FailEndpointLocked(ep, qp.status());
    return;
  }
  ep->qp_ = std::move(qp).value();
  by_qpn_[ep->qpn()] = ep;
  FillLocalData(ep);
  rdma_conn_param param = CmConnParam(limits_, /*request=*/nullptr);
  if (rdma_connect(id, &param) != 0) {
    FailEndpointLocked(ep,
                       VerbsError("rdma_connect(" + ep->peer_address() + ")", errno, ep->qpn()));
  }
}

// Active side: the QP is at RTS; the client speaks first. (The passive side started its
// handshake when it accepted.)
void VerbsTransport::OnEstablishedLocked(VerbsEndpoint* ep) {
  if (ep->passive_ || ep->state_ != VerbsEndpoint::State::kConnecting) return;
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(ep->qp_.get(), &attr, IBV_QP_PATH_MTU, &init) == 0) {
    stats_.path_mtu = MtuBytes(attr.path_mtu);
  }
  ep->state_ = VerbsEndpoint::State::kHandshake;
  ep->handshake_ = std::make_unique<Handshake>(Handshake::Role::kClient, MakeHello(ep->local_));
  SendControlFramesLocked(ep);
}

void VerbsTransport::SendControlFramesLocked(VerbsEndpoint* ep) {
  while (auto frame = ep->handshake_->TakeOutgoing()) {
    OpRecord* fresh = NewRecordLocked(OpRecord::Kind::kControl, ep);
    if (fresh == nullptr) {
      FailEndpointLocked(ep, ResourceExhausted("verbs: more than 16 M operations in flight"));
      return;
    }
    OpRecord& rec = *fresh;
    rec.owned = std::move(*frame);
    rec.owned_mr = MemoryRegistration(
        ibv_reg_mr(pd_.get(), rec.owned.data(), rec.owned.size(), IBV_ACCESS_LOCAL_WRITE));
    if (!rec.owned_mr) {
      const int err = errno;
      FreeRecordLocked(&rec);
      FailEndpointLocked(ep, VerbsError("ibv_reg_mr(handshake frame)", err, ep->qpn()));
      return;
    }
    PlanSend(reinterpret_cast<uintptr_t>(rec.owned.data()), rec.owned.size(), rec.owned_mr->lkey,
             kHandshakeFragment, kTagHandshake, &rec.plan);
    ep->backlog_.push(rec.id);
  }
  PumpLocked(ep);
}

void VerbsTransport::OnControlFragmentLocked(VerbsEndpoint* ep, const uint8_t* data,
                                             uint32_t length, bool last) {
  if (!ep->handshake_ || ep->handshake_->done() || ep->state_ != VerbsEndpoint::State::kHandshake) {
    FailEndpointLocked(ep,
                       ProtocolError("unexpected handshake message from " + ep->peer_address()));
    return;
  }
  if (ep->hs_frame_.size() + length > kMaxHandshakeFrame) {
    FailEndpointLocked(ep,
                       ProtocolError("handshake frame from " + ep->peer_address() + " exceeds " +
                                     std::to_string(kMaxHandshakeFrame) + " bytes"));
    return;
  }
  ep->hs_frame_.insert(ep->hs_frame_.end(), data, data + length);
  if (!last) return;
  std::vector<uint8_t> frame = std::move(ep->hs_frame_);
  ep->hs_frame_.clear();
  Status st = ep->handshake_->OnFrame(frame);
  SendControlFramesLocked(ep);  // replies, or the Reject frame
  if (!st.ok()) {
    if (ep->passive_) {
      accept_errors_.push_back(st);  // a refused handshake is reported by Accept()
      accept_cv_.notify_all();
    }
    FailEndpointLocked(ep, st, /*linger=*/true);
    return;
  }
  if (!ep->handshake_->done()) return;
  st = ApplyPeerHello(ep, ep->handshake_->peer());
  if (!st.ok()) {
    FailEndpointLocked(ep, st);
    return;
  }
  ep->state_ = VerbsEndpoint::State::kReady;
  ep->last_heard_ = Clock::now();
  if (ep->passive_) {
    accepted_.push_back(endpoints_.at(ep->id()));
    accept_cv_.notify_all();
  }
}

}  // namespace ferry::verbs
