// Listen/Accept/Connect: the Ferry handshake over a TCP control connection, UCP endpoints to the
// peer's worker address, liveness, and endpoint failure/close.
//
// Why not ucp_listener / UCP_EP_PARAM_FIELD_SOCK_ADDR: in UCX 1.13 the sockaddr connection
// manager only wires up transports on the network device the connection arrived on. With
// UCX_TLS=shm,self (posix, sysv, cma, self) the client endpoint fails with "Destination is
// unreachable"; with shm,tcp,self it connects but every lane is tcp (checked with
// ucp_ep_print_info). Exchanging worker addresses lets UCX pick lanes from everything UCX_TLS
// allows, shared memory included.
//
// Sequence (frames are u32-little-endian-length-prefixed ferry::Handshake frames):
//   client                                  server
//   TCP connect                 ----------> accept (listening socket in epoll_)
//   Hello(nonce)                ---------->
//                               <---------- Hello(nonce, proof)
//   Welcome(proof, regions, td) ---------->
//                               <---------- Welcome(regions, td)   ucp_ep_create(peer address)
//   ucp_ep_create(peer address)                                    -> Accept() returns
//   -> Connect() returns
//   td (transport_data) = { u64 LE: my id of this connection; ucp worker address bytes }
//   (td = { u64 id; samehost::HostIdentity (48 bytes, samehost/identity.h); worker address } in
//   full)
// A failed handshake (bad frame, wrong secret, wrong backend) sends the Reject frame, closes the
// connection and leaves the listener running.
//
// After the handshake the control connection carries one-byte frames: 'P' (ping) answered by
// 'O' (pong). EOF on it means the peer process is gone or closed the endpoint.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "transport/common/bytes.h"
#include "transport/common/socket.h"
#include "transport/ucx/errors.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

constexpr uint64_t kListenerKey = 0;  // epoll data of the listening socket (ids start at 1)

Status Resolve(const std::string& address, sockaddr_storage* out, socklen_t* len,
               std::string* host_out, uint16_t* port_out) {
  std::string host;
  uint16_t port = 0;
  FERRY_RETURN_IF_ERROR(common::SplitHostPort(address, &host, &port));
  FERRY_RETURN_IF_ERROR(common::Resolve(host, port, /*passive=*/false, out, len));
  *host_out = host;
  *port_out = port;
  return Status::Ok();
}

// True when the endpoint has an RMA lane on an rc/dc verbs transport: memory registered with
// ucp_mem_map then carries an rkey the HCA checks, and ucp_put/get_nbx are real RDMA. UCX 1.13
// has no query for an ep's lanes, so this reads ucp_ep_print_info's configuration dump
// ("lane[N]: ... rc_mlx5/mlx5_0:1 ... rma_bw#0" lines). Anything else, including a dump that
// cannot be read, means no: then Ferry's active-message protocol is used, never UCX's software
// RMA emulation.
bool HasVerbsRmaLane(ucp_ep_h ep) {
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&buf, &size);
  if (f == nullptr) return false;
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  bool found = false;
  std::string_view dump(buf, size);
  while (!dump.empty() && !found) {
    const size_t nl = dump.find('\n');
    std::string_view line = dump.substr(0, nl);
    dump = nl == std::string_view::npos ? std::string_view() : dump.substr(nl + 1);
    if (line.find("lane[") == std::string_view::npos ||
        line.find(" rma") == std::string_view::npos) {
      continue;
    }
    found =
        line.find(":rc_") != std::string_view::npos || line.find(":dc_") != std::string_view::npos;
  }
  std::free(buf);
  return found;
}

}  // namespace

// ---- endpoints ----

UcxEndpoint::UcxEndpoint(UcxTransport* t, uint64_t id, std::string peer_address, bool server)
    : t_(t), server_(server) {
  id_ = id;
  peer_address_ = std::move(peer_address);
}

UcxEndpoint::~UcxEndpoint() = default;

Status UcxEndpoint::status() const {
  Guard lock(t_->mu_);
  if (state_ == State::kHandshaking) return Status(Code::kInternal, "handshake in progress");
  return status_;
}

void UcxEndpoint::Close() {
  Guard lock(t_->mu_);
  t_->CloseEndpoint(this);
}

std::shared_ptr<UcxEndpoint> UcxTransport::NewEndpoint(std::string peer, bool server, UniqueFd fd) {
  const uint64_t id = next_ep_id_++;
  auto ep = std::make_shared<UcxEndpoint>(this, id, std::move(peer), server);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = id;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) {
    ep->state_ = UcxEndpoint::State::kFailed;
    ep->status_ = IoError("epoll_ctl(ADD control connection)", errno);
  } else {
    ep->fd_ = std::move(fd);
    live_.emplace(id, ep.get());
    ++handshakes_;
  }
  by_id_.emplace(id, ep);
  return ep;
}

HelloParams UcxTransport::MakeHello(uint64_t my_id) const {
  HelloParams h;
  h.backend = kBackendName;
  h.secret = options_.secret;
  h.regions = advertise_;
  h.info = options_.hello_info;
  common::AppendLe64(&h.transport_data, my_id);
  identity_.Append(&h.transport_data);
  h.transport_data.insert(h.transport_data.end(), worker_address_.begin(), worker_address_.end());
  h.max_message_size = options_.max_message_size;
  h.max_segments = options_.max_segments;
  return h;
}

// ---- UCX callback (runs inside ucp_worker_progress with mu_ held) ----

void UcxTransport::OnEpError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* ep = static_cast<UcxEndpoint*>(arg);
  if (ep->ucx_error_ == UCS_OK) ep->ucx_error_ = status;
  ep->t_->control_pending_ = true;
}

// ---- control connections ----

void UcxTransport::PollSockets() {
  epoll_event events[64];
  int n = epoll_wait(epoll_.get(), events, 64, 0);
  for (int i = 0; i < n; ++i) {
    const uint64_t key = events[i].data.u64;
    if (key == kListenerKey) {
      AcceptSockets();
      continue;
    }
    auto it = live_.find(key);
    if (it != live_.end()) ReadSocket(it->second);
  }
  if (adopt_pending_) AdoptReadySockets();
  // Retry frames that did not fit in the socket buffer (rare: handshake frames are small).
  if (pending_writes_) {
    pending_writes_ = false;
    std::vector<UcxEndpoint*> eps;
    for (auto& [id, ep] : live_) {
      if (!ep->wbuf_.empty()) eps.push_back(ep);
    }
    for (UcxEndpoint* ep : eps) FlushSocket(ep);
  }
}

void UcxTransport::AcceptSockets() {
  const int err =
      common::AcceptEach(listen_fd_.get(), [&](UniqueFd fd, const sockaddr_storage& ss) {
        const std::string peer = common::FormatAddress(ss);
        if (live_.size() >= options_.max_endpoints) {
          last_accept_error_ =
              ResourceExhausted("refused " + peer + ": max_endpoints (" +
                                std::to_string(options_.max_endpoints) + ") reached");
          return;  // closing the socket tells the client
        }
        common::SetNoDelay(fd.get());
        auto ep = NewEndpoint(peer, /*server=*/true, std::move(fd));
        if (ep->state_ == UcxEndpoint::State::kFailed) {
          last_accept_error_ = ep->status_;
          return;
        }
        ep->handshake_ = std::make_unique<Handshake>(Handshake::Role::kServer, MakeHello(ep->id()));
        ep->handshake_deadline_ = Clock::now() + AcceptBudget();
      });
  if (err != 0) last_accept_error_ = IoError("accept on " + listen_address_, err);
}

void UcxTransport::QueueFrame(UcxEndpoint* ep, std::span<const uint8_t> payload) {
  common::AppendLe32(&ep->wbuf_, static_cast<uint32_t>(payload.size()));
  ep->wbuf_.insert(ep->wbuf_.end(), payload.begin(), payload.end());
}

bool UcxTransport::FlushSocket(UcxEndpoint* ep) {
  size_t done = 0;
  while (done < ep->wbuf_.size()) {
    ssize_t n =
        ::send(ep->fd_.get(), ep->wbuf_.data() + done, ep->wbuf_.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pending_writes_ = true;
      break;
    }
    ep->wbuf_.clear();
    FailEndpoint(ep,
                 PeerFailure("control connection to " + ep->peer_address_ + ": " +
                             IoError("send", errno).message()),
                 /*graceful=*/false);
    return false;
  }
  ep->wbuf_.erase(ep->wbuf_.begin(), ep->wbuf_.begin() + static_cast<ptrdiff_t>(done));
  return true;
}

void UcxTransport::ReadSocket(UcxEndpoint* ep) {
  uint8_t buf[16384];
  bool eof = false;
  int err = 0;
  while (true) {
    ssize_t n = ::recv(ep->fd_.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      ep->rbuf_.insert(ep->rbuf_.end(), buf, buf + n);
      if (ep->rbuf_.size() > kMaxHandshakeFrame + 4 + sizeof(buf)) break;  // parse first
      continue;
    }
    if (n == 0)
      eof = true;
    else if (errno == EINTR)
      continue;
    else if (errno != EAGAIN && errno != EWOULDBLOCK)
      err = errno;
    break;
  }
  // Frames: u32 little-endian length, then the payload.
  size_t off = 0;
  while (ep->state_ != UcxEndpoint::State::kFailed && ep->rbuf_.size() - off >= 4) {
    const uint8_t* p = ep->rbuf_.data() + off;
    const uint32_t len = common::GetLe32(p);
    if (len > kMaxHandshakeFrame) {
      Status s = ProtocolError("control frame of " + std::to_string(len) + " bytes from " +
                               ep->peer_address_ + " exceeds the limit of " +
                               std::to_string(kMaxHandshakeFrame));
      if (ep->server_ && ep->state_ == UcxEndpoint::State::kHandshaking) last_accept_error_ = s;
      FailEndpoint(ep, s, /*graceful=*/false);
      return;
    }
    if (ep->rbuf_.size() - off - 4 < len) break;
    OnFrame(ep, std::span<const uint8_t>(p + 4, len));
    off += 4 + len;
  }
  if (ep->state_ == UcxEndpoint::State::kFailed) return;
  ep->rbuf_.erase(ep->rbuf_.begin(), ep->rbuf_.begin() + static_cast<ptrdiff_t>(off));
  if (eof || err != 0) {
    const bool handshaking = ep->state_ == UcxEndpoint::State::kHandshaking;
    Status s =
        PeerFailure("peer " + ep->peer_address_ +
                    (err != 0      ? " connection error: " + IoError("recv", err).message()
                     : handshaking ? " closed the connection during the handshake"
                                   : " closed the connection (process exited or endpoint closed)"));
    if (ep->server_ && handshaking) last_accept_error_ = s;
    FailEndpoint(ep, s, /*graceful=*/false);
  }
}

void UcxTransport::OnFrame(UcxEndpoint* ep, std::span<const uint8_t> frame) {
  ep->last_heard_ = Clock::now();
  if (ep->state_ == UcxEndpoint::State::kReady || ep->wiring_) {  // handshake frames are done
    if (frame.size() == 1 && frame[0] == kPing) {
      const uint8_t pong = kPong;
      QueueFrame(ep, {&pong, 1});
      FlushSocket(ep);
      return;
    }
    if (frame.size() == 1 && frame[0] == kPong) return;
    FailEndpoint(ep,
                 ProtocolError("unexpected control frame of " + std::to_string(frame.size()) +
                               " bytes from " + ep->peer_address_),
                 /*graceful=*/false);
    return;
  }
  Status s = ep->handshake_->OnFrame(frame);
  while (auto out = ep->handshake_->TakeOutgoing()) QueueFrame(ep, *out);
  if (!FlushSocket(ep)) return;
  if (!s.ok()) {
    s = s.Annotate("handshake with " + ep->peer_address_);
    if (ep->server_) last_accept_error_ = s;
    FailEndpoint(ep, s, /*graceful=*/true);  // graceful: the Reject frame goes out first
    return;
  }
  if (ep->handshake_->done()) FinishHandshake(ep);
}

void UcxTransport::FinishHandshake(UcxEndpoint* ep) {
  const PeerHello& peer = ep->handshake_->peer();
  const std::string who = "handshake with " + ep->peer_address_;
  constexpr size_t kHeader = 8 + samehost::HostIdentity::kWireSize;
  if (peer.transport_data.size() <= kHeader) {
    Status bad =
        ProtocolError(who + ": transport data of " + std::to_string(peer.transport_data.size()) +
                      " bytes has no UCX worker address");
    if (ep->server_) last_accept_error_ = bad;
    FailEndpoint(ep, bad, /*graceful=*/false);
    return;
  }
  const uint64_t tag = common::GetLe64(peer.transport_data.data());
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.address = reinterpret_cast<const ucp_address_t*>(peer.transport_data.data() + kHeader);
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = &UcxTransport::OnEpError;
  p.err_handler.arg = ep;
  ucp_ep_h handle = nullptr;
  ucs_status_t st = ucp_ep_create(worker_.get(), &p, &handle);
  if (st != UCS_OK) {
    Status s = UcsError("ucp_ep_create(" + ep->peer_address_ +
                            ") (does UCX_TLS allow a transport that reaches the peer?)",
                        st);
    if (ep->server_) last_accept_error_ = s;
    FailEndpoint(ep, s, /*graceful=*/false);
    return;
  }
  ep->ep_ = EpHandle(worker_.get(), handle);
  ep->peer_tag_ = tag;
  const auto peer_id = samehost::HostIdentity::Parse(peer.transport_data.data() + 8);
  if (cma_allowed_) {
    // The same-host engine only with the peer's region table mapped: without it nothing could
    // check the target's rules, so such an endpoint uses the checked protocol of path (3).
    auto engine = samehost::Peer::Open(identity_, peer_id);
    if (engine.ok()) ep->samehost_ = std::move(*engine);
  }
  ep->native_rma_ = HasVerbsRmaLane(handle);
  ep->peer_max_message_ = peer.max_message_size;
  ep->peer_regions_ = peer.regions;
  ep->peer_info_ = peer.info;
  ep->handshake_.reset();
  if (ep->native_rma_) {
    // Verbs lanes (rc + ud wireup): the endpoint is handed out only once UCX's wireup is done,
    // probed with an ep flush (it completes when every lane is connected). Ops posted before
    // that would wait in UCX's wireup queue, where a dead peer leaves them until UCX's ud
    // timeout (30 s, far past peer_timeout), and where UCX 1.13 aborts the process if a force
    // close purges the wireup REQ. So no Op of the user ever sits there.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxTransport::OnWireupDone;
    p.user_data = ep;
    ucs_status_ptr_t req = ucp_ep_flush_nbx(handle, &p);
    if (UCS_PTR_IS_ERR(req)) {
      Status s = UcsError("ucx wireup with " + ep->peer_address_, UCS_PTR_STATUS(req));
      if (ep->server_) last_accept_error_ = s;
      FailEndpoint(ep, Status(Code::kPeerFailure, s.message()), /*graceful=*/false);
      return;
    }
    if (req != nullptr) {  // OnWireupDone finishes the endpoint
      ep->wiring_ = true;
      if (ep->server_) {
        ep->handshake_deadline_ = std::max(ep->handshake_deadline_, Clock::now() + AcceptBudget());
      }
      return;
    }
    ep->wired_ = true;
  }
  EnterReady(ep);
}

Clock::duration UcxTransport::AcceptBudget() const {
  // With verbs lanes, setting up a connection creates and connects QPs on both sides: seconds
  // under emulation (seen in the soft-RoCE VM: 2.5 s for one ucp_ep_create), more than a short
  // peer_timeout. A generous budget costs little: a dead peer is still noticed at once (EOF on
  // the control connection), and the endpoint is not the caller's before it is ready.
  // Without them, a lossy link's retransmissions need it too: HandshakeBound (handshake.h) covers
  // both, for the handshake and again for UCX's wireup.
  return HandshakeBound(options_.peer_timeout);
}

void UcxTransport::EnterReady(UcxEndpoint* ep) {
  ep->state_ = UcxEndpoint::State::kReady;
  --handshakes_;
  ep->last_heard_ = Clock::now();
  // Its control connection goes to the heartbeat thread, not from here: a socket read may be in
  // progress (EnterReady runs inside OnFrame, or a UCX callback).
  ep->adopt_ = true;
  adopt_pending_ = true;
  if (ep->server_) accepted_.push_back(by_id_.at(ep->id()));
}

void UcxTransport::OnWireupDone(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  auto* ep = static_cast<UcxEndpoint*>(user_data);
  // Not wiring any more: the endpoint failed (or the transport is going) before UCX finished;
  // the endpoint object itself lives until the transport dies, after the worker.
  if (!ep->wiring_) return;
  ep->wiring_ = false;
  if (status == UCS_OK) {
    ep->wired_ = true;
    ep->t_->EnterReady(ep);
    return;
  }
  // Failing the endpoint closes its ucp_ep: not from inside a UCX callback (HandleControlLocked).
  ep->wireup_error_ = status;
  ep->t_->control_pending_ = true;
}

void UcxTransport::HandleControlLocked() {
  control_pending_ = false;
  std::vector<UcxEndpoint*> failed;
  for (auto& [id, ep] : live_) {
    if (ep->ucx_error_ != UCS_OK || ep->wireup_error_ != UCS_OK) failed.push_back(ep);
  }
  for (UcxEndpoint* ep : failed) {
    Status why = ep->ucx_error_ != UCS_OK
                     ? UcsError("endpoint to " + ep->peer_address_ + " failed", ep->ucx_error_)
                     : UcsError("ucx wireup with " + ep->peer_address_, ep->wireup_error_);
    if (ep->server_ && ep->state_ == UcxEndpoint::State::kHandshaking) last_accept_error_ = why;
    FailEndpoint(ep, Status(Code::kPeerFailure, why.message()), /*graceful=*/false);
  }
  for (size_t i = 0; i < closing_.size();) {
    if (ucp_request_check_status(closing_[i]) != UCS_INPROGRESS) {
      ucp_request_free(closing_[i]);
      closing_[i] = closing_.back();
      closing_.pop_back();
    } else {
      ++i;
    }
  }
  if (!closing_.empty()) control_pending_ = true;
}

void UcxTransport::FailEndpoint(UcxEndpoint* ep, Status why, bool graceful) {
  if (ep->state_ == UcxEndpoint::State::kFailed) return;
  if (ep->state_ == UcxEndpoint::State::kHandshaking && live_.count(ep->id()) != 0) {
    --handshakes_;
  }
  ep->state_ = UcxEndpoint::State::kFailed;
  ep->status_ = std::move(why);
  ep->handshake_.reset();
  ep->wiring_ = false;  // a wireup probe still in UCX completes into nothing (OnWireupDone)
  live_.erase(ep->id());
  // Recvs on this endpoint are worker-level tag receives: cancel them ourselves. Their
  // callbacks complete the Ops with the endpoint's status.
  std::vector<void*> recvs;
  for (OpState* r = ep->ops_; r != nullptr; r = r->next) {
    if (r->type == OpType::kRecv && r->request != nullptr) recvs.push_back(r->request);
  }
  for (void* req : recvs) ucp_request_cancel(worker_.get(), req);
  FailAmOps(ep);
  if (ep->ep_.get() != nullptr) {
    // A force close makes UCX complete every outstanding request of the ep with an error
    // (callbacks map it to status_); after an error callback UCX requires force. Exception: an
    // ep with verbs lanes (rc + ud wireup) is closed in flush mode unless UCX reported an
    // error: UCX 1.13 asserts and aborts the process when a force close purges a ud wireup REQ
    // still pending ("ucp_request.c:684 ... got REQ message", seen in the VM when the peer
    // closed right after connecting). Such an ep is still handshaking (FinishHandshake waits for
    // the wireup), so it carries no Op. Once wireup is done (wired_), a force close is safe
    // again and needed: it completes RMA requests in flight to a dead peer at once, where a
    // flush-mode close waits for UCX's keepalive.
    const bool force = ep->ucx_error_ != UCS_OK || (!graceful && (!ep->native_rma_ || ep->wired_));
    void* req = ep->ep_.Close(force);
    if (req != nullptr) {
      closing_.push_back(req);
      control_pending_ = true;
    }
    // A force close stops UCX from moving data for the ep, but UCX 1.13 does not complete every
    // request of it (some never), so what is still in flight completes here, at once.
    if (force) OrphanOps(ep);
  }
  if (ep->live_ != nullptr) liveness_->Drop(ep->live_);  // the peer sees EOF: fails at once
  if (ep->fd_) {
    if (graceful && !ep->wbuf_.empty()) {
      (void)::send(ep->fd_.get(), ep->wbuf_.data(), ep->wbuf_.size(), MSG_NOSIGNAL);
    }
    (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, ep->fd_.get(), nullptr);
    (void)::shutdown(ep->fd_.get(), SHUT_RDWR);
    ep->fd_.reset();  // the peer sees EOF: its endpoint fails at once
  }
  ep->rbuf_.clear();
  ep->wbuf_.clear();
}

void UcxTransport::CloseEndpoint(UcxEndpoint* ep) {
  ep->closed_by_user_ = true;
  FailEndpoint(ep, Cancelled("endpoint to " + ep->peer_address_ + " was closed"),
               /*graceful=*/true);
}

void UcxTransport::AdoptReadySockets() {
  adopt_pending_ = false;
  std::vector<UcxEndpoint*> eps;
  for (auto& [id, ep] : live_) {
    if (ep->adopt_) eps.push_back(ep);
  }
  for (UcxEndpoint* ep : eps) {
    ep->adopt_ = false;
    (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, ep->fd_.get(), nullptr);
    auto live =
        liveness_->Adopt(ep->id(), std::move(ep->fd_), std::move(ep->rbuf_), std::move(ep->wbuf_));
    ep->rbuf_.clear();
    ep->wbuf_.clear();
    if (!live.ok()) {
      FailEndpoint(ep, live.status(), /*graceful=*/false);
      continue;
    }
    ep->live_ = std::move(live).value();
  }
}

void UcxTransport::CheckLiveness(Clock::time_point now) {
  const auto timeout = options_.peer_timeout;
  next_liveness_ = now + std::clamp<Clock::duration>(timeout / 8, std::chrono::milliseconds(1),
                                                     std::chrono::milliseconds(50));
  PollSockets();  // handshakes; adopts the connections of endpoints that became ready
  // A snapshot (FailEndpoint changes live_), in a vector kept for its capacity: this runs inside
  // Poll and Wait, which allocate nothing once warm. Taken out, so a nested call gets its own.
  std::vector<UcxEndpoint*> eps;
  eps.swap(liveness_eps_);
  eps.clear();
  for (auto& [id, ep] : live_) eps.push_back(ep);
  CheckEndpointsLiveness(eps, now);
  eps.clear();
  liveness_eps_.swap(eps);
}

void UcxTransport::CheckEndpointsLiveness(const std::vector<UcxEndpoint*>& eps,
                                          Clock::time_point now) {
  const auto timeout = options_.peer_timeout;
  for (UcxEndpoint* ep : eps) {
    if (ep->state_ == UcxEndpoint::State::kHandshaking) {
      if (now <= ep->handshake_deadline_) continue;
      Status s = Timeout((ep->wiring_ ? "ucx wireup with " : "handshake with ") +
                         ep->peer_address_ + " did not finish in time");
      if (ep->server_) last_accept_error_ = s;
      FailEndpoint(ep, s, /*graceful=*/false);
      continue;
    }
    if (ep->live_ == nullptr) continue;  // adopted at the next PollSockets
    if (ep->live_->failed.load(std::memory_order_acquire)) {
      // The control connection ended. Replies the peer sent before it closed travel on UCX's own
      // connections and may arrive after the EOF: an endpoint with work outstanding gets a short
      // grace (what polling the socket used to give by accident) before its Ops fail.
      if (ep->eof_seen_ == Clock::time_point()) ep->eof_seen_ = now;
      const auto grace = std::clamp<Clock::duration>(timeout / 8, std::chrono::milliseconds(1),
                                                     std::chrono::milliseconds(50));
      if (ep->outstanding_ > 0 && now - ep->eof_seen_ < grace) {
        next_liveness_ = std::min(next_liveness_, ep->eof_seen_ + grace);
        continue;
      }
      FailEndpoint(ep,
                   PeerFailure("peer " + ep->peer_address_ + " " + liveness_->ErrorOf(ep->live_)),
                   /*graceful=*/false);
      continue;
    }
    // Silent = nothing heard for peer_timeout while we wait for it. The peer's heartbeat thread
    // pings every peer_timeout/4 and answers ours whatever its process is doing, so silence means
    // the process is stopped, hung or gone; data from it counts as heard too (last_heard_).
    const Clock::time_point heard = std::max(
        ep->last_heard_, Clock::time_point(std::chrono::nanoseconds(ep->live_->heard_ns.load())));
    if (ep->outstanding_ > 0 && now - heard > timeout) {
      FailEndpoint(ep,
                   PeerFailure("peer " + ep->peer_address_ + " did not respond within " +
                               std::to_string(timeout.count()) + " ms (peer_timeout)"),
                   /*graceful=*/false);
    }
  }
}

// ---- public connection API ----

Result<std::string> UcxTransport::Listen(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string host;
  uint16_t port = 0;
  FERRY_RETURN_IF_ERROR(Resolve(address, &ss, &len, &host, &port));
  Guard lock(mu_);
  if (listen_fd_) return InvalidArgument("ucx: already listening on " + listen_address_);
  FERRY_ASSIGN_OR_RETURN(common::Listener listener, common::ListenStream(ss, len, 128));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerKey;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener.fd.get(), &ev) != 0) {
    return IoError("epoll_ctl(ADD listener)", errno);
  }
  listen_fd_ = std::move(listener.fd);
  // The host as the caller named it (a name stays a name), with the bound port.
  listen_address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                    std::to_string(listener.port);
  return listen_address_;
}

Result<std::shared_ptr<Endpoint>> UcxTransport::Accept(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  Lock lock(mu_);
  if (!listen_fd_) return InvalidArgument("ucx: Accept() before Listen()");
  while (true) {
    ProgressLocked();
    PollSockets();
    if (!accepted_.empty()) {
      std::shared_ptr<Endpoint> ep = std::move(accepted_.front());
      accepted_.pop_front();
      return ep;
    }
    if (Clock::now() >= deadline) {
      std::string msg = "ucx: no peer completed a handshake on " + listen_address_ + " within " +
                        std::to_string(timeout.count()) + " ms";
      if (!last_accept_error_.ok()) msg += " (last refused: " + last_accept_error_.ToString() + ")";
      return Timeout(msg);
    }
    SleepOnWorker(lock, deadline);
  }
}

Result<std::shared_ptr<Endpoint>> UcxTransport::Connect(const std::string& address,
                                                        Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string host;
  uint16_t port = 0;
  FERRY_RETURN_IF_ERROR(Resolve(address, &ss, &len, &host, &port));
  if (port == 0) return InvalidArgument("ucx: cannot connect to port 0 ('" + address + "')");
  // TCP connect without the lock (it may take a while).
  FERRY_ASSIGN_OR_RETURN(UniqueFd fd, common::ConnectStream(ss, len, address, deadline));

  Lock lock(mu_);
  if (live_.size() >= options_.max_endpoints) {
    return ResourceExhausted("ucx: max_endpoints (" + std::to_string(options_.max_endpoints) +
                             ") reached");
  }
  auto ep = NewEndpoint(address, /*server=*/false, std::move(fd));
  if (ep->state_ == UcxEndpoint::State::kFailed) return ep->status_;
  ep->handshake_ = std::make_unique<Handshake>(Handshake::Role::kClient, MakeHello(ep->id()));
  ep->handshake_deadline_ = deadline;
  while (auto out = ep->handshake_->TakeOutgoing()) QueueFrame(ep.get(), *out);
  FlushSocket(ep.get());
  while (true) {
    ProgressLocked();
    PollSockets();
    if (ep->state_ == UcxEndpoint::State::kReady) return std::shared_ptr<Endpoint>(ep);
    if (ep->state_ == UcxEndpoint::State::kFailed) {
      return ep->status_.Annotate("connect " + address);
    }
    if (Clock::now() >= deadline) {
      Status s = Timeout("connect " + address + ": no handshake within " +
                         std::to_string(timeout.count()) + " ms");
      FailEndpoint(ep.get(), s, /*graceful=*/false);
      return s;
    }
    SleepOnWorker(lock, deadline);
  }
}

}  // namespace ferry::ucx
