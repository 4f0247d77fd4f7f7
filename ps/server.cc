// Server setup, worker connections, the serve loop and control commands (see server.h).
#include "ps/server.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ps/checkpoint.h"
#include "ps/optimizer.h"
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
  for (Link& l : links_) l.ring.reset();
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
  if (index >= job.servers) return InvalidArgument("server index out of range");
  std::unique_ptr<Server> s(new Server(job, index, std::move(data)));
  FERRY_RETURN_IF_ERROR(s->Init(listen_host));
  return s;
}

Status Server::Init(const std::string& listen_host) {
  const uint32_t workers = job_.workers;
  // Tables: rows registered for remote reads (one-sided pulls); the rows buffer is the source
  // of every pull reply.
  for (const TableSpec& spec : job_.tables) {
    Table t;
    t.spec = spec;
    const TableOptions o = ServerTableOptions(spec);
    FERRY_ASSIGN_OR_RETURN(t.map, ArrayHashMap::Create(o));
    if (spec.fp16_pull) {
      t.mirror_offset = t.map->layout().state_offset + 4 * StateFloats(spec.optimizer, spec.dim);
    }
    if (!job_.restore_dir.empty()) {
      FERRY_RETURN_IF_ERROR(RestoreShard(tables_.size(), o, t.map.get()));
    }
    Status st = t.map->AttachTransport(data_.get(), kAccessRemoteRead);
    if (!st.ok()) return st.Annotate("server " + std::to_string(index_) + ": table " + spec.name);
    shapes_.push_back(TableShape{spec.dim, spec.fp16_pull});
    tables_.push_back(std::move(t));
  }
  // Staging rings, one per worker.
  ring_memory_ = std::make_unique<RingMemory>();
  FERRY_ASSIGN_OR_RETURN(ring_memory_->memory,
                         ShareableMemory::Allocate(job_.staging_bytes * workers));
  rings_ = ring_memory_->memory.data();
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
  for (const Table& t : tables_) advertised.push_back(t.map->descriptor());
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

void Server::JoinCheckpointWriter() {
  if (checkpoint_writer_.joinable()) checkpoint_writer_.join();
}

void Server::StartCheckpoint(const ControlMessage& command, ControlClient* control) {
  JoinCheckpointWriter();  // one write at a time: memory for two copies at most
  ControlMessage done;
  done.kind = ControlKind::kCheckpointDone;
  done.value = command.value;
  // The copy is the pause: serving resumes as soon as every table is copied, and the copies are
  // consistent with each other (nothing is applied in between).
  const auto start = Clock::now();
  checkpoint_images_.resize(tables_.size());  // kept: the next capture reuses their memory
  uint64_t bytes = 0;
  for (size_t i = 0; i < tables_.size(); ++i) {
    Status s = tables_[i].map->CaptureSnapshot(&checkpoint_images_[i]);
    if (!s.ok()) {
      done.text = s.Annotate("checkpoint table '" + tables_[i].spec.name + "'").ToString();
      (void)control->Send(done);
      return;
    }
    bytes += checkpoint_images_[i].bytes();
  }
  const auto pause = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
  ++stats_.checkpoints;
  stats_.checkpoint_pause_ns =
      std::max<uint64_t>(stats_.checkpoint_pause_ns, static_cast<uint64_t>(pause.count()));
  stats_.checkpoint_bytes = bytes;
  std::vector<std::string> paths;
  for (const Table& t : tables_) paths.push_back(ShardPath(command.text, t.spec.name, index_));
  // The images are the writer's until it is joined (the next checkpoint, Serve's end).
  checkpoint_writer_ = std::thread(
      [control, done, images = &checkpoint_images_, paths = std::move(paths)]() mutable {
        for (size_t i = 0; i < images->size() && done.text.empty(); ++i) {
          Status s = (*images)[i].WriteTo(paths[i]);
          if (!s.ok()) done.text = s.ToString();
        }
        (void)control->Send(done);  // ControlClient::Send is thread-safe
      });
}

Status Server::RestoreShard(size_t t, const TableOptions& options, ArrayHashMap* map) {
  if (!restore_manifest_) {
    FERRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(job_.restore_dir));
    FERRY_RETURN_IF_ERROR(CheckManifestMatches(m, job_));
    restore_manifest_ = std::make_unique<CheckpointManifest>(std::move(m));
  }
  const CheckpointManifest& m = *restore_manifest_;
  FERRY_ASSIGN_OR_RETURN(Partition mine,
                         Partition::Create(job_.servers, job_.virtual_nodes, job_.partition_seed));
  const std::string& name = job_.tables[t].name;
  size_t index = 0;
  while (m.tables[index].name != name) ++index;  // CheckManifestMatches found it
  const size_t row_bytes = map->layout().stride;
  // Every old shard's rows that this server owns under the new partition move here, with their
  // optimizer state and metadata (same layout: CheckManifestMatches).
  return ForEachCheckpointRow(
      job_.restore_dir, m, index, options, [&](uint64_t key, const uint8_t* row) -> Status {
        if (mine.ServerOf(key) != index_) return Status::Ok();
        FERRY_ASSIGN_OR_RETURN(ArrayHashMap::Insertion ins, map->Insert(key));
        std::memcpy(ins.row + 8, row + 8, row_bytes - 8);
        ++stats_.rows_restored;
        return Status::Ok();
      });
}

Status Server::AcceptWorkers(ControlClient* control, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  uint32_t connected = 0;
  while (connected < job_.workers) {
    if (Clock::now() > deadline) {
      return Timeout("server " + std::to_string(index_) + ": only " + std::to_string(connected) +
                     " of " + std::to_string(job_.workers) + " workers connected in time");
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
    auto w = DecodeWorkerHello((*ep)->peer_info());
    if (!w.ok() || *w >= job_.workers || links_[*w].ep != nullptr) {
      (*ep)->Close();
      std::fprintf(
          stderr, "ferry server %u: refused a data connection from %s: %s\n", index_,
          (*ep)->peer_address().c_str(),
          w.ok() ? "duplicate or out-of-range worker index" : w.status().ToString().c_str());
      continue;
    }
    Link& l = links_[*w];
    if ((*ep)->peer_regions().size() != 1) {
      return ProtocolError("worker " + std::to_string(*w) + " advertised " +
                           std::to_string((*ep)->peer_regions().size()) +
                           " regions instead of its arena");
    }
    const RemoteRegion& arena = (*ep)->peer_regions()[0];
    FERRY_ASSIGN_OR_RETURN(l.arena, (*ep)->Import(arena));
    l.arena_bytes = arena.length;
    l.ep = std::move(ep).value();
    worker_of_ep_[l.ep->id()] = *w;
    ++connected;
  }
  return Status::Ok();
}

void Server::FailWorker(uint32_t w, const Status& why) {
  Link& l = links_[w];
  if (l.failed) return;
  l.failed = true;
  // A worker's connection also ends when the job shuts down cleanly and that worker got its
  // kShutdown first; the coordinator's word (kShutdown or kFailure) decides. It has its own view
  // of every member's liveness, so without a word from it within a grace period the loss is ours
  // to report.
  if (worker_failure_.ok()) {
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
    auto it = c.ep != nullptr ? worker_of_ep_.find(c.ep->id()) : worker_of_ep_.end();
    if (it == worker_of_ep_.end()) return;  // not a worker's data connection
    if (!c.ok()) {
      FailWorker(it->second, Status(c.code, c.error));
      return;
    }
    HandleNotify(it->second, c.imm);
    return;
  }
  // A reply write finished: release what it held.
  if (c.context >= replies_.size() || !replies_[c.context].busy) return;
  Reply& r = replies_[c.context];
  if (r.table >= 0) --tables_[r.table].inflight;
  if (r.scratch >= 0) links_[r.worker].free_scratch.push_back(static_cast<uint32_t>(r.scratch));
  const SlotsFollowUp slots = TakeSlotsFollowUp(r);  // one-sided pulls (server_onesided.cc)
  r.busy = false;
  r.table = -1;
  r.scratch = -1;
  r.segments.clear();
  free_replies_.push_back(static_cast<uint32_t>(c.context));
  if (!c.ok()) FailWorker(r.worker, Status(c.code, c.error));
  FinishSlotsFollowUp(slots, c.ok());  // last: it may grow replies_ (r is dangling then)
}

Status Server::DrainTable(Table& t) {
  Completion comps[64];
  const auto deadline = Clock::now() + job_.peer_timeout * 2;
  while (t.inflight > 0) {
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

Status Server::ApplyClock(uint64_t clock) {
  // Every worker's staged pushes of clocks < `clock`, in worker order, then each worker's
  // posting order: the same order in every run.
  for (uint32_t w = 0; w < links_.size(); ++w) {
    Link& l = links_[w];
    while (!l.staged.empty() && l.staged.front().clock < clock) {
      const uint64_t offset = l.staged.front().offset;
      l.staged.pop_front();
      if (l.failed) continue;  // a worker closed for a violation: its pushes are void
      std::span<const uint8_t> ring(rings_ + w * job_.staging_bytes, job_.staging_bytes);
      RequestLimits limits{job_.staging_bytes, l.arena_bytes,
                           ReplySlotsBytes(job_.servers, job_.max_outstanding),
                           job_.max_keys_per_request};
      RequestView req;
      // The ring is the worker's to write: a staged push may have been rewritten since it was
      // checked on arrival. Anything but a push now is that worker's protocol violation (close
      // it, as HandleNotify would), not a reason to stop serving everyone else.
      Status st = ParseRequest(ring, offset, shapes_, limits, &req);
      if (st.ok() && req.type() != RequestType::kPush) {
        st = ProtocolError("it now reads as a " + std::string(RequestTypeName(req.type())) +
                           " request");
      }
      if (!st.ok()) {
        st = ProtocolError("staged push at ring offset " + std::to_string(offset) +
                           " was overwritten before its clock was applied: " + st.message());
        std::fprintf(stderr, "ferry server %u: closing worker %u: %s\n", index_, w,
                     st.ToString().c_str());
        l.ep->Close();
        FailWorker(w, st);
        l.staged.clear();
        break;
      }
      FERRY_RETURN_IF_ERROR(ApplyPush(w, req));
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
  while (true) {
    while (!deferred_.empty()) {
      Completion c = std::move(deferred_.front());
      deferred_.pop_front();
      HandleCompletion(c, false);
    }
    if (stop_) return Cancelled("server " + std::to_string(index_) + ": stopped");
    const size_t n = data_->Poll(comps);
    // Reply-write completions first, then the requests. Handling a request may wait for reply
    // writes to complete (DrainTable before growth, SendRecord for a scratch record) by polling
    // the transport itself: a completion already taken into this batch would never reach it,
    // and the wait would run into its timeout. (Requests keep their arrival order.)
    for (size_t i = 0; i < n; ++i) {
      if (comps[i].type != OpType::kNotify) HandleCompletion(comps[i], false);
    }
    for (size_t i = 0; i < n; ++i) {
      if (comps[i].type == OpType::kNotify) HandleCompletion(comps[i], false);
    }
    if (!fatal_.ok()) {
      control->ReportFailure(fatal_);
      return fatal_;
    }
    while (auto m = control->TryReceive()) {
      switch (m->kind) {
        case ControlKind::kApplyClock: {
          FERRY_RETURN_IF_ERROR(ApplyClock(m->value));
          ControlMessage done;
          done.kind = ControlKind::kClockApplied;
          done.value = m->value;
          FERRY_RETURN_IF_ERROR(control->Send(done));
          break;
        }
        case ControlKind::kCheckpoint:
          StartCheckpoint(*m, control);
          break;
        case ControlKind::kShutdown:
          return Status::Ok();
        case ControlKind::kFailure:
          return Status(Code::kPeerFailure, "job failed: " + m->text);
        default:
          break;
      }
    }
    FERRY_RETURN_IF_ERROR(control->status());
    for (uint32_t w = 0; w < links_.size(); ++w) {
      if (!links_[w].failed && links_[w].ep && !links_[w].ep->status().ok()) {
        FailWorker(w, links_[w].ep->status());
      }
    }
    // Calls control->TryReceive() at least every peer_timeout / 8 (half its idle hook's
    // threshold, Node): while this loop runs, it alone drives the data transport.
    Millis idle = std::clamp(job_.peer_timeout / 8, Millis(1), Millis(1000));
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
