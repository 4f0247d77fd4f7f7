// Ferry's UCX backend: ferry::Transport over UCP (UCX 1.13).
//
// Mapping of the Ferry model onto UCP:
//   Transport     one ucp_context + one ucp_worker (UCS_THREAD_MODE_SERIALIZED; every worker call
//                 is made under mu_). Progress: Poll/Wait/Accept/Connect, or the optional
//                 internal progress thread.
//   Listen        a TCP listening socket of Ferry's own (not ucp_listener): UCX 1.13's sockaddr
//   Connect       connection manager only wires up lanes on the network device the connection
//                 came in on, so UCX_TLS=shm,self cannot connect through it ("Destination is
//                 unreachable"; with shm,tcp,self it silently uses tcp only). Instead, the Ferry
//                 handshake runs over this TCP control connection (length-prefixed frames) and
//                 its transport_data carries each side's ucp worker address; both sides then
//                 ucp_ep_create(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS), the way ucx_perftest
//                 connects. That works for every UCX_TLS (shm, tcp, rc/ud verbs). The control
//                 connection stays open: its EOF is an immediate "peer gone" signal, and it
//                 carries the liveness pings.
//                 An endpoint with verbs lanes (path 2 below) is returned by Connect/Accept
//                 only once UCX's wireup is done (an ep flush as probe, within the same
//                 deadline as the handshake): Ops on a lane whose wireup has not finished wait
//                 in UCX's wireup queue, where a dead peer leaves them until UCX's ud timeout
//                 (~30 s) and a force close that purges the wireup REQ aborts UCX 1.13.
//   Identity      transport_data also carries the id each side gave the endpoint. Every message
//                 and notification names the receiver's endpoint id: tag = receiver's id of the
//                 sending endpoint; kAmNotify's header carries it too.
//   Send / Recv   tag API. A Recv on one endpoint matches its tag exactly, a shared Recv
//                 (ep == nullptr) matches any tag and finds the endpoint from the sender tag.
//                 Truncation -> kOutOfRange; the endpoint stays healthy.
//   Write / Read  one of three paths, chosen per endpoint when its handshake finishes:
//                 (1) same host (the same process included) and UCX_TLS allows cma -> Ferry's
//                 own cross-memory attach (process_vm_writev/readv, up to 1024 segments per
//                 call; UCX 1.13's cma lane is unavailable with UCP_ERR_HANDLING_MODE_PEER, see
//                 cma.cc), checked against the target's published region table
//                 (region_table.h): the handshake carries the table's fd number and token, the
//                 initiator maps it read-only (pidfd_getfd), and every Op is checked there
//                 (live epoch at the descriptor's address, key digest, bounds of every segment,
//                 rights) before a byte moves. If the table cannot be mapped, the endpoint uses
//                 path (3) instead.
//                 Shareable target memory (transport.h "Shareable memory": the table entry names
//                 the owner's memfd fd, offset and inode): the initiator maps that memfd
//                 (pidfd_getfd + mmap, writable only if the region grants remote write) once per
//                 RemoteKey, on its first Op, and copies with memcpy instead of CMA — every Op is
//                 still checked against the table first. Mapping lifetime: the mapping belongs to
//                 the RemoteKey; it is unmapped when the key is destroyed, when a check finds the
//                 region's entry gone (kStale), or never made if mapping fails (the key then
//                 uses CMA). Guarantee, the same as an HCA's: an Op whose check starts after
//                 ~MemoryRegion has returned is refused and touches nothing; an Op checked before
//                 may still land (the copy runs right after the check, inside Post). The
//                 initiator's mapping keeps the memfd's pages alive, so a racing copy never
//                 faults, whatever the owner does with the memory afterwards.
//                 (2) native_rma_: the ep has an RMA lane on an rc/dc verbs transport (read from
//                 ucp_ep_print_info's lane dump; UCX 1.13 has no other per-ep query) -> memory is
//                 registered with an rkey the HCA checks: ucp_put_nbx/ucp_get_nbx, adjacent
//                 segments merged, one put/get per run without callbacks and ONE ep flush as
//                 the Op's completion (a Write completes when the data has landed).
//                 (3) otherwise (tcp, shm without cma, self, ...) -> Ferry's protocol over active
//                 messages. UCX's software RMA emulation (ucp/rma/rma_sw.c) is NEVER used: its
//                 target writes to any address the peer names, and when its ack cannot reach a
//                 dead peer UCX aborts the process ("ucp_request.inl:346 Fatal: unexpected
//                 error: Endpoint timeout" from ucp_put_handler).
//                 The protocol: the initiator sends kAmRmaRequest (RmaHeader: req id, region
//                 addr + epoch + key digest, kind, notify/imm; payload = segment table, then for
//                 a write the data as a UCP_DATATYPE_IOV straight from the local region), eager
//                 and whole (UCP_AM_SEND_FLAG_EAGER). The target finds ITS registration by epoch
//                 and address, checks the key digest and every segment with
//                 ferry::CheckRemoteAccess (bounds and rights) before touching memory, copies
//                 the write in, queues the kNotify completion of a kOpNotify
//                 write, and answers with kAmRmaReply
//                 (status code + error text, or the read data as a UCP iov straight from the
//                 region, adjacent rows merged: no gather buffer). Replies are sent after worker
//                 progress, never from inside a UCX callback; a reply that cannot be sent (dead
//                 peer) is dropped through its completion callback, never an abort. The Op
//                 completes when both its request's send and the reply are done, or with the
//                 endpoint's status when the endpoint fails. Requests that arrive while our side
//                 of the handshake is still running are copied and served once it is done.
//                 Cost: the target copies a write out of UCX's receive buffer (no rendezvous).
//                 A region counts the read replies sending from it; ~UcxMemoryRegion turns
//                 queued ones into kStale errors and waits for those UCX holds (up to
//                 peer_timeout, then fails their endpoints), so UCX never reads freed memory.
//                 Nothing is ever packed on the initiator for a write.
//   kOpNotify     paths (1)/(2): after the flush (data landed), an active message (kAmNotify)
//                 carries imm and the byte count; the target queues a kNotify completion when it
//                 arrives; the initiator's Op completes when that message has been sent. Path
//                 (3): the request carries imm; the target queues the kNotify right after the
//                 data landed, and the Op completes with the reply.
//   Peer failure  every ep uses UCP_ERR_HANDLING_MODE_PEER + an error callback; UCX keepalive is
//                 configured from peer_timeout; the control connection's EOF fails the endpoint
//                 at once; and pings on it fail an endpoint with work outstanding whose peer
//                 stays silent for peer_timeout (a stopped or hung process). When a failure
//                 force-closes the ucp_ep (all but Close()), every Op in flight on it completes at
//                 once with the endpoint's status, without waiting for UCX (1.13 never completes
//                 some requests of a force-closed rc ep); the Op's state stays allocated until
//                 UCX's callback for it runs, at the latest when ~UcxTransport destroys the
//                 worker (before the states and endpoints it may call back into).
//
// Keys: a descriptor's "key" is its packed UCX rkey. Paths (1) and (3) never unpack it (UCX's
// parser takes no length); the target compares KeyDigest(rkey) with its registration's, so an
// edited key is refused like a wrong rkey on an HCA. Path (2) unpacks it for ucp_put/get_nbx and
// the HCA checks it.
//
// Capabilities: everything. target_checks holds where only paths (1) and (3) can run (shm, cma,
// tcp): path 1 checks against the target's region table, read by the initiator; path 3 in the
// target's AM handler. Deregistration removes the table entry and the AM lookup entry before
// ~UcxMemoryRegion returns; an access checked before that may still land, exactly like an RDMA
// write already on the wire when an HCA deregisters. Where UCX has an RDMA RMA lane (rc/dc,
// path 2) target_checks is FALSE (context.cc HasVerbsRmaLane): UCX 1.13 registers every region
// with full remote rights and accepts an rkey with its first byte edited, so the HCA enforces
// neither Ferry's read-only access nor key integrity (seen on rxe in the VM). Deregistration is
// final there too (final_deregistration), because registrations bypass UCX's registration cache
// (UCX_IB_REG_METHODS=direct by default, context.cc), which would keep the MR alive.
//
// Parameters: UCX_* variables, plus Ferry's "region_table_entries" (capacity of the region
// table, default 16384; RegisterMemory fails with kResourceExhausted beyond it). The table
// exists only where cma may be used (UCX_TLS allowing cma/shm).
//
// Config defaults (context.cc ApplyParams, explicit UCX_* params win): UCX_ZCOPY_THRESH=inf,
// because UCX 1.13 aborts (uct_iface.h:884 "Assertion comp->count > 0") when a tcp peer dies
// with an eager zero-copy send in flight; only where UCX_TLS may use tcp (rc lanes keep zero-copy
// puts/gets).
//
// Known limits: the tag of a message is chosen by its sender, so a malicious but authenticated
// peer can make its messages look as if they came from another endpoint of this transport; and
// ucp_ep_create / ucp_ep_rkey_unpack parse the peer's worker address / rkey without a length,
// so those bytes are trusted once the peer has passed the handshake (shared secret).
//
// Thread-safety: every public method locks mu_. UCX callbacks run inside ucp_worker_progress
// with mu_ held and never lock it again.
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
#include <unordered_set>
#include <vector>

#include "transport/backend.h"
#include "transport/handshake.h"
#include "transport/transport.h"
#include "transport/ucx/region_table.h"
#include "transport/ucx/ucx_handles.h"

namespace ferry::ucx {

using Clock = std::chrono::steady_clock;

inline constexpr const char* kBackendName = "ucx";

class UcxTransport;
struct DeferredRequest;

// Active-message ids used by this backend.
enum AmId : unsigned {
  kAmNotify = 1,      // header: NotifyHeader, no payload
  kAmRmaRequest = 2,  // header: RmaHeader; payload: segment table (+ the data of a write)
  kAmRmaReply = 3,    // header: RmaReplyHeader; payload: read data, or the error text
};

// Ferry's own one-sided protocol over active messages (see "Write / Read" above). The payload
// of a kAmRmaRequest starts with num_segments RmaSegment entries (offsets relative to the
// target's region); a write's data follows, segment after segment.
struct RmaHeader {
  uint64_t target_ep;    // the receiver's id of the endpoint
  uint64_t req_id;       // echoed in the reply
  uint64_t region_addr;  // RemoteRegion::addr of the target's region
  uint64_t epoch;        // RemoteRegion::epoch: names the registration
  uint64_t total;        // sum of the segment lengths
  uint64_t key;          // KeyDigest of the descriptor's rkey: must match the registration's
  uint32_t num_segments;
  uint8_t write;   // 1: write, 0: read
  uint8_t notify;  // 1: the target queues a kNotify completion after the write landed
  uint16_t reserved;
  uint32_t imm;
  uint32_t reserved2;
};
struct RmaSegment {
  uint64_t remote_offset;
  uint64_t length;
};
struct RmaReplyHeader {
  uint64_t target_ep;  // the receiver's id of the endpoint
  uint64_t req_id;
  uint64_t bytes;  // bytes moved (a read's payload length)
  uint32_t code;   // ferry::Code; non-zero: the payload is the error text
  uint32_t reserved;
};
// A reply the target owes; sent after worker progress (never from inside a UCX callback), and
// kept alive until UCX is done with it. A failed send (dead peer) just frees it.
// Calls add(local_offset, remote_offset, length) once for a contiguous op, and for a sparse op
// once per run of segments adjacent on BOTH sides (one copy / iov entry per run instead of per
// row); stops when add returns false.
template <typename F>
void ForEachMergedRun(const Op& op, F&& add) {
  if (op.type == OpType::kWrite || op.type == OpType::kRead) {
    add(op.local_offset, op.remote_offset, op.length);
    return;
  }
  const Segment* seg = op.segments;
  const size_t n = op.num_segments;
  for (size_t i = 0; i < n;) {
    uint64_t lo = seg[i].local_offset, ro = seg[i].remote_offset, len = seg[i].length;
    size_t j = i + 1;
    while (j < n && seg[j].local_offset == lo + len && seg[j].remote_offset == ro + len) {
      len += seg[j].length;
      ++j;
    }
    if (!add(lo, ro, len)) return;
    i = j;
  }
}

class UcxMemoryRegion;

// A reply owed to a path-(3) request. A read's payload is NOT copied: `iov` points into the
// target region (adjacent segments merged) and the reply is sent with a UCP iov datatype, so
// `region` counts it in `replies_in_flight_` until UCX is done with the memory (OnReplySent or
// a failed send); ~UcxMemoryRegion waits for that count (see there). `data` carries only an
// error text.
struct PendingReply {
  UcxTransport* t = nullptr;
  uint64_t ep_id = 0;
  RmaReplyHeader header{};
  std::vector<uint8_t> data;
  std::vector<ucp_dt_iov_t> iov;
  UcxMemoryRegion* region = nullptr;  // set while it holds a count on the region
  ~PendingReply();
};

// The kAmNotify header on the wire (little-endian hosts only, like UCX itself here).
struct NotifyHeader {
  uint64_t target_ep;  // the receiver's id of the endpoint
  uint64_t bytes;
  uint32_t imm;
  uint32_t reserved;
};

class UcxTransport;
struct OpState;

// A kAmRmaRequest copied out of UCX because its endpoint was still handshaking here.
struct DeferredRequest {
  RmaHeader header{};
  std::vector<uint8_t> data;
};

// Who we are, for deciding whether a peer can be reached with cross-memory attach (cma.cc).
// Sent in the handshake's transport_data after the endpoint id:
//   struct { u64 pid; u64 pid_ns_inode; u64 host (FNV-1a of boot_id); u64 probe_addr;
//            u64 table_fd (~0: none); u64 table_token; }
// table_fd / table_token name this process's region table (region_table.h).
struct HostIdentity {
  static constexpr size_t kWireSize = 48;
  uint64_t pid = 0;
  uint64_t pid_ns = 0;
  uint64_t host = 0;
  uint64_t probe_addr = 0;
  uint64_t table_fd = ~uint64_t{0};
  uint64_t table_token = 0;
  static HostIdentity Local();
  static HostIdentity Parse(const uint8_t* p);  // kWireSize bytes
  void Append(std::vector<uint8_t>* out) const;
};
// True when `peer` is a process on this host in our PID namespace (possibly this one) whose
// memory we may read (checked with a 1-byte process_vm_readv of its probe address).
bool CmaUsable(const HostIdentity& me, const HostIdentity& peer);

// FIFO of finished completions: a growable ring, so the steady state allocates nothing
// (std::deque would allocate a block every few completions).
class CompletionRing {
 public:
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  void push_back(Completion&& c) {
    if (count_ == ring_.size()) Grow();
    ring_[(head_ + count_) % ring_.size()] = std::move(c);
    ++count_;
  }
  Completion pop_front() {
    Completion c = std::move(ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    --count_;
    return c;
  }

 private:
  void Grow() {
    std::vector<Completion> bigger(std::max<size_t>(64, ring_.size() * 2));
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
    ring_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<Completion> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
};

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
  uint32_t table_slot_ = PeerRegionTable::kNoSlot;  // our entry in t_->region_table_
  uint64_t replies_in_flight_ = 0;  // read replies sending straight from this memory (mu_)
};

class UcxEndpoint;

class UcxRemoteKey final : public RemoteKey {
 public:
  UcxRemoteKey(UcxTransport* t, UcxEndpoint* ep, RemoteRegion region, RkeyHandle rkey,
               uint32_t table_slot);
  ~UcxRemoteKey() override;
  // The unpacked UCX rkey; only on endpoints with a verbs RMA lane (path 2), else nullptr.
  ucp_rkey_h rkey() const { return rkey_.get(); }
  UcxEndpoint* endpoint() const { return ep_; }
  uint64_t key() const { return key_; }  // KeyDigest(region().rkey)
  // Path (1): the slot of the region in the peer's table at Import time (kNoSlot: none).
  uint32_t table_slot() const { return table_slot_; }

 private:
  UcxTransport* t_;
  UcxEndpoint* ep_;
  RkeyHandle rkey_;
  uint64_t key_;
  uint32_t table_slot_;
  // Path (1) with a shareable target region: the region mapped here (cma.cc), created on first
  // use; guarded by t_->mu_.
  friend class UcxTransport;
  mutable PeerMapping shm_;
  mutable bool shm_failed_ = false;  // mapping it failed once: use CMA for this key
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
  pid_t cma_pid_ = 0;                // > 0: one-sided ops use CMA (cma.cc)
  PeerRegionTable peer_table_;       // the peer's region table (valid when cma_pid_ > 0)
  bool native_rma_ = false;          // an rc/dc verbs lane carries RMA (ucp_put/get_nbx)
  bool wired_ = false;               // UCX wireup is done (FinishHandshake / OnWireupDone)
  // Handshake done, waiting for UCX's wireup (verbs lanes, see FinishHandshake); state_ stays
  // kHandshaking until then.
  bool wiring_ = false;
  ucs_status_t wireup_error_ = UCS_OK;  // the wireup probe failed; handled after progress
  uint64_t peer_max_message_ = 0;
  // Liveness (see UcxTransport::CheckLiveness).
  size_t outstanding_ = 0;
  Clock::time_point last_heard_;
  Clock::time_point last_ping_;
  OpState* ops_ = nullptr;  // intrusive list of the Ops in flight on this endpoint
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
  Status Post(std::span<const Op> ops) override;
  size_t Poll(std::span<Completion> out) override;
  Status Wait(Millis timeout) override;
  void Wake() override;

 private:
  friend class UcxEndpoint;
  friend class UcxMemoryRegion;
  friend class UcxRemoteKey;
  friend struct OpState;

  explicit UcxTransport(const TransportOptions& options);
  Status Init();

  // ---- progress (context.cc) ----
  // One round of worker progress plus the deferred control work. Requires mu_.
  unsigned ProgressLocked();
  void ProgressThreadMain();
  void WakeProgressThread();
  // Drops mu_ and sleeps until the worker has events (ucp_worker_arm + its efd) or a short
  // slice (at most 2 ms, never past `deadline`) passes; returns with mu_ held again.
  void SleepOnWorker(std::unique_lock<std::mutex>& lock, Clock::time_point deadline);

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

  // ---- data path (datapath.cc) ----
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                         void* user_data);
  static ucs_status_t OnAmNotify(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
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
  Status CheckOpOwnership(const Op& op, size_t index) const;
  void PostOne(const Op& op);
  void PostRecv(OpState* st, const Op& op);
  void PostOneSided(OpState* st, const Op& op);
  void PostCma(OpState* st, const Op& op);
  // The target region of `rk` mapped into this process (path 1, shareable memory), or nullptr.
  uint8_t* SharedMapping(const UcxRemoteKey* rk, const RegionEntry& entry);
  void StartFlush(OpState* st);
  void SendNotify(OpState* st);
  void StepDone(OpState* st, ucs_status_t status);
  void Finish(OpState* st, ucs_status_t status);
  void CompleteNow(const Op& op, Status status);
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
  HostIdentity identity_;
  bool cma_allowed_ = false;  // UCX_TLS permits cma (see cma.cc)
  bool verbs_lanes_ = false;  // the context has an rc/dc verbs transport (context.cc)
  RegionTable region_table_;  // our live registrations, for CMA peers (when cma_allowed_)
  UniqueFd epoll_;            // control connections + the listening socket
  UniqueFd listen_fd_;
  std::string listen_address_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled by the progress thread when completions arrive
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
  CompletionRing done_;
  // Registered regions by epoch: what the target side of the AM protocol checks against.
  std::unordered_map<uint64_t, UcxMemoryRegion*> regions_;
  // AM one-sided Ops waiting for their reply, by request id.
  std::unordered_map<uint64_t, OpState*> am_ops_;
  uint64_t next_req_id_ = 1;
  std::vector<std::unique_ptr<PendingReply>> replies_;  // owed replies, sent after progress
  std::unordered_set<PendingReply*> replies_sending_;   // handed to UCX, freed by OnReplySent
  // Requests that arrived while our side of their endpoint's handshake was still running.
  std::vector<DeferredRequest> deferred_;
  std::vector<std::unique_ptr<OpState>> op_storage_;
  std::vector<OpState*> op_free_;
  uint32_t tick_ = 0;
  Clock::time_point next_liveness_;
  Clock::time_point next_socket_poll_;

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
  Status cma_error;       // set with UCS_ERR_IO_ERROR by a failed CMA transfer
  NotifyHeader header{};  // kAmNotify header; must live until the send completes
  // AM one-sided protocol (PostAm): request header, segment table, the write's iov, the read's
  // local segments to scatter the reply into, and which halves are still outstanding.
  RmaHeader rma{};
  std::vector<RmaSegment> table;
  std::vector<ucp_dt_iov_t> iov;
  std::vector<RmaSegment> local_segs;  // read: (local offset, length) per segment
  uint8_t* local_base = nullptr;
  bool send_pending = false;
  bool reply_pending = false;
  OpState* prev = nullptr;  // UcxEndpoint::ops_ links
  OpState* next = nullptr;
  bool linked = false;
  // Completed already (OrphanOps); UCX's late callback only frees the request and the state.
  bool orphaned = false;
};

}  // namespace ferry::ucx
