// The worker's private state (worker*.cc; Worker::State in worker.h). Not part of the public API;
// it includes nothing of worker.h.
//
// Per ticket: the unique keys grouped by server in the send buffer (SendData), the pulled rows
// in the arena, and one Request per (server, chunk) with the segments its sparse write reads.
// Per server: the staging ring on that server as a FIFO of RingSlots (requests in seq order;
// space returns from the front once replied, or, for BSP pushes, once their clock has been
// applied everywhere), and the count of requests awaiting a reply (<= max_outstanding: reply
// slot seq % max_outstanding is then never reused too early).
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/job/partition.h"
#include "ps/store/range_allocator.h"
#include "ps/wire/control.h"
#include "ps/wire/protocol.h"
#include "ps/worker/dedupe_map.h"
#include "ps/worker/request_plan.h"
#include "ps/worker/ticket.h"
#include "transport/common/ring.h"
#include "transport/pool.h"
#include "transport/transport.h"

namespace ferry::ps {

// A range of a RangeAllocator, returned on destruction (or reset); empty when default-made.
// Movable, held inline by the pooled ticket states (no allocation per request).
struct Block {
  RangeAllocator* alloc = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  Block() = default;
  Block(RangeAllocator* a, uint64_t o, uint64_t b) : alloc(a), offset(o), bytes(b) {}
  ~Block() { reset(); }
  Block(Block&& o) noexcept
      : alloc(std::exchange(o.alloc, nullptr)), offset(o.offset), bytes(o.bytes) {}
  Block& operator=(Block&& o) noexcept {
    if (this != &o) {
      reset();
      alloc = std::exchange(o.alloc, nullptr);
      offset = o.offset;
      bytes = o.bytes;
    }
    return *this;
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  void reset() {
    if (alloc != nullptr) alloc->Free(offset, bytes);
    alloc = nullptr;
  }
  explicit operator bool() const { return alloc != nullptr; }
};

// Keys (and gradients) of one ticket's requests, grouped by server: the unique keys of server s
// are at positions [begin[s], begin[s+1]).
struct SendData {
  Block keys;                   // uint64_t[n]
  Block grads;                  // float[n][dim] (or half when fp16)
  std::vector<uint32_t> begin;  // servers + 1
  uint32_t n = 0;
  bool fp16 = false;
};

struct Request {
  uint32_t server = 0;  // where it went: the head of `shard` then
  uint32_t seq = 0;
  Segment segs[3];
  uint32_t nsegs = 0;
  // What it asks, so that it can be sent again to the shard's next head (replicas).
  uint32_t shard = 0;
  uint32_t begin = 0, n = 0;  // positions in the ticket's SendData
  uint8_t flags = 0;
  uint64_t push_id = 0;    // push types
  bool abandoned = false;  // its server was removed; a copy went to the new head
};

// A request whose server was removed (replicas): re-sent to its shard's new head as ring space
// allows (worker_failover.cc). The ticket's reply count stays held for it meanwhile.
struct Reroute {
  Ticket ticket = 0;
  uint32_t request = 0;  // index in the ticket's requests
  // Answered kMoved (elastic jobs): sent again once the chains' version exceeds after_version.
  bool moved = false;
  uint32_t after_version = 0;
};

// ---- One-sided pulls (worker_onesided.cc; docs/ps.md "One-sided pulls") ----------------------

// Completion contexts: requests are ticket << kContextShift | request index; one-sided reads set
// kReadContextBit too (ticket << kContextShift | read index), so Progress hands them to
// OnReadDone.
inline constexpr int kContextShift = 20;
inline constexpr uint64_t kReadContextBit = uint64_t{1} << 63;

// How to read one table's rows on one server one-sided: the rows' registration imported on that
// server's endpoint, and what a read's rows are checked against. A slot cache holds one; a read
// takes a copy (the cache may change while the read is in flight).
struct RemoteRows {
  std::shared_ptr<RemoteKey> rows;    // null: no usable descriptor (none yet, or it went stale)
  std::shared_ptr<RemoteKey> status;  // the server's reuse generations
  uint64_t generation = 0;            // reuse generation the cached slots were resolved under
  uint32_t row_stride = 0;            // of the server's table
  uint32_t status_offset = 0;         // this table's generation word in `status`
  bool may_reuse = false;  // slots can change hands: check the generation after every read
};

// What this worker knows of one table's rows on one server: the slots of the keys it learned
// (SlotReplies) and how to read the rows.
struct SlotCache {
  std::unordered_map<uint64_t, uint32_t> slots;  // key -> slot
  RemoteRows remote;
  uint64_t epoch = 0;     // of `remote.rows`; requests send it as known_epoch
  bool disabled = false;  // never read one-sided (see worker_onesided.cc)
};

// The cached keys of one server in a one-sided pull: ticket positions [begin, end), read with
// one sparse read (several if the backend limits segments or bytes), then checked.
struct OneSidedRead {
  uint32_t server = 0;
  uint32_t begin = 0, end = 0;
  std::vector<Segment> segments;           // borrowed by the posted reads
  RemoteRows remote;                       // as the slots were taken; alive until reads complete
  std::unique_ptr<Block> generation_word;  // arena bytes the generation read lands on
  bool generation_phase = false;           // the generation read is the one in flight
  uint32_t ops_left = 0;
  Status error;
};

// A want-slots request: its SlotReply is read once its ticket has every reply.
struct SlotLearning {
  Ticket ticket = 0;
  uint32_t table = 0, server = 0, seq = 0;
  uint32_t begin = 0, n = 0;  // positions of its keys in `send`
  std::shared_ptr<SendData> send;
  std::shared_ptr<Block> area;  // arena bytes set aside for the SlotReply
};

// Positions [next, end) of a ticket whose one-sided read failed its checks: they go through the
// request path (posted as ring space allows; the read's reply count is held until then).
struct Fallback {
  Ticket ticket = 0;
  uint32_t server = 0, next = 0, end = 0;
};

struct TicketState {
  Ticket id = 0;
  uint32_t table = 0;
  RequestType type = RequestType::kPull;
  bool fp16_rows = false;
  bool read_only = false;     // PullOptions::read_only: kFlagReadOnly, absent keys read as zeros
  uint64_t clock = 0;         // worker clock when posted (BSP pushes are held until applied)
  std::vector<uint32_t> pos;  // input key i -> position among the unique keys
  std::shared_ptr<SendData> send;
  Block rows;     // arena rows (pull types)
  Block headers;  // RequestHeader per request
  uint64_t headers_used = 0, headers_cap = 0;
  std::vector<std::unique_ptr<Block>> reroute_headers;  // one per re-sent request
  uint32_t row_bytes = 0;                               // arena stride of the rows
  uint32_t row_prefix = 0;          // one-sided: key word and metadata before each embedding
  std::vector<OneSidedRead> reads;  // one-sided: per server read of the cached keys
  std::deque<Request> requests;
  uint32_t unreplied = 0;  // requests without a reply
  uint32_t moved = 0;      // "moved" answers so far (elastic jobs): bounded, never a livelock
  uint32_t unsent = 0;     // sparse writes without a local completion
  Status error;
  bool released = false;
  bool grads_ready = false;   // Gradients() handed out the area
  bool grads_pushed = false;  // PushGradients() sent it: the area is a push's source now

  // Frees what the ticket holds (its arena and send-buffer ranges) and resets every field, but
  // keeps the containers' capacity, and the SendData when no other ticket shares it, for the
  // next ticket made from this state (TicketTable).
  void Recycle();
};

// The worker's tickets by id, made from a pool of TicketStates: a retired ticket's state is
// recycled for a later one, and the index is open addressing over power-of-two slots, so a
// steady stream of requests allocates nothing (only growth does: more tickets alive at once
// than ever before). Ids are never reused: a released ticket stays unknown.
//
// Threading: none (the worker's thread). Pointers returned stay valid until that ticket's Erase.
class TicketTable {
 public:
  TicketTable() = default;
  TicketTable(const TicketTable&) = delete;
  TicketTable& operator=(const TicketTable&) = delete;

  // A new ticket with the next id, its state reset (TicketState::Recycle).
  TicketState* Create();
  // The live ticket `t`, or nullptr.
  TicketState* Find(Ticket t) const;
  // Retires `t` (no-op when unknown): its state is recycled.
  void Erase(Ticket t);
  // Retires every ticket.
  void Clear();
  size_t size() const { return live_; }

 private:
  struct Entry {
    Ticket id = 0;  // 0: empty
    TicketState* state = nullptr;
  };
  size_t SlotOf(Ticket t) const { return static_cast<size_t>(t) & (index_.size() - 1); }
  void Insert(TicketState* s);
  void Grow();

  std::vector<Entry> index_;  // size 0 or a power of two, at most half full
  size_t live_ = 0;
  Ticket next_ = 1;
  std::vector<std::unique_ptr<TicketState>> states_;  // every state made, live or pooled
  std::vector<TicketState*> pool_;                    // recycled, ready for Create
};

struct RingSlot {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t seq = 0;
  Ticket ticket = 0;
  bool replied = false;
  bool free = false;
  uint64_t hold_until = 0;  // BSP push: freed when min_clock >= hold_until
};

struct ServerLink {
  MemberInfo member;
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<RemoteKey> ring;
  uint64_t ring_bytes = 0;
  uint32_t next_seq = 0;
  uint32_t unreplied = 0;
  common::Ring<RingSlot> slots;  // reuses its storage: no allocation per request
  Status failed;
  std::chrono::steady_clock::time_point failed_at;  // when `failed` was first seen waiting
  bool dead = false;       // removed from the job (replicas): its shards moved on
  bool suspected = false;  // its failure was reported to the coordinator (kSuspect)
};

// Vectors lent per call depth: the request path re-enters itself from Progress inside a wait
// (fallbacks, re-routes), and a nested call must not take its caller's scratch. A lease hands out
// an empty vector that keeps its capacity for the next call at that depth: no allocation once
// warm.
template <typename T>
class ScratchStack {
 public:
  class Lease {
   public:
    explicit Lease(ScratchStack& s) : stack_(s) {
      if (stack_.depth_ == stack_.vectors_.size()) stack_.vectors_.emplace_back();
      v_ = &stack_.vectors_[stack_.depth_++];  // a deque: earlier leases' vectors stay put
      v_->clear();
    }
    ~Lease() { --stack_.depth_; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    std::vector<T>& operator*() { return *v_; }
    std::vector<T>* operator->() { return v_; }

   private:
    ScratchStack& stack_;
    std::vector<T>* v_;
  };

 private:
  std::deque<std::vector<T>> vectors_;
  size_t depth_ = 0;
};

// Where a request of `bytes` fits in the staging ring `l` (FIFO of slots), or nullopt while it
// does not (or max_outstanding requests await replies).
std::optional<uint64_t> RingSpace(const ServerLink& l, uint64_t bytes, uint32_t max_outstanding);

struct WorkerState {
  // Members in construction order: registrations die before the memory they cover.
  ShareableMemory arena_memory;
  ShareableMemory send_memory;
  std::unique_ptr<MemoryRegion> arena;  // remote-write: rows and reply slots
  std::unique_ptr<MemoryRegion> send;   // local: headers, keys, gradients
  RangeAllocator rows_alloc;
  RangeAllocator send_alloc;
  std::vector<ServerLink> servers;
  std::unordered_map<uint64_t, uint32_t> server_of_ep;
  TicketTable tickets;
  DedupeMap<> dedupe;
  std::vector<uint64_t> unique_keys;      // scratch
  std::vector<uint32_t> unique_of;        // scratch: input -> unique
  std::vector<uint32_t> server_of;        // scratch: unique -> server
  std::vector<uint32_t> fill;             // scratch: unique -> position
  std::vector<uint32_t> cursor;           // scratch: per-server cursor
  ScratchStack<RangePlan> range_scratch;  // PostRequests' ranges, plan and ops
  ScratchStack<RequestChunk> plan_scratch;
  ScratchStack<Op> op_scratch;
  // One-sided pulls (worker_onesided.cc).
  std::vector<std::vector<SlotCache>> slot_caches;  // [table][server]
  std::deque<SlotLearning> learning;
  std::deque<Fallback> fallbacks;
  std::vector<uint32_t> slot_of;  // scratch: position -> cached slot
  // Replicas (worker_failover.cc).
  std::vector<uint64_t> push_ids;  // per shard: the last push number given out
  std::deque<Reroute> reroutes;
  // Control-plane state.
  Status failure;  // the job failed (a member died): every call returns it
  bool shutdown = false;
  uint64_t barrier_id = 0;
  std::set<uint64_t> released_barriers;
  uint64_t gather_id = 0;
  struct GatherParts {
    std::vector<std::vector<uint8_t>> data;
    std::vector<uint64_t> received;
    std::vector<bool> sized;
    // The chunk offsets each sender's parts brought: a standby coordinator that took over relays
    // the newest gathers' parts again (ps/wire/control_journal.h), each counts once.
    std::vector<std::set<uint32_t>> chunks;
  };
  std::unordered_map<uint64_t, GatherParts> gathers;
  uint64_t gathers_done = 0;  // the newest gather completed here: later copies of its parts
                              // are dropped
  uint64_t checkpoint_id = 0;
  std::unordered_map<uint64_t, std::string> checkpoints_done;  // id -> error text ("" = ok)
  std::unordered_map<uint64_t, std::vector<TableStats>> table_stats_done;  // kCheckpointStats
  std::unordered_map<uint64_t, ControlMessage> moves_done;  // kMoveShards answers, by id
  std::optional<ControlMessage> work_taken;                 // the answer to the kWorkTake in flight
  // The workers a gather waits for (elastic jobs: kWorkerJoin and kWorkerLeave change them):
  // worker w's part of gather `id` is awaited while gather_member[w] and id > gather_from[w] (the
  // job's highest gather id when w joined). A part that arrived counts whoever sent it.
  std::vector<bool> gather_member;
  std::vector<uint64_t> gather_from;
  std::map<uint32_t, std::vector<uint8_t>> farewells;  // kWorkerLeave's data, by worker
};

}  // namespace ferry::ps
