// Transport construction: parameters, device/port, PD, receive pool, CQ, SRQ, QP creation,
// handshake payloads; plus the small public methods and the registry entry.
#include <arpa/inet.h>
#include <openssl/rand.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "transport/common/socket.h"
#include "transport/verbs/errors.h"
#include "transport/verbs/events.h"
#include "transport/verbs/verbs_transport.h"

namespace ferry::verbs {
namespace {

Result<uint32_t> ParamU32(const TransportOptions& o, const std::string& key, uint32_t fallback,
                          uint32_t min, uint32_t max) {
  FERRY_ASSIGN_OR_RETURN(uint64_t v, ParamUint(o, key, fallback));
  if (v < min || v > max) {
    return InvalidArgument("parameter " + key + "=" + std::to_string(v) + " is outside [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

Result<Config> ParseConfig(const TransportOptions& o) {
  static const char* kKnown[] = {
      "connect",      "device",           "port",      "gid_index",          "sq_depth", "cq_depth",
      "recv_buffers", "recv_buffer_size", "reg_cache", "reg_cache_max_bytes"};
  for (const auto& [key, value] : o.params) {
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return key == k; }) == std::end(kKnown)) {
      std::string known;
      for (const char* k : kKnown) known += (known.empty() ? "" : ", ") + std::string(k);
      return InvalidArgument("unknown verbs parameter '" + key + "' (known: " + known + ")");
    }
  }
  Config c;
  if (auto it = o.params.find("connect"); it != o.params.end()) {
    if (it->second == "cm") {
      c.mode = ConnectMode::kCm;
    } else if (it->second == "oob") {
      c.mode = ConnectMode::kOob;
    } else {
      return InvalidArgument("parameter connect='" + it->second + "': use \"cm\" or \"oob\"");
    }
  }
  if (auto it = o.params.find("device"); it != o.params.end()) c.device = it->second;
  FERRY_ASSIGN_OR_RETURN(c.port, ParamU32(o, "port", 0, 0, 255));
  if (o.params.count("gid_index")) {
    FERRY_ASSIGN_OR_RETURN(uint32_t g, ParamU32(o, "gid_index", 0, 0, 65535));
    c.gid_index = g;
  }
  FERRY_ASSIGN_OR_RETURN(c.sq_depth, ParamU32(o, "sq_depth", c.sq_depth, 4, 1u << 15));
  FERRY_ASSIGN_OR_RETURN(c.cq_depth, ParamU32(o, "cq_depth", c.cq_depth, 64, 1u << 22));
  FERRY_ASSIGN_OR_RETURN(c.recv_buffers, ParamU32(o, "recv_buffers", c.recv_buffers, 4, 1u << 16));
  FERRY_ASSIGN_OR_RETURN(c.recv_buffer_size, ParamU32(o, "recv_buffer_size", c.recv_buffer_size,
                                                      kHandshakeFragment, 1u << 20));
  if (auto it = o.params.find("reg_cache"); it != o.params.end()) {
    if (it->second == "on") {
      c.reg_cache = true;
    } else if (it->second == "off") {
      c.reg_cache = false;
    } else {
      return InvalidArgument("parameter reg_cache='" + it->second + "': use \"on\" or \"off\"");
    }
  }
  FERRY_ASSIGN_OR_RETURN(c.reg_cache_max_bytes,
                         ParamUint(o, "reg_cache_max_bytes", c.reg_cache_max_bytes));
  return c;
}

std::vector<uint8_t> EncodePeerData(const PeerData& d) {
  std::vector<uint8_t> out;
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(1, 1);
  put(d.mtu, 1);
  put(d.lid, 2);
  put(d.qpn, 4);
  put(d.psn, 4);
  out.insert(out.end(), d.gid.raw, d.gid.raw + 16);
  put(d.recv_buffer_size, 4);
  put(d.heartbeat_addr, 8);
  put(d.heartbeat_rkey, 4);
  return out;
}

Result<PeerData> DecodePeerData(std::span<const uint8_t> b) {
  constexpr size_t kSize = 44;
  if (b.size() != kSize || b[0] != 1) {
    return ProtocolError("verbs transport data: expected " + std::to_string(kSize) +
                         " bytes of version 1, got " + std::to_string(b.size()) + " bytes");
  }
  size_t pos = 1;
  auto get = [&](int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b[pos + i]) << (8 * i);
    pos += bytes;
    return v;
  };
  PeerData d;
  d.mtu = static_cast<uint8_t>(get(1));
  d.lid = static_cast<uint16_t>(get(2));
  d.qpn = static_cast<uint32_t>(get(4));
  d.psn = static_cast<uint32_t>(get(4));
  std::memcpy(d.gid.raw, b.data() + pos, 16);
  pos += 16;
  d.recv_buffer_size = static_cast<uint32_t>(get(4));
  d.heartbeat_addr = get(8);
  d.heartbeat_rkey = static_cast<uint32_t>(get(4));
  if (d.mtu < IBV_MTU_256 || d.mtu > IBV_MTU_4096) {
    return ProtocolError("verbs transport data: bad MTU code " + std::to_string(d.mtu));
  }
  if (d.qpn > 0xffffff || d.psn > 0xffffff) {
    return ProtocolError("verbs transport data: QPN or PSN wider than 24 bits");
  }
  if (d.recv_buffer_size < kHandshakeFragment || d.recv_buffer_size > (1u << 20)) {
    return ProtocolError("verbs transport data: receive buffer size " +
                         std::to_string(d.recv_buffer_size) + " outside [4096, 1 MiB]");
  }
  return d;
}

VerbsTransport::VerbsTransport(const TransportOptions& options, Config config)
    : options_(options),
      config_(std::move(config)),
      mu_(options.thread_mode),
      advertise_(options.advertise) {}

Result<std::unique_ptr<Transport>> VerbsTransport::Create(const TransportOptions& options) {
  FERRY_RETURN_IF_ERROR(common::CheckThreadMode(options, "verbs"));
  FERRY_ASSIGN_OR_RETURN(Config config, ParseConfig(options));
  std::unique_ptr<VerbsTransport> t(new VerbsTransport(options, std::move(config)));
  FERRY_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transport>(std::move(t));
}

uint8_t VerbsTransport::AckTimeoutExponent() const {
  // The QP gives up after (retry_cnt + 1) = 8 ack timeouts of 4.096 us * 2^t; spend at most half
  // of peer_timeout on that so the error surfaces well within it.
  const double budget_us = static_cast<double>(options_.peer_timeout.count()) * 1000.0 / 2.0 / 8.0;
  int t = static_cast<int>(std::floor(std::log2(std::max(budget_us / 4.096, 1.0))));
  return static_cast<uint8_t>(std::clamp(t, 10, 22));
}

uint32_t CqEntries(uint32_t cq_depth, uint32_t recv_buffers, uint32_t sq, uint32_t max_cqe) {
  return std::min(std::max(cq_depth, recv_buffers + 2 * sq + kCqSlack), max_cqe);
}

uint32_t SendCqBudget(int cqe, uint32_t recv_buffers) {
  // The rest is reserved for receive completions, plus slack for flushed unsignaled WRs of a
  // failing QP.
  const uint32_t reserved = recv_buffers + 32;
  return static_cast<uint32_t>(cqe) > reserved + 16 ? cqe - reserved : 16;
}

uint32_t CqGrowth(uint32_t cqe, uint64_t needed, uint32_t max_cqe) {
  if (needed <= cqe || cqe >= max_cqe) return cqe;
  const uint64_t grown = std::max<uint64_t>(needed, uint64_t{cqe} + cqe / 2);
  return static_cast<uint32_t>(std::min<uint64_t>(grown, max_cqe));
}

uint32_t SendQueueShare(uint32_t cqe, uint32_t recv_buffers, uint64_t reserved, uint32_t sq) {
  const uint64_t held = uint64_t{recv_buffers} + kCqSlack + reserved;
  const uint64_t room = cqe > held ? cqe - held : 0;
  const uint32_t share = static_cast<uint32_t>(std::min<uint64_t>(room, sq));
  return std::max(share, std::min(sq, kMinSendShare));
}

// Each step creates the next verbs objects in their declaration order (verbs_transport.h).
Status VerbsTransport::Init() {
  FERRY_RETURN_IF_ERROR(OpenDevice());
  FERRY_RETURN_IF_ERROR(CreateMemory());
  FERRY_RETURN_IF_ERROR(CreateQueues());
  if (config_.mode == ConnectMode::kCm) {
    cm_channel_ = CmEventChannel(rdma_create_event_channel());
    if (!cm_channel_) return VerbsError("rdma_create_event_channel", errno);
    if (!SetNonBlocking(cm_channel_->fd)) return IoError("fcntl(rdma_cm channel)", errno);
  }
  inbox_ = AsyncHub::Get().Subscribe(ctx_);
  wake_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) return IoError("verbs: eventfd", errno);
  FillCapabilities();
  if (options_.progress_thread) {
    progress_thread_ = std::thread([this] { ProgressThreadMain(); });
  }
  return Status::Ok();
}

// The device list, the chosen device and port, and the device's limits.
Status VerbsTransport::OpenDevice() {
  int n = 0;
  ibv_context** list = rdma_get_devices(&n);
  if (list == nullptr) return VerbsError("rdma_get_devices", errno);
  devices_ = DeviceList(list, n);
  FERRY_ASSIGN_OR_RETURN(ctx_, SelectDevice(devices_, config_.device));
  FERRY_ASSIGN_OR_RETURN(port_, SelectPort(ctx_, config_.port, config_.gid_index));
  FERRY_ASSIGN_OR_RETURN(limits_, QueryLimits(ctx_));
  return Status::Ok();
}

// The PD and what is registered for the transport's lifetime: the receive pool, the heartbeat
// word; and the registration cache.
Status VerbsTransport::CreateMemory() {
  pd_ = ProtectionDomain(ibv_alloc_pd(ctx_));
  if (!pd_) return VerbsError("ibv_alloc_pd(" + port_.device + ")", errno);
  const uint32_t buffers = std::min(config_.recv_buffers, limits_.max_srq_wr);
  FERRY_ASSIGN_OR_RETURN(pool_,
                         RecvPool::Create(pd_.get(), &memlock_, buffers, config_.recv_buffer_size));
  FERRY_RETURN_IF_ERROR(memlock_.Reserve(8, "the heartbeat word"));
  hb_word_ = std::make_unique<uint64_t>(0);
  hb_mr_ = MemoryRegistration(ibv_reg_mr(pd_.get(), hb_word_.get(), sizeof(uint64_t),
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!hb_mr_) return VerbsError("ibv_reg_mr(heartbeat word)", errno);
  if (config_.reg_cache) {
    reg_cache_ = RegCache::Create(pd_.get(), &memlock_, config_.reg_cache_max_bytes);
  }
  return Status::Ok();
}

// The completion channel and CQ, the SRQ filled with the whole receive pool, and the SGE and
// inline limits (probed with a QP on that CQ). Sets stats_.sq_depth, which CreateQp uses.
Status VerbsTransport::CreateQueues() {
  channel_ = CompletionChannel(ibv_create_comp_channel(ctx_));
  if (!channel_) return VerbsError("ibv_create_comp_channel", errno);
  if (!SetNonBlocking(channel_->fd)) return IoError("fcntl(completion channel)", errno);
  const uint32_t sq = std::min(config_.sq_depth, limits_.max_qp_wr);
  const uint32_t cqe = CqEntries(config_.cq_depth, pool_.count(), sq, limits_.max_cqe);
  cq_ = CompletionQueue(ibv_create_cq(ctx_, static_cast<int>(cqe), nullptr, channel_.get(), 0));
  if (!cq_) return VerbsError("ibv_create_cq(" + std::to_string(cqe) + ")", errno);
  cq_budget_ = SendCqBudget(cq_->cqe, pool_.count());
  stats_.cq_entries = static_cast<uint32_t>(cq_->cqe);

  ibv_srq_init_attr sattr{};
  sattr.attr.max_wr = pool_.count();
  sattr.attr.max_sge = 1;
  srq_ = SharedReceiveQueue(ibv_create_srq(pd_.get(), &sattr));
  if (!srq_) return VerbsError("ibv_create_srq(" + std::to_string(pool_.count()) + ")", errno);
  for (uint32_t i = 0; i < pool_.count(); ++i) reposts_.push_back(i);
  FlushRepostsLocked();
  if (!fatal_.ok()) return fatal_;

  max_send_sge_ = std::max<uint32_t>(1, limits_.max_sge);
  max_read_sge_ = std::max<uint32_t>(1, std::min(max_send_sge_, limits_.max_sge_rd));
  max_inline_ = ProbeMaxInline(ctx_, pd_.get(), cq_.get(), max_send_sge_);
  stats_.sq_depth = sq;
  return Status::Ok();
}

void VerbsTransport::FillCapabilities() {
  caps_.send_recv = caps_.write = caps_.read = true;
  caps_.sparse_write = caps_.sparse_read = true;
  caps_.notify = true;
  caps_.zero_copy_sparse = true;
  caps_.shared_recv = true;
  caps_.target_checks = true;         // the HCA checks rkey, bounds and rights (REM_ACCESS_ERR)
  caps_.final_deregistration = true;  // ibv_dereg_mr invalidates the rkey
  // Not capped at the port's max_msg_sz (8 MiB on rxe): the WR planner cuts every op into WRs
  // of at most max_msg_sz (wr_plan.h), so one Op may be as large as the peer accepts, as on
  // the other backends (a 100 000 x 256 B sparse op is 25.6 MB).
  caps_.max_message_size = options_.max_message_size;
  caps_.max_segments = options_.max_segments;

  stats_.max_inline = max_inline_;
  stats_.max_send_sge = max_send_sge_;
  stats_.max_read_sge = max_read_sge_;
  stats_.gid_index = port_.gid_index;
  stats_.gid = GidToString(port_.gid);
  stats_.device = port_.device + ":" + std::to_string(port_.port);
}

VerbsTransport::~VerbsTransport() {
  stop_ = true;
  if (progress_thread_.joinable()) progress_thread_.join();
  std::lock_guard<common::MaybeMutex> lock(mu_);
  oob_sessions_.clear();
  for (auto& [id, ep] : endpoints_) {
    FailEndpointLocked(ep.get(), Cancelled("transport destroyed"));
    ep->lingering_ = false;
    ep->ReleaseResources();
  }
  accepted_.clear();
  endpoints_.clear();
  by_qpn_.clear();
  records_.clear();
  if (cq_ && cq_events_unacked_ > 0) ibv_ack_cq_events(cq_.get(), cq_events_unacked_);
  if (inbox_) AsyncHub::Get().Unsubscribe(ctx_, inbox_);
  // Idle cached MRs go now, before the PD (a member) is freed.
  if (reg_cache_) reg_cache_->Close();
}

Result<QueuePair> VerbsTransport::CreateQp(VerbsEndpoint* ep, rdma_cm_id* cm_id) {
  // The CQ grows with the endpoints. Past the device's max_cqe (or on a device that cannot
  // resize) a new QP gets the send slots that still fit, and at least kMinSendShare: endpoints
  // are never refused, and each one past the CQ's capacity overcommits it by that little only.
  const uint32_t sq = stats_.sq_depth;
  const uint32_t target =
      CqGrowth(static_cast<uint32_t>(cq_->cqe),
               uint64_t{pool_.count()} + kCqSlack + sq_reserved_ + sq, limits_.max_cqe);
  if (target > static_cast<uint32_t>(cq_->cqe)) {
    const int before = cq_->cqe;
    if (ibv_resize_cq(cq_.get(), static_cast<int>(target)) == 0 && cq_->cqe > before) {
      cq_budget_ += static_cast<uint32_t>(cq_->cqe - before);
      stats_.cq_resizes++;
    }
    stats_.cq_entries = static_cast<uint32_t>(cq_->cqe);
  }
  const uint32_t share =
      SendQueueShare(static_cast<uint32_t>(cq_->cqe), pool_.count(), sq_reserved_, sq);
  if (share < sq) stats_.send_shares_cut++;
  ibv_qp_init_attr init{};
  init.send_cq = cq_.get();
  init.recv_cq = cq_.get();
  init.srq = srq_.get();
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;  // selective signaling: one completion per Op
  init.cap.max_send_wr = stats_.sq_depth;
  init.cap.max_send_sge = max_send_sge_;
  init.cap.max_inline_data = max_inline_;
  init.cap.max_recv_wr = 0;
  init.cap.max_recv_sge = 0;
  QueuePair qp;
  if (cm_id != nullptr) {
    if (rdma_create_qp(cm_id, pd_.get(), &init) != 0) return VerbsError("rdma_create_qp", errno);
    qp = QueuePair(cm_id);
  } else {
    qp = QueuePair(ibv_create_qp(pd_.get(), &init));
    if (!qp) return VerbsError("ibv_create_qp", errno);
  }
  ep->sq_depth_ = share;
  sq_reserved_ += share;
  return qp;
}

void VerbsTransport::FillLocalData(VerbsEndpoint* ep) {
  PeerData& d = ep->local_;
  d.mtu = static_cast<uint8_t>(port_.active_mtu);
  d.lid = port_.lid;
  d.qpn = ep->qpn();
  uint32_t psn = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&psn), sizeof(psn)) != 1) psn = 0x1234;
  d.psn = psn & 0xffffff;
  d.gid = port_.gid;
  d.recv_buffer_size = pool_.size();
  d.heartbeat_addr = reinterpret_cast<uintptr_t>(hb_word_.get());
  d.heartbeat_rkey = hb_mr_->rkey;
}

HelloParams VerbsTransport::MakeHello(const PeerData& local) const {
  HelloParams h;
  h.backend = "verbs";
  h.secret = options_.secret;
  h.regions = advertise_;
  h.info = options_.hello_info;
  h.transport_data = EncodePeerData(local);
  h.max_message_size = caps_.max_message_size;
  h.max_segments = caps_.max_segments;
  return h;
}

Status VerbsTransport::ApplyPeerHello(VerbsEndpoint* ep, const PeerHello& hello) {
  FERRY_ASSIGN_OR_RETURN(ep->peer_, DecodePeerData(hello.transport_data));
  ep->peer_regions_ = hello.regions;
  ep->peer_info_ = hello.info;
  ep->peer_max_message_size_ = hello.max_message_size;
  return Status::Ok();
}

std::shared_ptr<VerbsEndpoint> VerbsTransport::NewEndpointLocked(std::string peer) {
  auto ep = std::make_shared<VerbsEndpoint>(this, next_endpoint_id_++, std::move(peer));
  endpoints_[ep->id()] = ep;
  return ep;
}

void VerbsTransport::DropEndpointLocked(VerbsEndpoint* ep) {
  if (ep->qp_) by_qpn_.erase(ep->qpn());
  ep->ReleaseResources();
  endpoints_.erase(ep->id());
}

VerbsEndpoint* VerbsTransport::EndpointByQpnLocked(uint32_t qpn) {
  auto it = by_qpn_.find(qpn);
  return it == by_qpn_.end() ? nullptr : it->second;
}

std::vector<DeviceInfo> VerbsTransport::devices() const {
  return ListRdmaDevices();
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::RegisterMemory(void* addr, size_t length,
                                                                     uint32_t access) {
  return RegisterRegion(pd_.get(), &memlock_, reg_cache_.get(), addr, length, access);
}

void VerbsTransport::Advertise(std::vector<RemoteRegion> regions) {
  std::lock_guard<common::MaybeMutex> lock(mu_);
  advertise_ = std::move(regions);
}

Stats VerbsTransport::stats() const {
  std::lock_guard<common::MaybeMutex> lock(mu_);
  return stats_;
}

RegCacheStats VerbsTransport::reg_cache_stats() const {
  if (reg_cache_) return reg_cache_->stats();
  RegCacheStats off;
  off.memlock_bytes = memlock_.used();
  return off;
}

std::optional<RegCacheStats> VerbsRegCacheStats(const Transport& transport) {
  const auto* t = dynamic_cast<const VerbsTransport*>(&transport);
  if (t == nullptr) return std::nullopt;
  return t->reg_cache_stats();
}

std::optional<Stats> VerbsStats(const Transport& transport) {
  const auto* t = dynamic_cast<const VerbsTransport*>(&transport);
  if (t == nullptr) return std::nullopt;
  return t->stats();
}

Result<std::string> VerbsTransport::Listen(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  FERRY_RETURN_IF_ERROR(common::SplitHostPort(address, &host, &port));
  {
    std::lock_guard<common::MaybeMutex> lock(mu_);
    if (listen_id_ || listen_fd_) {
      return InvalidArgument("already listening on " + listen_address_);
    }
  }
  return config_.mode == ConnectMode::kCm ? ListenCm(host, port) : ListenOob(host, port);
}

Result<std::shared_ptr<Endpoint>> VerbsTransport::Connect(const std::string& address,
                                                          Millis timeout) {
  std::string host;
  uint16_t port = 0;
  FERRY_RETURN_IF_ERROR(common::SplitHostPort(address, &host, &port));
  if (port == 0) return InvalidArgument("connect " + address + ": port 0");
  return config_.mode == ConnectMode::kCm ? ConnectCm(host, port, address, timeout)
                                          : ConnectOob(host, port, address, timeout);
}

// ---- Endpoint ----

VerbsEndpoint::VerbsEndpoint(VerbsTransport* transport, uint64_t id, std::string peer)
    : t_(transport), last_heard_(Clock::now()) {
  id_ = id;
  peer_address_ = std::move(peer);
}

VerbsEndpoint::~VerbsEndpoint() = default;

void VerbsEndpoint::ReleaseResources() {
  // Its send-queue share of the CQ returns with the QP: a failed QP's flush completions were
  // polled already (the failure was seen on one, and the poll drains the CQ).
  if (qp_) t_->sq_reserved_ -= sq_depth_;
  qp_.reset();  // the QP before its cm id (rdma_destroy_qp before rdma_destroy_id)
  cm_id_.reset();
  control_fd_.reset();
}

Status VerbsEndpoint::status() const {
  std::lock_guard<common::MaybeMutex> lock(t_->mu_);
  return status_;
}

Result<std::unique_ptr<RemoteKey>> VerbsEndpoint::Import(const RemoteRegion& region) {
  std::lock_guard<common::MaybeMutex> lock(t_->mu_);
  if (!status_.ok()) return status_;
  if (region.rkey.size() != 4) {
    return InvalidArgument("remote region key is " + std::to_string(region.rkey.size()) +
                           " bytes; a verbs rkey is 4 (descriptor from another backend?)");
  }
  if ((region.access & ~static_cast<uint32_t>(kAccessRemote)) != 0) {
    return InvalidArgument("remote region has unknown access bits " +
                           std::to_string(region.access));
  }
  if (region.addr + region.length < region.addr) {
    return InvalidArgument("remote region wraps around the address space");
  }
  const uint32_t rkey =
      static_cast<uint32_t>(region.rkey[0]) | static_cast<uint32_t>(region.rkey[1]) << 8 |
      static_cast<uint32_t>(region.rkey[2]) << 16 | static_cast<uint32_t>(region.rkey[3]) << 24;
  return std::unique_ptr<RemoteKey>(new VerbsRemoteKey(region, rkey, id_));
}

void VerbsEndpoint::Close() {
  std::lock_guard<common::MaybeMutex> lock(t_->mu_);
  t_->CloseEndpointLocked(this);
}

}  // namespace ferry::verbs

namespace ferry {

const BackendEntry& VerbsBackendEntry() {
  static const BackendEntry entry{"verbs", 30, &verbs::ProbeVerbs, &verbs::VerbsTransport::Create};
  return entry;
}

}  // namespace ferry
