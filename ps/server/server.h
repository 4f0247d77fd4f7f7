// A parameter server: owns one shard (by consistent hashing, partition.h) of every table in
// ArrayHashMaps whose rows buffers are registered with the data transport, and serves the
// workers' requests (protocol.h) on one thread.
//
//   pull       find (or create with the table's initializer) the rows, then ONE sparse write
//              straight out of the rows buffer into the worker's arena, with a notification;
//   push       apply the optimizer in place on the rows, reading the gradients where the worker
//              wrote them in this server's staging ring (no copy); ASP/SSP apply on arrival,
//              BSP stages the push and applies every worker's pushes of a clock at the clock
//              boundary in (worker, seq) order, so a BSP run is deterministic;
//   push-pull  push, then pull the same keys.
//
// Memory registered with the data transport (advertised in the handshake, in this order):
//   staging ring per worker (remote-write, JobSpec::staging_bytes), then the rows buffer of each
//   table (remote-read: one-sided readers; re-registered with a new epoch when a table grows).
// Replies never move a rows buffer while a write out of it is in flight: growth first drains
// that table's replies.
//
// Replicas (JobSpec::replicas R > 1; chain.h, server_replication.cc, docs/ps.md "Replicas"): the
// server also hosts the shards of the R-1 servers before it, each in tables of its own, connects
// to the R-1 servers after it (its successors) and accepts the R-1 before it (predecessors). A
// push for a shard whose chain continues past this server is forwarded, and answered (to the
// worker, or as an ack to the predecessor) only once the successor acknowledged it; each member
// applies a (shard, worker, push_id) once, whatever path brought it. kServerDown from the
// coordinator closes the chains over a dead server: forwards waiting for it go to the next live
// member (or are acknowledged here, now the tail), and the shards it headed are served here.
// Tables with admission, a max_rows bound or tick eviction (server_records.cc): only a chain's
// head admits, evicts and ticks; it sends each batch of those decisions down the chain as a row
// record, in its order with the pushes, and the replicas create and erase exactly those rows.
//
// One-sided pulls (server_onesided.cc, docs/ps.md): a pull with kFlagWantSlots is answered with
// the rows AND each key's slot, the table's epoch and, when the worker's are old, the rows and
// status descriptors, so that the worker can read those rows itself later. Contract for anything
// that erases rows of a table while serving (ResolveSlots at a max_rows bound, and the eviction
// tick, server_eviction.cc): DrainTable(t), then BumpReuseGeneration(t) BEFORE the first erase,
// or a one-sided reader may take another key's row for its own.
//
// Eviction tick and counters (server_eviction.cc): every JobSpec::evict_tick, between requests
// on the serving thread, tables that evict or decay advance their tick and erase what their
// TableSpec asks for; each table counts rows admitted, evicted and refused since the start, and
// a kCheckpoint command with value2 = kCheckpointStats answers them (TableCounters) at once.

//
// Threading: Serve() runs on one thread (the tables have a single writer); Wake-ups come from
// the control client's pump thread. Not thread-safe otherwise.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/job/chain.h"
#include "ps/job/job.h"
#include "ps/server/forwarding.h"
#include "ps/store/array_hash_map.h"
#include "ps/store/range_allocator.h"
#include "ps/wire/control.h"
#include "ps/wire/protocol.h"
#include "transport/transport.h"

namespace ferry::ps {

struct CheckpointManifest;  // ps/job/checkpoint.h

struct ServerStats {
  uint64_t pulls = 0, pushes = 0, push_pulls = 0;
  uint64_t keys_pulled = 0, keys_pushed = 0;
  uint64_t rows_created = 0;
  uint64_t rows_restored = 0;
  uint64_t errors = 0;               // error replies
  uint64_t slot_replies = 0;         // pulls answered with slots (one-sided pulls learn them)
  uint64_t checkpoints = 0;          // shards copied for a checkpoint
  uint64_t checkpoint_pause_ns = 0;  // the longest copy (serving stops only for it)
  uint64_t checkpoint_bytes = 0;     // of the last checkpoint, all tables
  // Replicas.
  uint64_t forwards = 0;           // pushes forwarded to a successor
  uint64_t forwards_applied = 0;   // forwarded pushes received and applied (or staged)
  uint64_t duplicates = 0;         // pushes that arrived twice (after a failover) and were skipped
  uint64_t failovers = 0;          // kServerDown handled
  uint64_t forwards_rerouted = 0;  // forwards re-sent to a new successor, or acked as a new tail
  uint64_t records_sent = 0;       // row records a head sent down its chains (server_records.cc)
  uint64_t records_applied = 0;    // row records received and applied (duplicates not counted)
  // Backup workers (JobSpec::backup_workers): pushes dropped because their clock completed
  // without their worker; every server holding a copy of the shard counts its copy.
  uint64_t late_pushes_dropped = 0;
  // Repairs (JobSpec::spares). A source: rows and bytes it copied to spares, and the longest
  // snapshot (the serve loop's pause while it queues one shard's copy). A spare: rows it received,
  // and the time from its repair word to its join (every adopted shard copied), which ended at
  // joined_at_ns (steady_clock since its epoch: lines the repair up with a benchmark's timeline).
  uint64_t copy_rows_sent = 0, copy_bytes_sent = 0, copy_snapshot_ns = 0;
  uint64_t copy_rows_received = 0, join_ns = 0, joined_at_ns = 0;
  // Moves (elastic jobs): shards copied in and handed over here, and requests answered kMoved.
  uint64_t moves_in = 0, moves_out = 0, moved_replies = 0;
};

class Server {
 public:
  // Creates the tables, registers the staging rings and the rows, advertises them and listens
  // on "`listen_host`:0" of `data`.
  static Result<std::unique_ptr<Server>> Create(const JobSpec& job, uint32_t index,
                                                std::unique_ptr<Transport> data,
                                                const std::string& listen_host);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint32_t index() const { return index_; }
  const std::string& data_address() const { return data_address_; }
  Transport* transport() const { return data_.get(); }

  // The job's membership (kMembership) before AcceptWorkers and ConnectSuccessors: who connects
  // to this server and to whom it connects. A join slot's (JobSpec::join_slots, joining a running
  // job) also carries the chains as the others hold them, taken as this server's own; it waits
  // for the live servers and the workers still running that the membership names.
  Status SetMembership(const ControlMessage& membership);
  // Accepts one data connection per worker (and, with replicas, one from each predecessor).
  // `control` is checked between attempts so that a failure elsewhere ends the wait.
  Status AcceptWorkers(ControlClient* control, Millis timeout);
  // Replicas: connects to the successors (the next replicas-1 servers of `members`) and imports
  // their forward rings. Runs beside AcceptWorkers on another thread (every server does both:
  // the connections form a ring). A no-op without replicas.
  Status ConnectSuccessors(const std::vector<MemberInfo>& members, Millis timeout);
  // Serves requests and control commands until kShutdown (Ok) or a failure (the reason).
  // A checkpoint command copies every table (CaptureSnapshot; the only pause) and a writer
  // thread writes the files and answers kCheckpointDone; Serve returns after that thread.
  Status Serve(ControlClient* control);
  // Makes AcceptWorkers/Serve return kCancelled soon. Thread-safe.
  void RequestStop() {
    stop_ = true;
    data_->Wake();
  }
  // Elastic jobs: asks the coordinator for this server's graceful leave (its shards move to the
  // others, then Serve returns Ok; Worker::RetireServer). Thread-safe; the serve loop sends the
  // request. A refusal (R = S, another plan in progress) is logged and the server keeps serving.
  void RequestLeave() {
    leave_requested_ = true;
    data_->Wake();
  }
  // As RequestLeave once `*flag` is set (a signal handler's flag: the loop looks at it between
  // batches, at least every peer_timeout / 8). Before Serve.
  void LeaveWhenSet(const std::atomic<bool>* flag) { leave_flag_ = flag; }

  // For tests and checkpoints: this server's own shard of table `t` (only between requests).
  ArrayHashMap& table(uint32_t t) { return *tables_[t].map; }
  // For tests: table `t` of `shard` as this server holds it (a replica's copy too), or nullptr
  // when it holds no copy of that shard. Only after Serve returned.
  const ArrayHashMap* HostedTable(uint32_t shard, uint32_t t) const;
  const ServerStats& stats() const { return stats_; }

 private:
  // tables_[k * T + t]: table t of the shard in hosted slot k (chain.h; k = 0 is this server's
  // own shard, the only one without replicas).
  static constexpr uint32_t kNoShard = ~uint32_t{0};  // a spare's table before it adopts
  struct Table {
    TableSpec spec;
    std::unique_ptr<ArrayHashMap> map;
    TableStats counters;         // admitted, evicted, refused; live_rows and bytes when asked
    uint32_t mirror_offset = 0;  // fp16 mirror inside the row (fp16_pull), else 0
    uint32_t inflight = 0;       // reply writes out of this table's rows not yet completed
    uint32_t shard = 0;
  };
  struct Link {  // one worker
    std::shared_ptr<Endpoint> ep;
    std::unique_ptr<RemoteKey> arena;
    uint64_t arena_bytes = 0;
    uint32_t next_seq = 0;
    std::unique_ptr<MemoryRegion> ring;  // registration of rings_ slice
    std::vector<uint32_t> free_scratch;
    bool failed = false;
    // The worker left the job (kWorkerLeave): its connection ends without failing anything, and
    // the BSP pushes it staged are still applied with their clock.
    bool left = false;
  };
  struct Reply {  // an in-flight reply write
    std::vector<Segment> segments;
    int table = -1;
    uint32_t worker = 0;
    int scratch = -1;
    bool busy = false;
    // A SlotReply staged in the one-sided scratch (server_onesided.cc): the rows write posts it
    // when it completes (slots_follow); the SlotReply's own write frees it.
    int64_t slots_at = -1;
    uint32_t slots_len = 0;
    uint32_t seq = 0;
    uint64_t slots_dest = 0;
    bool slots_follow = false;
  };
  struct SlotsFollowUp {  // taken out of a completed Reply
    int64_t at = -1;
    uint32_t len = 0, worker = 0, seq = 0;
    uint64_t dest = 0;
    bool post = false;
  };
  struct OneSided;  // scratch for SlotReplies, reuse generations, their registrations
  struct OneSidedDeleter {
    void operator()(OneSided* p) const;  // server_onesided.cc (OneSided is complete there)
  };

  // A BSP push waiting for its clock's apply: in worker w's staging ring (pred < 0), or in the
  // forward ring of the predecessor `pred` places back.
  struct Staged {
    uint64_t push_id = 0;
    uint64_t offset = 0;
    uint32_t clock = 0;
    int32_t pred = -1;
    uint16_t table = 0;
  };
  // Push numbers of one (hosted shard, worker) seen so far: all up to `upto`, and `above`.
  struct Seen {
    uint64_t upto = 0;
    std::set<uint64_t> above;
  };

  // Replication (server_replication.cc; the records are in ps/server/forwarding.h).
  using Forward = forwarding::Forward;
  using Lane = forwarding::Lane;
  using Held = forwarding::Held;
  using Downstream = forwarding::Downstream;
  using Upstream = forwarding::Upstream;
  enum class PeerKind : uint8_t { kWorker, kUpstream, kDownstream };
  struct Peer {
    PeerKind kind;
    uint32_t index;
  };

  Server(const JobSpec& job, uint32_t index, std::unique_ptr<Transport> data);
  Status Init(const std::string& listen_host);
  Status InitMemory();
  // Table i of `shard` (kNoShard: a spare's, before it adopts), created empty, not registered.
  Result<Table> MakeTable(size_t i, uint32_t shard) const;
  // How many regions server `server` advertises (a spare has one forward ring more).
  size_t AdvertisedRegions(uint32_t server) const;
  // Elastic jobs: the 1-based number of the forward ring that server `at` keeps for server
  // `pred` (!= at): every other server in index order, join slots included.
  static uint32_t ElasticRing(uint32_t at, uint32_t pred) { return pred < at ? pred + 1 : pred; }
  // Table t of `shard` when this server hosts it, else nullptr (replicas; without them every
  // request is for this server's own shard).
  Table* TableFor(uint32_t shard, uint32_t t);
  uint32_t HostedSlot(const Table& t) const;
  // False when (slot k, worker w, push_id) was seen before (replicas), recording it otherwise.
  bool FirstSight(uint32_t k, uint32_t w, uint64_t push_id);

  // Request path (server_requests.cc).
  void HandleNotify(uint32_t w, uint32_t imm);
  Status HandleRequest(uint32_t w, const RequestView& req);
  // Applies a push of `worker` (row records: a chain head logs and sends its decisions, a replica
  // follows them; server_records.cc).
  Status ApplyPush(Table& t, const RequestView& req, uint32_t worker);
  void PrefetchAhead(const ArrayHashMap& m, bool leads, bool follows, uint32_t i, uint32_t n) const;
  Status ReplyRows(uint32_t w, const RequestView& req, Table& t);
  // `moved_after` set: a kMoved reply instead (MakeMovedRecord; status unused).
  Status SendRecord(uint32_t w, uint32_t seq, const Status& status,
                    std::optional<uint32_t> moved_after = std::nullopt);
  // Reply writes of one Poll batch's requests go out as one Post (server_replies.cc): tcp sends
  // them in one sendmsg per worker, verbs in one ibv_post_send. PostReply posts `op` (a reply
  // write whose Reply `op.context` is filled in) now, or queues it while batching_; FlushReplies
  // posts the queue. Every wait for completions flushes first: a queued write never completes.
  // A write that fails to post is answered there (ReplyPostFailed), so PostReply returns Ok.
  Status PostReply(const Op& op);
  void FlushReplies();
  void ReplyPostFailed(uint32_t r, const Status& why);
  // Frees what reply r held (its table's in-flight count, a scratch record) and returns its
  // SlotReply follow-up for FinishSlotsFollowUp.
  SlotsFollowUp ReleaseReply(uint32_t r);
  // Slots of keys in table t, creating absent rows (with the initializer, subject to admission;
  // refused keys get kNoSlot). Grows the table first if needed (draining its replies).
  Status ResolveSlots(Table& t, const uint64_t* keys, uint32_t n, std::vector<uint32_t>* slots);
  // A new row of `key`: the initializer, counted (and logged for the chain, BeginRowLog).
  void InitRow(Table& t, uint64_t key, uint8_t* row);
  // Row records (server_records.cc). LeadsRows/FollowsRows: table t tracks sightings and this
  // server is (is not) the head of its shard, with replicas. BeginRowLog starts logging t's row
  // creations and evictions; EndRowLog stops and sends what was logged (with `flags`
  // kForwardApplyStaged or kForwardClockDone, even if nothing was) to the successor.
  bool LeadsRows(const Table& t) const;
  bool FollowsRows(const Table& t) const;
  void BeginRowLog(Table& t);
  void EndRowLog(Table& t, uint8_t flags, uint32_t worker, uint64_t push_id, uint32_t clock);
  // A record from a predecessor for hosted slot k: applied once per op_id.
  Status ApplyRecord(uint32_t k, const ForwardView& fv);
  // After kApplyClock (and after each record): answers kClockApplied once every shard this
  // server follows has its head's kForwardClockDone for that clock.
  Status MaybeAnswerClock();
  // kServerDown made this server the head of hosted slot k: it decides from now on; a clock
  // being applied is finished here with its own decisions.
  Status TakeOverRows(uint32_t k);
  bool SlotHasRowRecords(uint32_t k) const;
  // A worker's request or a predecessor's forward outran the coordinator's word that explains it
  // (data and control travel apart): a request for a shard whose rows the head decides, before
  // the kServerDown that makes this server the head; a spare's copy, before its kChainRepair (a
  // move's, before its kMoveBegin; a request for a moved shard, before the kMoveFinish).
  // Waits (up to two peer timeouts) until `done()` holds, applying kServerDown, kChainRepair,
  // kMoveBegin and kMoveFinish
  // as they come and keeping every other message for the serve loop, in order. Fails with
  // Timeout(`what()`) or the status of the word that failed (a removal also sets fatal_).
  Status AwaitControl(const std::function<bool()>& done, const std::function<std::string()>& what);
  // The serve loop's next control message: those AwaitControl kept, then the client's.
  std::optional<ControlMessage> NextControl(ControlClient* control);
  bool ChainsQuiet() const;
  // The most entries one record carries (within the forwards' key limit).
  uint32_t RecordKeys() const { return std::min<uint32_t>(job_.max_keys_per_request, 16384); }
  // BSP: applies the staged pushes of clocks < `clock`, dropping those of the workers the clock
  // completed `without` (backup workers: the pushes of clock - 1 they made or will make).
  Status ApplyClock(uint64_t clock, std::span<const uint32_t> without);
  // Backup workers: whether worker w's pushes of `clock` are dropped (its clock completed
  // without it). `Forget` drops what no push can ask any more: a worker's pushes arrive in clock
  // order (each is acknowledged by the chain's tail before the worker's next clock).
  bool DroppedClock(uint32_t w, uint64_t clock) const;
  void ForgetDroppedClocks(uint32_t w, uint64_t before);
  Status ApplyStaged(uint32_t k, uint32_t w, const Staged& staged);
  // The staged push, parsed where it waits (a worker's ring or a forward ring).
  Result<RequestView> StagedPush(uint32_t w, const Staged& staged) const;
  // Repairs (server_repair.cc, chain.h "Repairs"). kChainRepair: every server applies the Join;
  // the spare adopts the slots (its tables take their shards); each source (the live tail of an
  // adopted shard) queues the shard's copy to the spare (QueueCopy), ahead of every push it
  // accepts later. A joining spare applies copies as they arrive (ApplyCopy), defers kApplyClock
  // until the last copy ended, then tells the coordinator (kChainJoined).
  Status HandleChainRepair(uint32_t dead, uint32_t spare);
  Status QueueCopy(uint32_t shard, uint32_t spare);
  // The spare acknowledged the watermark of `shard`'s copy (every row applied): pushes wait for
  // its acks again, and the end marker follows the pushes answered here before (server_repair.cc).
  void EndCopy(uint32_t spare, uint32_t shard);
  Status ImportSpareLane(Downstream& d, uint32_t lane);
  // A spare of the repair kind (JobSpec::spares). An elastic job's members above the shard
  // servers are join slots: they take moves like any server (a forward ring for each other).
  bool RepairSpare(uint32_t server) const { return !job_.elastic && chain_.is_spare(server); }
  // Connects to successor `m` (its forward ring `dist` for this server; 0: a spare's, imported
  // when it adopts) and keeps the Downstream.
  Status ConnectSuccessor(const MemberInfo& m, uint32_t dist, Millis timeout);
  // Join slots (server_moves.cc). kServerJoin: the joining server comes alive in the chains;
  // this server connects to it (a successor, like every other server in an elastic job) and
  // accepts its connection between requests (AcceptJoining) until it arrived.
  Status OnServerJoin(const ControlMessage& m);
  // A joining server's or worker's data connection, between requests (Accept(0)).
  void AcceptJoining();
  // Worker join slots (JobSpec::worker_join_slots; server_moves.cc). kWorkerJoin: the worker's
  // connection is awaited between requests (AcceptJoining). kWorkerLeave: the worker left the
  // job; its connection closing is not its failure.
  void OnWorkerJoin(const ControlMessage& m);
  // Tells the coordinator {kind, index} between requests; a failed send ends Serve (fatal_).
  void Report(ControlKind kind, uint32_t index);
  void OnWorkerLeave(uint32_t w);
  // Takes worker w's data connection (imports its arena); false when refused (a duplicate or
  // an index out of range: closed and logged), an error when it breaks the protocol.
  Result<bool> AcceptWorker(uint32_t w, std::shared_ptr<Endpoint> ep);
  Status ApplyCopy(const ForwardView& fv);
  Status FinishJoin();
  // Moves (elastic jobs; server_moves.cc, ps/coordinator/move_plan.h). kMoveBegin: every server
  // applies ChainMap::BeginMove; the target takes a slot for the shard (TakeSlot) and the copy
  // like a joining spare (ApplyCopy; kMoveCopied after the end marker, and kApplyClock deferred
  // until then); the source queues the copy (QueueCopy). kMoveDrain: the shard's head answers
  // its new pushes kMoved and reports kMoveDrained once every push of the shard it forwarded
  // was acknowledged (CheckDrained). kMoveFinish: ChainMap::FinishMove; the source empties the
  // slot, which names no shard from now on. A request for a shard this server does not hold
  // (any more) is answered kMoved too (HandleRequest).
  Status OnMoveControl(const ControlMessage& m);
  Status TakeSlot(uint32_t shard);
  Status EmptySlot(uint32_t k);
  void OnMoveDrain(const ControlMessage& m);
  void CheckDrained();
  Status MoveCopied(uint32_t shard);
  // The bytes of one kCopyRows (InitMemory sizes the record scratch for two of them), and the
  // most rows ParseForward lets one carry.
  uint64_t CopyChunkBytes() const { return copy_chunk_bytes_; }
  uint32_t MaxCopyRows() const { return static_cast<uint32_t>(copy_chunk_bytes_ / 16); }
  Status ServeLoop(ControlClient* control);
  // kApplyClock: applies the clock (once) and answers kClockApplied (with row records once the
  // heads followed here applied it: MaybeAnswerClock).
  Status OnApplyClock(const ControlMessage& m, ControlClient* control);
  // Replication (server_replication.cc).
  void HandleForward(uint32_t pred, uint32_t imm);
  void HandleAck(uint32_t succ, uint32_t imm, bool ok);
  // Accepts a push for hosted slot k (apply or stage once), then forwards it down the chain or,
  // as the tail, answers it at once (AnswerUpstream).
  Status AcceptPush(Forward f, const RequestView& req, int32_t pred);
  // Answers a push the chain's tail has: the worker's request (an ack record, or a push-pull's
  // rows), or the predecessor's forward (an ack). Errors are handled here.
  void Answer(const Forward& f);
  // Queues forward `f` (already accepted here) for `succ` under a fresh id.
  void QueueForward(Forward f, uint32_t succ);
  // A push or record for a spare this server is still copying a shard to (CatchingUp): queued
  // with its own copy of the payload and answering nobody, so that this server, the live tail,
  // answers it at once.
  void ForwardToJoining(const Forward& f, uint32_t spare);
  // Whether `succ` is a spare whose copy of `shard` from here is not acknowledged yet.
  bool CatchingUp(uint32_t succ, uint32_t shard) const {
    return !catching_up_.empty() && catching_up_.count({succ, shard}) > 0;
  }
  Status SendAck(uint32_t pred, uint32_t seq);
  void PostForwards(uint32_t succ);
  void OnForwardWritten(const Completion& c);
  // kServerDown: closes the chains over `dead` (an error if it is this server).
  Status HandleServerDown(uint32_t dead, const std::string& why);
  void FreeHeldForwards(uint64_t min_clock);
  void Suspect(uint32_t server, const Status& why);
  void CheckPeers();
  // Checkpoints (ps/job/checkpoint.h): copies every shard this server heads (its own; with
  // replicas also those it took over) of every table into checkpoint_images_, and writes the
  // copies as those shards' files into the command's directory on checkpoint_writer_ (which
  // answers the coordinator); a second command first waits for the previous write. At startup,
  // RestoreTable brings the rows of table `t` of every shard this server hosts from every shard
  // file of JobSpec::restore_dir (one pass over them).
  void StartCheckpoint(const ControlMessage& command, ControlClient* control);
  // kCheckpointClear: empties every table this server hosts (after their replies completed)
  // and answers the coordinator.
  void ClearTables(const ControlMessage& command, ControlClient* control);
  void JoinCheckpointWriter();
  Status RestoreTable(size_t t);
  // A predecessor's connection (replicas): checks its place and imports its ack word.
  Status AcceptPredecessor(uint32_t pred, std::shared_ptr<Endpoint> ep);
  uint32_t AllocReply();
  // Handles completions until table t has no reply in flight (notifications are queued).
  Status DrainTable(Table& t);
  void HandleCompletion(const Completion& c, bool defer_notifies);
  // One-sided pulls (server_onesided.cc). StageSlotReply writes the SlotReply of `req` into
  // scratch and returns its offset, or -1 when there is no room (the pull is then answered
  // without slots). TakeSlotsFollowUp empties a completed Reply's slot fields; FinishSlotsFollowUp
  // then posts the SlotReply write (notified) or frees the scratch.
  int64_t StageSlotReply(const RequestView& req, const Table& t, const std::vector<uint32_t>& slots,
                         uint32_t* len);
  void FreeSlotReply(int64_t at, uint32_t len);
  static SlotsFollowUp TakeSlotsFollowUp(Reply& r);
  void FinishSlotsFollowUp(const SlotsFollowUp& f, bool ok);
  void BumpReuseGeneration(size_t t);
  // Eviction tick and counters (server_eviction.cc). RunEvictionTick runs the ticks that are due
  // (at most one catch-up per call) and returns how long the loop may sleep until the next one.
  Result<Millis> RunEvictionTick();
  Status EvictTable(Table& t);
  // kCheckpointStats: answers the coordinator with the counters of the shards this server heads.
  void SendTableStats(const ControlMessage& command, ControlClient* control);
  OneSided& one_sided();
  // Registers the SlotReply scratch and the reuse generations on first use; false when that
  // failed (once: one-sided pulls are then off on this server).
  bool RegisterOneSided();
  // The encoded descriptor of table `table`'s rows registration (empty when unregistered),
  // re-encoded when the table's epoch moved.
  const std::vector<uint8_t>& RowsDescriptorBytes(size_t table);
  void FailWorker(uint32_t w, const Status& why);

  JobSpec job_;
  uint32_t index_;
  std::unique_ptr<Transport> data_;
  std::string data_address_;
  std::vector<TableShape> shapes_;
  std::unique_ptr<CheckpointManifest> restore_manifest_;
  std::vector<Table> tables_;
  // Hosted slots (chain.h): R shards with one a shard server, about R * Q / S with more; a
  // spare's R. tables_ holds job_.tables.size() per slot.
  uint32_t slot_count_ = 1;
  uint8_t* rings_ = nullptr;  // W * staging_bytes at the start of the ring block (server.cc)
  struct RingMemory;
  std::unique_ptr<RingMemory> ring_memory_;
  std::vector<ReplyRecord> scratch_;  // W * 2 * max_outstanding records
  std::unique_ptr<MemoryRegion> scratch_region_;
  std::vector<Link> links_;
  std::unordered_map<uint64_t, Peer> peer_of_ep_;
  // Completion contexts of writes that are not replies (replies use their index).
  static constexpr uint64_t kForwardContext = uint64_t{1} << 62;  // | forward id
  static constexpr uint64_t kAckContext = uint64_t{1} << 61;      // | predecessor index
  std::vector<std::vector<Staged>> staged_;         // [k * W + w]: BSP pushes, in push_id order
  std::vector<std::set<uint64_t>> dropped_clocks_;  // [w]: clocks completed without worker w
  // Replication state (empty without replicas).
  ChainMap chain_;
  ControlClient* control_ = nullptr;  // Serve's, for kSuspect
  std::vector<Seen> seen_;            // [k * W + w]
  uint8_t* pred_rings_ = nullptr;     // pred_ring_count_ * forward_ring_bytes_, in the ring block
  uint32_t pred_ring_count_ = 0;      // R-1 (by predecessor distance); a spare's R (by slot)
  uint64_t forward_ring_bytes_ = 0;
  uint64_t copy_chunk_bytes_ = 0;  // with spares: CopyChunkBytes()
  // A joining spare: copies of adopted slots not yet ended, and the kApplyClock it defers.
  uint32_t copies_pending_ = 0;
  // A source: (spare, shard) copies whose watermark the spare has not acknowledged.
  std::set<std::pair<uint32_t, uint32_t>> catching_up_;
  std::chrono::steady_clock::time_point repair_began_;  // the spare's kChainRepair (join_ns)
  std::optional<ControlMessage> deferred_apply_;
  // Moves: copies into this server not ended yet; the shards this server heads and drains, and
  // those of them reported drained.
  uint32_t move_copies_pending_ = 0;
  std::set<uint32_t> draining_, drained_;
  // The connections AcceptWorkers waits for (SetMembership), and the joining servers whose
  // connection the serve loop still awaits (AcceptJoining), with when it gives up.
  uint32_t want_workers_ = 0, want_preds_ = 0;
  std::set<uint32_t> awaited_preds_, awaited_workers_;
  std::chrono::steady_clock::time_point awaited_until_;
  std::vector<std::unique_ptr<MemoryRegion>> pred_ring_regions_;
  std::unique_ptr<MemoryRegion> ack_region_;    // this server's ack word (remote-write)
  std::unique_ptr<MemoryRegion> block_region_;  // the whole ring block: forward sources
  uint64_t ack_source_at_ = 0;                  // block offset of the constant ack record
  uint64_t headers_at_ = 0;                     // block offset of the forward header scratch
  RangeAllocator header_space_;
  std::map<uint32_t, Downstream> downstream_;  // by successor index
  std::map<uint32_t, Upstream> upstream_;      // by predecessor index
  std::map<uint64_t, Forward> forwards_;       // by id, in creation order
  uint64_t next_forward_ = 1;
  // Row records (server_records.cc): per hosted slot the last record number applied or made,
  // and the last clock whose kForwardClockDone arrived; the clock applied but not yet answered
  // (kApplyClock waits for the heads of the shards this server follows; 0: none); the scratch
  // that posted records' keys and ops are copied into; the log of the table being decided.
  std::vector<uint64_t> last_op_;
  std::vector<uint64_t> clock_done_;
  uint64_t pending_clock_ = 0;
  // BSP: the newest clock applied. A standby coordinator that took over tells the clock being
  // applied again (coordinator_takeover.cc): it is answered again, not applied twice.
  uint64_t applied_clock_ = 0;
  bool records_ = false;  // replicas > 1 and some table tracks sightings
  RangeAllocator record_space_;
  std::vector<uint64_t> log_keys_;
  std::vector<uint8_t> log_ops_;
  bool logging_ = false;
  std::deque<ControlMessage> early_control_;  // kept by AwaitControl, served by ServeLoop
  // After kShutdown with row records: no more ticks; serve forwards and acks until ChainsQuiet
  // (nothing of this server's unacknowledged, no forward arrived for a while) or the deadline.
  bool lingering_ = false;
  std::chrono::steady_clock::time_point linger_deadline_;
  std::chrono::steady_clock::time_point last_forward_at_;
  std::vector<uint32_t> push_slots_;  // a head's slots for a whole push (row records)
  std::vector<Reply> replies_;
  std::vector<uint32_t> free_replies_;
  std::vector<Op> queued_replies_;  // PostReply while batching_ (a Poll batch's requests)
  bool batching_ = false;
  // Notifications that arrived during a drain, handled in order at the top of the serve loop
  // and then cleared (the vector keeps its capacity: no allocation once warm).
  std::vector<Completion> deferred_;
  std::vector<uint32_t> slots_;  // scratch for ResolveSlots
  // ResolveSlots' absent keys (their positions in the request and the keys themselves), and
  // InsertBatch's slots and created-row flags for them.
  std::vector<uint32_t> absent_at_;
  std::vector<uint64_t> absent_keys_;
  std::vector<uint32_t> absent_slots_;
  std::vector<uint8_t> absent_created_;
  std::vector<float> grad_scratch_;                       // fp16 gradients converted for one row
  std::unique_ptr<OneSided, OneSidedDeleter> one_sided_;  // on first use; dies before data_
  std::chrono::steady_clock::time_point next_tick_;       // the eviction tick's next deadline
  bool ticking_ = false;                                  // some table evicts or decays
  std::thread checkpoint_writer_;
  std::vector<SnapshotImage> checkpoint_images_;  // one per table, reused by every checkpoint
  std::atomic<bool> stop_{false};
  std::atomic<bool> leave_requested_{false};
  const std::atomic<bool>* leave_flag_ = nullptr;
  bool leave_asked_ = false;
  Status fatal_;                // ends Serve at once (a broken invariant, a protocol violation)
  Status worker_failure_;       // a worker's connection failed; ends Serve after a grace period
  uint32_t failed_worker_ = 0;  // whose (a kWorkerLeave for it withdraws the failure)
  std::chrono::steady_clock::time_point worker_failure_deadline_;
  ServerStats stats_;
};

}  // namespace ferry::ps
