// Moves on the server (elastic jobs; server.h "Moves", ps/coordinator/move_plan.h): a shard's copy
// moves from one live server to another while the job runs.
//
// The copy is a repair's (server_repair.cc): on kMoveBegin the target joins the shard's chain at
// the tail as a copying member in a slot of its own (TakeSlot), and the shard's live tail (the
// source) queues the rows, the staged BSP pushes and the watermark to it, ahead of every push it
// accepts later, in the forward ring the target keeps for it. Pushes are answered at the tail
// until the target acknowledged the watermark, then they wait for the target too; the end marker
// follows, and the target reports kMoveCopied. It defers kApplyClock until then, as a joining
// spare does: a BSP clock completes only with the copy whole.
//
// The switch needs the chain quiet: on kMoveDrain the shard's head answers the shard's new pushes
// kMoved (the workers send them again after the finish, with the same push ids: applied once) and
// reports kMoveDrained once every push of the shard it forwarded is acknowledged, so every member
// holds the same rows. On kMoveFinish every process puts the target in the source's place; the
// source empties its slot. A request that reaches the source for that shard afterwards is
// answered kMoved (server_requests.cc): the worker's chains were older than the move.
//
// A join slot joining a running job (JobSpec::join_slots) is connected to first: on kServerJoin
// every server revives it in its chains, connects to it (its forward ring for this server, as
// between any two servers of an elastic job) and accepts its connection between requests. The
// coordinator plans the join's moves once the joining server has every connection.
#include <chrono>
#include <cstdio>

#include "ps/server/server.h"

namespace ferry::ps {

Status Server::OnMoveControl(const ControlMessage& m) {
  const uint32_t shard = m.index;
  const auto from = static_cast<uint32_t>(m.value), to = static_cast<uint32_t>(m.value2);
  if (m.kind == ControlKind::kMoveFinish) {
    const int k = chain_.Slot(index_, shard);
    if (!chain_.FinishMove(shard, from, to)) {
      return ProtocolError("the coordinator's finish of shard " + std::to_string(shard) +
                           "'s move from server " + std::to_string(from) + " to " +
                           std::to_string(to) + " does not apply on server " +
                           std::to_string(index_));
    }
    draining_.erase(shard);
    drained_.erase(shard);
    if (to == index_) ++stats_.moves_in;
    if (from != index_) return Status::Ok();
    ++stats_.moves_out;
    std::fprintf(stderr, "ferry server %u: shard %u moved to server %u\n", index_, shard, to);
    return EmptySlot(static_cast<uint32_t>(k));
  }
  // kMoveBegin. Again for a move already begun: its source died, and the copy starts over from
  // the new one (MovePlan::Failed); the target drops what it received.
  const bool again = chain_.copying(shard, to);
  if (!again && !chain_.BeginMove(shard, from, to)) {
    return ProtocolError("the coordinator's move of shard " + std::to_string(shard) +
                         " from server " + std::to_string(from) + " to " + std::to_string(to) +
                         " does not apply on server " + std::to_string(index_));
  }
  if (to == index_) {
    if (again) {
      FERRY_RETURN_IF_ERROR(EmptySlot(static_cast<uint32_t>(chain_.Slot(index_, shard))));
      const size_t tables = job_.tables.size();
      const auto k = static_cast<size_t>(chain_.Slot(index_, shard));
      for (size_t t = 0; t < tables; ++t) tables_[k * tables + t].shard = shard;
    } else {
      FERRY_RETURN_IF_ERROR(TakeSlot(shard));
      ++move_copies_pending_;
    }
    repair_began_ = std::chrono::steady_clock::now();
  }
  if (m.rank == index_) {
    FERRY_RETURN_IF_ERROR(QueueCopy(shard, to));
    PostForwards(to);
  }
  return Status::Ok();
}

Status Server::TakeSlot(uint32_t shard) {
  const int slot = chain_.Slot(index_, shard);
  const size_t tables = job_.tables.size();
  if (slot < 0 || static_cast<uint32_t>(slot) > slot_count_) {
    return Internal("server " + std::to_string(index_) + " has no slot for shard " +
                    std::to_string(shard));
  }
  const auto k = static_cast<uint32_t>(slot);
  if (k < slot_count_) {  // a slot a finished move left (EmptySlot emptied it)
    for (size_t t = 0; t < tables; ++t) tables_[k * tables + t].shard = shard;
    return Status::Ok();
  }
  // A new slot. Init reserved room for one a shard (ChainMap::BeginMove reuses left slots), so
  // no Table moves.
  if (tables_.size() + tables > tables_.capacity()) {
    return Internal("server " + std::to_string(index_) + " has no room for another slot");
  }
  for (size_t i = 0; i < tables; ++i) {
    FERRY_ASSIGN_OR_RETURN(Table t, MakeTable(i, shard));
    Status s = t.map->AttachTransport(data_.get(), kAccessRemoteRead);
    if (!s.ok()) return s.Annotate("server " + std::to_string(index_) + ": table " + t.spec.name);
    tables_.push_back(std::move(t));
  }
  ++slot_count_;
  const uint32_t workers = job_.worker_members();
  staged_.resize(size_t{slot_count_} * workers);
  seen_.resize(size_t{slot_count_} * workers);
  last_op_.push_back(0);
  clock_done_.push_back(0);
  return Status::Ok();
}

Status Server::EmptySlot(uint32_t k) {
  const size_t tables = job_.tables.size();
  const uint32_t workers = job_.worker_members();
  for (size_t t = 0; t < tables; ++t) {
    Table& table = tables_[k * tables + t];
    FERRY_RETURN_IF_ERROR(DrainTable(table));  // no reply still reads its rows
    FERRY_RETURN_IF_ERROR(table.map->Clear());
    table.shard = kNoShard;
  }
  for (uint32_t w = 0; w < workers; ++w) {
    staged_[size_t{k} * workers + w].clear();
    seen_[size_t{k} * workers + w] = Seen{};
  }
  last_op_[k] = 0;
  clock_done_[k] = 0;
  return Status::Ok();
}

Status Server::MoveCopied(uint32_t shard) {
  const auto ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - repair_began_)
          .count();
  std::fprintf(stderr,
               "ferry server %u: holds its copy of shard %u (%.1f ms after the move began)\n",
               index_, shard, ms);
  ControlMessage copied;
  copied.kind = ControlKind::kMoveCopied;
  copied.index = shard;
  FERRY_RETURN_IF_ERROR(control_->Send(copied));
  if (move_copies_pending_ > 0) --move_copies_pending_;
  if (move_copies_pending_ > 0 || copies_pending_ > 0 || !deferred_apply_) return Status::Ok();
  const ControlMessage apply = std::move(*deferred_apply_);
  deferred_apply_.reset();
  return OnApplyClock(apply, control_);
}

void Server::OnMoveDrain(const ControlMessage& m) {
  if (m.value != index_ || m.index >= job_.num_shards()) return;
  draining_.insert(m.index);
  drained_.erase(m.index);
  CheckDrained();
}

void Server::CheckDrained() {
  for (uint32_t shard : draining_) {
    if (drained_.count(shard) != 0) continue;
    bool quiet = true;
    for (const auto& [id, f] : forwards_) {
      if (f.shard == shard && !f.acked) {
        quiet = false;
        break;
      }
    }
    if (!quiet) continue;
    drained_.insert(shard);
    Report(ControlKind::kMoveDrained, shard);
  }
}

void Server::Report(ControlKind kind, uint32_t index) {
  ControlMessage m;
  m.kind = kind;
  m.index = index;
  Status s = control_->Send(m);
  if (!s.ok() && fatal_.ok()) fatal_ = s;
}

Status Server::OnServerJoin(const ControlMessage& m) {
  const uint32_t j = m.index;
  if (!job_.elastic || m.members.size() != 1 || m.members[0].index != j || j == index_ ||
      !chain_.Revive(j) || downstream_.count(j) != 0) {
    return ProtocolError("server " + std::to_string(index_) + ": the join of server " +
                         std::to_string(j) + " does not apply here");
  }
  const auto began = std::chrono::steady_clock::now();
  FERRY_RETURN_IF_ERROR(ConnectSuccessor(m.members[0], ElasticRing(j, index_), job_.peer_timeout));
  awaited_preds_.insert(j);
  awaited_until_ = std::chrono::steady_clock::now() + job_.startup_timeout;
  std::fprintf(
      stderr, "ferry server %u: connected to joining server %u in %.1f ms\n", index_, j,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count());
  return Status::Ok();
}

void Server::AcceptJoining() {
  // Between requests: a handshake completes as the loop polls, and Accept(0) takes it.
  auto ep = data_->Accept(Millis(0));
  if (!ep.ok()) {
    if (ep.status().code() != Code::kTimeout) {
      std::fprintf(stderr, "ferry server %u: refused a connection: %s\n", index_,
                   ep.status().ToString().c_str());
    } else if (std::chrono::steady_clock::now() > awaited_until_ && fatal_.ok()) {
      // The joining member is gone, or the coordinator tells of it (kServerLeave) meanwhile.
      std::fprintf(stderr, "ferry server %u: a joining %s %u never connected\n", index_,
                   awaited_preds_.empty() ? "worker" : "server",
                   awaited_preds_.empty() ? *awaited_workers_.begin() : *awaited_preds_.begin());
      awaited_preds_.clear();
      awaited_workers_.clear();
    }
    return;
  }
  auto hello = DecodeHello((*ep)->peer_info());
  const bool server = hello.ok() && hello->server;
  if (!hello.ok() || (server ? awaited_preds_ : awaited_workers_).count(hello->index) == 0) {
    std::fprintf(stderr,
                 "ferry server %u: refused a data connection from %s: not a joining "
                 "server or worker\n",
                 index_, (*ep)->peer_address().c_str());
    (*ep)->Close();
    return;
  }
  const uint32_t j = hello->index;
  if (!server) {
    auto accepted = AcceptWorker(j, std::move(ep).value());
    if (!accepted.ok()) {
      std::fprintf(stderr, "ferry server %u: refused joining worker %u: %s\n", index_, j,
                   accepted.status().ToString().c_str());
      return;
    }
    if (!*accepted) return;
    awaited_workers_.erase(j);
    // The worker sends nothing before the coordinator starts it, which waits for every server's
    // word: a request arriving before its connection was accepted here would be lost.
    Report(ControlKind::kWorkerJoin, j);
    return;
  }
  Status s = AcceptPredecessor(j, std::move(ep).value());
  if (!s.ok()) {
    std::fprintf(stderr, "ferry server %u: refused joining server %u: %s\n", index_, j,
                 s.ToString().c_str());
    return;
  }
  awaited_preds_.erase(j);
}

void Server::OnWorkerJoin(const ControlMessage& m) {
  const uint32_t w = m.index;
  if (w < job_.workers || w >= job_.worker_members() || links_[w].ep != nullptr) {
    // Not a free worker join slot here: refusing its connection fails its join, not the job.
    std::fprintf(stderr, "ferry server %u: the join of worker %u does not apply here\n", index_, w);
    return;
  }
  awaited_workers_.insert(w);
  awaited_until_ = std::chrono::steady_clock::now() + job_.startup_timeout;
}

void Server::OnWorkerLeave(uint32_t w) {
  if (w >= links_.size()) return;
  awaited_workers_.erase(w);
  Link& l = links_[w];
  // Its requests were answered before it left (Worker::Leave waits for them); BSP pushes it
  // staged stay in its ring and are applied with their clock like any other (not `failed`).
  l.left = true;
  if (!worker_failure_.ok() && failed_worker_ == w) {
    // Its connection closed before this word arrived: not a failure after all, and its staged
    // pushes still count.
    worker_failure_ = Status::Ok();
    l.failed = false;
  }
  std::fprintf(stderr, "ferry server %u: worker %u left the job\n", index_, w);
}

}  // namespace ferry::ps
