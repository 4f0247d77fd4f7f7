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
// One-sided pulls (server_onesided.cc, docs/ps.md): a pull with kFlagWantSlots is answered with
// the rows AND each key's slot, the table's epoch and, when the worker's are old, the rows and
// status descriptors, so that the worker can read those rows itself later. Contract for anything
// that erases rows of a table while serving (today only ResolveSlots at a max_rows bound): call
// BumpReuseGeneration(t) BEFORE the first erase, or a one-sided reader may take another key's
// row for its own.

//
// Threading: Serve() runs on one thread (the tables have a single writer); Wake-ups come from
// the control client's pump thread. Not thread-safe otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ps/array_hash_map.h"
#include "ps/control.h"
#include "ps/job.h"
#include "ps/protocol.h"
#include "transport/transport.h"

namespace ferry::ps {

struct CheckpointManifest;  // ps/checkpoint.h

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

  // Accepts one data connection per worker. `control` is checked between attempts so that a
  // failure elsewhere ends the wait.
  Status AcceptWorkers(ControlClient* control, Millis timeout);
  // Serves requests and control commands until kShutdown (Ok) or a failure (the reason).
  // A checkpoint command copies every table (CaptureSnapshot; the only pause) and a writer
  // thread writes the files and answers kCheckpointDone; Serve returns after that thread.
  Status Serve(ControlClient* control);
  // Makes AcceptWorkers/Serve return kCancelled soon. Thread-safe.
  void RequestStop() {
    stop_ = true;
    data_->Wake();
  }

  // For tests and checkpoints: the shard of table `t` (only between requests).
  ArrayHashMap& table(uint32_t t) { return *tables_[t].map; }
  const ServerStats& stats() const { return stats_; }

 private:
  struct Table {
    TableSpec spec;
    std::unique_ptr<ArrayHashMap> map;
    uint32_t mirror_offset = 0;  // fp16 mirror inside the row (fp16_pull), else 0
    uint32_t inflight = 0;       // reply writes out of this table's rows not yet completed
  };
  struct Link {  // one worker
    std::shared_ptr<Endpoint> ep;
    std::unique_ptr<RemoteKey> arena;
    uint64_t arena_bytes = 0;
    uint32_t next_seq = 0;
    std::unique_ptr<MemoryRegion> ring;  // registration of rings_ slice
    struct Staged {
      uint64_t offset;
      uint32_t clock;
    };
    std::deque<Staged> staged;  // BSP pushes waiting for their clock's apply
    std::vector<uint32_t> free_scratch;
    bool failed = false;
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

  Server(const JobSpec& job, uint32_t index, std::unique_ptr<Transport> data);
  Status Init(const std::string& listen_host);

  // Request path (server_requests.cc).
  void HandleNotify(uint32_t w, uint32_t imm);
  Status HandleRequest(uint32_t w, const RequestView& req);
  Status ApplyPush(uint32_t w, const RequestView& req);
  Status ReplyRows(uint32_t w, const RequestView& req);
  Status SendRecord(uint32_t w, uint32_t seq, const Status& status);
  // Slots of keys in table t, creating absent rows (with the initializer, subject to admission;
  // refused keys get kNoSlot). Grows the table first if needed (draining its replies).
  Status ResolveSlots(Table& t, const uint64_t* keys, uint32_t n, std::vector<uint32_t>* slots);
  Status ApplyClock(uint64_t clock);
  Status ServeLoop(ControlClient* control);
  // Checkpoints (ps/checkpoint.h): copies this server's shard of every table into
  // checkpoint_images_, and writes the copies into the command's directory on
  // checkpoint_writer_ (which answers the coordinator); a second command first waits for the
  // previous write. At startup, RestoreShard brings the
  // rows of table `t` this server owns from every shard of JobSpec::restore_dir.
  void StartCheckpoint(const ControlMessage& command, ControlClient* control);
  void JoinCheckpointWriter();
  Status RestoreShard(size_t t, const TableOptions& options, ArrayHashMap* map);
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
  OneSided& one_sided();
  void FailWorker(uint32_t w, const Status& why);

  JobSpec job_;
  uint32_t index_;
  std::unique_ptr<Transport> data_;
  std::string data_address_;
  std::vector<TableShape> shapes_;
  std::unique_ptr<CheckpointManifest> restore_manifest_;
  std::vector<Table> tables_;
  uint8_t* rings_ = nullptr;  // W * staging_bytes, shareable memory (see server.cc)
  struct RingMemory;
  std::unique_ptr<RingMemory> ring_memory_;
  std::vector<ReplyRecord> scratch_;  // W * 2 * max_outstanding records
  std::unique_ptr<MemoryRegion> scratch_region_;
  std::vector<Link> links_;
  std::unordered_map<uint64_t, uint32_t> worker_of_ep_;
  std::vector<Reply> replies_;
  std::vector<uint32_t> free_replies_;
  std::deque<Completion> deferred_;  // notifications that arrived during a drain
  std::vector<uint32_t> slots_;      // scratch for ResolveSlots
  std::vector<float> grad_scratch_;  // fp16 gradients converted for one row
  std::unique_ptr<OneSided, OneSidedDeleter> one_sided_;  // on first use; dies before data_
  std::thread checkpoint_writer_;
  std::vector<SnapshotImage> checkpoint_images_;  // one per table, reused by every checkpoint
  std::atomic<bool> stop_{false};
  Status fatal_;           // ends Serve at once (a broken invariant, a protocol violation)
  Status worker_failure_;  // a worker's connection failed; ends Serve after a grace period
  std::chrono::steady_clock::time_point worker_failure_deadline_;
  ServerStats stats_;
};

}  // namespace ferry::ps
