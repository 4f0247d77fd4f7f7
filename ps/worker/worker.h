// The worker library: what a training program calls to read and update the parameter server.
//
//   auto node = ferry::ps::Node::Start(job);           // joins the job (ps/node.h)
//   ferry::ps::Worker& w = *node->worker();
//   const uint32_t emb = *w.TableId("emb");
//   for (each minibatch) {
//     std::vector<uint64_t> keys = ...;                 // may repeat, any order
//     auto pull = w.Pull(emb, keys);                    // posts requests, returns (see Pull)
//     ... overlap: read the next minibatch ...
//     if (Status s = w.Wait(*pull); !s.ok()) return s;
//     ferry::ps::PulledRows rows = *w.Rows(*pull);      // rows[i]: const float*, in place
//     auto grads = *w.Gradients(*pull);                 // grads[i]: float*, zeroed; repeated
//     model.Step(rows, grads);                          //   keys share a row, so sums add up
//     auto push = w.PushGradients(*pull);               // sends them, no copy
//     w.Release(*pull);                                 // rows are gone after this
//     w.Wait(*push); w.Release(*push);
//     w.Clock();                                        // BSP/SSP: may wait for the others
//   }
//   w.Finish();
//
// Data path. A Pull dedupes the keys (unless PullOptions::keys_unique), groups them by owning
// server (consistent hashing) and writes each group's keys, straight out of the registered send
// buffer where the dedupe put them, into that server's staging ring (one sparse write + notify per
// request; groups larger than max_keys_per_request become several requests). Each server answers
// with ONE sparse write of its rows straight into this worker's arena, where `rows[i]` points.
// Gradients() hands out a registered gradient area with the same layout, so PushGradients sends
// keys and gradients without packing them. Push() (keys that may repeat, one gradient row per key)
// aggregates into that area first.
//
// Consistency (JobSpec::consistency): Clock() marks the end of this worker's iteration.
//   asp    never waits.
//   ssp:S  waits until no worker is more than S clocks behind this one.
//   bsp    waits until every worker finished the clock and every server applied its pushes
//          (pushes are applied only at clock boundaries, in worker order: runs are reproducible).
//          With backup_workers b it waits for all but b workers; a worker the job's clock left
//          behind returns from Clock() at the job's clock (skipped_clocks()).
// Clock(), Barrier() and Finish() first wait for this worker's pushes to be acknowledged.
//
// Failures: a dead server, or any member the coordinator reports dead, makes every waiting
// call return kPeerFailure naming it, within peer_timeout. With replicas (JobSpec::replicas) a
// dead server is not a failure: the worker reports the lost connection (kSuspect), and when the
// coordinator removes the server (kServerDown) every request still waiting for it goes to its
// shard's next live replica (worker_failover.cc); the caller sees its tickets complete. A bad
// request (unknown table, wrong width, too many keys) fails its ticket with the server's reason;
// nothing is changed.
//
// Lifetimes: rows stay valid until Release(ticket); a ticket id is never reused.
// Threading: one thread drives a Worker (all calls from it). Progress happens inside the calls
// (Pull/Push/Wait/Clock/...), so a worker that computes for longer than peer_timeout without
// calling in should set JobSpec::transport_params progress thread (see docs/ps.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ps/job/chain.h"
#include "ps/job/job.h"
#include "ps/job/partition.h"
#include "ps/wire/control.h"
#include "ps/wire/protocol.h"
#include "ps/worker/ticket.h"
#include "transport/transport.h"

namespace ferry::ps {

struct TicketState;
struct WorkerState;
struct ServerLink;
struct RingSlot;
struct SendData;
struct RangePlan;
struct SlotCache;
struct RemoteRows;
struct SlotLearning;
struct OneSidedRead;

struct PullOptions {
  bool keys_unique = false;  // the caller promises no repeats: skip the dedupe
  bool fp16 = false;         // ship the table's fp16 mirror (TableSpec::fp16_pull); rows are halves
  // Read the rows of keys whose slot this worker has learned straight out of the servers' rows
  // buffers (one sparse read per server, no server CPU on verbs and ucx shared memory); the other
  // keys take the request path and teach the worker their slots. Rows are checked before they
  // count (key word; reuse generation on bounded tables); whatever fails a check, or a read
  // refused as stale after a table grew, is pulled again through the request path, unseen by the
  // caller. Ignored with fp16 and where the backend cannot read (Capabilities::sparse_read).
  // Differences from the request path (docs/ps.md "One-sided pulls"): a server with one of this
  // worker's pushes of the table still unacknowledged is read through the request path (read-your-
  // writes stays); one-sided reads do not count as sightings for admission or eviction scores.
  bool one_sided = false;
  // Read, never create: keys the servers do not hold are not inserted (nor counted as sightings
  // for admission or eviction) and read as zeros, which is how ferry-predict scores a feature the
  // model lacks. For scoring (evaluation, prediction); training pulls create rows (the push that
  // follows updates them).
  bool read_only = false;
};

struct PushOptions {
  bool keys_unique = false;  // the caller promises no repeats: skip the dedupe
};

// Pulled rows, read in place. rows[i] is the row of keys[i] of the Pull (repeats share a row).
class PulledRows {
 public:
  size_t size() const { return n_; }
  uint32_t dim() const { return dim_; }
  bool fp16() const { return fp16_; }
  const float* operator[](size_t i) const {
    return reinterpret_cast<const float*>(base_ + size_t{pos_[i]} * stride_);
  }
  const uint16_t* half(size_t i) const {
    return reinterpret_cast<const uint16_t*>(base_ + size_t{pos_[i]} * stride_);
  }
  // The position of keys[i] among the unique keys; rows of unique u at unique_row(u).
  uint32_t unique_of(size_t i) const { return pos_[i]; }
  size_t unique_count() const { return unique_; }
  const float* unique_row(size_t u) const {
    return reinterpret_cast<const float*>(base_ + u * stride_);
  }

 private:
  friend class Worker;
  const uint8_t* base_ = nullptr;
  const uint32_t* pos_ = nullptr;
  size_t n_ = 0, unique_ = 0;
  uint32_t stride_ = 0, dim_ = 0;
  bool fp16_ = false;
};

// Gradient rows laid out like a pull's rows; grads[i] is keys[i]'s row (repeats share one, so
// adding into it sums). Zeroed when handed out.
class GradRows {
 public:
  size_t size() const { return n_; }
  uint32_t dim() const { return dim_; }
  float* operator[](size_t i) const { return base_ + size_t{pos_[i]} * dim_; }
  float* unique_row(size_t u) const { return base_ + u * dim_; }

 private:
  friend class Worker;
  float* base_ = nullptr;
  const uint32_t* pos_ = nullptr;
  size_t n_ = 0;
  uint32_t dim_ = 0;
};

struct WorkerStats {
  uint64_t pulls = 0, pushes = 0, requests = 0;
  uint64_t keys_pulled = 0, keys_pushed = 0;  // unique keys sent
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t filtered = 0;         // gradient rows dropped by the significance filter
  uint64_t waits_for_space = 0;  // requests that waited for ring/arena space or a reply slot
  uint64_t moved_resends = 0;    // requests answered "moved" (elastic jobs) and sent again
  // One-sided pulls.
  uint64_t one_sided_reads = 0;      // sparse reads posted (one per server and pull, or more)
  uint64_t keys_one_sided = 0;       // keys whose rows a one-sided read delivered
  uint64_t one_sided_fallbacks = 0;  // keys re-requested after a failed check or a stale read
  uint64_t slots_learned = 0;        // slots taken from SlotReplies into the cache
};

class Worker {
 public:
  // Registers the arena and the send buffer with `data` and advertises the arena.
  static Result<std::unique_ptr<Worker>> Create(const JobSpec& job, uint32_t index,
                                                std::unique_ptr<Transport> data);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Connects to every server (members with Role::kServer, in index order; join slots join
  // later, kServerJoin) and imports its staging ring. Node calls this; `control` stays attached
  // for clocks, barriers and failures.
  Status ConnectServers(const std::vector<MemberInfo>& members, ControlClient* control,
                        Millis timeout);
  // A worker join slot (JobSpec::worker_join_slots) joining the running job: the chains as its
  // kMembership carries them (ChainMap::Encode) and the live servers it names, connected to;
  // then, on kStart, the clocks the job completed before it takes part (StartAt). Node calls
  // these instead of ConnectServers.
  Status ConnectJoining(const std::vector<MemberInfo>& members, std::span<const uint8_t> chains,
                        ControlClient* control, Millis timeout);
  // kStart's fields: the job's clock and highest barrier id (value, value2), its highest gather
  // id (index) and the workers taking part (data, EncodeWorkerSet) at the join.
  Status StartAt(const ControlMessage& start);
  bool join_slot() const { return index_ >= job_.workers; }

  uint32_t index() const { return index_; }
  uint32_t num_workers() const { return job_.workers; }
  uint32_t num_servers() const { return job_.shard_servers(); }  // shard servers
  // Shard servers still serving: not removed by a graceful leave or a failover (as this
  // worker has heard; adopted spares count).
  uint32_t live_servers() const { return chain_.live_servers(); }
  // The shards `server` heads in this worker's chains (a move finished counts, as heard).
  uint32_t ShardsHeadedBy(uint32_t server) const {
    uint32_t n = 0;
    for (uint32_t q = 0; q < chain_.shards(); ++q) n += chain_.Head(q) == int(server) ? 1 : 0;
    return n;
  }
  // Join slots that joined the job and took shards (as this worker has heard; one that left
  // since still counts).
  uint32_t servers_joined() const {
    uint32_t n = 0;
    for (uint32_t s = job_.first_join_slot(); s < job_.server_members(); ++s) {
      n += chain_.Hosted(s).empty() ? 0 : 1;
    }
    return n;
  }
  const JobSpec& job() const { return job_; }
  Result<uint32_t> TableId(std::string_view name) const;
  const Partition& partition() const { return partition_; }
  Transport* transport() const { return data_.get(); }

  // Pull, Push and PushPull post their requests and return a ticket without waiting for the
  // replies (Wait/Test do). They block only while the send buffer, the arena or a server's
  // staging ring has no room (up to 4 x peer_timeout, then kTimeout); while they wait, replies
  // of earlier tickets are handled (which may post their fallbacks).
  Result<Ticket> Pull(uint32_t table, std::span<const uint64_t> keys,
                      const PullOptions& options = {});
  // grads: keys.size() rows of dim floats; rows of repeated keys are summed.
  Result<Ticket> Push(uint32_t table, std::span<const uint64_t> keys, std::span<const float> grads,
                      const PushOptions& options = {});
  // Push, then the updated rows of the same keys (not under BSP).
  Result<Ticket> PushPull(uint32_t table, std::span<const uint64_t> keys,
                          std::span<const float> grads, const PullOptions& options = {});
  // Gradient rows for a pulled ticket (same layout as its rows), zeroed on the first call; later
  // calls return the same rows as they are (several kernels may add into them).
  Result<GradRows> Gradients(Ticket pulled);
  // Pushes the ticket's gradient rows (Gradients) for its keys, once; returns the push's
  // ticket. The rows are the push's source from then on: Gradients() refuses to hand them out.
  Result<Ticket> PushGradients(Ticket pulled);

  // Blocks until every reply of `t` arrived; the ticket's first error otherwise.
  Status Wait(Ticket t, Millis timeout = Millis(3600000));
  // Drives progress once; true when `t` is complete.
  bool Test(Ticket t);
  // The rows of a completed pull or push-pull ticket.
  Result<PulledRows> Rows(Ticket t) const;
  // Frees the ticket's arena and send-buffer space (deferred while its sends are in flight).
  void Release(Ticket t);

  Status Barrier();
  // Ends this worker's clock. `position` is the caller's data position after it (for example
  // the samples it has read): periodic checkpoints (JobSpec::checkpoint_every) record every
  // worker's position at their clock boundary, and a job restored from one hands it back
  // (restored()). `checkpoint` (BSP, JobSpec::checkpoint_dir set): when every running worker
  // asks at the same clock, the coordinator takes a periodic checkpoint there even off the
  // checkpoint_every schedule (a stream's last clock: ferry-train's clean stop). A job whose
  // workers all finish waits for the servers to have written it before it shuts down.
  Status Clock(uint64_t position = 0, bool checkpoint = false);
  // A job restored from a checkpoint (JobSpec::restore_dir) starts at its clock; `position` is
  // this worker's recorded data position when the checkpoint has them (periodic ones do).
  struct Restored {
    uint64_t clock = 0;
    std::optional<uint64_t> position;
  };
  const std::optional<Restored>& restored() const { return restored_; }
  uint64_t clock() const { return clock_; }
  uint64_t min_clock() const { return min_clock_; }
  // Backup workers (JobSpec::backup_workers): the clocks this worker skipped because the job
  // completed them without it (Clock() returned with clock() that much further on; the caller
  // skips their work: ferry-train skips their batches).
  uint64_t skipped_clocks() const { return skipped_clocks_; }
  // Worker 0 receives every worker's bytes (indexed by worker); the others get an empty list.
  // With `to_all`, every worker receives them (an all-gather). Every worker makes the same
  // sequence of calls with the same `to_all`. Elastic jobs: the workers taking part when the
  // gather began send theirs (the list has an entry per worker index, empty for a worker join
  // slot not joined and a worker that left before sending); a worker that joined takes part in
  // the gathers after the job's last one at its join (its calls line up with the others' next). The
  // bytes travel on the control plane: meant for metrics and counts, not for rows.
  Result<std::vector<std::vector<uint8_t>>> GatherFromWorkers(std::span<const uint8_t> mine,
                                                              bool to_all = false);
  // The id of this worker's last gather: the job's gathers are numbered 1, 2, ... in the order
  // every worker makes them; a worker join slot starts at the job's last one when it joined, so
  // a program whose gathers come in rounds of several learns where in a round its next one falls.
  uint64_t last_gather_id() const;
  // Saves every server's shard of every table into `dir` (ps/job/checkpoint.h), which every server
  // and the coordinator must reach, and returns once the manifest is written. The checkpoint
  // holds what the servers have applied when they get the command: call it at a quiet point
  // (after Barrier(), or at a BSP clock boundary) for a consistent one. Blocks.
  Status Checkpoint(const std::string& dir);
  // Empties every table on every server (every shard and every replica): a key pulled afterwards
  // is a new row again (its initializer), as in a job that just started. For training the same
  // model again (ferry-train's refit on all the data). Call it at a quiet point (after
  // Barrier(); under BSP at a clock boundary) with no ticket of this worker outstanding; other
  // workers must not pull or push until it returned (a Barrier() after it). One-sided readers see
  // a new registration epoch and fall back as after a table grew. Blocks.
  Status ClearTables();
  // Every table's counters (ps/wire/control.h TableStats), in table order, summed over the
  // servers, each shard counted once (its head's copy with replicas): live rows and resident
  // bytes now, rows admitted and evicted and sightings refused since the job started. Costs each
  // server a few microseconds (it reads counters it keeps; no scan, no drain) and one control
  // round trip through the coordinator; safe to call with this worker's pulls and pushes in
  // flight (it does not wait for them, so their effects may or may not be counted) and from any
  // worker at any time. Blocks for the round trip.
  Result<std::vector<ps::TableStats>> TableStats();
  // Elastic jobs (JobSpec::elastic): moves each shard copy of `moves` (ps/job/rebalance.h: `to`
  // takes `from`'s place in the shard's chain) while the job runs, and returns how many moves
  // finished (the others no longer applied: a failure changed the chains meanwhile). Every
  // worker's requests keep going during the moves; a push that reaches a shard's head while the
  // shard drains is answered "moved" and sent again to the head after the move, with the same
  // push id (applied once). Any worker may call it, one plan at a time in the job; blocks until
  // the plan is done. InvalidArgument-like errors (a move that does not apply) come back as the
  // coordinator's refusal, with nothing moved.
  Result<size_t> MoveShards(std::span<const ShardMove> moves);
  // Elastic jobs: server `server` leaves the job gracefully. The coordinator plans where its
  // shard copies go (PlanLeave: to live servers outside each chain, heads to the server heading
  // fewest), moves them as MoveShards does, and then the server leaves (every process counts it
  // gone; its Serve returns Ok). Returns the moves made; an error, with nothing moved, when no
  // other server can take one of its copies. Blocks until it left.
  Result<size_t> RetireServer(uint32_t server);
  // Waits for this worker's requests (under BSP, clocks once more if pushes were made since the
  // last Clock(), or they would never be applied), tells the coordinator it is done, and waits
  // for the job's shutdown (or failure).
  Status Finish();
  // This worker makes no more clocks, and the job's clocks go on without it (as after Finish),
  // but it stays in the job: for barriers and gathers with the workers still training (whose
  // clocks a collective would otherwise block under BSP and SSP). Pushes since the last Clock()
  // get one first, as in Finish. Clock() fails afterwards. Blocks until its requests are done.
  Status StopClocks();
  // Elastic jobs: leaves the running job, which goes on without it. As Finish (its requests
  // waited for, under BSP its pushes clocked: call it at a clock boundary, right after Clock(),
  // and the job's participants change there), but it returns once the coordinator confirms
  // and the servers were told (kWorkerLeave), not at the job's end. The worker is done then:
  // nothing but Finish (which returns Ok) may follow. `farewell` (at most 64 KiB) reaches every
  // worker still in the job (farewells()): what the leaver would have added to the job's last
  // gathers, its counts say. Blocks.
  Status Leave(std::span<const uint8_t> farewell = {});
  // The farewells of the workers that left the job, by worker index (as this worker has heard).
  const std::map<uint32_t, std::vector<uint8_t>>& farewells() const;
  // Work dealing: the next item of pass `pass`, whose items are 0 .. items-1 (every worker names
  // the same count for a pass; at most kMaxWorkItems), or nullopt when every item of the pass was
  // dealt. The coordinator deals each item of a pass exactly once, to whichever worker asks, in
  // order: the workers of the moment share the pass, whoever joins or leaves (a worker that
  // leaves has read what it took; a data reader over it: models/data/reader.h "Dealt input").
  // Passes are independent. One control round trip; blocks.
  Result<std::optional<uint64_t>> TakeWork(uint64_t pass, uint64_t items);

  const WorkerStats& stats() const { return stats_; }

  using State = WorkerState;  // worker_state.h

 private:
  Worker(const JobSpec& job, uint32_t index, std::unique_ptr<Transport> data);

  // Progress and waiting (worker.cc).
  Status Usable() const;
  // One round: data completions, then control messages. Returns completions handled.
  size_t Progress();
  // Drives progress until pred() holds; the job's failure, a dead server or kTimeout otherwise.
  Status WaitFor(const std::function<bool()>& pred, Millis timeout, std::string_view what);
  void DrainControl();
  void OnNotify(uint32_t server, uint32_t imm);
  // A request's write completed (or failed); one-sided reads go to OnReadDone.
  void OnRequestWritten(const Completion& c);
  void Retire(Ticket t);
  void FreeRingSlots(ServerLink& link);
  Status WaitAllReplies(std::string_view what);
  // kCheckpoint relayed to every server (`mode`: 0 save into `dir`, kCheckpointClear); waits for
  // the coordinator's answer.
  Status ServerCommand(const std::string& dir, uint64_t mode, const std::string& what);
  // Sends a kCheckpoint command with `mode` and waits for its answer; its error text, or ok.
  Status AskServers(const std::string& dir, uint64_t mode, const std::string& what, uint64_t* id);
  // Sends a kMoveShards request (`m`'s rank, index and data set) and waits for its answer.
  Result<size_t> AskMoves(ControlMessage m);

  // Requests (worker_requests.cc).
  Result<TicketState*> NewTicket(uint32_t table, RequestType type, bool fp16_rows);
  Status PrepareKeys(TicketState& tk, std::span<const uint64_t> keys, bool unique);
  Status AllocRows(TicketState& tk);
  Status AllocGrads(SendData& send, uint32_t dim);
  Status AggregateGrads(TicketState& tk, std::span<const float> grads);
  // The keys and gradients a push sends: `src` itself, or a filtered / fp16 copy.
  Result<std::shared_ptr<SendData>> PushData(const std::shared_ptr<SendData>& src, uint32_t dim);
  // Sets aside `headers` request headers in the send buffer (tk.headers), waiting for space.
  Status AllocHeaders(TicketState& tk, uint64_t headers);
  // Posts the requests of `ranges` (nullptr: every server's whole group), waiting for ring
  // space; unless tk.headers was set aside before, `spare_headers` more request headers are set
  // aside for fallbacks.
  Status PostRequests(TicketState& tk, const std::vector<RangePlan>* ranges = nullptr,
                      uint64_t spare_headers = 0);
  // Fills the header of a request (ring offset `at`, `seq`) for positions [begin, begin + n) of
  // `data`, keys of `shard`, going to `server`, records it in tk and returns its write. The
  // header goes into the ticket's next set-aside header, or at send-buffer offset `header_at`
  // when given; a push type gets `push_id`, or the shard's next number when 0.
  Op BuildRequest(TicketState& tk, const SendData& data, uint32_t shard, uint32_t server,
                  uint32_t begin, uint32_t n, uint64_t at, uint32_t seq, uint8_t flags,
                  uint64_t header_at = UINT64_MAX, uint64_t push_id = 0);
  // Ring space and a seq now, or nullopt (no waiting; never on a removed server).
  std::optional<uint64_t> TryReserveRing(uint32_t server, uint64_t bytes, Ticket ticket,
                                         uint32_t* seq);
  // The server that serves `shard` now (its own server without replicas).
  uint32_t HeadOf(uint32_t shard) const;
  // Replicas (worker_failover.cc): a server the coordinator removed; its waiting requests go to
  // the new heads of their shards.
  void OnServerDown(uint32_t server);
  // Connects to server `s` (its member info known), imports its staging ring.
  Status ConnectServer(uint32_t s, Millis timeout);
  // kServerJoin: a join slot joins the running job; revived in the chains and connected to.
  void OnServerJoin(const ControlMessage& m);
  // Posts queued re-sent requests as ring space allows (no waiting).
  void PostReroutes();
  // A kMoved reply (elastic jobs) to `slot` of server `s`: its request goes to the shard's head
  // again once this worker's chains are newer than the reply says (PostReroutes).
  void OnMoved(uint32_t s, const RingSlot& slot, TicketState& tk);
  // Tells the coordinator once that the connection to `server` failed (replicas).
  void SuspectServer(uint32_t server);
  // Keys per request for this ticket (max_keys_per_request, and at most half the ring).
  uint32_t KeysPerRequest(const TicketState& tk, bool grads) const;
  // The end of every Pull/Push/PushPull/PushGradients: with `s` ok, counts the ticket in the
  // stats and returns it; otherwise retires it (whatever was posted completes into it, unseen)
  // and returns `s`.
  Result<Ticket> Issued(TicketState& tk, const Status& s);

  // One-sided pulls (worker_onesided.cc).
  Result<Ticket> PullOneSided(uint32_t table, std::span<const uint64_t> keys,
                              const PullOptions& options);
  // Whether this table's pulls may read rows one-sided at all (sparse reads, no replicas).
  bool OneSidedPossible(uint32_t table) const;
  // Servers with a push of `table` from this worker not yet acknowledged.
  std::vector<bool> PushesInFlight(uint32_t table) const;
  // st.slot_of[p]: the cached slot of pulled[p] where that server may be read, else kNoSlotValue.
  void LookUpSlots(uint32_t table, const SendData& send, std::span<const uint64_t> pulled,
                   uint64_t read_len);
  // A copy of how the slot cache of (table, server) reads the rows.
  RemoteRows RemoteRowsOf(uint32_t table, uint32_t server) const;
  // tk.reads for the `cached` ranges (their descriptors in `taken`); a range without arena room
  // for its generation word goes to *requests instead.
  void PlanReads(TicketState& tk, const std::vector<RangePlan>& cached,
                 const std::vector<RemoteRows>& taken, uint64_t read_len,
                 std::vector<RangePlan>* requests);
  // Posts tk.reads; a read the transport refuses goes to *requests instead.
  void PostReads(TicketState& tk, std::vector<RangePlan>* requests);
  // Reads the SlotReplies of finished want-slots requests into the slot caches.
  void LearnSlots();
  // What one SlotReply teaches the slot cache `c`: the rows' descriptor, layout, generation
  // and the slots of the request's keys.
  void Learn(const SlotLearning& e, const SlotReplyView& v, SlotCache& c);
  // Sets aside a SlotReply area for a request of n keys and records what to learn from it;
  // false (the request goes without slots) when the arena has no room now.
  bool PlanSlotReply(TicketState& tk, uint32_t server, uint32_t begin, uint32_t n, uint32_t seq,
                     RequestHeader* hdr);
  // A completion of a one-sided read (context has kReadContextBit).
  void OnReadDone(const Completion& c);
  void FinishRead(TicketState& tk, size_t read);
  // The 8-byte read of the server's reuse generation that follows a read's rows; false (with
  // the read's error set) when it could not be posted.
  bool PostGenerationRead(TicketState& tk, size_t read);
  // Whether a finished read's rows may be counted: its registration still stands, no row was
  // erased meanwhile, every row holds its key. Updates the slot cache with what it learns.
  bool ReadRowsValid(TicketState& tk, const OneSidedRead& rd);
  // Sends a read's positions the request path (a Fallback), their rows zeroed.
  void FallBack(TicketState& tk, const OneSidedRead& rd);
  // Posts queued fallbacks as far as ring space allows (no waiting).
  void PostFallbacks();
  // Ring space and a seq on the head of `shard` (stored in *server). Before it waits for space
  // it posts `pending` (requests already holding earlier seqs must be on their way, or their
  // replies never come). If the head is removed meanwhile, the shard's next head is used.
  Result<uint64_t> ReserveRing(uint32_t shard, uint64_t bytes, Ticket ticket, uint32_t* server,
                               uint32_t* seq, std::vector<Op>* pending);

  JobSpec job_;
  uint32_t index_;
  Partition partition_;
  ChainMap chain_;
  std::unique_ptr<Transport> data_;
  ControlClient* control_ = nullptr;
  std::unique_ptr<State> st_;
  uint64_t clock_ = 0;
  uint64_t min_clock_ = 0;
  uint64_t skipped_clocks_ = 0;
  uint64_t pushes_since_clock_ = 0;  // BSP: Finish() clocks once more if pushes are pending
  bool clocks_stopped_ = false;      // StopClocks
  // Finish and Leave: tell the coordinator (kFinish with `rank`) and wait for kShutdown.
  Status EndWith(uint32_t rank, std::span<const uint8_t> data = {});
  std::optional<Restored> restored_;
  WorkerStats stats_;
};

}  // namespace ferry::ps
