// Ferry's public transport interface. ps/, models/ and tools/ include this header (and
// status.h) only; backend headers (verbs, UCX) never leave their own folders.
//
// The model, in one paragraph:
//   A Transport owns registered memory (MemoryRegion), connections (Endpoint) and a completion
//   queue. Work is posted in batches (Post) and finished work is reaped in batches (Poll). Remote
//   memory is named by a serialisable RemoteRegion descriptor (address, length, access, epoch and
//   the backend's packed key); an initiator imports it once per endpoint into a RemoteKey and then
//   reads or writes it, contiguously or as a sparse list of (local offset, remote offset, length)
//   segments. A write may carry a 32-bit notification that the target receives as a completion
//   after the data has landed (verbs WRITE_WITH_IMM semantics).
//
// Progress model:
//   Nothing moves unless someone drives progress. Poll(), Wait(), Accept() and Connect() drive it
//   on the calling thread. This includes the *target* side of one-sided operations on backends
//   without hardware offload (tcp; ucx over tcp): a process that only serves its memory must keep
//   calling Poll()/Wait() or set TransportOptions::progress_thread, which starts one internal
//   thread that drives progress continuously; completions are then queued for Poll().
//
// Threading:
//   By default (ThreadMode::kMulti) every method of Transport, Endpoint and MemoryRegion is
//   thread-safe. Completions go to whichever thread polls them. A Poll() that finds another thread
//   driving progress returns at once (possibly with nothing) instead of waiting for it. Calls may
//   block only where documented (Accept, Connect, Wait, and a MemoryRegion destructor, which may
//   wait for in-flight target-side accesses to drain).
//   ThreadMode::kSingle (opt-in, as UCX's UCS_THREAD_MODE_SINGLE) is the caller's promise that
//   no two calls into the transport or the objects it handed out ever overlap: one thread at a
//   time, and a hand-over between threads is ordered by the caller (a join, a mutex, an
//   acquire/release pair). The transport then takes no lock on any path. Wake() stays callable
//   from any thread at any time. It cannot be combined with progress_thread.
//
// Lifetimes:
//   - Objects returned by a Transport must be destroyed before the Transport.
//   - A MemoryRegion, RemoteKey, and the segment array of a sparse Op must stay alive until the
//     Op's completion has been polled. Destroying a MemoryRegion deregisters it: later remote
//     accesses with its key fail on the initiator and touch no memory.
//   - Endpoint::Close() completes every Op still pending on it with Code::kCancelled.
//
// Completion semantics:
//   A write (contiguous or sparse) completes on the initiator once its bytes are in the target's
//   memory (remote completion, as an RC ACK); a read once the bytes are in local memory; a send
//   once its buffer may be reused. Completions of different ops may arrive in any order.
//
// Failure model:
//   An operation on a dead, vanished or misbehaving peer completes with an error within
//   TransportOptions::peer_timeout (plus one progress interval): never a hang. The endpoint is
//   then failed for good (Endpoint::status() explains why); create a new one to reconnect.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/shareable.h"  // shareable memory: part of this interface
#include "transport/status.h"

namespace ferry {

using Millis = std::chrono::milliseconds;

// Access rights of a registered region, as an HCA enforces them.
enum Access : uint32_t {
  kAccessLocal = 0,              // local use only (send sources, receive targets)
  kAccessRemoteRead = 1u << 0,   // peers may read it
  kAccessRemoteWrite = 1u << 1,  // peers may write it
  kAccessRemote = kAccessRemoteRead | kAccessRemoteWrite,
};

// What a peer needs to reach a registered region. Plain data, serialisable with
// EncodeRemoteRegion(); meaningful only to endpoints of the same backend kind.
struct RemoteRegion {
  uint64_t addr = 0;          // base address in the owner's address space
  uint64_t length = 0;        // bytes
  uint32_t access = 0;        // Access bits
  uint64_t epoch = 0;         // registration generation, chosen by the owner (see ps/)
  std::vector<uint8_t> rkey;  // the backend's packed remote key

  bool operator==(const RemoteRegion&) const = default;
};

// FlatBuffers encoding (schema: transport/schema/wire.fbs). Decode verifies the buffer and
// rejects malformed, truncated or oversized input with Code::kProtocol; it never crashes.
std::vector<uint8_t> EncodeRemoteRegion(const RemoteRegion& region);
Result<RemoteRegion> DecodeRemoteRegion(std::span<const uint8_t> bytes);

// A registered local region. Owned by the caller; destruction deregisters.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  uint32_t access() const { return access_; }
  // The descriptor to hand to peers (via a message or the handshake).
  const RemoteRegion& descriptor() const { return descriptor_; }

 protected:
  MemoryRegion(uint8_t* data, size_t size, uint32_t access)
      : data_(data), size_(size), access_(access) {}
  uint8_t* data_;
  size_t size_;
  uint32_t access_;
  RemoteRegion descriptor_;  // filled in by the backend
};

// A peer's region imported for use on one endpoint (UCX: an unpacked rkey). Owned by the caller.
class RemoteKey {
 public:
  virtual ~RemoteKey() = default;
  RemoteKey(const RemoteKey&) = delete;
  RemoteKey& operator=(const RemoteKey&) = delete;
  const RemoteRegion& region() const { return region_; }

 protected:
  explicit RemoteKey(RemoteRegion region) : region_(std::move(region)) {}
  RemoteRegion region_;
};

// One connection to a peer. Shared between the caller and the transport.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  uint64_t id() const { return id_; }  // unique within this transport
  const std::string& peer_address() const { return peer_address_; }
  // Regions the peer advertised in its handshake (TransportOptions::advertise / Advertise()).
  const std::vector<RemoteRegion>& peer_regions() const { return peer_regions_; }
  // Opaque bytes the peer passed in its handshake (TransportOptions::hello_info).
  const std::vector<uint8_t>& peer_info() const { return peer_info_; }

  // Ok while healthy; the reason once failed or closed.
  virtual Status status() const = 0;
  // Prepares a peer's region for one-sided operations on this endpoint.
  virtual Result<std::unique_ptr<RemoteKey>> Import(const RemoteRegion& region) = 0;
  // Closes the connection; pending Ops complete with kCancelled. Idempotent, non-blocking.
  virtual void Close() = 0;

 protected:
  Endpoint() = default;
  uint64_t id_ = 0;
  std::string peer_address_;
  std::vector<RemoteRegion> peer_regions_;
  std::vector<uint8_t> peer_info_;
};

// A sparse transfer moves segments between ONE local and ONE remote region. Each segment is
// contiguous on both sides; the list may have any order, overlap on the source side, and any
// alignment. (Overlap on the destination side leaves the destination bytes unspecified.)
struct Segment {
  uint64_t local_offset = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

// Appends `s` to a segment list, or extends the last segment instead when `s` continues it on
// both sides (its local and remote bytes follow the last's): rows that happen to be neighbours on
// both sides then move as one run. Every builder of a sparse op's list uses this.
inline void AppendMergedSegment(std::vector<Segment>& segments, const Segment& s) {
  if (!segments.empty()) {
    Segment& last = segments.back();
    if (last.local_offset + last.length == s.local_offset &&
        last.remote_offset + last.length == s.remote_offset) {
      last.length += s.length;
      return;
    }
  }
  segments.push_back(s);
}

enum class OpType : uint8_t {
  kSend,         // two-sided: local[local_offset, +length) to the peer's next matching Recv
  kRecv,         // two-sided: receive one message into local[local_offset, +length)
  kWrite,        // one-sided: local[local_offset,+length) -> remote[remote_offset,+length)
  kRead,         // one-sided: remote[remote_offset,+length) -> local[local_offset,+length)
  kSparseWrite,  // one-sided: every segment local -> remote
  kSparseRead,   // one-sided: every segment remote -> local
  kNotify,       // completion only: a peer's write with kOpNotify has landed here
};
std::string_view OpTypeName(OpType type);

enum OpFlags : uint8_t {
  kOpNone = 0,
  // On kWrite / kSparseWrite: after all bytes have landed, the target receives a kNotify
  // completion carrying `imm` (and the endpoint). The initiator's completion is unchanged.
  kOpNotify = 1u << 0,
};

struct Op {
  OpType type = OpType::kSend;
  uint8_t flags = kOpNone;
  uint32_t imm = 0;        // with kOpNotify
  Endpoint* ep = nullptr;  // kRecv: nullptr receives from any endpoint (shared queue)
  uint64_t context = 0;    // returned verbatim in the Completion
  const MemoryRegion* local = nullptr;
  uint64_t local_offset = 0;          // contiguous ops
  uint64_t length = 0;                // contiguous ops; kRecv: capacity
  const RemoteKey* remote = nullptr;  // one-sided ops
  uint64_t remote_offset = 0;         // contiguous one-sided ops
  const Segment* segments = nullptr;  // sparse ops; borrowed until completion
  size_t num_segments = 0;
};

struct Completion {
  uint64_t context = 0;
  OpType type = OpType::kSend;
  Code code = Code::kOk;
  Endpoint* ep = nullptr;  // kRecv / kNotify: the sender
  uint64_t bytes = 0;      // bytes moved (kRecv: message length)
  uint32_t imm = 0;        // kNotify
  std::string error;       // empty on success; a sentence otherwise

  bool ok() const { return code == Code::kOk; }
};

struct Capabilities {
  bool send_recv = false;
  bool write = false;
  bool read = false;
  bool sparse_write = false;
  bool sparse_read = false;
  bool notify = false;            // kOpNotify on writes
  bool zero_copy_sparse = false;  // sparse lists never packed into a temporary buffer
  bool shared_recv = false;       // kRecv with ep == nullptr
  // The target side (software or HCA) rejects accesses that a forged or stale descriptor would
  // allow: outside the registered region, without the access right, or with a deregistered key.
  // When false, only the initiator's checks against the descriptor protect the target. (Every
  // built-in backend checks; ucx over CMA does so against the target's published region table.)
  bool target_checks = false;
  // Narrower: once DeregisterMemory returns, the target refuses every access through the old
  // key (one already on the wire may still land). Implied by target_checks; ucx over RDMA
  // lanes has this one alone (its HCA registrations keep full rights: see ucx_transport.h).
  bool final_deregistration = false;
  uint64_t max_message_size = 0;  // largest Send / Write / Read
  uint64_t max_segments = 0;      // largest sparse list per Op
};

// One device or interface a backend can use, for ferry-info.
struct DeviceInfo {
  std::string name;                               // "lo", "rxe0:1", "posix"
  std::string kind;                               // "netdev", "rdma", "shm", ...
  int numa_node = -1;                             // -1: unknown / not applicable
  std::map<std::string, std::string> attributes;  // port state, GIDs, MTU, max_sge, ...
};

// Who may call into a transport at once (see "Threading" above).
enum class ThreadMode : uint8_t {
  kMulti,   // any thread, concurrently (the default)
  kSingle,  // the caller serialises every call; no locks are taken
};

struct TransportOptions {
  // Backend parameters, e.g. {"UCX_TLS", "posix,cma,self"} or {"device", "rxe0"}. Unknown keys are
  // an error at creation, so typos are caught.
  std::map<std::string, std::string> params;
  // Bound on noticing a dead or silent peer; every affected Op completes with an error by then.
  Millis peer_timeout{5000};
  // Regions sent to every peer in the handshake (see Endpoint::peer_regions()).
  std::vector<RemoteRegion> advertise;
  // Opaque bytes sent to every peer in the handshake (Endpoint::peer_info()).
  std::vector<uint8_t> hello_info;
  // Optional shared secret; peers presenting a different one are refused before any region
  // descriptor is revealed. Never logged.
  std::string secret;
  // Limits applied to everything a peer sends.
  uint64_t max_message_size = 1ull << 30;
  uint64_t max_segments = 1u << 20;
  uint32_t max_endpoints = 4096;
  // Start an internal thread that drives progress (see the progress model above).
  bool progress_thread = false;
  // kSingle: the caller promises one thread at a time (see "Threading" above); creation fails
  // with kInvalidArgument together with progress_thread.
  ThreadMode thread_mode = ThreadMode::kMulti;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  virtual std::string_view name() const = 0;  // "tcp", "ucx", "verbs"
  virtual const Capabilities& capabilities() const = 0;
  virtual std::vector<DeviceInfo> devices() const = 0;

  // Registers [addr, addr+length). The caller keeps ownership of the memory.
  virtual Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                               uint32_t access) = 0;
  // Replaces the regions sent in future handshakes (existing endpoints keep the old list).
  virtual void Advertise(std::vector<RemoteRegion> regions) = 0;

  // Starts listening on "host:port" (port 0 picks one); returns the bound "host:port".
  virtual Result<std::string> Listen(const std::string& address) = 0;
  // Blocks until a peer has connected and completed the handshake, or the timeout expires.
  virtual Result<std::shared_ptr<Endpoint>> Accept(Millis timeout) = 0;
  // Connects and handshakes; blocks up to `timeout`.
  virtual Result<std::shared_ptr<Endpoint>> Connect(const std::string& address, Millis timeout) = 0;

  // Validates every Op first; if any is malformed (bad region bounds, missing key, capability the
  // backend lacks, too many segments, an endpoint, region or key of another transport) nothing
  // is posted and the error names the Op's index. Otherwise all are posted and each completes
  // exactly once. Ops on a failed endpoint complete with its error. Non-blocking.
  // Not virtual: the checks are the same for every backend (ValidateOp, then the backend's
  // CheckOwnership hook, op by op), and only then does the backend's PostValidated run.
  Status Post(std::span<const Op> ops);
  // Returns up to out.size() completions. When none are queued (or `out` is empty) it first
  // drives progress once, except that under ThreadMode::kMulti a Poll that finds another thread
  // driving progress at that moment does not wait for it and returns what is queued (possibly
  // nothing). Non-blocking; allocation-free once warm. An empty `out` only drives progress.
  virtual size_t Poll(std::span<Completion> out) = 0;
  // Blocks until Poll may return something, `timeout` passes, or Wake() is called (driving
  // progress meanwhile); over tcp also when an endpoint fails (its status() changed). When
  // `timeout` passes it returns kTimeout (tcp, ucx) or Ok (verbs), without allocating: idle loops
  // call it.
  virtual Status Wait(Millis timeout) = 0;
  // Makes a Wait() blocked now in another thread, or else the next Wait() to start, return Ok
  // promptly, possibly with nothing to poll. For a thread that sleeps in Wait() and must also
  // react to events from outside this transport (another transport's messages, a queue).
  // Thread-safe, non-blocking, one eventfd write; wake-ups do not accumulate.
  virtual void Wake() = 0;

 protected:
  Transport() = default;

  // Post's ownership hook, called once per Op after ValidateOp accepted it: Ok when the Op's
  // endpoint, local region and remote key belong to this transport (and the Op fits what the
  // peer announced in its handshake); otherwise an error naming Op `index`. Runs for every
  // posted Op, so it must not allocate unless it fails (backend.h ForeignError words the common
  // failures). Called without any backend lock: it may read only what stays fixed while the
  // Op's objects are alive. Thread-safe, non-blocking.
  virtual Status CheckOwnership(const Op& op, size_t index) const = 0;
  // Posts a batch that passed Post's checks; the rest of Post's contract applies.
  virtual Status PostValidated(std::span<const Op> ops) = 0;
};

// ---- Backends -------------------------------------------------------------------------------

struct BackendInfo {
  std::string name;
  int priority = 0;  // higher is preferred: verbs > ucx > tcp
  bool available = false;
  std::string reason;  // why it is unavailable (missing device, not built)
};

// All backends compiled in, highest priority first, with run-time availability.
std::vector<BackendInfo> ListBackends();
// Creates a named backend ("tcp", "ucx", "verbs").
Result<std::unique_ptr<Transport>> CreateTransport(std::string_view name,
                                                   const TransportOptions& options);
// Creates the highest-priority backend that is available (verbs -> ucx -> tcp).
Result<std::unique_ptr<Transport>> CreateBestTransport(const TransportOptions& options);

}  // namespace ferry
