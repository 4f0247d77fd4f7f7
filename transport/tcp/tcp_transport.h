// The tcp backend's hub header (never included outside transport/tcp/ and its tests).
//
// Architecture:
//   One TcpTransport owns an epoll set, the listening sockets, every connection (Conn), the table
//   of registered regions and the completion queue. One mutex (mu_) guards all of it; every
//   public method takes it, so all are thread-safe (Post's ownership hook reads only what is
//   fixed while the objects live, and takes none). Progress (socket I/O) runs on whichever
//   thread calls Poll/Wait/Accept/Connect, or on the internal progress thread when
//   TransportOptions::progress_thread is set. epoll_wait itself runs with the mutex released.
//   Idle Poll (ThreadMode::kMulti, no progress thread): nothing queued, no timer due and an
//   epoll_wait(0) that reports nothing return without touching mu_ (queued_ and next_timer_ns_
//   are the atomics it reads); with events it only tries the lock, since a thread holding it is
//   driving progress already (level-triggered epoll reports the events again).
//   ThreadMode::kSingle: mu_ is a no-op (common::MaybeMutex); the caller serialises the calls.
//
//   A Conn goes kConnecting (client) -> kHandshake -> kOpen -> kFailed. Server-side Conns have no
//   Endpoint handle until their handshake completes; then they are queued for Accept().
//   A handle (TcpEndpoint) is the only owner of an established Conn's lifetime: destroying it
//   closes the socket and frees the Conn.
//
// Files (the names verbs and ucx use for the same concerns): setup.cc (options, progress,
// Poll/Wait, registry entry), connect.cc (sockets, handshake, failure), datapath.cc (the
// ownership hook, PostValidated, framing, sendmsg), receive.cc (the receive state machine),
// memory.cc (registration, target-side key lookup, remote keys), wire.{h,cc} (frame layout),
// cursor.{h,cc} (iovec walking). Shared plumbing (sockets, fds, the ring, the segment check)
// is in transport/common/.
#pragma once

#include <sys/epoll.h>
#include <sys/uio.h>

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
#include "transport/common/fd.h"
#include "transport/common/maybe_mutex.h"
#include "transport/common/ring.h"
#include "transport/handshake.h"
#include "transport/tcp/cursor.h"
#include "transport/tcp/wire.h"

namespace ferry::tcp {

using common::Ring;
using common::UniqueFd;
using Clock = std::chrono::steady_clock;

inline constexpr size_t kMaxIov = 1024;  // IOV_MAX on Linux
// Receive look-ahead (see Rx): a header read takes up to kCtrlSize bytes, so a message up to
// about 8 KiB arrives with its header in one recv(); the iovec appended to a payload's readv
// takes only kTailLookAhead, so that bulk streams copy little out of the look-ahead.
inline constexpr size_t kCtrlSize = 8192;
inline constexpr size_t kTailLookAhead = 512;
inline constexpr uint64_t kDefaultUnexpectedLimit = 64ull << 20;
// Target of a sparse write whose rows average at most this many bytes: the payload is received
// into the connection's scratch buffer and scattered with non-temporal stores (Rx::bounce,
// common::ScatterRow) instead of one readv iovec per row. End to end (ferry-bw, loopback, rows
// at random places of a 64 MiB region, alternated A/B, docs/perf/tcp-profile.md) the bounce
// gives 2.3x the rows/s at 256 B, 1.6-2.0x at 1 KiB and 1.2-1.4x at 16 KiB: the kernel's
// copy into each row reads the destination lines first, ScatterRow does not. Parameter
// bounce_max_row overrides it (0 disables).
inline constexpr uint64_t kDefaultBounceMaxRow = 16384;
// Target of a sparse read whose rows average at most this many bytes: the response is gathered
// chunk by chunk into the tx scratch and sent as one buffer (TxItem::gather) instead of one
// sendmsg iovec per row; the initiator of a sparse write does the same for its source rows
// (ShouldGatherSource: a parameter server's pull reply). Same A/B: 2.2x at 256 B, even at 1 KiB, 0.7-0.75x at 4-16 KiB (there
// the kernel's per-iovec cost is small next to the extra copy). Parameter gather_max_row.
inline constexpr uint64_t kDefaultGatherMaxRow = 512;

// Whether the target receives a checked sparse write of `total` bytes in `nsegs` rows through
// the bounce buffer: rows averaging at most max_row bytes (max_row 0: never).
inline bool ShouldBounce(uint64_t total, size_t nsegs, uint64_t max_row) {
  return max_row > 0 && nsegs > 1 && total / nsegs <= max_row;
}

// Whether the initiator of a sparse write of `total` bytes gathers its rows into the tx scratch
// (TxItem::gather, as the target of a sparse read does) instead of one sendmsg iovec per run:
// the runs of rows that touch on its side (one iovec each, Cursor::Fill) average at most
// max_row bytes (gather_max_row). Rows already packed are one run and go out as they are.
inline bool ShouldGatherSource(const Segment* segs, size_t nsegs, uint64_t total,
                               uint64_t max_row) {
  if (!ShouldBounce(total, nsegs, max_row)) return false;  // fewer runs only raise the average
  size_t runs = 1;
  for (size_t i = 1; i < nsegs; ++i) {
    runs += segs[i].local_offset != segs[i - 1].local_offset + segs[i - 1].length;
  }
  return ShouldBounce(total, runs, max_row);
}

// An initiator's one-sided op awaiting its reply (FIFO per connection, replies come in order).
struct PendingOp {
  uint64_t req_id = 0;
  OpType type = OpType::kWrite;
  uint64_t context = 0;
  uint64_t bytes = 0;
  uint8_t* local = nullptr;       // reads: destination base (region data)
  uint64_t local_offset = 0;      // contiguous read
  const Segment* segs = nullptr;  // sparse read
  size_t nsegs = 0;
};

// Whether a reply header `h` answers the oldest outstanding request (nullptr: none): same req_id,
// a kResponse to a read carries an error (a read succeeds by kReadResponse), and a kReadResponse
// answers a read with exactly the bytes requested. The error is a kProtocol naming `peer`.
Status CheckReply(const PendingOp* oldest, const FrameHeader& h, const std::string& peer);

// One ReadData call's allowance. A peer that streams faster than we consume must not starve
// other connections and timers: after 64 reads the call returns; level-triggered epoll reports
// the socket again.
struct ReadRound {
  bool drained = false;  // a short read: the socket is empty, do not ask again this round
  int budget = 64;
  // True when no further read may be made; otherwise uses up one read.
  bool Spent() { return drained || --budget < 0; }
};

struct PostedRecv {
  uint64_t context = 0;
  uint8_t* dst = nullptr;
  uint64_t capacity = 0;
};

// Receive state machine. Headers are read into `ctrl` (with a look-ahead so that a frame of up
// to ~8 KiB costs one system call); payloads and segment tables are read with readv() straight
// into their destination, with kTailLookAhead bytes of `ctrl` appended as the last iovec to pick
// up the next header. Payload bytes that arrived in the look-ahead are copied out of it. The
// exception is `bounce` below (small-row sparse writes on the target).
struct Rx {
  enum class Phase : uint8_t { kHeader, kTable, kBody };
  Phase phase = Phase::kHeader;
  uint8_t ctrl[kCtrlSize];
  size_t ctrl_begin = 0;
  size_t ctrl_end = 0;
  FrameHeader hdr;
  Cursor dst;
  Status verdict;           // target side: why the current request is refused
  uint64_t region_key = 0;  // target region the current write streams into (0: none)
  bool has_recv = false;    // a message is landing in `recv`
  bool recv_too_small = false;
  PostedRecv recv;
  // Target of a checked sparse write with small rows: each readv fills Conn::scratch (plus the
  // look-ahead at the frame's end) and CopyIn scatters it; the checks ran before, in OnTable.
  bool bounce = false;
  bool unexpected = false;  // a message is landing in `unexpected_buf`
  std::vector<uint8_t> unexpected_buf;
  std::vector<Segment> table;   // sparse requests, reused
  std::vector<uint8_t> packed;  // a packed table as it arrives (decoded into `table`), reused
  std::string text;             // error text of a kResponse
};

class TcpTransport;
class TcpEndpoint;
class TcpRegion;

inline Completion DoneCompletion(uint64_t context, OpType type, Endpoint* ep, uint64_t bytes) {
  Completion c;
  c.context = context;
  c.type = type;
  c.ep = ep;
  c.bytes = bytes;
  return c;
}

inline Completion ErrorCompletion(uint64_t context, OpType type, Endpoint* ep, const Status& s) {
  Completion c = DoneCompletion(context, type, ep, 0);
  c.code = s.code();
  c.error = s.message();
  return c;
}

struct Conn {
  enum class State : uint8_t { kConnecting, kHandshake, kOpen, kFailed };
  uint64_t id = 0;
  UniqueFd fd;  // closed (reset) when the connection fails
  State state = State::kConnecting;
  bool server = false;
  bool want_out = false;  // EPOLLOUT registered
  Status status;          // failure / close reason
  TcpEndpoint* handle = nullptr;
  std::string peer_address;
  Clock::time_point last_rx;
  Clock::time_point last_tx;
  Clock::time_point deadline;  // handshake

  // Handshake: frames are u32 LE length + bytes, read exactly (no over-read into data frames).
  std::unique_ptr<Handshake> hs;
  std::vector<uint8_t> hs_out;
  size_t hs_out_done = 0;
  uint8_t hs_len[4] = {};
  size_t hs_len_done = 0;
  std::vector<uint8_t> hs_in;
  size_t hs_in_done = 0;
  PeerHello peer;
  std::shared_ptr<TcpEndpoint> own_handle;  // client: handed out by Connect()
  uint64_t peer_max_message = 0;
  uint64_t peer_max_segments = 0;

  // Data path.
  Ring<TxItem> tx;
  Ring<PendingOp> pending;
  uint64_t next_req = 1;
  Ring<PostedRecv> recvs;
  std::deque<std::vector<uint8_t>> unexpected;
  uint64_t unexpected_bytes = 0;
  Rx rx;
  std::vector<uint8_t> scratch;                   // kScratchSize: discard sink, bounce buffer
  std::vector<uint8_t> tx_scratch;                // kScratchSize: gathered read responses
  std::vector<std::vector<Segment>> table_pool;   // recycled sparse-read tables
  std::vector<std::vector<uint8_t>> packed_pool;  // recycled packed request tables
  iovec iov[kMaxIov + 1];
};

struct RegionEntry {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  uint32_t access = 0;
  uint32_t pins = 0;           // read responses streaming out of it
  bool dead = false;           // deregistration in progress
  TcpRegion* owner = nullptr;  // detached if the transport dies first (a caller's bug)
};

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(TcpTransport* t, Conn* c);
  ~TcpEndpoint() override;
  Status status() const override;
  Result<std::unique_ptr<RemoteKey>> Import(const RemoteRegion& region) override;
  void Close() override;

  TcpTransport* transport_;  // null once the transport is gone
  Conn* conn_;               // owned by the transport's table, freed by ~TcpEndpoint
};

class TcpRegion final : public MemoryRegion {
 public:
  TcpRegion(TcpTransport* t, uint8_t* data, size_t size, uint32_t access, uint64_t key,
            uint64_t epoch);
  ~TcpRegion() override;
  TcpTransport* transport_;
  uint64_t key_;
};

class TcpRemoteKey final : public RemoteKey {
 public:
  TcpRemoteKey(RemoteRegion region, uint64_t key, const Conn* conn)
      : RemoteKey(std::move(region)), key_(key), conn_(conn) {}
  uint64_t key_;
  const Conn* conn_;
};

struct Params {
  uint64_t sndbuf = 0;
  uint64_t rcvbuf = 0;
  uint64_t unexpected_limit = kDefaultUnexpectedLimit;
  uint64_t bounce_max_row = kDefaultBounceMaxRow;
  uint64_t gather_max_row = kDefaultGatherMaxRow;
};

class TcpTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> Create(const TransportOptions& options);
  ~TcpTransport() override;

  std::string_view name() const override { return "tcp"; }
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
  friend class TcpEndpoint;
  friend class TcpRegion;
  using Lock = std::unique_lock<common::MaybeMutex>;

  TcpTransport(const TransportOptions& options, Params params);
  Status Init();

  // ---- progress (setup.cc)
  // One round: epoll_wait (unlocked when timeout_ms > 0), socket events, timers.
  void Progress(Lock& lk, int timeout_ms);
  // The rest of a round, for events gathered by epoll_wait (maybe without the lock). Requires mu_.
  void HandleEvents(const struct epoll_event* evs, int n);
  // Poll under kMulti without a progress thread: the lock-free idle path, then a tried lock.
  size_t PollShared(std::span<Completion> out);
  size_t TakeCompletions(std::span<Completion> out);
  // Drives progress (or waits for the progress thread) until pred() or the deadline.
  template <typename Pred>
  bool DriveUntil(Lock& lk, Clock::time_point deadline, Pred pred);
  void ProgressThreadMain();
  void RunTimers(Clock::time_point now);
  void Complete(Completion c);

  // ---- connections (connect.cc)
  Conn* NewConn(UniqueFd fd, bool server, std::string peer_address);
  void AcceptNew(int listen_fd);
  void HandleEvent(Conn& c, uint32_t events);
  void StartHandshake(Conn& c);
  void HandshakeRead(Conn& c);
  Status HandshakeFrame(Conn& c);
  void Fail(Conn& c, Status why);
  void SetWantOut(Conn& c, bool on);
  void ConfigureSocket(int fd);
  static void SetUserTimeout(int fd, Millis timeout);  // TCP_USER_TIMEOUT
  void Sweep();
  void ReleaseConn(Conn* c);

  // ---- data path (datapath.cc, receive.cc)
  void PostOne(const Op& op);
  void PostRequest(Conn& c, const Op& op);
  void PackTable(Conn& c, const Op& op, FrameHeader* h, std::vector<uint8_t>* packed);
  void PostRecv(const Op& op);
  void FlushTx(Conn& c);
  // Gathers the next chunk of a gathered read response at the front of c.tx into c.tx_scratch.
  void PrepareGather(Conn& c, TxItem& item);
  void OnTxDone(Conn& c, TxItem& item);
  // Reads what the socket has, frame by frame, within a ReadRound.
  void ReadData(Conn& c);
  bool ReadHeader(Conn& c, ReadRound& round);   // false: stop reading this round
  bool ReadPayload(Conn& c, ReadRound& round);  // false: stop reading this round
  // Whether a read's result (recv/readv) let reading go on; EOF and errors fail c.
  bool ReadOk(Conn& c, ssize_t n);
  // Sets up the receive of the frame whose header was just read; false if c failed.
  bool OnHeader(Conn& c);
  void StartWrite(Conn& c);  // target side; a refused write is drained
  void ServeRead(Conn& c);   // target side: queues the response
  void StartTable(Conn& c);  // target side of a sparse request
  bool StartReply(Conn& c);  // initiator side
  // A live region under h.key granting `needed` and holding [h.arg, +h.length).
  Status CheckTargetRange(const FrameHeader& h, uint32_t needed, RegionEntry** e);
  bool OnBodyDone(Conn& c);
  bool StartMessage(Conn& c);
  void DeliverUnexpected(Conn& c, std::vector<uint8_t>& msg, const PostedRecv& r);
  void QueueResponse(Conn& c, uint64_t req_id, const Status& s);
  void QueueHeartbeat(Conn& c);
  void SetDiscard(Conn& c, uint64_t n);
  bool OnTable(Conn& c);
  void QueueHandshakeOut(Conn& c);
  TxItem& PushFrame(Conn& c, const FrameHeader& h);

  // ---- regions (memory.cc)
  Status CheckTarget(uint64_t key, uint32_t needed, RegionEntry** out);
  void Unpin(uint64_t key);
  void Deregister(uint64_t key);

  const TransportOptions options_;
  const Params params_;
  Capabilities caps_;
  WireLimits limits_;

  mutable common::MaybeMutex mu_;   // a real mutex unless options_.thread_mode is kSingle
  std::condition_variable_any cv_;  // progress happened (completions, accepts, handshakes, drains)
  UniqueFd epfd_;
  UniqueFd wake_fd_;  // eventfd: stops the progress thread, interrupts a Wait (Wake)
  std::atomic<bool> wake_requested_{false};               // Wake() called, not yet seen by a Wait
  std::vector<std::pair<uint64_t, UniqueFd>> listeners_;  // (event id, socket)
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_id_ = 1;  // event ids: wake = 0, listeners and conns from 1
  size_t open_conns_ = 0;
  std::deque<std::shared_ptr<TcpEndpoint>> accepted_;
  std::vector<uint64_t> doomed_;  // server handshakes that failed; freed by Sweep()
  std::string last_refusal_;      // why the last incoming handshake was dropped
  std::vector<RemoteRegion> advertise_;
  std::vector<Conn*> touched_;  // Post(): connections to flush, reused
  Ring<PostedRecv> shared_recvs_;
  Ring<Completion> completions_;
  std::atomic<size_t> queued_{0};  // completions_.size(), for the lock-free idle Poll
  std::unordered_map<uint64_t, RegionEntry> regions_;
  std::unordered_set<uint64_t> dead_keys_;
  uint64_t next_epoch_ = 1;
  Clock::time_point next_timer_;
  std::atomic<int64_t> next_timer_ns_{0};  // next_timer_ on the steady clock, lock-free readable
  std::atomic<int64_t> idle_check_ns_{0};  // when a lock-free idle Poll last found no event
  Clock::time_point last_progress_;        // end of the last progress round (stall detection)
  Millis heartbeat_interval_;
  std::thread progress_thread_;
  bool stop_ = false;
};

}  // namespace ferry::tcp

namespace ferry::tcp {

template <typename Pred>
bool TcpTransport::DriveUntil(Lock& lk, Clock::time_point deadline, Pred pred) {
  while (!pred()) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (options_.progress_thread) {
      cv_.wait_until(lk, deadline);
      continue;
    }
    const auto left = std::chrono::ceil<Millis>(deadline - now).count();
    // Slices well below the heartbeat interval, so that waiting is never taken for a stall.
    const int64_t slice = std::clamp<int64_t>(heartbeat_interval_.count() / 2, 1, 20);
    Progress(lk, static_cast<int>(std::clamp<int64_t>(left, 1, slice)));
  }
  return true;
}

}  // namespace ferry::tcp
