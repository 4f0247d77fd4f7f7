// tcp connections: listening, accepting, connecting, the handshake (u32 LE length-prefixed
// FlatBuffers frames driven by ferry::Handshake), and failing a connection.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transport/common/socket.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

using common::FormatAddress;
using common::SocketError;

void TcpTransport::SetUserTimeout(int fd, Millis timeout) {
  const auto ms = static_cast<unsigned int>(timeout.count());
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
}

void TcpTransport::ConfigureSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // The kernel gives up on unacknowledged data after peer_timeout as well, so a black-holed
  // link fails even while our own frames are queued. Until the handshake is done it gets the
  // handshake's own bound (HandshakeBound: a hello may wait behind a 3 s fallback RTO);
  // HandshakeFrame narrows it to peer_timeout.
  SetUserTimeout(fd, HandshakeBound(options_.peer_timeout));
  if (params_.sndbuf > 0) {
    int v = static_cast<int>(params_.sndbuf);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
  }
  if (params_.rcvbuf > 0) {
    int v = static_cast<int>(params_.rcvbuf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
  }
}

// Resolves "host:port" (numeric or a name such as localhost) to the first stream address.
static Status ResolveAddress(const std::string& address, bool passive, sockaddr_storage* out,
                             socklen_t* len) {
  std::string host;
  uint16_t port = 0;
  FERRY_RETURN_IF_ERROR(common::SplitHostPort(address, &host, &port));
  return common::Resolve(host, port, passive, out, len);
}

Result<std::string> TcpTransport::Listen(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  FERRY_RETURN_IF_ERROR(ResolveAddress(address, true, &ss, &len));
  auto listener = common::ListenStream(ss, len, SOMAXCONN);
  if (!listener.ok()) return listener.status().Annotate("tcp listen " + address);
  Lock lk(mu_);
  const uint64_t id = next_id_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, listener->fd.get(), &ev) != 0) {
    return IoError("tcp listen: epoll_ctl", errno);
  }
  listeners_.emplace_back(id, std::move(listener->fd));
  return FormatAddress(listener->bound);
}

Result<std::shared_ptr<Endpoint>> TcpTransport::Accept(Millis timeout) {
  Lock lk(mu_);
  if (listeners_.empty()) return InvalidArgument("tcp accept: call Listen() first");
  const auto deadline = Clock::now() + timeout;
  if (!DriveUntil(lk, deadline, [&] { return !accepted_.empty(); })) {
    std::string why = "tcp accept: no peer completed a handshake within " +
                      std::to_string(timeout.count()) + " ms";
    if (!last_refusal_.empty()) why += " (last refused: " + last_refusal_ + ")";
    return Timeout(why);
  }
  std::shared_ptr<Endpoint> ep = std::move(accepted_.front());
  accepted_.pop_front();
  return ep;
}

Result<std::shared_ptr<Endpoint>> TcpTransport::Connect(const std::string& address,
                                                        Millis timeout) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  FERRY_RETURN_IF_ERROR(ResolveAddress(address, false, &ss, &len));
  const auto deadline = Clock::now() + timeout;
  Lock lk(mu_);
  if (open_conns_ >= options_.max_endpoints) {
    return ResourceExhausted("tcp connect " + address + ": max_endpoints (" +
                             std::to_string(options_.max_endpoints) + ") reached");
  }
  UniqueFd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return IoError("tcp connect: socket", errno);
  ConfigureSocket(fd.get());
  int rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len);
  if (rc != 0 && errno != EINPROGRESS) return SocketError("tcp connect " + address, errno);
  Conn* c = NewConn(std::move(fd), false, address);
  c->deadline = deadline;
  if (rc == 0) {
    StartHandshake(*c);
  } else {
    SetWantOut(*c, true);
  }
  DriveUntil(lk, deadline,
             [&] { return c->state == Conn::State::kOpen || c->state == Conn::State::kFailed; });
  if (c->state == Conn::State::kOpen || c->own_handle) {
    std::shared_ptr<Endpoint> ep = std::move(c->own_handle);
    return ep;
  }
  Status why = c->state == Conn::State::kFailed
                   ? c->status
                   : Timeout("tcp connect " + address + ": no handshake within " +
                             std::to_string(timeout.count()) + " ms");
  ReleaseConn(c);
  return why;
}

Conn* TcpTransport::NewConn(UniqueFd fd, bool server, std::string peer_address) {
  auto owned = std::make_unique<Conn>();
  Conn* c = owned.get();
  c->id = next_id_++;
  c->fd = std::move(fd);
  c->server = server;
  c->peer_address = std::move(peer_address);
  c->last_rx = c->last_tx = Clock::now();
  c->deadline = c->last_rx + HandshakeBound(options_.peer_timeout);  // Connect narrows it
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = c->id;
  epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev);
  conns_.emplace(c->id, std::move(owned));
  ++open_conns_;
  return c;
}

void TcpTransport::AcceptNew(int listen_fd) {
  // EAGAIN, or EMFILE and friends: the listener stays; retry on the next event.
  (void)common::AcceptEach(listen_fd, [&](UniqueFd fd, const sockaddr_storage& peer) {
    if (open_conns_ >= options_.max_endpoints) {
      last_refusal_ = "max_endpoints (" + std::to_string(options_.max_endpoints) + ") reached";
      return;  // closing the socket tells the client
    }
    ConfigureSocket(fd.get());
    Conn* c = NewConn(std::move(fd), true, FormatAddress(peer));
    StartHandshake(*c);
  });
}

void TcpTransport::QueueHandshakeOut(Conn& c) {
  while (auto frame = c.hs->TakeOutgoing()) {
    const uint32_t n = static_cast<uint32_t>(frame->size());
    uint8_t len[4];
    std::memcpy(len, &n, sizeof(n));  // little-endian (see wire.h)
    c.hs_out.insert(c.hs_out.end(), len, len + 4);
    c.hs_out.insert(c.hs_out.end(), frame->begin(), frame->end());
  }
}

void TcpTransport::StartHandshake(Conn& c) {
  HelloParams p;
  p.backend = "tcp";
  p.secret = options_.secret;
  p.regions = advertise_;
  p.info = options_.hello_info;
  p.max_message_size = options_.max_message_size;
  p.max_segments = options_.max_segments;
  c.hs = std::make_unique<Handshake>(c.server ? Handshake::Role::kServer : Handshake::Role::kClient,
                                     std::move(p));
  c.state = Conn::State::kHandshake;
  QueueHandshakeOut(c);
  FlushTx(c);
}

void TcpTransport::HandleEvent(Conn& c, uint32_t events) {
  if (c.state == Conn::State::kFailed) return;
  if (c.state == Conn::State::kConnecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      Fail(c, SocketError("tcp connect " + c.peer_address, err));
      return;
    }
    SetWantOut(c, false);
    StartHandshake(c);
    return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    if (c.state == Conn::State::kHandshake) HandshakeRead(c);
    if (c.state == Conn::State::kOpen) ReadData(c);
  }
  if (c.state != Conn::State::kFailed && (events & EPOLLOUT)) FlushTx(c);
}

void TcpTransport::HandshakeRead(Conn& c) {
  while (c.state == Conn::State::kHandshake) {
    const bool want_len = c.hs_len_done < 4;
    uint8_t* dst = want_len ? c.hs_len + c.hs_len_done : c.hs_in.data() + c.hs_in_done;
    const size_t want = want_len ? 4 - c.hs_len_done : c.hs_in.size() - c.hs_in_done;
    ssize_t n = recv(c.fd.get(), dst, want, 0);
    if (n == 0) {
      Fail(c,
           PeerFailure("peer " + c.peer_address + " closed the connection during the handshake"));
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        Fail(c, SocketError("tcp handshake with " + c.peer_address, errno));
      }
      return;
    }
    c.last_rx = Clock::now();
    if (want_len) {
      c.hs_len_done += static_cast<size_t>(n);
      if (c.hs_len_done < 4) continue;
      uint32_t len;
      std::memcpy(&len, c.hs_len, sizeof(len));
      if (len == 0 || len > kMaxHandshakeFrame) {
        Fail(c, ProtocolError("handshake frame of " + std::to_string(len) + " bytes from " +
                              c.peer_address + " (limit " + std::to_string(kMaxHandshakeFrame) +
                              "): not a Ferry tcp peer"));
        return;
      }
      c.hs_in.assign(len, 0);
      c.hs_in_done = 0;
      continue;
    }
    c.hs_in_done += static_cast<size_t>(n);
    if (c.hs_in_done < c.hs_in.size()) continue;
    c.hs_len_done = 0;
    if (!HandshakeFrame(c).ok()) return;
  }
}

Status TcpTransport::HandshakeFrame(Conn& c) {
  Status s = c.hs->OnFrame(c.hs_in);
  QueueHandshakeOut(c);
  FlushTx(c);  // the next handshake frame, or a Reject explaining the failure (best effort)
  if (!s.ok()) {
    Fail(c, s.Annotate("tcp handshake with " + c.peer_address));
    return s;
  }
  if (!c.hs->done() || c.state != Conn::State::kHandshake) return Status::Ok();
  c.peer = c.hs->peer();
  c.peer_max_message = c.peer.max_message_size;
  c.peer_max_segments = c.peer.max_segments;
  c.hs.reset();
  c.hs_in = std::vector<uint8_t>();
  c.state = Conn::State::kOpen;
  c.last_rx = Clock::now();
  SetUserTimeout(c.fd.get(), options_.peer_timeout);
  // The handle exists before any data frame is read, so every completion can name it.
  auto handle = std::make_shared<TcpEndpoint>(this, &c);
  c.handle = handle.get();
  if (c.server) {
    accepted_.push_back(std::move(handle));
  } else {
    c.own_handle = std::move(handle);
  }
  cv_.notify_all();
  return Status::Ok();
}

void TcpTransport::SetWantOut(Conn& c, bool on) {
  if (c.want_out == on || !c.fd) return;
  c.want_out = on;
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void TcpTransport::Fail(Conn& c, Status why) {
  if (c.state == Conn::State::kFailed) return;
  if (c.server && c.state != Conn::State::kOpen) last_refusal_ = why.ToString();
  c.state = Conn::State::kFailed;
  c.status = why;
  if (c.fd) {
    epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    c.fd.reset();
    --open_conns_;
  }
  Endpoint* ep = c.handle;
  auto error = [&](OpType type, uint64_t context) {
    Completion done;
    done.context = context;
    done.type = type;
    done.code = why.code();
    done.ep = ep;
    done.error = why.message();
    Complete(std::move(done));
  };
  while (!c.tx.empty()) {
    TxItem item = c.tx.pop();
    if (item.complete_send) error(OpType::kSend, item.context);
    if (item.pin_key != 0) Unpin(item.pin_key);
  }
  while (!c.pending.empty()) {
    PendingOp p = c.pending.pop();
    error(p.type, p.context);
  }
  while (!c.recvs.empty()) error(OpType::kRecv, c.recvs.pop().context);
  if (c.rx.has_recv) error(OpType::kRecv, c.rx.recv.context);
  c.rx.has_recv = c.rx.unexpected = c.rx.recv_too_small = false;
  c.rx.unexpected_buf = std::vector<uint8_t>();
  c.rx.region_key = 0;
  c.rx.phase = Rx::Phase::kHeader;
  c.unexpected.clear();
  c.unexpected_bytes = 0;
  c.hs.reset();
  c.hs_out.clear();
  c.hs_out_done = 0;
  if (c.server && c.handle == nullptr) doomed_.push_back(c.id);
  // An endpoint with nothing posted fails without a completion: wake Wait() anyway, so that an
  // idle loop watching its endpoints' status (a control client, the coordinator) sees it at once
  // instead of after its wait's timeout (measured: up to 100 ms more for a control client).
  wake_requested_.store(true, std::memory_order_release);
  cv_.notify_all();
}

void TcpTransport::Sweep() {
  for (uint64_t id : doomed_) conns_.erase(id);
  doomed_.clear();
}

void TcpTransport::ReleaseConn(Conn* c) {
  c->handle = nullptr;  // completions from here on name no endpoint: the handle is going away
  Fail(*c, Cancelled("endpoint released"));
  for (size_t i = 0; i < doomed_.size(); ++i) {
    if (doomed_[i] == c->id) doomed_.erase(doomed_.begin() + static_cast<ptrdiff_t>(i));
  }
  conns_.erase(c->id);
}

TcpEndpoint::TcpEndpoint(TcpTransport* t, Conn* c) : transport_(t), conn_(c) {
  id_ = c->id;
  peer_address_ = c->peer_address;
  peer_regions_ = c->peer.regions;
  peer_info_ = c->peer.info;
}

TcpEndpoint::~TcpEndpoint() {
  if (transport_ == nullptr) return;
  TcpTransport::Lock lk(transport_->mu_);
  if (conn_ != nullptr) transport_->ReleaseConn(conn_);
}

Status TcpEndpoint::status() const {
  if (transport_ == nullptr) return Cancelled("the transport was destroyed");
  TcpTransport::Lock lk(transport_->mu_);
  if (conn_ == nullptr) return Cancelled("the transport was destroyed");
  return conn_->state == Conn::State::kFailed ? conn_->status : Status::Ok();
}

void TcpEndpoint::Close() {
  if (transport_ == nullptr) return;
  TcpTransport::Lock lk(transport_->mu_);
  if (conn_ != nullptr) transport_->Fail(*conn_, Cancelled("endpoint closed by this side"));
}

Result<std::unique_ptr<RemoteKey>> TcpEndpoint::Import(const RemoteRegion& region) {
  if (region.rkey.size() != sizeof(uint64_t)) {
    return InvalidArgument("tcp import: remote key of " + std::to_string(region.rkey.size()) +
                           " bytes; a tcp key has 8 (descriptor from another backend?)");
  }
  uint64_t key;
  std::memcpy(&key, region.rkey.data(), sizeof(key));
  return std::unique_ptr<RemoteKey>(std::make_unique<TcpRemoteKey>(region, key, conn_));
}

}  // namespace ferry::tcp
