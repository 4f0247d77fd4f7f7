// Server setup, worker connections, the serve loop and control commands (see server.h); BSP
// clocks in server_clocks.cc, checkpoints in server_checkpoints.cc.
#include "ps/server/server.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ps/job/checkpoint.h"
#include "ps/store/optimizer.h"
#include "transport/pool.h"

namespace ferry::ps {

using Clock = std::chrono::steady_clock;

// The staging rings live in shareable memory: a same-host worker over ucx then writes its
// requests with memcpy into a mapping of it instead of cross-memory attach.
struct Server::RingMemory {
  ShareableMemory memory;
};

Server::Server(const JobSpec& job, uint32_t index, std::unique_ptr<Transport> data)
    : job_(job), index_(index), data_(std::move(data)) {}

Server::~Server() {
  JoinCheckpointWriter();
  // Registrations die before the memory and the transport (the transport contract).
  for (Link& l : links_) {
    if (l.ep) l.ep->Close();
    l.arena.reset();
  }
  for (auto& [j, d] : downstream_) {
    if (d.ep) d.ep->Close();
    for (Lane& lane : d.lanes) lane.ring.reset();
  }
  for (auto& [p, u] : upstream_) {
    if (u.ep) u.ep->Close();
    u.ack.reset();
  }
  for (Link& l : links_) l.ring.reset();
  pred_ring_regions_.clear();
  ack_region_.reset();
  block_region_.reset();
  scratch_region_.reset();
  one_sided_.reset();  // one-sided pulls' registrations (server_onesided.cc)
  for (Table& t : tables_) t.map.reset();
  links_.clear();
  data_.reset();
}

Result<std::unique_ptr<Server>> Server::Create(const JobSpec& job, uint32_t index,
                                               std::unique_ptr<Transport> data,
                                               const std::string& listen_host) {
  FERRY_RETURN_IF_ERROR(ValidateJob(job));
  if (index >= job.server_members()) return InvalidArgument("server index out of range");
  std::unique_ptr<Server> s(new Server(job, index, std::move(data)));
  FERRY_RETURN_IF_ERROR(s->Init(listen_host));
  return s;
}

Status Server::Init(const std::string& listen_host) {
  const uint32_t workers = job_.worker_members();
  const uint32_t replicas = job_.replicas;
  chain_ = JobChains(job_);
  // Tables, per hosted shard (one without replicas and more shards): rows registered for remote
  // reads (one-sided pulls); the rows buffer is the source of every pull reply. A spare holds as
  // many as a server, empty and of no shard until it adopts a dead server's (chain.h "Repairs"):
  // its regions are laid out as any server's.
  const bool spare = chain_.is_spare(index_);
  slot_count_ = spare ? replicas : static_cast<uint32_t>(chain_.Hosted(index_).size());
  // An elastic job's server gains slots while it serves (a move's target, server_moves.cc):
  // reserved up front so that no Table moves while a request or a reply refers to it.
  if (job_.elastic) tables_.reserve(size_t{job_.num_shards()} * job_.tables.size());
  for (uint32_t k = 0; k < slot_count_; ++k) {
    const uint32_t shard = spare ? kNoShard : chain_.HostedShard(index_, k);
    for (size_t i = 0; i < job_.tables.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(Table t, MakeTable(i, shard));
      if (k == 0) shapes_.push_back(TableShape{t.spec.dim, t.spec.fp16_pull});
      tables_.push_back(std::move(t));
    }
  }
  if (!job_.restore_dir.empty() && !spare) {
    for (size_t i = 0; i < job_.tables.size(); ++i) FERRY_RETURN_IF_ERROR(RestoreTable(i));
  }
  for (Table& t : tables_) {
    Status status = t.map->AttachTransport(data_.get(), kAccessRemoteRead);
    if (!status.ok()) {
      return status.Annotate("server " + std::to_string(index_) + ": table " + t.spec.name);
    }
  }
  FERRY_RETURN_IF_ERROR(InitMemory());
  // Who connects (SetMembership refines it from the membership): every worker, and a shard
  // server's predecessors are the replicas-1 servers before it; every server before a spare
  // connects to it (any of them may be the tail it joins behind); in an elastic job every
  // other server the job starts with.
  want_workers_ = job_.workers;  // worker join slots connect when they join (kWorkerJoin)
  want_preds_ = job_.elastic          ? job_.first_join_slot() - 1
                : RepairSpare(index_) ? index_
                                      : job_.replicas - 1;
  links_.resize(workers);
  std::vector<RemoteRegion> advertised;
  for (uint32_t w = 0; w < workers; ++w) {
    FERRY_ASSIGN_OR_RETURN(
        links_[w].ring, data_->RegisterMemory(rings_ + w * job_.staging_bytes, job_.staging_bytes,
                                              kAccessRemoteWrite));
    advertised.push_back(links_[w].ring->descriptor());
    for (uint32_t i = 2 * job_.max_outstanding; i-- > 0;) {
      links_[w].free_scratch.push_back(w * 2 * job_.max_outstanding + i);
    }
  }
  // Own shard's rows only: the only ones a worker reads one-sided.
  for (size_t i = 0; i < job_.tables.size(); ++i)
    advertised.push_back(tables_[i].map->descriptor());
  if (job_.forwards()) {
    // Forward rings (one per predecessor distance; a spare's one per slot it may adopt; an
    // elastic job's one per other server) and the ack word: protocol.h "Replication".
    for (uint32_t r = 0; r < pred_ring_count_; ++r) {
      FERRY_ASSIGN_OR_RETURN(auto ring,
                             data_->RegisterMemory(pred_rings_ + r * forward_ring_bytes_,
                                                   forward_ring_bytes_, kAccessRemoteWrite));
      advertised.push_back(ring->descriptor());
      pred_ring_regions_.push_back(std::move(ring));
    }
    advertised.push_back(ack_region_->descriptor());
  }
  staged_.resize(size_t{slot_count_} * workers);
  dropped_clocks_.resize(workers);
  if (job_.forwards()) seen_.resize(size_t{slot_count_} * workers);
  scratch_.resize(size_t{workers} * 2 * job_.max_outstanding);
  FERRY_ASSIGN_OR_RETURN(
      scratch_region_,
      data_->RegisterMemory(scratch_.data(), scratch_.size() * sizeof(ReplyRecord), kAccessLocal));
  data_->Advertise(std::move(advertised));
  auto addr = data_->Listen(listen_host + ":0");
  if (!addr.ok()) {
    return addr.status().Annotate("server " + std::to_string(index_) + ": listen on " +
                                  listen_host);
  }
  data_address_ = *addr;
  replies_.resize(64);
  for (uint32_t i = 64; i-- > 0;) free_replies_.push_back(i);
  return Status::Ok();
}

Result<Server::Table> Server::MakeTable(size_t i, uint32_t shard) const {
  Table t;
  t.spec = ShardTable(job_.tables[i], job_);
  t.shard = shard;
  FERRY_ASSIGN_OR_RETURN(t.map, ArrayHashMap::Create(ServerTableOptions(t.spec)));
  if (t.spec.fp16_pull) {
    t.mirror_offset = t.map->layout().state_offset + 4 * StateFloats(t.spec.optimizer, t.spec.dim);
  }
  return t;
}

Status Server::InitMemory() {
  // One block of shareable memory (a same-host worker over ucx then writes its requests with
  // memcpy into a mapping of it instead of cross-memory attach):
  //   [ W staging rings | replicas: forward rings (a spare: R; elastic: S-1) | ack word |
  //     ack record | headers | row records' scratch ]
  // With replicas the whole block is also registered once for local access, so a forward is one
  // sparse write whose segments come from anywhere in it (a header from the scratch, keys and
  // gradients straight from the worker's ring or a forward ring).
  const uint32_t replicas = job_.replicas;
  const bool forwards = job_.forwards();
  const uint64_t worker_rings = job_.staging_bytes * job_.worker_members();
  // A predecessor forwards at most what the workers can have outstanding at it for one clock:
  // every worker's ring (under BSP the pushes of a clock stay until every server applied it).
  // Row records (server_records.cc) share the ring with the pushes and free their space when
  // acknowledged, but under BSP a clock's last records (kForwardClockDone) must find room beside
  // that clock's held pushes: twice the room then.
  records_ = forwards && std::any_of(job_.tables.begin(), job_.tables.end(),
                                     [](const TableSpec& t) { return TableTracksSightings(t); });
  forward_ring_bytes_ = forwards ? worker_rings * (records_ ? 2 : 1) : 0;
  // A shard server's predecessors stand at distances 1..R-1, one ring each; a spare's are the
  // tails of the chains it adopts, one ring per adopted slot (chain.h "Repairs"); in an elastic
  // job any other server may become one (a move reorders chains): one ring each.
  pred_ring_count_ = job_.elastic              ? job_.server_members() - 1
                     : replicas == 1           ? 0
                     : chain_.is_spare(index_) ? replicas
                                               : replicas - 1;
  const uint64_t headers =
      forwards ? std::max<uint64_t>(256, 2ull * job_.worker_members() * job_.max_outstanding) : 0;
  // Room for a few records of the largest size at once (more wait, in order), and with spares
  // for two chunks of a repair's copy (QueueCopy): up to 1 MiB of whole rows, a quarter of a
  // forward ring, or one row if that is more.
  uint64_t record_scratch = records_ ? 4 * ((RecordPayloadBytes(RecordKeys()) + 63) / 64 * 64) : 0;
  if (forwards && (job_.spares > 0 || job_.elastic)) {
    uint64_t stride = 0;
    for (const Table& t : tables_) stride = std::max<uint64_t>(stride, t.map->layout().stride);
    copy_chunk_bytes_ =
        std::max<uint64_t>(std::min<uint64_t>(uint64_t{1} << 20, forward_ring_bytes_ / 4), stride);
    copy_chunk_bytes_ = (copy_chunk_bytes_ + 63) / 64 * 64;
    if (copy_chunk_bytes_ + sizeof(ForwardHeader) > forward_ring_bytes_) {
      return InvalidArgument("a row of " + std::to_string(stride) +
                             " bytes does not fit a repair's forward ring of " +
                             std::to_string(forward_ring_bytes_) + " bytes: raise staging_bytes");
    }
    // The pushes forwarded to a joining spare carry their own bytes through it too.
    uint64_t push_bytes = 0;
    for (const Table& t : tables_) {
      push_bytes = std::max<uint64_t>(
          push_bytes,
          RequestPayloadBytes(RequestType::kPush, 0, job_.max_keys_per_request, t.spec.dim));
    }
    record_scratch += 2 * std::max<uint64_t>(copy_chunk_bytes_, (push_bytes + 63) / 64 * 64);
  }
  last_op_.assign(slot_count_, 0);
  clock_done_.assign(slot_count_, 0);
  uint64_t bytes = worker_rings;
  if (forwards) {
    bytes += forward_ring_bytes_ * pred_ring_count_ + 2 * kAckBytes + headers * 64 + record_scratch;
  }
  ring_memory_ = std::make_unique<RingMemory>();
  FERRY_ASSIGN_OR_RETURN(ring_memory_->memory, ShareableMemory::Allocate(bytes));
  rings_ = ring_memory_->memory.data();
  if (!forwards) return Status::Ok();
  pred_rings_ = rings_ + worker_rings;
  const uint64_t ack_at = worker_rings + forward_ring_bytes_ * pred_ring_count_;
  ack_source_at_ = ack_at + kAckBytes;
  headers_at_ = ack_source_at_ + kAckBytes;
  header_space_ = RangeAllocator(headers_at_, headers_at_ + headers * 64, 64);
  const uint64_t records_at = headers_at_ + headers * 64;
  record_space_ = RangeAllocator(records_at, records_at + record_scratch, 64);
  ReplyRecord ack;  // what every ack writes (its notification is what counts)
  std::memcpy(rings_ + ack_source_at_, &ack, 8);
  FERRY_ASSIGN_OR_RETURN(ack_region_,
                         data_->RegisterMemory(rings_ + ack_at, kAckBytes, kAccessRemoteWrite));
  FERRY_ASSIGN_OR_RETURN(block_region_, data_->RegisterMemory(rings_, bytes, kAccessLocal));
  return Status::Ok();
}

Server::Table* Server::TableFor(uint32_t shard, uint32_t t) {
  if (t >= job_.tables.size()) return nullptr;
  // Without replicas, and one shard a shard server, every request is for this server's shard
  // (the field is not checked).
  if (slot_count_ == 1 && !chain_.is_spare(index_) && !job_.elastic) return &tables_[t];
  const int k = chain_.Slot(index_, shard);
  if (k < 0) return nullptr;
  return &tables_[size_t(k) * job_.tables.size() + t];
}

uint32_t Server::HostedSlot(const Table& t) const {
  return static_cast<uint32_t>((&t - tables_.data()) / job_.tables.size());
}

bool Server::FirstSight(uint32_t k, uint32_t w, uint64_t push_id) {
  if (!job_.forwards()) return true;
  Seen& s = seen_[size_t{k} * job_.worker_members() + w];
  if (push_id <= s.upto || s.above.count(push_id) != 0) return false;
  s.above.insert(push_id);
  while (!s.above.empty() && *s.above.begin() == s.upto + 1) {
    s.above.erase(s.above.begin());
    ++s.upto;
  }
  return true;
}

Status Server::SetMembership(const ControlMessage& mem) {
  if (!mem.data.empty()) {
    ChainMap chains;
    if (!chains.Decode(mem.data) || chains.members() != chain_.members() ||
        chains.shards() != chain_.shards() || chains.dead(index_)) {
      return ProtocolError("server " + std::to_string(index_) +
                           ": the membership's chains do not fit this job");
    }
    chain_ = std::move(chains);
  }
  if (!job_.elastic) return Status::Ok();
  // Every other server of the membership connects, and a join slot waits for the workers
  // still running (those the membership names).
  uint32_t workers = 0, preds = 0;
  for (const MemberInfo& m : mem.members) {
    if (m.role == Role::kWorker) ++workers;
    if (m.role == Role::kServer && m.index != index_) ++preds;
  }
  want_preds_ = preds;
  if (!mem.data.empty()) want_workers_ = workers;
  return Status::Ok();
}

Status Server::AcceptWorkers(ControlClient* control, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  uint32_t connected = 0, preds = 0;
  const uint32_t want_preds = want_preds_, want_workers = want_workers_;
  while (connected < want_workers || preds < want_preds) {
    if (Clock::now() > deadline) {
      return Timeout("server " + std::to_string(index_) + ": only " + std::to_string(connected) +
                     " of " + std::to_string(want_workers) + " workers and " +
                     std::to_string(preds) + " of " + std::to_string(want_preds) +
                     " predecessor servers connected in time");
    }
    if (stop_) return Cancelled("server " + std::to_string(index_) + ": stopped");
    if (control != nullptr) {
      FERRY_RETURN_IF_ERROR(control->status());
    }
    auto ep = data_->Accept(Millis(200));
    if (!ep.ok()) {
      if (ep.status().code() == Code::kTimeout) continue;
      // A connection that failed its handshake (wrong secret, another backend) is refused
      // without ending the wait for the real workers.
      std::fprintf(stderr, "ferry server %u: refused a connection: %s\n", index_,
                   ep.status().ToString().c_str());
      continue;
    }
    auto hello = DecodeHello((*ep)->peer_info());
    if (hello.ok() && hello->server) {
      Status s = AcceptPredecessor(hello->index, std::move(ep).value());
      if (!s.ok()) {
        std::fprintf(stderr, "ferry server %u: refused a data connection: %s\n", index_,
                     s.ToString().c_str());
        continue;
      }
      ++preds;
      continue;
    }
    if (!hello.ok()) {
      (*ep)->Close();
      std::fprintf(stderr, "ferry server %u: refused a data connection from %s: %s\n", index_,
                   (*ep)->peer_address().c_str(), hello.status().ToString().c_str());
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(const bool accepted, AcceptWorker(hello->index, std::move(ep).value()));
    if (accepted) ++connected;
  }
  return Status::Ok();
}

Result<bool> Server::AcceptWorker(uint32_t w, std::shared_ptr<Endpoint> ep) {
  if (w >= job_.worker_members() || links_[w].ep != nullptr) {
    ep->Close();
    std::fprintf(stderr,
                 "ferry server %u: refused a data connection from %s: duplicate or out-of-range "
                 "worker index %u\n",
                 index_, ep->peer_address().c_str(), w);
    return false;
  }
  Link& l = links_[w];
  if (ep->peer_regions().size() != 1) {
    return ProtocolError("worker " + std::to_string(w) + " advertised " +
                         std::to_string(ep->peer_regions().size()) +
                         " regions instead of its arena");
  }
  const RemoteRegion& arena = ep->peer_regions()[0];
  FERRY_ASSIGN_OR_RETURN(l.arena, ep->Import(arena));
  l.arena_bytes = arena.length;
  l.ep = std::move(ep);
  peer_of_ep_[l.ep->id()] = Peer{PeerKind::kWorker, w};
  return true;
}

void Server::FailWorker(uint32_t w, const Status& why) {
  Link& l = links_[w];
  if (l.failed || l.left) return;
  l.failed = true;
  // A worker's connection also ends when the job shuts down cleanly and that worker got its
  // kShutdown first; the coordinator's word (kShutdown or kFailure) decides. It has its own view
  // of every member's liveness, so without a word from it within a grace period the loss is ours
  // to report.
  if (worker_failure_.ok()) {
    failed_worker_ = w;
    worker_failure_ = Status(why.code() == Code::kOk ? Code::kPeerFailure : why.code(),
                             "server " + std::to_string(index_) + ": worker " + std::to_string(w) +
                                 "'s connection failed: " + why.message());
    worker_failure_deadline_ = Clock::now() + std::min(job_.peer_timeout, Millis(3000));
  }
}

uint32_t Server::AllocReply() {
  if (free_replies_.empty()) {
    const uint32_t n = static_cast<uint32_t>(replies_.size());
    replies_.resize(n * 2);
    for (uint32_t i = 2 * n; i-- > n;) free_replies_.push_back(i);
  }
  const uint32_t r = free_replies_.back();
  free_replies_.pop_back();
  replies_[r].busy = true;
  return r;
}

void Server::HandleCompletion(const Completion& c, bool defer_notifies) {
  if (c.type == OpType::kNotify) {
    if (defer_notifies) {
      deferred_.push_back(c);
      return;
    }
    auto it = c.ep != nullptr ? peer_of_ep_.find(c.ep->id()) : peer_of_ep_.end();
    if (it == peer_of_ep_.end()) return;  // not a data connection of this job
    const Peer peer = it->second;
    switch (peer.kind) {
      case PeerKind::kWorker:
        if (!c.ok()) {
          FailWorker(peer.index, Status(c.code, c.error));
          return;
        }
        HandleNotify(peer.index, c.imm);
        return;
      case PeerKind::kUpstream:
        if (!c.ok()) {
          Suspect(peer.index, Status(c.code, c.error));
          return;
        }
        HandleForward(peer.index, c.imm);
        return;
      case PeerKind::kDownstream:
        HandleAck(peer.index, c.imm, c.ok());
        return;
    }
    return;
  }
  if ((c.context & kForwardContext) != 0) {
    OnForwardWritten(c);
    return;
  }
  if ((c.context & kAckContext) != 0) {
    const uint32_t pred = static_cast<uint32_t>(c.context & 0xffffffffu);
    if (!c.ok()) Suspect(pred, Status(c.code, "an ack write to it failed: " + c.error));
    return;
  }
  // A reply write finished: release what it held.
  if (c.context >= replies_.size() || !replies_[c.context].busy) return;
  const uint32_t worker = replies_[c.context].worker;
  const SlotsFollowUp slots = ReleaseReply(static_cast<uint32_t>(c.context));
  if (!c.ok()) FailWorker(worker, Status(c.code, c.error));
  FinishSlotsFollowUp(slots, c.ok());  // last: it may grow replies_
}

Server::SlotsFollowUp Server::ReleaseReply(uint32_t index) {
  Reply& r = replies_[index];
  if (r.table >= 0) --tables_[r.table].inflight;
  if (r.scratch >= 0) links_[r.worker].free_scratch.push_back(static_cast<uint32_t>(r.scratch));
  const SlotsFollowUp slots = TakeSlotsFollowUp(r);  // one-sided pulls (server_onesided.cc)
  r.busy = false;
  r.table = -1;
  r.scratch = -1;
  r.segments.clear();
  free_replies_.push_back(index);
  return slots;
}

Status Server::DrainTable(Table& t) {
  Completion comps[64];
  const auto deadline = Clock::now() + job_.peer_timeout * 2;
  while (t.inflight > 0) {
    FlushReplies();  // a queued reply never completes
    const size_t n = data_->Poll(comps);
    for (size_t i = 0; i < n; ++i) HandleCompletion(comps[i], /*defer_notifies=*/true);
    if (n == 0) {
      if (Clock::now() > deadline) {
        return Timeout("server " + std::to_string(index_) + ": replies out of table '" +
                       t.spec.name + "' did not complete within 2 x peer_timeout");
      }
      (void)data_->Wait(Millis(10));
    }
  }
  return Status::Ok();
}

Status Server::Serve(ControlClient* control) {
  Status s = ServeLoop(control);
  JoinCheckpointWriter();  // it answers through `control`, which the caller owns
  return s;
}

Status Server::ServeLoop(ControlClient* control) {
  Completion comps[64];
  control_ = control;
  for (auto& [j, d] : downstream_) peer_of_ep_[d.ep->id()] = Peer{PeerKind::kDownstream, j};
  while (true) {
    // By index: handling one may defer more (a drain inside it), appended behind.
    for (size_t i = 0; i < deferred_.size(); ++i) {
      Completion c = std::move(deferred_[i]);
      HandleCompletion(c, false);
    }
    deferred_.clear();
    if (stop_) return Cancelled("server " + std::to_string(index_) + ": stopped");
    const size_t n = data_->Poll(comps);
    // Reply-write completions first, then the requests. Handling a request may wait for reply
    // writes to complete (DrainTable before growth, SendRecord for a scratch record) by polling
    // the transport itself: a completion already taken into this batch would never reach it,
    // and the wait would run into its timeout. (Requests keep their arrival order.)
    for (size_t i = 0; i < n; ++i) {
      if (comps[i].type != OpType::kNotify) HandleCompletion(comps[i], false);
    }
    // The requests' replies go out as one Post (FlushReplies: one sendmsg per worker on tcp).
    batching_ = true;
    for (size_t i = 0; i < n; ++i) {
      if (comps[i].type == OpType::kNotify) HandleCompletion(comps[i], false);
    }
    batching_ = false;
    FlushReplies();
    for (auto& [j, d] : downstream_) {
      if (!d.queue.empty()) PostForwards(j);
    }
    if (drained_.size() < draining_.size()) CheckDrained();
    if (!awaited_preds_.empty() || !awaited_workers_.empty()) AcceptJoining();
    if (!fatal_.ok()) {
      control->ReportFailure(fatal_);
      return fatal_;
    }
    if ((leave_requested_ || (leave_flag_ != nullptr && *leave_flag_)) && !leave_asked_ &&
        job_.elastic) {
      leave_asked_ = true;
      ControlMessage leave;
      leave.kind = ControlKind::kMoveShards;
      leave.rank = kMoveLeave;
      leave.index = index_;
      std::fprintf(stderr, "ferry server %u: asks to leave the job\n", index_);
      FERRY_RETURN_IF_ERROR(control->Send(leave));
    }
    while (auto m = NextControl(control)) {
      switch (m->kind) {
        case ControlKind::kServerDown:
          FERRY_RETURN_IF_ERROR(HandleServerDown(m->index, m->text));
          break;
        case ControlKind::kClockUpdate:
          FreeHeldForwards(m->value);
          break;
        case ControlKind::kApplyClock:
          // A joining spare applies clocks once its copies are complete (server_repair.cc).
          if (copies_pending_ > 0 || move_copies_pending_ > 0) {
            deferred_apply_ = std::move(*m);
            break;
          }
          FERRY_RETURN_IF_ERROR(OnApplyClock(*m, control));
          break;
        case ControlKind::kChainRepair:
          FERRY_RETURN_IF_ERROR(HandleChainRepair(m->index, static_cast<uint32_t>(m->value)));
          break;
        case ControlKind::kChainJoined:
          if (m->index < chain_.members()) chain_.Joined(m->index);
          break;
        case ControlKind::kMoveBegin:
        case ControlKind::kMoveFinish:
          FERRY_RETURN_IF_ERROR(OnMoveControl(*m));  // server_moves.cc
          break;
        case ControlKind::kMoveDrain:
          OnMoveDrain(*m);
          break;
        case ControlKind::kMoveShards:  // the answer to this server's leave: only a refusal
          if (!m->text.empty()) {
            std::fprintf(stderr, "ferry server %u: its leave was refused: %s\n", index_,
                         m->text.c_str());
          }
          break;
        case ControlKind::kServerJoin:
          FERRY_RETURN_IF_ERROR(OnServerJoin(*m));  // server_moves.cc
          break;
        case ControlKind::kWorkerJoin:
          OnWorkerJoin(*m);  // server_moves.cc
          break;
        case ControlKind::kWorkerLeave:
          OnWorkerLeave(m->index);  // server_moves.cc
          break;
        case ControlKind::kServerLeave:
          // A graceful leave (server_moves.cc): this server holds nothing any more.
          if (m->index == index_) {
            std::fprintf(stderr, "ferry server %u: leaves the job\n", index_);
            return Status::Ok();
          }
          if (m->index < chain_.members()) chain_.MarkDead(m->index);
          awaited_preds_.erase(m->index);  // a joining server that failed to join
          break;
        case ControlKind::kCheckpoint:
          StartCheckpoint(*m, control);
          break;
        case ControlKind::kShutdown:
          // Row records still on their way down a chain would leave a replica behind its head
          // (a tick fires up to the end): linger until they are acknowledged (server_records.cc).
          if (!records_) return Status::Ok();
          if (!lingering_) {
            lingering_ = true;
            linger_deadline_ = Clock::now() + job_.peer_timeout;
          }
          break;
        case ControlKind::kFailure:
          return Status(Code::kPeerFailure, "job failed: " + m->text);
        default:
          break;
      }
    }
    FERRY_RETURN_IF_ERROR(control->status());
    for (uint32_t w = 0; w < links_.size(); ++w) {
      if (!links_[w].failed && !links_[w].left && links_[w].ep && !links_[w].ep->status().ok()) {
        FailWorker(w, links_[w].ep->status());
      }
    }
    CheckPeers();
    if (lingering_) {
      if (ChainsQuiet() || Clock::now() > linger_deadline_) return Status::Ok();
      if (n == 0) (void)data_->Wait(Millis(5));
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(const Millis to_tick, RunEvictionTick());
    // Calls control->TryReceive() at least every peer_timeout / 8 (half its idle hook's
    // threshold, Node): while this loop runs, it alone drives the data transport.
    Millis idle = std::min(std::clamp(job_.peer_timeout / 8, Millis(1), Millis(1000)), to_tick);
    if (!worker_failure_.ok()) {
      if (Clock::now() > worker_failure_deadline_) {
        // Ours to report (the coordinator said nothing within the grace): tell it, so the job's
        // failure names the worker and not this server, which leaves now.
        control->ReportFailure(worker_failure_);
        return worker_failure_;
      }
      idle = std::min(idle, Millis(50));
    }
    if (n == 0) (void)data_->Wait(idle);  // woken by data, or by the control pump
  }
}

}  // namespace ferry::ps
