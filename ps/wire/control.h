// The parameter server's control plane: small messages between every role (server, worker) and
// the coordinator, carried by Ferry's own tcp transport (always available, authenticated by the
// job secret, failures detected within peer_timeout). Data never travels here; this plane
// carries membership, the start barrier, worker barriers, clocks, gathers and failure notices.
//
//   member -> coordinator   kRegister {rank, role, index, value = job fingerprint,
//                           members = {itself: data address, host, pid}}
//   coordinator -> all      kMembership {members}  once every expected member registered
//                           kReject {text}         the member's job spec or identity is wrong
//   member -> coordinator   kReady                 connections made; coordinator -> all kStart
//   worker -> coordinator   kBarrier {value = id}; coordinator -> workers kBarrierRelease {id}
//   worker -> coordinator   kClock {value = completed clocks, value2 = data position,
//                           rank = kClockCheckpoint or 0}
//   coordinator -> servers  kApplyClock {value, data = workers}  BSP: apply pushes staged for
//                           clocks < value; drop those of `workers` (EncodeWorkerSet: the
//                           clock completed without them, JobSpec::backup_workers) for value - 1
//   server -> coordinator   kClockApplied {value}
//   coordinator -> workers  kClockUpdate {value = min clock over workers (applied, under BSP)}
//   worker -> coordinator   kGather {value = id, value2 = total bytes, index = chunk offset,
//                           rank = kGatherToAll / 0 for worker 0, data}; relayed as
//                           kGatherPart {rank = sender's worker index, same fields}
//   worker -> coordinator   kFinish; when every worker finished: coordinator -> all kShutdown
//   coordinator -> all      kFailure {rank, role, index, text = reason, value = ms since start}
//   member -> coordinator   kFailure {text = what it saw, value = kFailureWhileRunning}: a
//                           member that lost a peer (a worker its server, a server its worker)
//                           says so before it leaves, so the job's failure names the peer that
//                           died and not the member that left because of it; {rank, text,
//                           value = 0}: this rank could not start (Node::ReportStartFailure)
//   worker -> coordinator   kCheckpoint {text = dir, value = id}: relayed to every server, which
//                           saves its shards and answers kCheckpointDone {value = id, text =
//                           error or ""}; then the coordinator writes the manifest and answers
//                           the worker kCheckpointDone. With value2 = kCheckpointClear (text
//                           empty) every server empties every table it hosts instead, and the
//                           coordinator answers once all did (no manifest). With value2 =
//                           kCheckpointStats (text empty) every server answers at once with
//                           table_stats (its counters, one per table, the shards it heads) and
//                           the coordinator answers the sums (Worker::TableStats)
//   coordinator -> servers  kClockUpdate {value}   with replicas > 1 too (forward rings hold BSP
//                           pushes until every server applied their clock)
//   member -> coordinator   kSuspect {index = server, text}: with replicas > 1, a member that
//                           lost its data connection to a server asks for its removal instead of
//                           failing the job; the coordinator decides (it may know already)
//   coordinator -> all      kServerDown {index, text, value}: with replicas > 1, a server died
//                           (its control connection failed) or was suspected, and every shard it
//                           held still has a live replica: its chains close over it and the job
//                           goes on (chain.h). The removed server itself stops serving if alive.
//   standby -> coordinator  kRegister's text: the address of the standby coordinator this rank
//                           runs (replicas > 1: rank 1, Coordinator::StartStandby); kMembership's
//                           text carries it to every member
//   member -> standby       kRejoin (control_journal.h): its coordinator connection failed while
//                           the job ran; the standby takes over once its own rank lost rank 0 too
//   coordinator -> all      kChainRepair {index = dead server, value = spare}: with spares, the
//                           lowest idle one adopts a removed server's slots at the tail of its
//                           chains; every member applies it in the order heard (chain.h Repairs)
//   spare -> coordinator    kChainJoined {index}: its copies are complete; relayed to all
//   worker -> coordinator   kMoveShards {value = id, data = EncodeMoves}: an elastic job moves
//                           these shards (Worker::MoveShards); the coordinator carries them out
//                           (MovePlan: kMoveBegin, kMoveCopied, kMoveDrain, kMoveDrained,
//                           kMoveFinish, below) and answers kMoveShards {value = id, value2 =
//                           moves finished, index = moves skipped, text = error or ""}; with
//                           rank = kMoveLeave and index = a server, the coordinator plans that
//                           server's leave itself (PlanLeave), carries it out and sends
//                           kServerLeave once the server holds nothing
//   join slot -> coordinator kRegister while the job runs (JobSpec::join_slots): the coordinator
//                           answers kMembership {members = the live members, data = the
//                           chains}, tells everyone kServerJoin, and once the joining server is
//                           ready (every connection made) kStart, then plans its moves (PlanJoin)
//   worker join slot -> coordinator kRegister while the job runs (JobSpec::worker_join_slots):
//                           kMembership {the live members, data = the chains}; the servers hear
//                           kWorkerJoin and accept its connection; once it is ready kStart
//                           {value = the clocks it starts after: it takes part from there,
//                           value2 = the highest barrier id, index = the highest gather id,
//                           data = EncodeWorkerSet(the workers running)}, the workers kWorkerJoin
//   worker -> coordinator   kFinish {rank = kFinishLeave}: the worker leaves the running job (its
//                           requests are done); the servers hear kWorkerLeave, the worker
//                           kShutdown, and the job goes on without it
//   worker -> coordinator   kWorkTake {value = pass, value2 = the pass's item count}: the next
//                           item of that pass; answered kWorkTake {value = pass, value2 = the
//                           item or kNoWork, text = error or ""} (Worker::TakeWork)
//
// ControlClient: one connection to the coordinator, driven by its own pump thread (which also
// answers heartbeats while the owner computes). When that connection fails while the job runs and
// the membership named a standby coordinator, the pump connects there once and rejoins (kRejoin
// from its ControlJournal, then the journal's replay, then what it still had queued); the owner
// sees no failure unless that fails too. Messages queue up for the owner; `on_message`
// is called from the pump thread after each one (the owner's data transport Wake(), typically).
// The pump thread also keeps the owner's DATA transport alive while the owner computes (see
// SetIdleHook): a tcp peer declares a connection dead when nothing arrives for peer_timeout, and
// nothing drives a worker's data transport while its caller computes between PS calls.
// Thread-safety: Send/TryReceive/Receive/status/ReportFailure may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ps/job/job.h"
#include "ps/job/rebalance.h"
#include "transport/transport.h"

namespace ferry::ps {

enum class Role : uint8_t { kServer = 0, kWorker = 1 };
std::string_view RoleName(Role role);

// Each kind's fields (ControlMessage below); a field a kind does not name is zero or empty.
enum class ControlKind : uint8_t {
  kRegister = 1,  // member -> coord {rank, role, index, value = job fingerprint, members = {self}}
  kMembership,    // coord -> all {members = every server, then every worker, in index order}
  kReject,        // coord -> member {text = why its registration was refused}
  kReady,         // member -> coord {}: its data connections are made
  kStart,         // coord -> all {}: every member is ready
  kBarrier,       // worker -> coord {value = barrier id}
  kBarrierRelease,  // coord -> workers {value = barrier id}
  kClock,           // worker -> coord {value = completed clocks, value2 = its data position,
                    //   rank = kClockCheckpoint: it asks for a checkpoint at this clock}
  kApplyClock,      // coord -> servers {value = clock, data = EncodeWorkerSet(the workers the
                    //   clock completed without)}: BSP, apply the pushes of clocks < value and
                    //   drop those workers' pushes of clock value - 1
  kClockApplied,    // server -> coord {value = clock}
  kClockUpdate,     // coord -> workers (and servers with replicas) {value = the job's min clock}
  kGather,          // worker -> coord {value = id, value2 = total bytes, index = chunk offset,
                    //   rank = kGatherToAll or 0 (to worker 0 only), data = the chunk}
  kGatherPart,      // coord -> worker(s) {rank = the sender's worker index, the rest as kGather}
  kFinish,          // worker -> coord {}: it waited for its requests and leaves the job
  kShutdown,        // coord -> all {text = why}: every worker finished
  kFailure,         // coord -> all {rank, role, index = who failed, text = why, value = ms since
                    //   start}; member -> coord {text, value = kFailureWhileRunning}: it lost a
                    //   peer; {rank, text, value = 0}: this rank could not start
  kCheckpoint,      // worker -> coord -> servers {text = dir, value = id, value2 = 0,
                    //   kCheckpointClear or kCheckpointStats}
  kCheckpointDone,  // server -> coord -> worker {value = id, text = error or "", table_stats
                    //   for kCheckpointStats}
  kServerDown,      // coord -> all {index = server, text = why, value = ms since start}
  kSuspect,         // member -> coord {index = server, text = what the member saw}
  kRejoin,          // member -> standby coord {rank, role, index, value = fingerprint, members =
                    //   the membership it heard, data = what it sent and heard}: the
                    //   coordinator's rank died (control_journal.h)
  kChainRepair,     // coord -> all {index = the dead server, value = the spare}: after its
                    //   kServerDown, an idle spare adopts the dead server's slots and joins the
                    //   tail of their chains (ChainMap::Join); the tails copy it the rows
  kChainJoined,     // spare -> coord {index = itself}: every adopted shard's copy arrived;
                    //   coord -> all {index = the spare}: it counts in its chains (Joined)
  // Moves (elastic jobs; ps/coordinator/move_plan.h has the protocol):
  kMoveShards,   // worker -> coord and back: see the list above
  kMoveBegin,    // coord -> all {index = shard, value = from, value2 = to, rank = the copy's
                 //   source}: ChainMap::BeginMove; the source copies the shard to `to`
  kMoveCopied,   // server -> coord {index = shard}: `to` holds the copy
  kMoveDrain,    // coord -> servers {index = shard, value = its head}: the head answers new
                 //   pushes of the shard "moved" until the tail acknowledged every accepted one
  kMoveDrained,  // server -> coord {index = shard}: the head says so
  kMoveFinish,   // coord -> all {index = shard, value = from, value2 = to}: ChainMap::FinishMove
  kServerLeave,  // coord -> all {index = server}: it holds no shard any more and leaves the job
                 //   (a graceful leave: kMoveShards with rank = kMoveLeave); every process counts
                 //   it dead, the server itself stops serving (Ok)
  kServerJoin,   // coord -> all {index = server, members = {its identity}}: a join slot joins the
                 //   running job (JobSpec::join_slots): every process revives it in its chains
                 //   (ChainMap::Revive), workers and servers connect to it; its own kMembership
                 //   carries data = the chains (ChainMap::Encode). Its shards come by moves.
  kWorkerJoin,   // coord -> servers {index = worker, members = {its identity}}: a worker join
                 //   slot joins the running job; each server accepts its data connection;
                 //   coord -> workers {index, value2 = the job's highest gather id} once it is
                 //   ready: its parts of later gathers count; server -> coord {index}: this
                 //   server accepted its connection (the worker starts once every server has)
  kWorkerLeave,  // coord -> all {index = worker, data = its farewell}: the worker left the job
                 //   (its requests are done); its connection closing is not a failure
  kWorkTake,     // worker <-> coord: work dealing (see the list above)
};
std::string_view ControlKindName(ControlKind kind);

// kFinish's rank: the worker leaves the running job (Worker::Leave) instead of ending with it.
inline constexpr uint32_t kFinishLeave = 1;
// kFinish {rank = kFinishLeave}'s data: the leaving worker's farewell, relayed to the workers in
// kWorkerLeave's data (Worker::Leave), at most this long.
inline constexpr size_t kMaxFarewell = 64 << 10;
// kFinish's rank: the worker makes no more clocks (Worker::StopClocks); it stays in the job.
inline constexpr uint32_t kFinishClocks = 2;
// kWorkTake's answer when the pass has no item left.
inline constexpr uint64_t kNoWork = UINT64_MAX;
// The most items a pass of work dealing may have.
inline constexpr uint64_t kMaxWorkItems = uint64_t{1} << 24;

// kCheckpoint's value2: empty the tables instead of saving them (Worker::ClearTables).
inline constexpr uint64_t kCheckpointClear = 1;
// kCheckpoint's value2: report every table's counters instead (Worker::TableStats).
inline constexpr uint64_t kCheckpointStats = 2;
// kGather's rank: relay the part to every worker (else to worker 0 only).
inline constexpr uint32_t kGatherToAll = 1;
// kMoveShards' rank: plan and carry out the leave of server `index` (Worker::RetireServer).
inline constexpr uint32_t kMoveLeave = 1;
// kMoveShards' rank (the coordinator's own, for a join slot that joined): plan and carry out the
// join of server `index` (PlanJoin).
inline constexpr uint32_t kMoveJoin = 2;
// kClock's rank: the worker asks for a checkpoint at this clock (Worker::Clock's `checkpoint`).
inline constexpr uint32_t kClockCheckpoint = 1;

struct MemberInfo {
  uint32_t rank = 0;
  Role role = Role::kServer;
  uint32_t index = 0;
  std::string data_address;
  std::string host;
  uint32_t pid = 0;
  bool operator==(const MemberInfo&) const = default;
};

// One table's counters (Worker::TableStats): on one server, or summed over the servers. Rows
// and bytes are as of the answer; the others count since the job started (a restored job
// starts them at zero; rows a checkpoint brought back are live but not admitted).
struct TableStats {
  uint64_t live_rows = 0;       // rows in the table
  uint64_t admitted = 0;        // rows created (admission let the key in)
  uint64_t evicted = 0;         // rows erased: tick eviction and the max_rows bound
  uint64_t refused = 0;         // sightings of absent keys that admission turned away
  uint64_t bytes_resident = 0;  // rows buffer + index mapped for the table
  TableStats& operator+=(const TableStats& o);
  bool operator==(const TableStats&) const = default;
};

// One control message. Which fields a kind uses, and what they mean, is said at ControlKind.
struct ControlMessage {
  ControlKind kind = ControlKind::kReady;
  uint32_t rank = 0;  // the sender's rank (kRegister, kFailure); kGather: relay target
  Role role = Role::kServer;
  uint32_t index = 0;  // a role index: the sender's, a server's, or a gather chunk's offset
  uint64_t value = 0;  // the kind's number: fingerprint, id, clock, ...
  uint64_t value2 = 0;
  std::string text;
  std::vector<MemberInfo> members;
  std::vector<uint8_t> data;
  std::vector<TableStats> table_stats;
};

// Largest encoded control message; gathers are chunked below it.
inline constexpr size_t kMaxControlMessage = 256u << 10;
inline constexpr size_t kGatherChunk = 192u << 10;

std::vector<uint8_t> EncodeControl(const ControlMessage& m);
// Verifies the buffer; kProtocol on malformed, truncated or unknown-kind input. Never crashes.
Result<ControlMessage> DecodeControl(std::span<const uint8_t> bytes);

// kApplyClock's data: worker indices as 4-byte little-endian numbers. DecodeWorkerSet checks the
// length and that each index is below `workers` (kProtocol otherwise).
std::vector<uint8_t> EncodeWorkerSet(std::span<const uint32_t> workers);
Result<std::vector<uint32_t>> DecodeWorkerSet(std::span<const uint8_t> bytes, uint32_t workers);
// kMoveShards' data: (shard, from, to) as three such numbers a move. DecodeMoves checks the
// length, shard < `shards` and both servers < `servers` (kProtocol otherwise).
std::vector<uint8_t> EncodeMoves(std::span<const ShardMove> moves);
Result<std::vector<ShardMove>> DecodeMoves(std::span<const uint8_t> bytes, uint32_t shards,
                                           uint32_t servers);

// Options of the control transports (client and coordinator).
TransportOptions ControlTransportOptions(const JobSpec& job);
// Options of a member's data transport (servers and workers alike): limits sized for the job's
// largest request or reply, and `hello` (EncodeWorkerHello/EncodeServerHello) for the handshake.
TransportOptions DataTransportOptions(const JobSpec& job, std::vector<uint8_t> hello);

// A registered pool of send slots and posted receives over one Transport; shared by the client
// and the coordinator. Not thread-safe: its owner serialises calls.
class ControlMailbox {
 public:
  static constexpr size_t kSlots = 16;
  static Result<std::unique_ptr<ControlMailbox>> Create(Transport* t, size_t receives);
  ~ControlMailbox();
  // Posts the receives (ep == nullptr: the transport's shared queue).
  Status PostReceives();
  // Copies `m` into a free send slot and posts it. kResourceExhausted when every slot is in
  // flight (drive completions and retry).
  Status Send(Endpoint* ep, const ControlMessage& m);
  // Handles one completion of this mailbox. Returns the decoded message for a receive (and
  // reposts its buffer), nullopt for a send completion; an error for a failed op or a
  // malformed message (with c.ep naming the peer).
  Result<std::optional<ControlMessage>> Handle(const Completion& c);
  bool Owns(const Completion& c) const { return (c.context >> 56) == kTag; }
  size_t free_slots() const { return free_.size(); }

 private:
  static constexpr uint64_t kTag = 0xc7;
  ControlMailbox(Transport* t, size_t receives);
  Transport* t_;
  size_t receives_;
  std::vector<uint8_t> memory_;
  std::unique_ptr<MemoryRegion> region_;
  std::vector<size_t> free_;
};

struct ControlJournal;  // control_journal.h

class ControlClient {
 public:
  // Connects to the coordinator at `address`, retrying until `timeout` (it may start later).
  static Result<std::unique_ptr<ControlClient>> Connect(const std::string& address,
                                                        const JobSpec& job,
                                                        std::function<void()> on_message,
                                                        Millis timeout);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  Status Send(const ControlMessage& m);
  // The next queued message, if any. Calling it counts as the owner driving its data transport
  // (Worker::Progress and Server::Serve call it on every round): see SetIdleHook.
  std::optional<ControlMessage> TryReceive();
  // Blocks up to `timeout` for the next message; kTimeout, or the connection's failure.
  Result<ControlMessage> Receive(Millis timeout);
  // Ok while the coordinator connection is healthy; its failure otherwise.
  Status status() const;

  // While the owner has not called TryReceive() for `idle`, the pump thread calls `hook` every
  // ~100 ms (Node passes one that drives the role's data transport without taking its
  // completions: Poll() of an empty span), so the owner's peers keep hearing from it while it
  // computes or waits on the control plane. `idle` well below peer_timeout (Node: a quarter).
  // The hook runs on the pump thread and must not block; it must outlive this client.
  void SetIdleHook(std::function<void()> hook, Millis idle);

  // Tells the coordinator that this member saw a failure while running (kFailure, value =
  // kFailureWhileRunning, text = why; the coordinator knows who sent it): the job then fails
  // naming what this member saw, even if this member's own departure reaches the coordinator
  // first. Non-blocking; the destructor gives queued messages up to kCloseFlush to leave. A
  // no-op once the connection failed.
  void ReportFailure(const Status& why);
  static constexpr uint64_t kFailureWhileRunning = 1;
  static constexpr Millis kCloseFlush{500};

 private:
  ControlClient();
  void PumpMain();
  void Fail(const Status& s);
  // The coordinator connection failed (`why`): rejoin the standby, or fail.
  void Lost(const Status& why);
  // Connects to the standby and queues the rejoin before what was queued. Returns the failure to
  // report instead when there is none to go to (the job has not started or has shut down, no
  // standby, rejoined once already) or it cannot be reached within rejoin_timeout_.
  Status FailOver(const Status& why);

  std::string address_;
  std::unique_ptr<Transport> transport_;
  std::shared_ptr<Endpoint> ep_;
  std::unique_ptr<ControlMailbox> mailbox_;
  std::function<void()> on_message_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ControlMessage> inbox_;
  std::deque<ControlMessage> outbox_;  // waiting for a free send slot
  size_t in_flight_ = 0;               // posted sends not yet completed (the pump's count)
  std::function<void()> idle_hook_;
  Millis idle_{0};
  std::atomic<int64_t> owner_seen_ns_{0};  // steady clock of the owner's last TryReceive
  Status failed_;
  std::unique_ptr<ControlJournal> journal_;  // what was sent and heard (guarded by mu_)
  bool failed_over_ = false;                 // the pump's
  std::shared_ptr<Endpoint> old_ep_;         // the failed one: its completions are ignored
  Millis rejoin_timeout_{5000};
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

}  // namespace ferry::ps
