// Ferry's UCX backend: ferry::Transport over UCP (UCX 1.13). Internal to transport/ucx/.
//
// Files: setup.cc (context, worker, parameters, progress, registry entry), connect.cc (control
// connection, handshake, endpoints, failure), liveness.{h,cc} (the control connections'
// heartbeat thread), datapath.cc (Post, tag send/recv, the
// one-sided dispatch, native RMA, completions, Poll/Wait), emulated_rma.{h,cc} (path 3 below),
// memory.cc (registration, import), wire.h (what this backend puts on the wire), objects.h (one
// RAII owner per UCX object), errors.{h,cc} (ucs_status_t -> Status).
//
// Mapping of the Ferry model onto UCP:
//   Transport     one ucp_context + one ucp_worker (UCS_THREAD_MODE_SERIALIZED; every worker call
//                 is made under mu_). Progress: Poll/Wait/Accept/Connect, or the optional
//                 internal progress thread.
//   Listen        a TCP listening socket of Ferry's own (not ucp_listener): UCX 1.13's sockaddr
//   Connect       connection manager only wires up lanes on the network device the connection
//                 came in on, so UCX_TLS=shm,self cannot connect through it. The Ferry handshake
//                 runs over this TCP control connection; its transport_data carries each side's
//                 ucp worker address (wire.h) and both sides ucp_ep_create() from it, the way
//                 ucx_perftest connects; that works for every UCX_TLS. The control connection
//                 stays open: its EOF is an immediate "peer gone" signal, and it carries pings.
//                 An endpoint with verbs lanes (path 2) is returned only once UCX's wireup is
//                 done (an ep flush as probe, within the handshake's deadline): Ops queued in
//                 UCX's wireup queue would wait ~30 s for a dead peer, and a force close that
//                 purges the wireup REQ aborts UCX 1.13.
//   Identity      every message and notification names the receiver's endpoint id: tag =
//                 receiver's id of the sending endpoint (exchanged in transport_data).
//   Send / Recv   tag API. A Recv on one endpoint matches its tag exactly, a shared Recv
//                 (ep == nullptr) matches any tag and finds the endpoint from the sender tag.
//                 Truncation -> kOutOfRange; the endpoint stays healthy.
//   Write / Read  one of three paths, chosen per endpoint when its handshake finishes:
//                 (1) same host (the same process included) and UCX_TLS allows cma -> the
//                 same-host engine (transport/samehost/samehost.h): checked against the target's
//                 published region table, then memcpy through a mapping of shareable target
//                 memory or cross-memory attach. UCX 1.13's own cma lane is unavailable with
//                 UCP_ERR_HANDLING_MODE_PEER. If the peer's table cannot be mapped, path (3).
//                 (2) native_rma_: the ep has an RMA lane on an rc/dc verbs transport (read from
//                 ucp_ep_print_info's lane dump; UCX 1.13 has no other per-ep query) -> memory is
//                 registered with an rkey the HCA checks: ucp_put_nbx/ucp_get_nbx, one per run of
//                 merged segments, without callbacks, and ONE ep flush as the Op's completion
//                 (a Write completes when the data has landed).
//                 (3) otherwise (tcp, shm without cma, self, ...) -> Ferry's protocol over active
//                 messages (emulated_rma.h); UCX's software RMA emulation is NEVER used.
//   kOpNotify     paths (1)/(2): after the flush (data landed), an active message (kAmNotify)
//                 carries imm and the byte count; the target queues a kNotify completion when it
//                 arrives; the initiator's Op completes when that message has been sent. Path
//                 (3): the request carries imm; the target queues the kNotify right after the
//                 data landed, and the Op completes with the reply.
//   Peer failure  every ep uses UCP_ERR_HANDLING_MODE_PEER + an error callback; UCX keepalive is
//                 configured from peer_timeout; the control connection's EOF fails the endpoint
//                 at once; and the heartbeat on it (liveness.h: a thread of its own pings and
//                 answers, so a process stuck in one long call is still heard) fails an endpoint
//                 with work outstanding whose peer stays silent for peer_timeout (a stopped or
//                 hung process). When a failure force-closes the ucp_ep (all but
//                 Close()), every Op in flight on it completes at once with the endpoint's
//                 status (UCX 1.13 never completes some requests of a force-closed rc ep); the
//                 Op's state stays allocated until UCX's callback for it runs, at the latest when
//                 ~UcxTransport destroys the worker (before the states and endpoints it may call
//                 back into).
//
// Keys: a descriptor's "key" is its packed UCX rkey. Paths (1) and (3) never unpack it (UCX's
// parser takes no length); the target compares samehost::KeyDigest(rkey) with its
// registration's, so an edited key is refused like a wrong rkey on an HCA. Path (2) unpacks it
// for ucp_put/get_nbx and the HCA checks it.
//
// Capabilities: everything. target_checks holds where only paths (1) and (3) can run (shm, cma,
// tcp). Deregistration removes the table entry and the AM lookup entry before ~UcxMemoryRegion
// returns; an access checked before that may still land, exactly like an RDMA write already on
// the wire when an HCA deregisters. Where UCX has an RDMA RMA lane (rc/dc, path 2)
// target_checks is FALSE (setup.cc HasVerbsRmaLane): UCX 1.13 registers every region with full
// remote rights and accepts an rkey with its first byte edited (seen on rxe in the VM).
// Deregistration is final there too, because registrations bypass UCX's registration cache
// (UCX_IB_REG_METHODS=direct by default, setup.cc), which would keep the MR alive.
//
// Parameters: UCX_* variables, plus Ferry's "region_table_entries" (capacity of the region
// table, default 16384; RegisterMemory fails with kResourceExhausted beyond it). The table
// exists only where cma may be used (UCX_TLS allowing cma/shm). Config defaults (setup.cc
// ApplyParams, explicit UCX_* params win): UCX_ZCOPY_THRESH=inf where UCX_TLS may use tcp,
// because UCX 1.13 aborts (uct_iface.h:884) when a tcp peer dies with an eager zero-copy send in
// flight.
//
// Known limits: the tag of a message is chosen by its sender, so a malicious but authenticated
// peer can make its messages look as if they came from another endpoint of this transport; and
// ucp_ep_create / ucp_ep_rkey_unpack parse the peer's worker address / rkey without a length,
// so those bytes are trusted once the peer has passed the handshake (shared secret).
//
// Thread-safety: every public method locks mu_ (Post's ownership check needs no lock); Poll only
// tries it (another thread holding it is driving progress). Under ThreadMode::kSingle mu_ is a
// no-op (common::MaybeMutex) and the caller's promise serialises every call. UCX callbacks run
// inside ucp_worker_progress with mu_ held and never lock it again. The heartbeat thread
// (liveness.h) and Wake() take no lock in either mode: they only signal the worker.
// Per-operation cost: a same-host write or read without notification completes inside Post
// without any Op state; other Ops use pooled states (OpState, PendingReply) whose vectors keep
// their capacity, request ids name pool slots (no map), completions are filled in place in a
// ring, liveness stamps use the coarse clock, and error texts are built only on failure.
#pragma once

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/backend.h"
#include "transport/common/maybe_mutex.h"
#include "transport/common/ring.h"
#include "transport/handshake.h"
#include "transport/samehost/samehost.h"
#include "transport/transport.h"
#include "transport/ucx/emulated_rma.h"
#include "transport/ucx/liveness.h"
#include "transport/ucx/objects.h"
#include "transport/ucx/wire.h"

namespace ferry::ucx {

using Clock = std::chrono::steady_clock;
// A write (contiguous or sparse) as opposed to a read, for the one-sided paths.
inline bool IsWrite(OpType t) {
  return t == OpType::kWrite || t == OpType::kSparseWrite;
}

// The transport lock (a no-op under ThreadMode::kSingle) and its guards.
using Guard = std::lock_guard<common::MaybeMutex>;
using Lock = std::unique_lock<common::MaybeMutex>;

inline constexpr const char* kBackendName = "ucx";

class UcxTransport;
struct OpState;

// Parameters of every active message this backend sends: eager (the whole message reaches the
// target's handler: no rendezvous) with a completion callback.
inline ucp_request_param_t EagerAmParams(ucp_send_nbx_callback_t cb, void* user_data) {
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = cb;
  p.user_data = user_data;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  return p;
}

class UcxMemoryRegion final : public MemoryRegion {
 public:
  UcxMemoryRegion(UcxTransport* t, uint8_t* data, size_t size, uint32_t access, MemHandle memh,
                  std::vector<uint8_t> packed_rkey, uint64_t epoch);
  ~UcxMemoryRegion() override;
  ucp_mem_h memh() const { return memh_.get(); }
  UcxTransport* owner() const { return t_; }
  uint64_t key() const { return key_; }  // KeyDigest(descriptor().rkey)

 private:
  friend class UcxTransport;
  friend struct PendingReply;
  UcxTransport* t_;
  MemHandle memh_;
  uint64_t key_ = 0;
  uint32_t table_slot_ = samehost::PeerRegionTable::kNoSlot;  // our entry in t_->region_table_
  uint64_t replies_in_flight_ = 0;  // read replies sending straight from this memory (mu_)
};

class UcxEndpoint;

class UcxRemoteKey final : public RemoteKey {
 public:
  UcxRemoteKey(UcxTransport* t, UcxEndpoint* ep, RemoteRegion region, RkeyHandle rkey,
               samehost::KeyState samehost);
  ~UcxRemoteKey() override;
  // The unpacked UCX rkey; only on endpoints with a verbs RMA lane (path 2), else nullptr.
  ucp_rkey_h rkey() const { return rkey_.get(); }
  UcxEndpoint* endpoint() const { return ep_; }
  uint64_t key() const { return key_; }  // samehost::KeyDigest(region().rkey)

 private:
  UcxTransport* t_;
  UcxEndpoint* ep_;
  RkeyHandle rkey_;
  uint64_t key_;
  // Path (1): the region's slot in the peer's table and its mapping (samehost::KeyState);
  // guarded by t_->mu_.
  friend class UcxTransport;
  mutable samehost::KeyState samehost_;
};

class UcxEndpoint final : public Endpoint {
 public:
  UcxEndpoint(UcxTransport* t, uint64_t id, std::string peer_address, bool server);
  ~UcxEndpoint() override;

  Status status() const override;
  Result<std::unique_ptr<RemoteKey>> Import(const RemoteRegion& region) override;
  void Close() override;
  UcxTransport* owner() const { return t_; }

 private:
  friend class UcxTransport;
  enum class State { kHandshaking, kReady, kFailed };

  // Everything below is guarded by t_->mu_.
  UcxTransport* t_;
  bool server_;
  State state_ = State::kHandshaking;
  Status status_;
  bool closed_by_user_ = false;
  // The control connection and its framing buffers (length-prefixed frames).
  UniqueFd fd_;
  std::vector<uint8_t> rbuf_;
  std::vector<uint8_t> wbuf_;
  std::unique_ptr<Handshake> handshake_;
  Clock::time_point handshake_deadline_;
  // The UCP endpoint to the peer's worker (created when the handshake is done).
  EpHandle ep_;
  ucs_status_t ucx_error_ = UCS_OK;  // from the error callback, handled after progress
  uint64_t peer_tag_ = 0;            // the peer's id of this connection
  samehost::Peer samehost_;          // valid(): one-sided ops use the same-host engine
  bool native_rma_ = false;          // an rc/dc verbs lane carries RMA (ucp_put/get_nbx)
  bool wired_ = false;               // UCX wireup is done (FinishHandshake / OnWireupDone)
  // Handshake done, waiting for UCX's wireup (verbs lanes, see FinishHandshake); state_ stays
  // kHandshaking until then.
  bool wiring_ = false;
  ucs_status_t wireup_error_ = UCS_OK;  // the wireup probe failed; handled after progress
  uint64_t peer_max_message_ = 0;
  // Liveness (see UcxTransport::CheckLiveness). Once ready, the control connection belongs to
  // the transport's Liveness thread (live_; adopt_ until AdoptReadySockets hands it over).
  size_t outstanding_ = 0;
  Clock::time_point last_heard_;
  Clock::time_point last_ping_;
  bool adopt_ = false;
  std::shared_ptr<LiveSocket> live_;
  Clock::time_point eof_seen_;  // when CheckLiveness first saw live_ failed (a grace, there)
  OpState* ops_ = nullptr;      // intrusive list of the Ops in flight on this endpoint
};

class UcxTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> Create(const TransportOptions& options);
  ~UcxTransport() override;

  std::string_view name() const override { return kBackendName; }
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

 protected:
  Status CheckOwnership(const Op& op, size_t index) const override;
  Status PostValidated(std::span<const Op> ops) override;

 private:
  friend class UcxEndpoint;
  friend class UcxMemoryRegion;
  friend class UcxRemoteKey;
  friend struct OpState;

  explicit UcxTransport(const TransportOptions& options);
  Status Init();

  // ---- progress (setup.cc) ----
  // One round of worker progress plus the deferred control work. Requires mu_.
  unsigned ProgressLocked();
  void ProgressThreadMain();
  void WakeProgressThread();
  // Drops mu_ and sleeps until the worker has events (ucp_worker_arm + its efd) or a short
  // slice (at most 2 ms, never past `deadline`) passes; returns with mu_ held again.
  void SleepOnWorker(Lock& lock, Clock::time_point deadline);

  // ---- connections (connect.cc) ----
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  Status SetAmHandler(unsigned id, ucp_am_recv_callback_t cb);
  std::shared_ptr<UcxEndpoint> NewEndpoint(std::string peer, bool server, UniqueFd fd);
  HelloParams MakeHello(uint64_t my_id) const;
  // Control connections: accept, read/write frames, drive handshakes, answer pings.
  void PollSockets();
  void AcceptSockets();
  void ReadSocket(UcxEndpoint* ep);
  void QueueFrame(UcxEndpoint* ep, std::span<const uint8_t> payload);
  bool FlushSocket(UcxEndpoint* ep);
  void OnFrame(UcxEndpoint* ep, std::span<const uint8_t> frame);
  void FinishHandshake(UcxEndpoint* ep);
  // The handshake (and, with verbs lanes, UCX's wireup) is done: Connect/Accept may return it.
  void EnterReady(UcxEndpoint* ep);
  // How long an accepted connection may take for its handshake (and again for the wireup).
  Clock::duration AcceptBudget() const;
  // Completion of the wireup probe (an ep flush; user_data: the UcxEndpoint).
  static void OnWireupDone(void* request, ucs_status_t status, void* user_data);
  void HandleControlLocked();
  // Fails the endpoint for good: cancels its Recvs, closes the ucp_ep (force unless graceful)
  // and the control connection, and makes later Ops on it complete with `why`.
  void FailEndpoint(UcxEndpoint* ep, Status why, bool graceful);
  void CloseEndpoint(UcxEndpoint* ep);
  void CheckLiveness(Clock::time_point now);
  void CheckEndpointsLiveness(const std::vector<UcxEndpoint*>& eps, Clock::time_point now);
  // Hands the control connections of endpoints that became ready to liveness_. Called where no
  // socket read is in progress (the end of PollSockets, CheckLiveness).
  void AdoptReadySockets();

  // ---- data path (datapath.cc) ----
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                         void* user_data);
  static ucs_status_t OnAmNotify(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  void PostOne(const Op& op);
  void PostRecv(OpState* st, const Op& op);
  void PostSend(OpState* st, const Op& op);
  // Links st on ep's list of Ops in flight and counts it for liveness (Report undoes both).
  void Track(UcxEndpoint* ep, OpState* st);
  void PostOneSided(OpState* st, const Op& op);
  void PostSameHost(OpState* st, const Op& op);
  void StartFlush(OpState* st);
  void SendNotify(OpState* st);
  void StepDone(OpState* st, ucs_status_t status);
  void Finish(OpState* st, ucs_status_t status);
  void CompleteNow(const Op& op, const Status& status);
  // The next completion slot, filled with these fields (code Ok); the caller adds the rest.
  Completion& PushCompletion(uint64_t context, OpType type, Endpoint* ep, uint64_t bytes);
  // A same-host one-sided Op without kOpNotify: moved and completed within Post.
  void PostSameHostInline(const Op& op);
  OpState* AllocOp();
  void FreeOp(OpState* st);
  void LinkOp(UcxEndpoint* ep, OpState* st);
  void UnlinkOp(OpState* st);
  // Queues the Op's completion (as Finish) but keeps its state: UCX still holds a request
  // naming it. Used for what a force close of the ep left in flight.
  void Report(OpState* st, ucs_status_t status);
  // After a force close of ep's ucp_ep (FailEndpoint): completes every Op still in flight on it
  // with the endpoint's status at once, instead of waiting for UCX. Their states become
  // orphans, freed when (if ever) UCX's callback runs, at the latest when the worker is
  // destroyed. Why: UCX 1.13 drops some requests of a force-closed rc ep without completing
  // them ("destroying txqp with uncompleted operation ... uct_rc_ep_get_bcopy_handler").
  void OrphanOps(UcxEndpoint* ep);

  // ---- path (3): one-sided ops over active messages (emulated_rma.cc) ----
  static ucs_status_t OnAmRmaRequest(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnAmRmaReply(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param);
  static void OnAmRmaSent(void* request, ucs_status_t status, void* user_data);
  static void OnReplySent(void* request, ucs_status_t status, void* user_data);
  void PostAm(OpState* st, const Op& op);
  void ServeRmaRequest(UcxEndpoint* ep, const RmaHeader& h, const uint8_t* data, size_t length);
  void ServeDeferred();
  void AmFinish(OpState* st);
  void SendReplies();
  // ~UcxMemoryRegion (mu_ held): read replies still owed from `mr` become kStale errors; those
  // UCX is sending are waited for (progress) up to peer_timeout, then their endpoints are failed
  // (a force close completes the sends) so the memory is no longer referenced when it returns.
  void DrainRepliesFrom(UcxMemoryRegion* mr);
  void FailAmOps(UcxEndpoint* ep);
  // Reply pool (emulated_rma.cc): a cleared reply for endpoint `ep_id` / back to the pool (its
  // count on a region dropped, unlinked from sending_ first by the caller).
  PendingReply* TakeReply(uint64_t ep_id);
  void ReleaseReply(PendingReply* r);
  void QueueErrorReply(uint64_t ep_id, const RmaHeader& h, const Status& s);
  // The pooled Op a reply's request id names, if it still waits for that reply from `ep`.
  OpState* AmOpFor(uint64_t req_id, const UcxEndpoint* ep);

  // Members in construction order. Destruction runs bottom-up, which is the order UCX needs:
  // the progress thread stops first; endpoints (closed explicitly in ~UcxTransport) and queued
  // state go next; then the listener, then the worker, then the context. Memory handles and
  // rkeys live in objects the caller must destroy before the transport.
  TransportOptions options_;
  Capabilities caps_;
  ContextHandle context_;
  WorkerHandle worker_;
  int efd_ = -1;  // the worker's event fd (owned by the worker), -1 if unavailable
  std::vector<uint8_t> worker_address_;  // ucp_worker_query, sent in the handshake
  samehost::HostIdentity identity_;
  bool cma_allowed_ = false;  // UCX_TLS permits cma (the same-host engine may serve peers)
  bool verbs_lanes_ = false;  // the context has an rc/dc verbs transport (setup.cc)
  samehost::RegionTable region_table_;  // our live registrations, for same-host peers
  UniqueFd epoll_;  // control connections still handshaking + the listening socket
  UniqueFd listen_fd_;
  std::string listen_address_;

  mutable common::MaybeMutex mu_;   // a real mutex unless options_.thread_mode is kSingle
  std::condition_variable_any cv_;  // signalled by the progress thread when completions arrive
  std::vector<RemoteRegion> advertise_;
  uint64_t next_ep_id_ = 1;
  // Every endpoint ever created, by id; kept until the transport dies so that Completion::ep
  // stays valid.
  std::unordered_map<uint64_t, std::shared_ptr<UcxEndpoint>> by_id_;
  // Endpoints not yet failed (handshaking or ready): liveness, control and max_endpoints.
  std::unordered_map<uint64_t, UcxEndpoint*> live_;
  size_t handshakes_ = 0;        // live endpoints still handshaking (poll sockets every round)
  bool pending_writes_ = false;  // some control connection has unsent bytes
  std::deque<std::shared_ptr<UcxEndpoint>> accepted_;
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests still in flight
  bool control_pending_ = false;
  Status last_accept_error_;
  common::Ring<Completion> done_;  // finished completions (allocation-free once warm)
  // Registered regions by epoch: what the target side of the AM protocol checks against.
  std::unordered_map<uint64_t, UcxMemoryRegion*> regions_;
  // Replies (emulated_rma.h): every one ever made (reply_pool_), the free ones, those owed (sent
  // after progress; reply_batch_ is SendReplies' second buffer, so neither loses its capacity)
  // and the list of those UCX is sending (released by OnReplySent).
  std::vector<std::unique_ptr<PendingReply>> reply_pool_;
  std::vector<PendingReply*> reply_free_;
  std::vector<PendingReply*> replies_;
  std::vector<PendingReply*> reply_batch_;
  PendingReply* sending_ = nullptr;
  std::vector<Segment> serve_table_;  // ServeRmaRequest's decoded table, reused
  // Requests that arrived while our side of their endpoint's handshake was still running.
  std::vector<DeferredRequest> deferred_;
  std::vector<std::unique_ptr<OpState>> op_storage_;
  std::vector<OpState*> op_free_;
  uint32_t tick_ = 0;
  Clock::time_point next_liveness_;
  std::vector<UcxEndpoint*> liveness_eps_;  // CheckLiveness' snapshot, kept for its capacity
  Clock::time_point next_socket_poll_;

  // The heartbeat of ready control connections (liveness.h); stopped before the worker goes.
  std::unique_ptr<Liveness> liveness_;
  std::atomic<bool> liveness_event_{false};  // it saw a connection fail: check at once
  bool adopt_pending_ = false;               // some endpoint's adopt_ is set

  std::atomic<bool> stop_{false};
  std::atomic<bool> thread_sleeping_{false};
  std::atomic<bool> wake_requested_{false};  // Wake() called, not yet seen by a Wait
  std::thread progress_thread_;
};

// One posted Op while UCX works on it. Pooled by the transport (no allocation per Op once warm).
struct OpState {
  enum class Stage : uint8_t { kMain, kNotify };
  UcxTransport* t = nullptr;
  OpType type = OpType::kSend;
  Stage stage = Stage::kMain;
  bool notify = false;
  uint32_t imm = 0;
  uint64_t context = 0;
  UcxEndpoint* ep = nullptr;   // the Op's endpoint; nullptr: shared Recv
  Endpoint* sender = nullptr;  // Completion::ep (a Recv's sender)
  uint64_t bytes = 0;          // bytes moved (or the Recv's capacity until it completes)
  void* request = nullptr;     // an in-flight Recv's request (to cancel it)
  ucs_status_t error = UCS_OK;
  Status cma_error;         // set with UCS_ERR_IO_ERROR by a failed CMA transfer
  NotifyHeader header{};    // kAmNotify header; must live until the send completes
  EmulatedOp am;            // path (3) only (emulated_rma.h)
  OpState* prev = nullptr;  // UcxEndpoint::ops_ links
  OpState* next = nullptr;
  bool linked = false;
  // Completed already (OrphanOps); UCX's late callback only frees the request and the state.
  bool orphaned = false;
  uint32_t slot = 0;  // index in UcxTransport::op_storage_
  uint32_t gen = 0;   // bumped by every AllocOp of this slot (path 3's request ids)

  // Back to the pooled state (datapath.cc), keeping the vectors' capacity.
  void Reset();
};

}  // namespace ferry::ucx
