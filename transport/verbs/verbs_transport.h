// The verbs backend: ferry::Transport over libibverbs + librdmacm, RC queue pairs.
//
// Contract: transport/transport.h. Internal to transport/verbs/; nothing outside includes it
// (tests/verbs/ does, for white-box checks through VerbsStats()).
//
// Design in one page:
//  - One device port per transport (device.h). One PD, one CQ with a completion channel, one SRQ
//    holding a registered receive pool (memory.h) shared by every endpoint: memory stays
//    O(pool) however many endpoints there are. Each endpoint is one RC QP on that CQ/SRQ.
//  - Connection modes (params {"connect": "cm" | "oob"}):
//      cm  (connect_cm.cc): librdmacm resolves, connects and moves the QP through its states.
//          The Ferry handshake then runs as SEND messages on the QP (control tag, fragmented
//          to 4 KiB), before the endpoint is handed out. rdma_cm private data is not used: its
//          56 bytes cannot hold region lists, and one path for all frames is simpler.
//      oob (connect_oob.cc): a TCP control connection carries the handshake; its transport_data
//          holds QPN, PSN, GID, LID, MTU and our receive-buffer size; the QPs are then moved to
//          RTR/RTS by hand with path MTU = min of both ports' active MTU. The TCP connection
//          stays open as a liveness backstop (EOF fails the endpoint).
//  - Two-sided messages (datapath.cc): SEND_WITH_IMM fragments straight from the user's region
//    (zero copy, inline when small); each fragment lands in a pool buffer; user kRecv ops are
//    matched in posting order and the bytes are copied from the pool into the user's buffer, then
//    the pool buffer is reposted. Unmatched fragments wait in their pool buffer; when the pool is
//    empty the sender is held back by RNR retries (rnr_retry = 7, unlimited) until receives are
//    posted: that is the flow control.
//  - One-sided: WRITE / READ / WRITE_WITH_IMM (kOpNotify), sparse lists planned by wr_plan.h,
//    a signaled completion per post-list and every 16th WR (RC completes in order: it retires
//    every WR before it, whatever Op), post-lists bounded by SQ depth and CQ budget; the rest
//    waits in a per-endpoint backlog that Poll() drains.
//  - Registration (memory.h, reg_cache.h): remote-access regions get their own MR; local-access
//    ones lease a refcounted cached MR (params reg_cache=on|off, reg_cache_max_bytes).
//  - Failures: error completions, async events (events.cc), rdma_cm DISCONNECTED, control-socket
//    EOF and an unanswered heartbeat (an 8-byte RDMA WRITE to the peer's heartbeat word when the
//    endpoint is idle) fail the endpoint; QP ack timeout/retry_cnt are set from peer_timeout.
//
// Locking: one mutex (mu_) guards all transport and endpoint state; Accept/Connect/Wait release
// it while they sleep. Poll only tries it (a thread holding it is driving progress). Under
// ThreadMode::kSingle mu_ is a no-op (common::MaybeMutex). Completions are queued in ready_ and
// handed out by Poll().
//
// Per-operation cost: records of posted Ops are pooled (their WR plans keep their capacity; an
// id names the pool slot and a generation, so a completion finds its record without a map), the
// queues are rings, the post-list and repost buffers are members, ownership checks compare
// typeids, and liveness stamps and gates use the coarse clock (common/coarse_clock.h). Once
// warm, Post and Poll allocate nothing; error texts are built only on failure.
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/backend.h"
#include "transport/common/maybe_mutex.h"
#include "transport/common/ring.h"
#include "transport/handshake.h"
#include "transport/verbs/device.h"
#include "transport/verbs/errors.h"
#include "transport/verbs/memory.h"
#include "transport/verbs/objects.h"
#include "transport/verbs/wr_plan.h"

namespace ferry::verbs {

using Clock = std::chrono::steady_clock;

enum class ConnectMode { kCm, kOob };

struct Config {
  ConnectMode mode = ConnectMode::kCm;
  std::string device;
  uint64_t port = 0;       // 0: first ACTIVE port
  int64_t gid_index = -1;  // -1: automatic
  uint32_t sq_depth = 256;
  uint32_t cq_depth = 8192;
  uint32_t recv_buffers = 256;
  uint32_t recv_buffer_size = 8192;
  bool reg_cache = true;                        // params reg_cache=on|off (reg_cache.h)
  uint64_t reg_cache_max_bytes = 256ull << 20;  // idle cached bytes kept (LRU beyond)
};
Result<Config> ParseConfig(const TransportOptions& options);

// Queue sizing (setup.cc). CQ entries: cq_depth, raised to hold a completion for every receive
// buffer, two per send-queue slot and 64 more, within the device's max_cqe.
uint32_t CqEntries(uint32_t cq_depth, uint32_t recv_buffers, uint32_t sq, uint32_t max_cqe);
// The CQ entries signaled send WRs may hold (cq_budget_) out of the CQ's actual size `cqe`:
// all but recv_buffers + 32, and at least 16.
uint32_t SendCqBudget(int cqe, uint32_t recv_buffers);
// Room for every send queue on the shared CQ (CreateQp). A posted send WR makes a CQE when it is
// signaled, and every one does, signaled or not, when its QP fails and flushes: the CQ must hold
// the receive pool, kCqSlack and every live QP's send-queue share at once, or a failure of many
// QPs with full send queues overflows it. CqGrowth: the size to resize a CQ of `cqe` entries to
// so that it holds `needed` (at least half as much again, to amortise; within max_cqe); `cqe`
// when it already does. SendQueueShare: the send slots a new QP may use on a CQ of `cqe` entries
// when live QPs hold `reserved`: what still fits, at most `sq`, and at least kMinSendShare (or
// `sq` when smaller) even when nothing fits: a QP past the CQ's capacity overcommits it by that.
inline constexpr uint32_t kCqSlack = 64;
inline constexpr uint32_t kMinSendShare = 16;
uint32_t CqGrowth(uint32_t cqe, uint64_t needed, uint32_t max_cqe);
uint32_t SendQueueShare(uint32_t cqe, uint32_t recv_buffers, uint64_t reserved, uint32_t sq);

// Counters for tests and ferry-info; read with VerbsStats().
struct Stats {
  uint64_t post_calls = 0;  // ibv_post_send calls
  // The longest ibv_post_send call (coarse clock, ms). On a hardware HCA it is microseconds; soft
  // RoCE (rxe) runs its protocol inside the call and can stay there long (datapath.cc).
  uint64_t longest_post_ms = 0;
  uint64_t wrs_posted = 0;
  uint64_t rdma_reads = 0;  // of them RDMA READs (one per remote-contiguous run of a sparse read)
  uint64_t inline_wrs = 0;
  uint64_t signaled_wrs = 0;
  uint64_t max_sges_in_wr = 0;
  uint64_t recv_reposts = 0;
  uint64_t backlog_waits = 0;  // times the backlog could not be fully posted (SQ/CQ full)
  uint32_t max_inline = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_read_sge = 0;
  uint32_t sq_depth = 0;
  uint32_t cq_entries = 0;       // the shared CQ's size now (it grows with the endpoints)
  uint64_t cq_resizes = 0;       // ibv_resize_cq calls that grew it
  uint64_t send_shares_cut = 0;  // QPs given fewer send slots than sq_depth (the CQ was full)
  int gid_index = -1;
  std::string gid;
  std::string device;
  int path_mtu = 0;  // bytes, of the most recently connected endpoint
};
// Stats of a transport created by the verbs backend; nullopt for any other transport.
std::optional<Stats> VerbsStats(const Transport& transport);
// Registration-cache counters (reg_cache.h) of a verbs transport; nullopt for any other.
std::optional<RegCacheStats> VerbsRegCacheStats(const Transport& transport);

// What each side tells the other about its QP (handshake transport_data), little-endian:
//   struct { u8 version=1; u8 mtu; u16 lid; u32 qpn; u32 psn; u8 gid[16];
//            u32 recv_buffer_size; u64 heartbeat_addr; u32 heartbeat_rkey; }  // 44 bytes
struct PeerData {
  uint8_t mtu = IBV_MTU_1024;
  uint16_t lid = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  ibv_gid gid{};
  uint32_t recv_buffer_size = 0;
  uint64_t heartbeat_addr = 0;
  uint32_t heartbeat_rkey = 0;
};
std::vector<uint8_t> EncodePeerData(const PeerData& d);
Result<PeerData> DecodePeerData(std::span<const uint8_t> bytes);

// Control tags carried in SEND_WITH_IMM's immediate (bit 0 = last fragment).
inline constexpr uint32_t kTagData = 1u << 8;
inline constexpr uint32_t kTagHandshake = 2u << 8;
inline constexpr uint32_t kHandshakeFragment = 4096;  // minimum recv_buffer_size

// rdma_cm connection parameters (connect_cm.cc), the same on both sides: RDMA READ depths
// within what the device allows, capped at 16, and when accepting also within what the
// `request` offers (its initiator depth bounds our responder resources and vice versa; nullptr
// when connecting); retry counts 7 (rnr_retry 7 = unlimited).
rdma_conn_param CmConnParam(const DeviceLimits& limits, const rdma_conn_param* request);

class VerbsTransport;
class VerbsEndpoint;

// A passive out-of-band connection whose handshake is still running. Driven without blocking
// from Accept() and from progress, so a handshake survives Accept() calls with short timeouts.
struct OobSession {
  UniqueFd fd;
  std::shared_ptr<VerbsEndpoint> ep;
  std::unique_ptr<Handshake> handshake;
  std::vector<uint8_t> in;   // received, not yet parsed
  std::vector<uint8_t> out;  // framed, not yet sent
  Clock::time_point deadline;
};

class VerbsRemoteKey final : public RemoteKey {
 public:
  VerbsRemoteKey(RemoteRegion region, uint32_t rkey, uint64_t endpoint_id)
      : RemoteKey(std::move(region)), rkey(rkey), endpoint_id(endpoint_id) {}
  const uint32_t rkey;
  const uint64_t endpoint_id;
};

// A posted Op (or handshake frame, or heartbeat) until its last WR completes. Pooled by the
// transport (NewRecordLocked / FreeRecordLocked): `id` names the pool slot and a generation.
struct OpRecord {
  enum class Kind : uint8_t { kUser, kControl, kHeartbeat };
  uint64_t id = 0;
  Kind kind = Kind::kUser;
  bool in_use = false;
  uint32_t slot = 0;  // position in the pool
  uint32_t gen = 0;   // bumped on every reuse of the slot
  VerbsEndpoint* ep = nullptr;
  // The user Op's completion fields (the error, if any, is added when it fails).
  uint64_t context = 0;
  OpType type = OpType::kSend;
  Endpoint* completion_ep = nullptr;
  WrPlan plan;
  size_t next_wr = 0;          // first WR not yet posted
  size_t unreleased = 0;       // posted WRs whose SQ slots are not yet released
  std::vector<uint8_t> owned;  // control frame bytes (kControl)
  MemoryRegistration owned_mr;
};

struct PendingRecv {
  uint64_t seq = 0;
  uint64_t context = 0;
  const VerbsMemoryRegion* region = nullptr;
  uint64_t offset = 0;
  uint64_t capacity = 0;
};

struct Fragment {
  uint32_t buffer = 0;
  uint32_t length = 0;
  uint32_t tag = 0;
};

class VerbsEndpoint final : public Endpoint {
 public:
  VerbsEndpoint(VerbsTransport* transport, uint64_t id, std::string peer);
  ~VerbsEndpoint() override;

  Status status() const override;
  Result<std::unique_ptr<RemoteKey>> Import(const RemoteRegion& region) override;
  void Close() override;

 private:
  friend class VerbsTransport;
  enum class State { kConnecting, kHandshake, kReady, kFailed, kClosed };
  // Frees the QP, cm id and control socket now (transport shutdown, failed connect).
  void ReleaseResources();
  uint32_t qpn() const { return qp_ ? qp_->qp_num : kNoQp; }

  VerbsTransport* const t_;
  // ---- guarded by t_->mu_ ----
  State state_ = State::kConnecting;
  Status status_;
  // Verbs objects in construction order; destruction (reverse) frees the QP before its cm id.
  CmId cm_id_;
  QueuePair qp_;
  UniqueFd control_fd_;   // oob mode: the TCP control connection (liveness backstop)
  sockaddr_in cm_src_{};  // cm mode, active side: addresses for (re)resolution
  sockaddr_in cm_dst_{};
  bool cm_has_src_ = false;
  Clock::time_point connect_deadline_{};

  std::unique_ptr<Handshake> handshake_;  // cm mode, until done
  std::vector<uint8_t> hs_frame_;         // cm mode: control frame being reassembled
  PeerData local_;
  PeerData peer_;
  uint64_t peer_max_message_size_ = 0;
  bool passive_ = false;    // created by Listen/Accept (server side)
  bool lingering_ = false;  // failed, but a Reject frame is still being sent
  Clock::time_point linger_until_;
  uint32_t sq_depth_ = 0;  // the send slots this endpoint may use (its share of the CQ)
  uint32_t sq_used_ = 0;
  common::Ring<uint64_t> backlog_;         // OpRecord ids with WRs still to post, in order
  PostedWrs posted_;                       // posted, not yet retired (wr_plan.h)
  bool pump_queued_ = false;               // in the transport's pump_queue_ (PostValidated)
  common::Ring<PendingRecv> recvs_;        // kRecv ops naming this endpoint
  common::Ring<Fragment> unexpected_;      // arrived fragments not yet copied out
  std::optional<PendingRecv> assembling_;  // the recv the current message is copied into
  uint64_t assembled_ = 0;                 // bytes of the current message so far
  bool discarding_ = false;                // current message did not fit; drop to its end
  Status discard_error_;
  Clock::time_point last_heard_;
  Clock::time_point last_ack_;   // last send completion, or when the SQ last became busy
  uint64_t inflight_bytes_ = 0;  // bytes of posted WRs not yet acknowledged
  bool hb_outstanding_ = false;
  Clock::time_point hb_posted_;
};

class VerbsTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> Create(const TransportOptions& options);
  ~VerbsTransport() override;

  std::string_view name() const override { return "verbs"; }
  const Capabilities& capabilities() const override { return caps_; }
  std::vector<DeviceInfo> devices() const override;
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override;
  void Advertise(std::vector<RemoteRegion> regions) override;
  Result<std::string> Listen(const std::string& address) override;
  Result<std::shared_ptr<Endpoint>> Accept(Millis timeout) override;
  Result<std::shared_ptr<Endpoint>> Connect(const std::string& address, Millis timeout) override;
  size_t Poll(std::span<Completion> out) override;
  Status Wait(Millis timeout) override;
  void Wake() override;

  Stats stats() const;
  RegCacheStats reg_cache_stats() const;

 protected:
  Status CheckOwnership(const Op& op, size_t index) const override;
  Status PostValidated(std::span<const Op> ops) override;

 private:
  friend class VerbsEndpoint;
  explicit VerbsTransport(const TransportOptions& options, Config config);

  // ---- setup.cc ----
  Status Init();  // OpenDevice, CreateMemory, CreateQueues, event fds, FillCapabilities
  Status OpenDevice();
  Status CreateMemory();
  Status CreateQueues();
  void FillCapabilities();  // and the static stats_ fields
  // A QP for `ep` on the shared CQ (cm_id == nullptr: plain ibv_create_qp), with its send-queue
  // share reserved on the CQ (grown first when needed; SendQueueShare): sets ep->sq_depth_.
  // ReleaseResources returns the share.
  Result<QueuePair> CreateQp(VerbsEndpoint* ep, rdma_cm_id* cm_id);
  HelloParams MakeHello(const PeerData& local) const;
  void FillLocalData(VerbsEndpoint* ep);
  Status ApplyPeerHello(VerbsEndpoint* ep, const PeerHello& hello);
  uint8_t AckTimeoutExponent() const;

  // ---- connect_cm.cc ----
  Result<std::string> ListenCm(const std::string& host, uint16_t port);
  Result<std::shared_ptr<Endpoint>> ConnectCm(const std::string& host, uint16_t port,
                                              const std::string& address, Millis timeout);
  Status ResolveAddrLocked(VerbsEndpoint* ep);
  void ProcessCmEventsLocked();
  void OnCmEventLocked(rdma_cm_event* ev, std::vector<rdma_cm_id*>* destroy_after_ack);
  void OnConnectRequestLocked(rdma_cm_event* ev, std::vector<rdma_cm_id*>* destroy_after_ack);
  void OnRouteResolvedLocked(rdma_cm_id* id, VerbsEndpoint* ep);
  void OnEstablishedLocked(VerbsEndpoint* ep);
  // Accept's answer, if there is one yet (shared by both connection modes).
  std::optional<Result<std::shared_ptr<Endpoint>>> TakeAcceptedLocked();
  void SendControlFramesLocked(VerbsEndpoint* ep);
  void OnControlFragmentLocked(VerbsEndpoint* ep, const uint8_t* data, uint32_t length, bool last);

  // ---- connect_oob.cc ----
  Result<std::string> ListenOob(const std::string& host, uint16_t port);
  Result<std::shared_ptr<Endpoint>> AcceptOob(Millis timeout);
  Result<std::shared_ptr<Endpoint>> ConnectOob(const std::string& host, uint16_t port,
                                               const std::string& address, Millis timeout);
  Result<std::shared_ptr<Endpoint>> FinishOob(UniqueFd fd, Handshake::Role role, std::string peer,
                                              Clock::time_point deadline);
  Status ConnectQpByHand(VerbsEndpoint* ep);
  void CheckControlSocketsLocked();
  void AcceptPendingOobLocked();
  // One accepted control connection: its endpoint, QP (INIT) and handshake session.
  void AcceptOobLocked(UniqueFd fd, std::string peer);
  void DriveOobSessionsLocked();
  // Ok: keep going; error: drop the session (`refused`: report it through Accept()).
  Status StepOobSessionLocked(OobSession* s, bool* refused);

  // ---- datapath.cc ----
  // Validated Op: fails it now, or queues its WRs on its endpoint's backlog (and the endpoint on
  // pump_queue_: PostValidated pumps each once).
  Status PostOneLocked(const Op& op);
  bool PlanUserOp(const Op& op, WrPlan* plan) const;
  // Posts what the backlog's head allows (SQ and CQ room), in post-lists of up to 64 WRs.
  void PumpLocked(VerbsEndpoint* ep);
  size_t BuildPostListLocked(VerbsEndpoint* ep, std::span<const BatchPiece> pieces);
  int PostSendTimedLocked(VerbsEndpoint* ep, size_t total);  // ibv_post_send's return value
  void CommitPostedLocked(VerbsEndpoint* ep, std::span<const BatchPiece> pieces, size_t total);
  void PollCqLocked();
  void OnSendCompletionLocked(const ibv_wc& wc);
  // `count` WRs of record `id`, its oldest posted ones, completed (PostedWrs says which): their
  // SQ slots and bytes come back, and a record with every WR posted and completed reports its
  // completion and is freed.
  void RetireLocked(VerbsEndpoint* ep, uint64_t id, uint32_t count);
  void OnRecvCompletionLocked(const ibv_wc& wc);
  void DeliverLocked(VerbsEndpoint* ep);
  bool TakeRecvLocked(VerbsEndpoint* ep, PendingRecv* out);
  void RepostLocked(uint32_t buffer);
  void FlushRepostsLocked();
  // The next completion slot of ready_, filled with these fields (code Ok).
  Completion& PushCompletionLocked(uint64_t context, OpType type, Endpoint* ep, uint64_t bytes);
  // The same with an error.
  void FailOpLocked(uint64_t context, OpType type, Endpoint* ep, const Status& why);
  // The record pool (datapath.cc).
  OpRecord* NewRecordLocked(OpRecord::Kind kind, VerbsEndpoint* ep);  // nullptr: pool full
  OpRecord* RecordLocked(uint64_t id);  // nullptr: freed, or the slot was reused since
  void FreeRecordLocked(OpRecord* rec);

  // ---- events.cc ----
  // kAlways: also drain rdma_cm and async events (a syscall each); kWhenDue: only if
  // kEventInterval has passed since they were last drained (the busy Poll() path).
  enum class EventCheck { kAlways, kWhenDue };
  static constexpr std::chrono::milliseconds kEventInterval{1};
  void ProgressLocked(EventCheck events = EventCheck::kAlways);
  void ProcessAsyncEventsLocked();
  void HeartbeatLocked();
  void FailEndpointLocked(VerbsEndpoint* ep, Status why, bool linger = false);
  void TearDownLocked(VerbsEndpoint* ep);
  void ReapLocked();
  void DropEndpointLocked(VerbsEndpoint* ep);
  void CloseEndpointLocked(VerbsEndpoint* ep);
  void FailAllLocked(const Status& why);
  std::vector<pollfd> WaitFdsLocked();
  void SleepOnFds(std::vector<pollfd> fds, Millis slice);
  void ProgressThreadMain();
  VerbsEndpoint* EndpointByQpnLocked(uint32_t qpn);
  std::shared_ptr<VerbsEndpoint> NewEndpointLocked(std::string peer);

  const TransportOptions options_;
  const Config config_;
  Capabilities caps_;
  mutable common::MaybeMutex mu_;  // a real mutex unless options_.thread_mode is kSingle
  std::condition_variable accept_cv_;
  MemlockBudget memlock_;

  // ---- verbs objects, declared in construction order. Destruction runs in reverse: endpoints
  // (their QPs and cm ids) first, then the listener, cm channel, SRQ, CQ, completion channel,
  // the MRs (heartbeat word, receive pool) and the PD, and last librdmacm's device list. ----
  DeviceList devices_;
  ibv_context* ctx_ = nullptr;  // borrowed from devices_
  PortChoice port_;
  DeviceLimits limits_;
  ProtectionDomain pd_;
  RecvPool pool_;
  std::unique_ptr<uint64_t> hb_word_;  // target of peers' heartbeat writes
  MemoryRegistration hb_mr_;
  // Shared with the regions leasing its entries; Close()d in the destructor body, so its idle
  // MRs are deregistered before the PD.
  std::shared_ptr<RegCache> reg_cache_;
  CompletionChannel channel_;
  CompletionQueue cq_;
  SharedReceiveQueue srq_;
  CmEventChannel cm_channel_;
  CmId listen_id_;
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;  // eventfd in every Wait's poll set: Wake() writes it
  std::unordered_map<uint64_t, std::shared_ptr<VerbsEndpoint>> endpoints_;
  std::thread progress_thread_;  // declared last: joined first (in the destructor body)

  // ---- plain state, guarded by mu_ ----
  std::unordered_map<uint32_t, VerbsEndpoint*> by_qpn_;
  std::vector<std::unique_ptr<OpRecord>> records_;  // the pool; slot = position
  std::vector<OpRecord*> free_records_;
  common::Ring<Completion> ready_;
  common::Ring<PendingRecv> shared_recvs_;
  // PumpLocked's and FlushRepostsLocked's working buffers (reused: no allocation per post).
  std::vector<size_t> pump_remaining_;
  std::vector<BatchPiece> pump_pieces_;
  std::vector<ibv_send_wr> pump_wrs_;
  std::vector<VerbsEndpoint*> pump_queue_;  // endpoints PostValidated queued work on
  std::vector<ibv_sge> repost_sges_;
  std::vector<ibv_recv_wr> repost_wrs_;
  std::deque<std::shared_ptr<VerbsEndpoint>> accepted_;
  std::deque<Status> accept_errors_;
  std::vector<std::unique_ptr<OobSession>>
      oob_sessions_;  // passive handshakes that failed (reported by Accept)
  std::shared_ptr<struct AsyncInbox> inbox_;
  Clock::time_point next_housekeeping_{};
  Clock::time_point next_events_{};  // Poll() drains cm/async events from then on
  std::vector<RemoteRegion> advertise_;
  std::vector<uint32_t> reposts_;
  std::string listen_address_;
  uint32_t max_inline_ = 0;
  uint32_t max_send_sge_ = 1;
  uint32_t max_read_sge_ = 1;
  uint32_t cq_budget_ = 0;    // spare CQ entries for signaled send WRs
  uint64_t sq_reserved_ = 0;  // send slots the live QPs' shares hold on the CQ (CreateQp)
  uint64_t next_endpoint_id_ = 1;
  uint64_t next_recv_seq_ = 1;
  unsigned cq_events_unacked_ = 0;
  bool cq_armed_ = false;
  Status fatal_;  // device-level failure: every endpoint and new connect fails
  Stats stats_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> wake_requested_{false};  // Wake() called, not yet seen by a Wait
};

}  // namespace ferry::verbs
