// Worker setup, progress, completions, control messages and the synchronisation calls (see
// worker.h; the request path is in worker_requests.cc).
#include "ps/worker/worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "ps/job/checkpoint.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {

using Clock = std::chrono::steady_clock;

Worker::Worker(const JobSpec& job, uint32_t index, std::unique_ptr<Transport> data)
    : job_(job), index_(index), data_(std::move(data)), st_(std::make_unique<State>()) {}

Worker::~Worker() {
  // Endpoints close first (pending ops cancel), tickets and keys go, then registrations, then
  // the transport (the transport contract: its objects die before it).
  for (ServerLink& l : st_->servers) {
    if (l.ep) l.ep->Close();
  }
  st_->tickets.Clear();
  st_->slot_caches.clear();  // one-sided pulls' remote keys (worker_onesided.cc)
  for (ServerLink& l : st_->servers) l.ring.reset();
  st_->arena.reset();
  st_->send.reset();
  st_->servers.clear();
  data_.reset();
}

Result<std::unique_ptr<Worker>> Worker::Create(const JobSpec& job, uint32_t index,
                                               std::unique_ptr<Transport> data) {
  FERRY_RETURN_IF_ERROR(ValidateJob(job));
  if (index >= job.worker_members()) return InvalidArgument("worker index out of range");
  std::unique_ptr<Worker> w(new Worker(job, index, std::move(data)));
  FERRY_ASSIGN_OR_RETURN(
      w->partition_, Partition::Create(job.num_shards(), job.virtual_nodes, job.partition_seed));
  w->chain_ = JobChains(job);
  w->st_->push_ids.assign(job.num_shards(), 0);
  w->st_->gather_member.assign(job.workers, true);  // worker join slots join later
  w->st_->gather_member.resize(job.worker_members(), false);
  w->st_->gather_from.assign(job.worker_members(), 0);
  if (!job.restore_dir.empty()) {
    // The job goes on from the checkpoint's clock (the coordinator starts there too).
    FERRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(job.restore_dir));
    Restored r;
    r.clock = m.clock;
    if (!m.positions.empty()) {
      if (m.positions.size() != job.worker_members()) {
        return InvalidArgument("checkpoint " + job.restore_dir + " holds the data positions of " +
                               std::to_string(m.positions.size()) + " workers; this job has " +
                               std::to_string(job.worker_members()) +
                               " (resume with the same worker count; servers may differ)");
      }
      r.position = m.positions[index];
    }
    w->clock_ = w->min_clock_ = m.clock;
    w->restored_ = r;
  }
  State& st = *w->st_;
  const uint64_t slots = ReplySlotsBytes(job.server_members(), job.max_outstanding);
  if (slots + (64u << 10) > job.arena_bytes) {
    return InvalidArgument("arena_bytes " + std::to_string(job.arena_bytes) +
                           " leaves no room for rows after the reply slots (" +
                           std::to_string(slots) + " bytes)");
  }
  // Shareable memory: a same-host server over ucx copies rows into it with memcpy.
  FERRY_ASSIGN_OR_RETURN(st.arena_memory, ShareableMemory::Allocate(job.arena_bytes));
  FERRY_ASSIGN_OR_RETURN(st.send_memory, ShareableMemory::Allocate(job.send_bytes));
  FERRY_ASSIGN_OR_RETURN(st.arena, w->data_->RegisterMemory(st.arena_memory.data(), job.arena_bytes,
                                                            kAccessRemoteWrite));
  FERRY_ASSIGN_OR_RETURN(
      st.send, w->data_->RegisterMemory(st.send_memory.data(), job.send_bytes, kAccessLocal));
  st.rows_alloc = RangeAllocator(slots, job.arena_bytes, 64);
  st.send_alloc = RangeAllocator(0, job.send_bytes, 64);
  w->data_->Advertise({st.arena->descriptor()});
  return w;
}

Status Worker::ConnectServers(const std::vector<MemberInfo>& members, ControlClient* control,
                              Millis timeout) {
  control_ = control;
  State& st = *st_;
  // Every server, spares included: a spare that adopted a shard may come to head it, and data
  // connections are made only here (and for a join slot, when it joins: kServerJoin).
  const uint32_t servers = job_.server_members();
  st.servers.resize(servers);
  uint32_t found = 0;
  for (const MemberInfo& m : members) {
    if (m.role != Role::kServer || m.index >= servers) continue;
    st.servers[m.index].member = m;
    ++found;
  }
  if (found != job_.first_join_slot()) return ProtocolError("membership lacks some servers");
  for (uint32_t s = 0; s < job_.first_join_slot(); ++s) {
    FERRY_RETURN_IF_ERROR(ConnectServer(s, timeout));
  }
  return Status::Ok();
}

Status Worker::ConnectServer(uint32_t s, Millis timeout) {
  State& st = *st_;
  ServerLink& l = st.servers[s];
  // The transport sends hello_info in the handshake; set per connection through a fresh
  // transport option is not possible, so the worker's hello was fixed at creation (Node).
  auto ep = data_->Connect(l.member.data_address, timeout);
  if (!ep.ok()) {
    return ep.status().Annotate("worker " + std::to_string(index_) + ": connect to server " +
                                std::to_string(s) + " (rank " + std::to_string(l.member.rank) +
                                ") at " + l.member.data_address);
  }
  l.ep = std::move(ep).value();
  const auto& regions = l.ep->peer_regions();
  // Rings per worker, rows per table; with replicas also forward rings (R-1, a spare's R; an
  // elastic job's one per other server) and the ack word (protocol.h "Replication"), which only
  // servers use.
  const size_t expect = job_.worker_members() + job_.tables.size() +
                        (job_.elastic         ? job_.server_members()
                         : job_.replicas == 1 ? 0
                         : chain_.is_spare(s) ? job_.replicas + 1
                                              : job_.replicas);
  if (regions.size() != expect) {
    return ProtocolError("server " + std::to_string(s) + " advertised " +
                         std::to_string(regions.size()) + " regions, expected " +
                         std::to_string(expect));
  }
  FERRY_ASSIGN_OR_RETURN(l.ring, l.ep->Import(regions[index_]));
  l.ring_bytes = regions[index_].length;
  st.server_of_ep[l.ep->id()] = s;
  return Status::Ok();
}

void Worker::OnServerJoin(const ControlMessage& m) {
  State& st = *st_;
  const uint32_t j = m.index;
  if (m.members.size() != 1 || j >= st.servers.size() || st.servers[j].ep != nullptr ||
      !chain_.Revive(j)) {
    if (st.failure.ok()) {
      st.failure = ProtocolError("worker " + std::to_string(index_) + ": the join of server " +
                                 std::to_string(j) + " does not apply here");
    }
    return;
  }
  st.servers[j].member = m.members[0];
  // Nothing is sent to it before a move makes it a head, which comes after this word. A join
  // that fails here fails at the joining server too (it waits for every worker), and the
  // coordinator then tells of its leave (kServerLeave).
  Status s = ConnectServer(j, job_.peer_timeout);
  if (!s.ok()) std::fprintf(stderr, "ferry worker %u: %s\n", index_, s.ToString().c_str());
}

Result<uint32_t> Worker::TableId(std::string_view name) const {
  for (uint32_t t = 0; t < job_.tables.size(); ++t) {
    if (job_.tables[t].name == name) return t;
  }
  return NotFound("no table named '" + std::string(name) + "'");
}

Status Worker::Usable() const {
  if (!st_->failure.ok()) return st_->failure;
  if (st_->servers.empty()) return InvalidArgument("worker is not connected to the servers");
  if (st_->shutdown) return Cancelled("the job has shut down");
  return Status::Ok();
}

void Worker::DrainControl() {
  if (control_ == nullptr) return;
  State& st = *st_;
  while (auto m = control_->TryReceive()) {
    switch (m->kind) {
      case ControlKind::kClockUpdate:
        if (m->value > min_clock_) {
          min_clock_ = m->value;
          for (ServerLink& l : st.servers) {
            for (RingSlot& r : l.slots) {
              if (r.hold_until != 0 && r.hold_until <= min_clock_) r.free = true;
            }
            FreeRingSlots(l);
          }
        }
        break;
      case ControlKind::kBarrierRelease:
        st.released_barriers.insert(m->value);
        break;
      case ControlKind::kGatherPart: {
        if (m->rank >= job_.worker_members() || m->value2 > (uint64_t{1} << 32)) break;
        if (m->value <= st.gathers_done) break;  // a copy relayed again after a takeover
        auto& g = st.gathers[m->value];
        if (g.data.empty()) {
          g.data.resize(job_.worker_members());
          g.received.assign(job_.worker_members(), 0);
          g.sized.assign(job_.worker_members(), false);
          g.chunks.resize(job_.worker_members());
        }
        if (!g.chunks[m->rank].insert(m->index).second) break;
        auto& buf = g.data[m->rank];
        if (!g.sized[m->rank]) {
          buf.resize(m->value2);
          g.sized[m->rank] = true;
        }
        if (m->index <= buf.size() && m->data.size() <= buf.size() - m->index) {
          if (m->data.size() != 0)
            std::memcpy(buf.data() + m->index, m->data.data(),
                        m->data.size());  // data() may be null when empty
          g.received[m->rank] += m->data.size();
        }
        break;
      }
      case ControlKind::kCheckpointDone:
        st.checkpoints_done[m->value] = m->text;
        if (!m->table_stats.empty()) st.table_stats_done[m->value] = std::move(m->table_stats);
        break;
      case ControlKind::kShutdown:
        st.shutdown = true;
        break;
      case ControlKind::kFailure:
        if (st.failure.ok()) st.failure = PeerFailure("job failed: " + m->text);
        break;
      case ControlKind::kServerDown:
        OnServerDown(m->index);
        break;
      // Repairs change no head while they join (chain.h): applied so that later heads are right.
      case ControlKind::kChainRepair:
        (void)chain_.Join(m->index, static_cast<uint32_t>(m->value));
        break;
      case ControlKind::kChainJoined:
        if (m->index < chain_.members()) chain_.Joined(m->index);
        break;
      // Moves (elastic jobs): a copying member heads nothing, so a begin changes no head; a
      // finish may, and the pushes answered "moved" go to the new head (PostReroutes).
      case ControlKind::kMoveBegin:
        (void)chain_.BeginMove(m->index, static_cast<uint32_t>(m->value),
                               static_cast<uint32_t>(m->value2));
        break;
      case ControlKind::kMoveFinish:
        (void)chain_.FinishMove(m->index, static_cast<uint32_t>(m->value),
                                static_cast<uint32_t>(m->value2));
        break;
      case ControlKind::kMoveShards:
        st.moves_done[m->value] = std::move(*m);
        break;
      // A graceful leave: the server holds nothing; what it did not answer goes to the heads.
      case ControlKind::kServerLeave:
        OnServerDown(m->index);
        break;
      case ControlKind::kServerJoin:
        OnServerJoin(*m);
        break;
      case ControlKind::kWorkerJoin:  // ready: from its start on, its gathers count
        if (m->index < st.gather_member.size()) {
          st.gather_member[m->index] = true;
          st.gather_from[m->index] = m->value2;
        }
        break;
      case ControlKind::kWorkerLeave:
        if (m->index < st.gather_member.size()) st.gather_member[m->index] = false;
        if (!m->data.empty()) st.farewells[m->index] = std::move(m->data);
        break;
      case ControlKind::kWorkTake:
        st.work_taken = std::move(*m);
        break;
      default:
        break;
    }
  }
  if (st.failure.ok() && !st.shutdown) {
    Status cs = control_->status();
    if (!cs.ok()) st.failure = cs;
  }
}

void Worker::FreeRingSlots(ServerLink& l) {
  while (!l.slots.empty() && l.slots.front().free) l.slots.pop();
}

void Worker::Retire(Ticket t) {
  TicketState* it = st_->tickets.Find(t);
  if (it == nullptr) return;
  const TicketState& tk = *it;
  if (tk.released && tk.unreplied == 0 && tk.unsent == 0) st_->tickets.Erase(t);
}

void Worker::OnNotify(uint32_t s, uint32_t imm) {
  State& st = *st_;
  ServerLink& l = st.servers[s];
  if (l.dead) return;  // a removed server's late reply: its requests went elsewhere
  const uint32_t seq = ReplyImmSeq(imm);
  auto slot = std::find_if(l.slots.begin(), l.slots.end(), [&](const RingSlot& r) {
    return !r.replied && (r.seq & 0xffffffu) == seq;
  });
  if (slot == l.slots.end()) {
    if (l.failed.ok()) {
      l.failed = ProtocolError("server " + std::to_string(s) + " replied to request " +
                               std::to_string(seq) + ", which is not in flight");
    }
    return;
  }
  slot->replied = true;
  --l.unreplied;
  TicketState* it = st.tickets.Find(slot->ticket);
  if (it != nullptr && ReplyImmKind(imm) == ReplyKind::kMoved) {
    OnMoved(s, *slot, *it);
    slot->free = true;
    FreeRingSlots(l);
    return;
  }
  if (it != nullptr) {
    TicketState& tk = *it;
    if (ReplyImmKind(imm) == ReplyKind::kError) {
      ReplyRecord rec;
      std::memcpy(&rec, st.arena->data() + ReplySlotOffset(s, slot->seq, job_.max_outstanding),
                  sizeof rec);
      Status why = DecodeErrorRecord(rec, slot->seq);
      if (tk.error.ok()) {
        tk.error = why.Annotate("server " + std::to_string(s) + " refused " +
                                std::string(RequestTypeName(tk.type)) + " request " +
                                std::to_string(slot->seq));
      }
    }
    --tk.unreplied;
    // BSP pushes stay in the ring until their clock has been applied on every server.
    if (tk.type == RequestType::kPush && job_.consistency.kind == Consistency::kBsp &&
        ReplyImmKind(imm) == ReplyKind::kOk) {
      slot->hold_until = tk.clock + 1;
      slot->free = min_clock_ >= slot->hold_until;
    } else {
      slot->free = true;
    }
    const Ticket id = tk.id;
    FreeRingSlots(l);
    Retire(id);
  } else {
    slot->free = true;
    FreeRingSlots(l);
  }
  if (!st.fallbacks.empty()) PostFallbacks();  // ring space came back (worker_onesided.cc)
}

void Worker::OnRequestWritten(const Completion& c) {
  const Ticket t = c.context >> kContextShift;
  TicketState* it = st_->tickets.Find(t);
  if (it == nullptr) return;
  TicketState& tk = *it;
  --tk.unsent;
  const uint64_t index = c.context & ((uint64_t{1} << kContextShift) - 1);
  if (!c.ok() && job_.forwards() && index < tk.requests.size()) {
    // The server may be gone: the request stays outstanding and goes to the shard's next head
    // when the coordinator removes the server (or the job fails). Not the ticket's error.
    const Request& q = tk.requests[index];
    ServerLink& l = st_->servers[q.server];
    if (!q.abandoned && !l.dead && l.failed.ok()) {
      l.failed = Status(c.code, "a request write to it failed: " + c.error);
    }
    Retire(t);
    return;
  }
  if (!c.ok() && tk.error.ok()) tk.error = Status(c.code, c.error);
  if (!c.ok()) {
    // The request's write failed on a connection that may still look healthy (an error
    // completion need not fail the endpoint): the server may never have seen it, so its reply
    // may never come, and nothing sends a request twice. Fail the link now, so that waiting
    // calls end with this cause (and the coordinator hears it) instead of waiting out their
    // timeout for the reply.
    if (index < tk.requests.size()) {
      ServerLink& l = st_->servers[tk.requests[index].server];
      if (l.failed.ok()) {
        l.failed = Status(c.code, "a request write to it failed: " + c.error);
      }
    }
  }
  if (c.ok()) stats_.bytes_sent += c.bytes;
  Retire(t);
}

size_t Worker::Progress() {
  State& st = *st_;
  Completion comps[64];
  const size_t n = data_->Poll(comps);
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = comps[i];
    if (c.type == OpType::kNotify) {
      auto it = c.ep != nullptr ? st.server_of_ep.find(c.ep->id()) : st.server_of_ep.end();
      if (it == st.server_of_ep.end()) continue;
      if (!c.ok()) {
        ServerLink& l = st.servers[it->second];
        if (l.failed.ok() && !l.dead) l.failed = Status(c.code, c.error);
        continue;
      }
      stats_.bytes_received += c.bytes;
      OnNotify(it->second, c.imm);
    } else if (c.context & kReadContextBit) {  // a one-sided pull's read (worker_onesided.cc)
      OnReadDone(c);
    } else {
      OnRequestWritten(c);
    }
  }
  DrainControl();
  for (uint32_t s = 0; s < st.servers.size(); ++s) {
    ServerLink& l = st.servers[s];
    if (l.failed.ok() && !l.dead && l.ep && !l.ep->status().ok() && !st.shutdown) {
      l.failed = l.ep->status();
    }
  }
  if (!st.reroutes.empty()) PostReroutes();
  return n;
}

Status Worker::WaitFor(const std::function<bool()>& pred, Millis timeout, std::string_view what) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const size_t n = Progress();
    if (pred()) return Status::Ok();
    if (!st_->failure.ok()) return st_->failure;
    for (uint32_t s = 0; s < st_->servers.size(); ++s) {
      ServerLink& l = st_->servers[s];
      if (l.dead) continue;
      if (!l.failed.ok() && job_.forwards() && !st_->shutdown) {
        // A server of a replicated job may be gone for good: the coordinator decides whether
        // it leaves the job (kServerDown: its requests move on; an elastic job's server may
        // also have left it gracefully, kServerLeave) or the job fails (kFailure).
        // Its word comes within moments; only a coordinator that says nothing lets the wait
        // end in this server's failure.
        SuspectServer(s);
        if (Clock::now() - l.failed_at < 2 * job_.peer_timeout) continue;
      }
      if (!l.failed.ok() && !st_->shutdown) {
        // Servers close their connections when the job shuts down or fails, which can reach us
        // before the coordinator's word does (kShutdown, or kFailure naming the member that
        // failed first): wait for that word a little before calling it this server's failure.
        // An idle link loses nothing of ours and waits longer.
        if (l.failed_at == Clock::time_point()) l.failed_at = Clock::now();
        const Millis grace = l.unreplied == 0 ? std::min(job_.peer_timeout, Millis(3000))
                                              : std::min(job_.peer_timeout / 4, Millis(250));
        if (Clock::now() - l.failed_at < grace) continue;
      }
      if (!l.failed.ok()) {
        // The worker is unusable from here on (the link failed for good): later calls return
        // the same error. The coordinator hears it first, naming the server, before this
        // worker's own departure can reach it and be taken for the cause.
        st_->failure = Status(l.failed.code() == Code::kOk ? Code::kPeerFailure : l.failed.code(),
                              "worker " + std::to_string(index_) + ": server " + std::to_string(s) +
                                  " (rank " + std::to_string(l.member.rank) + ", pid " +
                                  std::to_string(l.member.pid) + " on " + l.member.host +
                                  ") failed while waiting for " + std::string(what) + ": " +
                                  l.failed.message());
        if (control_ != nullptr) control_->ReportFailure(st_->failure);
        return st_->failure;
      }
    }
    if (Clock::now() >= deadline) {
      return Timeout("worker " + std::to_string(index_) + ": " + std::string(what) +
                     " did not finish within " + std::to_string(timeout.count()) + " ms");
    }
    // Sleep until data arrives or the control pump wakes us (it calls data_->Wake()).
    if (n == 0) (void)data_->Wait(Millis(100));
  }
}

Status Worker::Wait(Ticket t, Millis timeout) {
  TicketState* it = st_->tickets.Find(t);
  if (it == nullptr || it->released) {
    return InvalidArgument("ticket " + std::to_string(t) + " is unknown or released");
  }
  TicketState* tk = it;
  // Named on the stack: a wait allocates nothing (a small request's cost, worker_state.h).
  const std::string_view type = RequestTypeName(tk->type);
  char what[64];
  std::snprintf(what, sizeof what, "%.*s ticket %llu", static_cast<int>(type.size()), type.data(),
                static_cast<unsigned long long>(t));
  FERRY_RETURN_IF_ERROR(WaitFor([tk] { return tk->unreplied == 0; }, timeout, what));
  return tk->error;
}

bool Worker::Test(Ticket t) {
  Progress();
  TicketState* it = st_->tickets.Find(t);
  return it != nullptr && it->unreplied == 0;
}

Result<PulledRows> Worker::Rows(Ticket t) const {
  TicketState* it = st_->tickets.Find(t);
  if (it == nullptr || it->released) {
    return InvalidArgument("ticket " + std::to_string(t) + " is unknown or released");
  }
  const TicketState& tk = *it;
  if (!tk.rows) return InvalidArgument("ticket " + std::to_string(t) + " has no rows");
  if (tk.unreplied != 0) return InvalidArgument("ticket " + std::to_string(t) + " is not done");
  FERRY_RETURN_IF_ERROR(tk.error);
  PulledRows r;
  r.base_ = st_->arena->data() + tk.rows.offset + tk.row_prefix;
  r.pos_ = tk.pos.data();
  r.n_ = tk.pos.size();
  r.unique_ = tk.send->n;
  r.stride_ = tk.row_bytes;
  r.dim_ = job_.tables[tk.table].dim;
  r.fp16_ = tk.fp16_rows;
  return r;
}

void Worker::Release(Ticket t) {
  TicketState* it = st_->tickets.Find(t);
  if (it == nullptr) return;
  it->released = true;
  // Replies still on their way write into the rows: those stay allocated until Retire.
  if (it->unreplied == 0) it->rows.reset();
  Retire(t);
}

Status Worker::WaitAllReplies(std::string_view what) {
  State& st = *st_;
  // Requests waiting to be re-sent to a new head (replicas) are not answered either.
  return WaitFor(
      [&st] {
        return st.reroutes.empty() &&
               std::all_of(st.servers.begin(), st.servers.end(),
                           [](const ServerLink& l) { return l.unreplied == 0; });
      },
      Millis(3600000), what);
}

Status Worker::Barrier() {
  FERRY_RETURN_IF_ERROR(Usable());
  FERRY_RETURN_IF_ERROR(WaitAllReplies("the requests before a barrier"));
  const uint64_t id = ++st_->barrier_id;
  ControlMessage m;
  m.kind = ControlKind::kBarrier;
  m.value = id;
  FERRY_RETURN_IF_ERROR(control_->Send(m));
  FERRY_RETURN_IF_ERROR(WaitFor([this, id] { return st_->released_barriers.count(id) != 0; },
                                Millis(3600000), "barrier " + std::to_string(id)));
  st_->released_barriers.erase(id);
  return Status::Ok();
}

Status Worker::Clock(uint64_t position, bool checkpoint) {
  FERRY_RETURN_IF_ERROR(Usable());
  if (clocks_stopped_) {
    return InvalidArgument("worker " + std::to_string(index_) + " stopped its clocks (StopClocks)");
  }
  // Pushes of this clock must be applied (ASP/SSP) or staged (BSP) before the clock counts.
  FERRY_RETURN_IF_ERROR(WaitAllReplies("the pushes of clock " + std::to_string(clock_)));
  ++clock_;
  pushes_since_clock_ = 0;
  ControlMessage m;
  m.kind = ControlKind::kClock;
  m.value = clock_;
  m.value2 = position;
  m.rank = checkpoint ? kClockCheckpoint : 0;
  FERRY_RETURN_IF_ERROR(control_->Send(m));
  const ConsistencySpec& c = job_.consistency;
  if (c.kind == Consistency::kAsp) return Status::Ok();
  const uint64_t bound = c.kind == Consistency::kBsp ? 0 : c.staleness;
  FERRY_RETURN_IF_ERROR(WaitFor([this, bound] { return clock_ <= min_clock_ + bound; },
                                Millis(3600000),
                                "clock " + std::to_string(clock_) + " (the slowest worker is at " +
                                    std::to_string(min_clock_) + ")"));
  if (min_clock_ > clock_) {
    // Backup workers: the job's clocks completed without this worker's last ones (their pushes
    // were dropped); it goes on at the job's clock, as a SyncReplicas worker takes the global
    // step, or every push it made would arrive late again.
    skipped_clocks_ += min_clock_ - clock_;
    clock_ = min_clock_;
  }
  return Status::Ok();
}

Result<std::vector<std::vector<uint8_t>>> Worker::GatherFromWorkers(std::span<const uint8_t> mine,
                                                                    bool to_all) {
  FERRY_RETURN_IF_ERROR(Usable());
  const uint64_t id = ++st_->gather_id;
  uint64_t off = 0;
  do {
    const size_t n = std::min<size_t>(kGatherChunk, mine.size() - off);
    ControlMessage m;
    m.kind = ControlKind::kGather;
    m.rank = to_all ? kGatherToAll : 0;  // relay target
    m.value = id;
    m.value2 = mine.size();
    m.index = static_cast<uint32_t>(off);
    m.data.assign(mine.begin() + off, mine.begin() + off + n);
    FERRY_RETURN_IF_ERROR(control_->Send(m));
    off += n;
  } while (off < mine.size());
  if (index_ != 0 && !to_all) return std::vector<std::vector<uint8_t>>();
  State& st = *st_;
  FERRY_RETURN_IF_ERROR(WaitFor(
      [&st, id, this] {
        auto it = st.gathers.find(id);
        const bool any = it != st.gathers.end();
        for (uint32_t w = 0; w < job_.worker_members(); ++w) {
          const bool awaited = st.gather_member[w] && id > st.gather_from[w];
          const bool sized = any && it->second.sized[w];
          if (sized ? it->second.received[w] < it->second.data[w].size() : awaited) return false;
        }
        return true;
      },
      Millis(3600000), "gather " + std::to_string(id)));
  if (st.gathers.count(id) == 0) st.gathers[id].data.resize(job_.worker_members());
  auto parts = std::move(st.gathers[id].data);
  st.gathers.erase(id);
  st.gathers_done = std::max(st.gathers_done, id);
  return parts;
}

Status Worker::Finish() {
  return EndWith(0);
}

}  // namespace ferry::ps
