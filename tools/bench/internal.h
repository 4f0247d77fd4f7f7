// Internal to ferry_bench: the state shared by the session (setup, control, phases) and the
// measurement kernels. Not for the tools' mains (they use runner.h).
//
// Structure of one side (client or server):
//
//   Side
//   ├── transport               one Transport for everything
//   ├── control endpoint        JSON control messages (config ack, regions, phase barriers)
//   ├── streams[]               one data endpoint each; stream i < E: the client initiates,
//   │                           stream i >= E (bidir only): the server initiates
//   │     region layout:  [ credit buffers | src area (slots x payload) | target area ]
//   └── router                  completions -> the thread that owns the stream
//
// A phase is one message size. Data endpoints are connected per phase and closed after it, so
// every receive still posted at the end of a phase is cancelled and reaped (Endpoint::Close),
// and each phase starts from a clean slate.
//
// Threading: during a phase each stream is touched only by its owning worker; between phases
// only by the main thread. `expected` is the one field the main thread writes during a phase.
// With one worker (the runs perf/compare measures) the worker is the transport's only caller
// during a phase (Router::SetSolePoller: the main thread's posts go through the router's
// outbox), so the transport can run under ThreadMode::kSingle, as ucx_perftest's does.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tools/bench/config.h"
#include "tools/bench/stats.h"
#include "tools/bench/timer.h"
#include "transport/pool.h"
#include "transport/transport.h"

namespace ferry::bench::internal {

inline uint64_t NowNs() { return TickClock::SteadyNs(); }

// Completion context layout (64 bits):  owner:8 | kind:8 | stream:16 | slot:32
enum class Kind : uint8_t {
  kControl = 1,      // control endpoint send/recv (main thread)
  kData = 2,         // a data op this side initiated (send, write, read, sparse)
  kRecv = 3,         // a data receive (send op, target side)
  kCreditRecv = 4,   // a credit message receive (initiator side)
  kCreditSend = 5,   // a credit message send (target side)
  kNotify = 6,       // rewritten by the router for kNotify completions
  kRequestSend = 7,  // pack_read: the initiator's request send
  kReplySend = 8,    // pack_read: the target's packed reply send
};
inline uint64_t MakeContext(uint8_t owner, Kind kind, uint32_t stream, uint32_t slot) {
  return (uint64_t{owner} << 56) | (uint64_t{static_cast<uint8_t>(kind)} << 48) |
         (uint64_t{stream & 0xffff} << 32) | slot;
}
inline uint8_t ContextOwner(uint64_t c) {
  return static_cast<uint8_t>(c >> 56);
}
inline Kind ContextKind(uint64_t c) {
  return static_cast<Kind>((c >> 48) & 0xff);
}
inline uint32_t ContextStream(uint64_t c) {
  return static_cast<uint32_t>((c >> 32) & 0xffff);
}
inline uint32_t ContextSlot(uint64_t c) {
  return static_cast<uint32_t>(c);
}

inline constexpr uint8_t kMainOwner = 0;
inline constexpr uint32_t kCreditBuffers = 8;  // per direction, per stream
inline constexpr uint64_t kCreditBufSize = 64;
inline constexpr uint64_t kCreditAreaBytes = 4096;  // 2 x 8 x 64 + pack_read requests, a page
// pack_read requests (16 bytes: magic, seq) live in the credit area after the credit buffers,
// one per slot: at most kMaxPackReadDepth * 2 of them.
inline constexpr uint64_t kRequestArea = 2 * kCreditBuffers * kCreditBufSize;
inline constexpr uint64_t kRequestBytes = 16;
inline constexpr uint64_t kRequestMagic = 0x46455252595251ull;  // "FERRYRQ"
static_assert(kRequestArea + 2 * kMaxPackReadDepth * kRequestBytes <= kCreditAreaBytes);
inline constexpr uint64_t kCreditMagic = 0x46455252594352ull;  // "FERRYCR"
inline constexpr uint64_t kSlotBudget = 32ull << 20;           // bytes of rotating buffers per area

// How one phase uses the areas.
struct Geometry {
  uint64_t size = 0;        // bytes per operation (contiguous size, or rows * row_size)
  uint64_t slots = 2;       // rotating buffers in the src area / partitions of the target area
  uint64_t depth = 1;       // outstanding data ops per stream
  bool notify = false;      // writes carry kOpNotify (write_imm; checked sparse_write)
  bool credits = false;     // the target returns credits (two-sided or notify-verified ops)
  bool tags = false;        // latency write/sparse_write: arrival seen by a tag byte per row
  bool requests = false;    // pack_read: the target answers every request with packed rows
  uint64_t part_bytes = 0;  // rows ops: target-area bytes per partition
  uint64_t part_rows = 0;   // rows ops: rows eligible per partition
  Check check = Check::kFull;
  // Check::kRef bandwidth: every op uses slot 0's buffers, as the reference tools re-send one
  // buffer (slots still pace the window and the credits).
  bool shared = false;

  // Offsets of slot `slot` in the src area, in the target area (contiguous ops), and of a
  // pack_write's packed rows in the target area.
  uint64_t SrcOffset(uint64_t slot) const { return shared ? 0 : slot * size; }
  uint64_t TargetOffset(uint64_t slot) const { return shared ? 0 : slot * size; }
  uint64_t PackOffset(uint64_t slot) const { return shared ? 0 : slot * part_bytes; }
};
Geometry MakeGeometry(const BenchConfig& c, uint64_t size, Check check, const Capabilities& caps);
uint64_t SrcAreaBytes(const BenchConfig& c, const Capabilities& caps);
uint64_t TargetAreaBytes(const BenchConfig& c, const Capabilities& caps);

struct FreeDeleter {
  void operator()(uint8_t* p) const;
};

struct Stream {
  uint32_t index = 0;
  bool initiator = false;  // this side initiates the data on this stream
  uint8_t owner = 1;
  // Destruction order matters: the key and endpoint go before the region, the region before
  // the memory (declared in construction order, destroyed in reverse). Shareable (a memfd), so
  // that same-host peers of backends that can (ucx over shm) copy into it directly.
  ShareableMemory memory;
  uint64_t memory_bytes = 0;
  std::unique_ptr<MemoryRegion> mr;
  RemoteRegion peer;  // the peer's region for this stream
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<RemoteKey> rkey;

  // Offsets inside the local region (the peer's region has the same layout).
  uint64_t credit_tx = 0, credit_rx = kCreditBuffers * kCreditBufSize;
  uint64_t src = kCreditAreaBytes, target = 0;

  // ---- per-phase state (reset by ResetPhase) ----
  uint64_t outstanding = 0;     // ops posted and not yet reaped (all kinds), for draining
  uint64_t posted = 0;          // data ops initiated
  uint64_t completed = 0;       // data ops reaped
  uint64_t arrivals = 0;        // receives / notifications from the peer's data ops
  uint64_t verified = 0;        // target: arrivals checked (bandwidth)
  uint64_t granted = 0;         // initiator: verified count the target last reported
  uint64_t credit_sent = 0;     // target: verified count last reported
  uint32_t credit_tx_busy = 0;  // bitmask of credit send buffers in flight
  uint64_t handled = 0;         // latency responder: requests answered
  bool stop_posting = false;
  bool finished = false;
  uint64_t last_recv_bytes = 0;
  // Per slot: kSlotData while its data op (or pack_read reply) is in flight, kSlotRequest while
  // a pack_read request from it is; the slot is reused only when both are clear.
  std::vector<uint8_t> slot_busy;
  std::vector<uint64_t> slot_seq;              // the op last posted in each slot
  std::vector<std::vector<Segment>> segs;      // sparse: the row list of each slot in flight
  std::atomic<uint64_t> expected{UINT64_MAX};  // the peer's data-op count (main thread sets)
  BandwidthMeter meter;
  std::vector<double> samples;  // latency, microseconds
  Status error;
};

inline uint8_t* Base(Stream& s) { return s.memory.data(); }
inline std::string StreamName(const Stream& s) { return "stream " + std::to_string(s.index); }

inline constexpr uint8_t kSlotData = 1;
inline constexpr uint8_t kSlotRequest = 2;

// Routes completions to the thread that owns them (see the context layout). Thread-safe.
class Router {
 public:
  void Init(Transport* transport, size_t owners);
  // Posts `ops` for `owner`. While another owner is the sole poller, they are queued and that
  // poller posts them on its next Poll (or when it clears the mode), so that it stays the
  // transport's only caller; a failure to post them comes back to `owner` as failed completions.
  // Otherwise they are posted at once. Thread-safe.
  Status Post(uint8_t owner, std::span<const Op> ops);
  // Endpoint -> (owner, stream) for kNotify completions, which carry no context of ours.
  // Main thread only, while no worker runs.
  void Map(Endpoint* ep, uint8_t owner, uint32_t stream);
  void Unmap(Endpoint* ep);
  // Polls once and hands `owner`'s completions (plus any queued for it) to `handle`;
  // completions for other owners are queued for them. Returns how many were handled.
  // Not reentrant per owner: `handle` must not Poll for the same owner (it uses the owner's
  // buffer).
  template <typename F>
  size_t Poll(uint8_t owner, F&& handle);
  // Drain mode (main thread, no worker running): hands every completion to `handle`.
  template <typename F>
  size_t PollAll(F&& handle);

  // Sole-poller mode (a phase with one worker): only `owner` polls the transport, without
  // poll_mu_; every other owner's Poll() only drains its mailbox, so the main thread's control
  // polling never takes the transport's lock while the worker measures. Set by the main thread
  // before the worker starts; cleared by the worker after its last Poll() (and again by the main
  // thread after joining it), after which the others poll the transport themselves again.
  void SetSolePoller(uint8_t owner) { sole_.store(owner, std::memory_order_release); }
  // Posts what is still queued, then ends the mode. Called by the sole poller after its last
  // Poll, or by the main thread once that worker is joined.
  void ClearSolePoller();
  bool HasSolePoller() const { return sole_.load(std::memory_order_acquire) != kNoSole; }

 private:
  static constexpr size_t kBatch = 32;
  struct Mailbox {
    std::mutex mu;
    std::vector<Completion> items;
    std::atomic<bool> nonempty{false};
    // The owner's own completions of one Poll; touched only by the owning thread.
    Completion direct[kBatch];
  };
  uint8_t Route(Completion& c);
  // Posts the outbox (post_mu_ held): by the sole poller, or after it.
  void FlushOutboxLocked();
  static constexpr int kNoSole = -1;
  Transport* transport_ = nullptr;
  std::atomic<int> sole_{kNoSole};
  std::mutex poll_mu_;
  // The buffers live as long as the router: Completion holds a std::string, and constructing and
  // destroying 2 x 32 of them on the stack in every Poll was 20-26 % of each ping-pong process's
  // samples (perf, ucx shm; docs/perf/transport-analysis.md).
  Completion polled_[kBatch];  // guarded by poll_mu_
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::unordered_map<Endpoint*, std::pair<uint8_t, uint32_t>> eps_;
  // Ops other owners posted while a sole poller runs, in order.
  std::mutex post_mu_;
  std::vector<std::pair<uint8_t, Op>> outbox_;  // (owner, op)
  std::atomic<bool> outbox_nonempty_{false};
};

// Ordering: a stream's completions must be handled in the transport's order (receives match
// posts in order; credits only grow). Polling and routing therefore happen under poll_mu_ (or by
// the sole poller alone), and an owner handles what it polled itself only when its mailbox was
// empty at that moment (nothing older is queued for it); otherwise everything goes through the
// mailbox, in order.
template <typename F>
size_t Router::Poll(uint8_t owner, F&& handle) {
  Mailbox& mine = *boxes_[owner];
  Completion* const direct = mine.direct;
  size_t ndirect = 0;
  const int sole = sole_.load(std::memory_order_acquire);
  if (sole == kNoSole || sole == owner) {
    // The sole poller skips poll_mu_: nobody else polls until it clears the mode after its last
    // Poll(), and that release store orders this buffer's use before theirs.
    std::unique_lock<std::mutex> poll_lock(poll_mu_, std::defer_lock);
    if (sole == kNoSole) poll_lock.lock();
    if (sole == owner && outbox_nonempty_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(post_mu_);
      FlushOutboxLocked();
    }
    Completion* const buf = polled_;
    const size_t n = transport_->Poll(std::span<Completion>(buf, kBatch));
    for (size_t i = 0; i < n; ++i) {
      const uint8_t to = Route(buf[i]);
      if (to == owner && !mine.nonempty.load(std::memory_order_acquire)) {
        direct[ndirect++] = std::move(buf[i]);
        continue;
      }
      Mailbox& box = *boxes_[to];
      std::lock_guard<std::mutex> lock(box.mu);
      box.items.push_back(std::move(buf[i]));
      box.nonempty.store(true, std::memory_order_release);
    }
  }
  for (size_t i = 0; i < ndirect; ++i) handle(direct[i]);
  size_t handled = ndirect;
  if (mine.nonempty.load(std::memory_order_acquire)) {
    std::vector<Completion> items;
    {
      std::lock_guard<std::mutex> lock(mine.mu);
      items.swap(mine.items);
      mine.nonempty.store(false, std::memory_order_release);
    }
    for (Completion& c : items) handle(c);
    handled += items.size();
  }
  return handled;
}

template <typename F>
size_t Router::PollAll(F&& handle) {
  size_t handled = 0;
  for (auto& box : boxes_) {  // queued completions are older than anything polled now
    std::vector<Completion> items;
    {
      std::lock_guard<std::mutex> lock(box->mu);
      items.swap(box->items);
      box->nonempty.store(false, std::memory_order_release);
    }
    for (Completion& c : items) handle(c);
    handled += items.size();
  }
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  const size_t n = transport_->Poll(std::span<Completion>(polled_, kBatch));
  for (size_t i = 0; i < n; ++i) {
    Route(polled_[i]);
    handle(polled_[i]);
  }
  return handled + n;
}

// One phase as both sides compute it.
struct Phase {
  uint32_t index = 0;
  Geometry g;
  std::vector<uint32_t> perm;  // rows ops: a permutation of a partition's rows (row choice)
};
Phase MakePhase(const BenchConfig& c, uint32_t index, const PhaseSpec& spec,
                const Capabilities& caps);
// Index into Phase::perm of row 0 of op `seq`; row k uses perm[(start + k) % part_rows].
uint64_t RowStart(const BenchConfig& c, const Phase& p, const Stream& s, uint64_t seq);
// Offset inside the target area of row k of op `seq` (which uses partition seq % slots).
uint64_t RowOffset(const BenchConfig& c, const Phase& p, const Stream& s, uint64_t seq, uint64_t k);

// One side of a session. Members in construction order: everything the transport hands out is
// declared after it and so destroyed before it.
struct Side {
  bool client = false;
  BenchConfig config;
  std::unique_ptr<Transport> transport;
  Capabilities caps;
  std::unique_ptr<uint8_t, FreeDeleter> control_memory;
  uint64_t control_half = 0;  // control region = [tx | rx], each control_half bytes
  std::unique_ptr<MemoryRegion> control_mr;
  std::shared_ptr<Endpoint> control;
  std::vector<std::unique_ptr<Stream>> streams;
  Router router;

  std::atomic<bool> abort{false};
  std::atomic<uint32_t> initiators_done{0};  // streams whose initiator part has finished

  // Records the first error and tells every loop to stop.
  void Fail(const Status& s);
  Status FirstError();

 private:
  std::mutex error_mu_;
  Status first_error_;
};

// A worker thread's share of the streams.
struct Worker {
  uint8_t owner = 1;
  std::vector<Stream*> streams;
  Status status;
};

// Ok while the control and every data endpoint are healthy (callable from any thread).
Status EndpointsHealthy(Side& side);

// Seeds of the patterns (both sides derive the same ones).
uint64_t RequestSeed(const BenchConfig& c, const Stream& s, const Phase& p, uint64_t seq);
uint64_t ReplySeed(const BenchConfig& c, const Stream& s, const Phase& p, uint64_t seq);
uint64_t RegionSeed(const BenchConfig& c, const Stream& s, const Phase& p);

// ---- payloads (payload.cc): patterns, tags, row lists, gathers and checks ----

inline uint8_t LoadByte(const uint8_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
// The tag of op `seq` (never 0, which the target area starts as).
inline uint8_t Tag(uint64_t seq) { return static_cast<uint8_t>(1 + seq % 251); }

// Offsets of the rows of op `seq` in the target area, in row order: RowOffset(seq, k) for
// k = 0, 1, ... with the per-op hash (four splitmix rounds) computed once instead of per row.
class RowWalk {
 public:
  RowWalk(const BenchConfig& c, const Phase& p, const Stream& s, uint64_t seq);
  uint64_t Next() {
    const uint64_t off = base_ + uint64_t{perm_[idx_]} * row_size_;
    if (++idx_ == part_rows_) idx_ = 0;
    return off;
  }

 private:
  const uint32_t* perm_;
  uint64_t part_rows_, row_size_, base_, idx_;
};

// The segment list of sparse op `seq` into s.segs[slot].
void BuildSegments(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq);
// pack_write / pack_read: copies the rows of op `seq` from s's own target area into its src slot.
void GatherRows(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq);
// Prepares the source of op `seq`: the pattern (kFull), tags, the row list, or the gather.
void FillOutgoing(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, uint64_t seed);
// Before a read: the row list, and (kFull) the complement of the expected first and last byte
// of each destination, so a read that moved nothing cannot pass the check.
void PoisonRead(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq);
// Rows of op `seq` laid out contiguously at `got` against the region pattern where they belong.
Status CheckRows(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, const uint8_t* got,
                 const std::string& what);
// A completed read (or pack_read reply) of op `seq` against the target's region pattern (kFull).
Status CheckRead(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq);
// Whether the payload of the peer's op `seq` in my target area matches (no message built), and
// the detailed error when it does not.
bool IncomingMatches(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, uint64_t seed);
Status IncomingError(const BenchConfig& c, const Phase& p, Stream& s, uint64_t seq, uint64_t seed);

// Kernels (kernels.cc). ResetPhase and PreparePhase run on the main thread before the phase;
// RunWorker on the worker's thread; it returns when the worker's streams are finished, on the
// first error, or when side.abort is set.
void ResetPhase(Stream& s, const Phase& p);
Status PreparePhase(Side& side, Stream& s, const Phase& p);
Status RunWorker(Side& side, Worker& w, const Phase& p);

}  // namespace ferry::bench::internal
