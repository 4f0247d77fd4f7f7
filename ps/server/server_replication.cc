// Chain replication on the server (JobSpec::replicas > 1; see server.h, chain.h and protocol.h
// "Replication"): connections to the neighbours in the chains, forwarding accepted pushes down,
// acknowledgements up, and closing the chains over a server the coordinator removed.
//
// Exactly once: a push is identified by (shard, worker, push_id). Every member records the ids it
// accepted (FirstSight) and applies or stages each once, whether it came from the worker (first
// try, or re-sent to a new head after a failover) or from a predecessor (forwarded, possibly
// again by a new predecessor after a failover). Duplicates are still forwarded and answered: the
// sender cannot know that this member had it, and the members after this one decide for
// themselves. Under BSP the staged pushes of a (shard, worker) are applied in push_id order
// (ApplyClock), so arrival order, which a failover changes, never changes the result.
//
// Acknowledged means applied on the tail: a member answers its upstream only when its successor
// acknowledged (or when it is the tail). When the successor dies, the forwards it had not
// acknowledged go to the next live member, or are answered at once by a member that became the
// tail; none is dropped, so an acknowledged push is on every live replica.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ps/server/server.h"

namespace ferry::ps {

Status Server::ConnectSuccessors(const std::vector<MemberInfo>& members, Millis timeout) {
  const uint32_t replicas = job_.replicas;
  if (!job_.forwards()) return Status::Ok();
  // The fixed successors (a shard server's next replicas-1), then every spare after this server:
  // a chain grows at its tail, and the spare that joins behind this server is always a later one
  // (chain.h "Repairs"). A spare's forward ring for this server comes when it adopts.
  // An elastic job's: every other server of the membership (ElasticRing: the ring each keeps
  // for this one); a join slot that joins later is connected to then (OnServerJoin).
  std::vector<std::pair<uint32_t, uint32_t>> succs;  // (server, distance; 0: a spare)
  if (job_.elastic) {
    for (const MemberInfo& m : members) {
      if (m.role == Role::kServer && m.index != index_ && m.index < job_.server_members()) {
        succs.push_back({m.index, ElasticRing(m.index, index_)});
      }
    }
  } else {
    if (!chain_.is_spare(index_)) {
      for (uint32_t dist = 1; dist < replicas; ++dist) {
        succs.push_back({(index_ + dist) % job_.shard_servers(), dist});
      }
    }
    for (uint32_t j = std::max(index_ + 1, job_.shard_servers()); j < job_.server_members(); ++j) {
      succs.push_back({j, 0});
    }
  }
  for (const auto& succ : succs) {
    // Named copies: clang 14 (the fuzz build's) cannot capture a structured binding.
    const uint32_t j = succ.first, dist = succ.second;
    auto m = std::find_if(members.begin(), members.end(), [j](const MemberInfo& mi) {
      return mi.role == Role::kServer && mi.index == j;
    });
    if (m == members.end()) return ProtocolError("membership lacks server " + std::to_string(j));
    FERRY_RETURN_IF_ERROR(ConnectSuccessor(*m, dist, timeout));
  }
  return Status::Ok();
}

Status Server::ConnectSuccessor(const MemberInfo& m, uint32_t dist, Millis timeout) {
  const uint32_t j = m.index;
  auto ep = data_->Connect(m.data_address, timeout);
  if (!ep.ok()) {
    return ep.status().Annotate("server " + std::to_string(index_) + ": connect to successor " +
                                std::to_string(j) + " at " + m.data_address);
  }
  const auto& regions = (*ep)->peer_regions();
  const size_t expect = AdvertisedRegions(j);
  if (regions.size() != expect) {
    return ProtocolError("server " + std::to_string(j) + " advertised " +
                         std::to_string(regions.size()) + " regions, expected " +
                         std::to_string(expect));
  }
  Downstream d;
  const size_t rings_at = job_.worker_members() + job_.tables.size();
  if (dist > 0) {
    const RemoteRegion& ring = regions[rings_at + dist - 1];
    d.lanes.resize(1);
    FERRY_ASSIGN_OR_RETURN(d.lanes[0].ring, (*ep)->Import(ring));
    d.lanes[0].space = RangeAllocator(0, ring.length, kRequestAlign);
  } else {
    // A spare's rings, one per slot it may adopt: imported when it adopts (ImportSpareLane).
    d.spare_rings.assign(regions.begin() + rings_at, regions.begin() + rings_at + job_.replicas);
    d.lanes.resize(job_.replicas);
  }
  d.ep = std::move(ep).value();
  // Serving already (a join): the serve loop learns of it here, not at its start.
  if (control_ != nullptr) peer_of_ep_[d.ep->id()] = Peer{PeerKind::kDownstream, j};
  downstream_.emplace(j, std::move(d));
  return Status::Ok();
}

size_t Server::AdvertisedRegions(uint32_t server) const {
  // Init's list: the worker rings, the own shard's tables, the forward rings, the ack word.
  const uint32_t rings = job_.elastic              ? job_.server_members() - 1
                         : chain_.is_spare(server) ? job_.replicas
                                                   : job_.replicas - 1;
  return job_.worker_members() + job_.tables.size() + rings + 1;
}

Status Server::AcceptPredecessor(uint32_t pred, std::shared_ptr<Endpoint> ep) {
  // A shard server's predecessors sit at a fixed distance, its forward ring's index; a spare's
  // are every server before it (distance 0: the ring comes when it adopts).
  // An elastic job's are every other server, each with a ring of its own (ElasticRing).
  const bool spare = RepairSpare(index_);
  const uint32_t dist =
      spare ? 0
      : job_.elastic
          ? (pred < job_.server_members() && pred != index_ ? ElasticRing(index_, pred) : 0)
          : (index_ + job_.shard_servers() - pred % job_.shard_servers()) % job_.shard_servers();
  const bool placed = spare ? pred < index_
                      : job_.elastic
                          ? dist != 0
                          : pred < job_.shard_servers() && dist != 0 && dist < job_.replicas;
  if (!placed || upstream_.count(pred) != 0) {
    ep->Close();
    return ProtocolError("server " + std::to_string(pred) + " at " + ep->peer_address() +
                         " is no predecessor of server " + std::to_string(index_) +
                         " with replicas " + std::to_string(job_.replicas) +
                         ", or connected twice");
  }
  const auto& regions = ep->peer_regions();
  const size_t expect = AdvertisedRegions(pred);
  if (regions.size() != expect) {
    ep->Close();
    return ProtocolError("server " + std::to_string(pred) + " advertised " +
                         std::to_string(regions.size()) + " regions, expected " +
                         std::to_string(expect));
  }
  Upstream u;
  auto ack = ep->Import(regions.back());
  if (!ack.ok()) {
    ep->Close();
    return ack.status().Annotate("import the ack word of server " + std::to_string(pred));
  }
  u.ack = std::move(ack).value();
  u.distance = dist;
  u.ep = std::move(ep);
  peer_of_ep_[u.ep->id()] = Peer{PeerKind::kUpstream, pred};
  upstream_.emplace(pred, std::move(u));
  return Status::Ok();
}

Status Server::AcceptPush(Forward f, const RequestView& req, int32_t pred) {
  Table* t = TableFor(f.shard, f.table);
  if (t == nullptr) return Internal("push for a shard this server does not hold");
  const uint32_t k = HostedSlot(*t);
  if (FirstSight(k, f.worker, f.push_id)) {
    if (job_.consistency.kind == Consistency::kBsp) {
      ForgetDroppedClocks(f.worker, f.clock);
      if (DroppedClock(f.worker, f.clock)) {
        ++stats_.late_pushes_dropped;  // its clock completed without it: acknowledged, not kept
      } else {
        staged_[size_t{k} * job_.worker_members() + f.worker].push_back(
            Staged{f.push_id, req.offset, f.clock, pred, f.table});
      }
    } else {
      FERRY_RETURN_IF_ERROR(ApplyPush(*t, req, f.worker));
    }
    if (!f.from_worker) ++stats_.forwards_applied;
  } else {
    ++stats_.duplicates;
  }
  const int succ = job_.forwards() ? chain_.Successor(f.shard, index_) : -1;
  if (succ >= 0 && !CatchingUp(static_cast<uint32_t>(succ), f.shard)) {
    QueueForward(std::move(f), static_cast<uint32_t>(succ));
    PostForwards(static_cast<uint32_t>(succ));
    return Status::Ok();
  }
  if (succ >= 0) ForwardToJoining(f, static_cast<uint32_t>(succ));
  // The tail (or no replicas): answer now, on the request path's own terms.
  if (f.from_worker) {
    if (f.type == RequestType::kPush) return SendRecord(f.from, f.from_seq, Status::Ok());
    return ReplyRows(f.from, req, *t);
  }
  Answer(f);
  return Status::Ok();
}

void Server::ForwardToJoining(const Forward& f, uint32_t spare) {
  // The shard has had one copy fewer since the failover; while the spare takes in the rows, an
  // acknowledged push is where it was (on the members up to this one, the tail) and the spare
  // gets it after the rows, in order; its copy ends only behind these pushes (EndCopy), so it
  // joins holding all of them. Answered here, the sender may reuse the push's bytes at once:
  // the forward carries its own copy of them (sent from the record scratch, as a record's are).
  Forward copy = f;
  if ((f.flags & (kForwardRecord | kForwardCopy)) == 0 && f.payload_bytes > 0) {
    const uint8_t* payload = rings_ + f.payload_at;
    copy.record.assign(payload, payload + f.payload_bytes);
  }
  copy.from_self = true;  // the spare's ack answers nobody
  QueueForward(std::move(copy), spare);
  PostForwards(spare);
}

void Server::QueueForward(Forward f, uint32_t succ) {
  f.successor = static_cast<int>(succ);
  // A spare takes each shard in the ring of the slot it adopted it in.
  const int slot = RepairSpare(succ) ? chain_.Slot(succ, f.shard) : 0;
  f.lane = slot < 0 ? 0 : static_cast<uint32_t>(slot);
  f.seq = 0;
  f.ring_at = f.ring_bytes = 0;
  f.header_at = -1;
  f.posted = f.written = f.acked = f.abandoned = false;
  const uint64_t id = next_forward_++;
  forwards_.emplace(id, std::move(f));
  downstream_[succ].queue.push_back(id);
}

void Server::PostForwards(uint32_t succ) {
  auto dit = downstream_.find(succ);
  if (dit == downstream_.end()) return;
  Downstream& d = dit->second;
  // A successor that failed waits for the coordinator's word: removed (the forwards move on) or
  // the job's failure.
  if (chain_.dead(succ) || d.suspected) return;
  std::vector<Op> ops;
  while (!d.queue.empty()) {
    const uint64_t id = d.queue.front();
    Forward& f = forwards_.at(id);
    if (f.lane >= d.lanes.size() || d.lanes[f.lane].ring == nullptr) break;  // a lane not adopted
    Lane& lane = d.lanes[f.lane];
    // A record's or copy's payload (or a push's for a joining spare) lives in the Forward.
    const bool record = !f.record.empty();
    const uint64_t bytes = (sizeof(ForwardHeader) + f.payload_bytes + kRequestAlign - 1) /
                           kRequestAlign * kRequestAlign;
    const auto at = lane.space.Allocate(bytes);
    if (!at) break;  // space returns with acks (BSP: with the clock update)
    const auto h = header_space_.Allocate(sizeof(ForwardHeader));
    if (!h) {
      lane.space.Free(*at, bytes);
      break;  // headers return as forward writes complete
    }
    if (record && f.payload_bytes > 0) {
      // A record's (or copy's) payload lives in the Forward: copied into registered scratch to
      // be sent.
      const auto r = record_space_.Allocate(f.payload_bytes);
      if (!r) {
        lane.space.Free(*at, bytes);
        header_space_.Free(*h, sizeof(ForwardHeader));
        break;  // scratch returns as record writes complete
      }
      f.record_at = static_cast<int64_t>(*r);
      f.payload_at = *r;
      std::memcpy(rings_ + *r, f.record.data(), f.payload_bytes);
    }
    f.ring_at = *at;
    f.ring_bytes = bytes;
    f.header_at = static_cast<int64_t>(*h);
    f.seq = d.next_seq++;
    ForwardHeader hdr;
    hdr.flags = f.flags;
    hdr.reserved0 = f.copy;
    hdr.table = f.table;
    hdr.seq = f.seq;
    hdr.num_keys = f.num_keys;
    hdr.dim = f.dim;
    hdr.clock = f.clock;
    hdr.worker = f.worker;
    hdr.shard = static_cast<uint16_t>(f.shard);
    hdr.push_id = f.push_id;
    hdr.payload_bytes = static_cast<uint32_t>(f.payload_bytes);
    hdr.op_id = f.op_id;
    std::memcpy(rings_ + *h, &hdr, sizeof hdr);
    // Keys and gradients straight from where they arrived (no copy): the worker keeps its ring
    // bytes, and a predecessor its forward-ring bytes, until this server answered the push.
    f.segs[0] = Segment{*h, *at, sizeof(ForwardHeader)};
    f.segs[1] = Segment{f.payload_at, *at + sizeof(ForwardHeader), f.payload_bytes};
    Op op;
    op.type = OpType::kSparseWrite;
    op.flags = kOpNotify;
    op.imm = ForwardImm(RepairSpare(succ) ? f.lane + 1 : 0, *at);
    op.ep = d.ep.get();
    op.context = kForwardContext | id;
    op.local = block_region_.get();
    op.remote = lane.ring.get();
    op.segments = f.segs;
    op.num_segments = f.payload_bytes > 0 ? 2 : 1;
    ops.push_back(op);
    f.posted = true;
    d.inflight[f.seq] = id;
    d.queue.pop_front();
    ++stats_.forwards;
  }
  if (ops.empty()) return;
  Status s = data_->Post(ops);
  // Post validates before it posts anything: a refusal is this server's bug, not the peer's.
  if (!s.ok() && fatal_.ok()) {
    fatal_ = s.Annotate("server " + std::to_string(index_) + ": forward pushes to server " +
                        std::to_string(succ));
  }
}

void Server::OnForwardWritten(const Completion& c) {
  const uint64_t id = c.context & ~kForwardContext;
  auto it = forwards_.find(id);
  if (it == forwards_.end()) return;
  Forward& f = it->second;
  if (f.header_at >= 0) {
    header_space_.Free(static_cast<uint64_t>(f.header_at), sizeof(ForwardHeader));
    f.header_at = -1;
  }
  if (f.record_at >= 0) {
    record_space_.Free(static_cast<uint64_t>(f.record_at), f.payload_bytes);
    f.record_at = -1;
  }
  f.written = true;
  if (!c.ok() && !f.abandoned && f.successor >= 0) {
    Suspect(static_cast<uint32_t>(f.successor),
            Status(c.code, "a forward write to it failed: " + c.error));
  }
  if (f.abandoned || f.acked) forwards_.erase(it);
}

void Server::HandleAck(uint32_t succ, uint32_t imm, bool ok) {
  if (chain_.dead(succ)) return;  // late words of a removed server: its forwards moved on
  auto dit = downstream_.find(succ);
  if (dit == downstream_.end()) return;
  Downstream& d = dit->second;
  if (!ok || ReplyImmKind(imm) != ReplyKind::kOk) {
    Suspect(succ, ProtocolError(ok ? "it refused a forwarded push" : "its ack failed"));
    return;
  }
  const uint32_t seq = ReplyImmSeq(imm);
  auto in = std::find_if(d.inflight.begin(), d.inflight.end(),
                         [seq](const auto& e) { return (e.first & 0xffffffu) == seq; });
  if (in == d.inflight.end()) {
    Suspect(succ, ProtocolError("it acknowledged forward " + std::to_string(seq) +
                                ", which is not in flight"));
    return;
  }
  const uint64_t id = in->second;
  d.inflight.erase(in);
  auto it = forwards_.find(id);
  if (it == forwards_.end()) return;
  Forward& f = it->second;
  f.acked = true;
  if ((f.flags & kForwardCopy) != 0 && f.copy == static_cast<uint8_t>(CopyKind::kWatermark)) {
    EndCopy(succ, f.shard);
  }
  // Records and copies are applied on arrival: their bytes return at once, as ASP pushes' do.
  if (job_.consistency.kind == Consistency::kBsp &&
      (f.flags & (kForwardRecord | kForwardCopy)) == 0) {
    // The successor applies it at the clock boundary: the bytes stay until every server did.
    d.held.push_back(Held{f.clock, f.lane, f.ring_at, f.ring_bytes});
  } else {
    d.lanes[f.lane].space.Free(f.ring_at, f.ring_bytes);
  }
  Answer(f);
  if (f.written) forwards_.erase(it);
  if (!d.queue.empty()) PostForwards(succ);
}

void Server::FreeHeldForwards(uint64_t min_clock) {
  for (auto& [j, d] : downstream_) {
    bool freed = false;
    for (auto it = d.held.begin(); it != d.held.end();) {
      if (uint64_t{it->clock} + 1 <= min_clock) {
        d.lanes[it->lane].space.Free(it->at, it->bytes);
        it = d.held.erase(it);
        freed = true;
      } else {
        ++it;
      }
    }
    if (freed && !d.queue.empty()) PostForwards(j);
  }
}

void Server::Answer(const Forward& f) {
  if (f.from_self) return;  // a record this server made as the head
  if (!f.from_worker) {
    if (chain_.dead(f.from)) return;  // the removed predecessor's upstream re-sends it
    Status s = SendAck(f.from, f.from_seq);
    if (!s.ok()) Suspect(f.from, s);
    return;
  }
  const uint32_t w = f.from;
  if (links_[w].failed) return;
  Status s;
  if (f.type == RequestType::kPush) {
    s = SendRecord(w, f.from_seq, Status::Ok());
  } else {
    // A push-pull's rows: read where the request still is (the worker keeps its ring bytes until
    // this answer).
    std::span<const uint8_t> ring(rings_ + w * job_.staging_bytes, job_.staging_bytes);
    const RequestLimits limits{job_.staging_bytes, links_[w].arena_bytes,
                               ReplySlotsBytes(job_.server_members(), job_.max_outstanding),
                               job_.max_keys_per_request};
    RequestView req;
    s = ParseRequest(ring, f.from_offset, shapes_, limits, &req);
    if (s.ok() && (req.header.seq != f.from_seq || req.type() != RequestType::kPushPull)) {
      s = ProtocolError("push-pull " + std::to_string(f.from_seq) +
                        " was overwritten before it was answered");
    }
    Table* t = s.ok() ? TableFor(f.shard, f.table) : nullptr;
    if (s.ok() && t != nullptr) s = ReplyRows(w, req, *t);
    if (!s.ok()) {
      ++stats_.errors;
      s = SendRecord(w, f.from_seq, s);
    }
  }
  if (!s.ok()) FailWorker(w, s);
}

Status Server::SendAck(uint32_t pred, uint32_t seq) {
  auto it = upstream_.find(pred);
  if (it == upstream_.end()) return Internal("no connection from server " + std::to_string(pred));
  Upstream& u = it->second;
  Op op;
  op.type = OpType::kWrite;
  op.flags = kOpNotify;
  op.imm = ReplyImm(ReplyKind::kOk, seq);
  op.ep = u.ep.get();
  op.context = kAckContext | pred;
  op.local = block_region_.get();
  op.local_offset = ack_source_at_;
  op.length = 8;
  op.remote = u.ack.get();
  op.remote_offset = 0;
  return data_->Post(std::span<const Op>(&op, 1));
}

void Server::HandleForward(uint32_t pred, uint32_t imm) {
  if (chain_.dead(pred)) return;  // a removed server's late forward: its pushes come again
  auto it = upstream_.find(pred);
  if (it == upstream_.end()) return;
  Upstream& u = it->second;
  if (u.suspected) return;
  // Which of this server's forward rings: by the sender's distance, or a spare's by the slot the
  // imm names (1-based either way).
  const uint32_t ring_no = u.distance != 0 ? u.distance : ForwardImmRing(imm);
  Status status;
  if (ring_no == 0 || ring_no > pred_ring_count_ || (u.distance != 0 && ForwardImmRing(imm) != 0)) {
    status = ProtocolError("a forward names ring " + std::to_string(ForwardImmRing(imm)));
  }
  std::span<const uint8_t> ring(
      pred_rings_ + size_t{status.ok() ? ring_no - 1 : 0} * forward_ring_bytes_,
      forward_ring_bytes_);
  const ForwardLimits limits{forward_ring_bytes_, job_.max_keys_per_request, job_.worker_members(),
                             job_.num_shards(), MaxCopyRows()};
  ForwardView fv;
  if (status.ok()) status = ParseForward(ring, ForwardImmOffset(imm), shapes_, limits, &fv);
  if (status.ok() && (u.distance == 0 || job_.elastic) &&
      chain_.Slot(index_, fv.header.shard) < 0) {
    // A copy for this spare overtook its kChainRepair (a move's target: its kMoveBegin).
    const uint32_t shard = fv.header.shard;
    status = AwaitControl([&] { return chain_.Slot(index_, shard) >= 0; },
                          [&] {
                            return "a copy of shard " + std::to_string(shard) + " reached server " +
                                   std::to_string(index_) +
                                   ", and no word from the coordinator gave it that shard";
                          });
  }
  if (status.ok() && fv.header.seq != u.next_seq) {
    status = ProtocolError("forward seq " + std::to_string(fv.header.seq) + " arrived, " +
                           std::to_string(u.next_seq) + " expected");
  }
  if (status.ok()) {
    const uint32_t shard = fv.header.shard;
    const auto runs = [&] {
      const int from = chain_.Position(shard, pred);
      return from >= 0 && chain_.Position(shard, index_) > from;
    };
    if (!runs() && job_.elastic) {
      // A move's finish reordered the chain and the new predecessor forwarded a push before
      // this server heard of the finish.
      status = AwaitControl(runs, [&] {
        return "a forward of shard " + std::to_string(shard) + " from server " +
               std::to_string(pred) + " reached server " + std::to_string(index_) +
               ", and no word from the coordinator put them in that order";
      });
    }
    if (status.ok() && !runs()) {
      status = ProtocolError("forward of shard " + std::to_string(fv.header.shard) +
                             ", whose chain does not run from server " + std::to_string(pred) +
                             " to server " + std::to_string(index_));
    }
  }
  if (status.ok() && u.distance == 0 &&
      chain_.Slot(index_, fv.header.shard) != static_cast<int>(ring_no) - 1) {
    status = ProtocolError("a forward of shard " + std::to_string(fv.header.shard) + " in ring " +
                           std::to_string(ring_no) + ", not that shard's slot");
  }
  if (!status.ok()) {
    // A server of the same job sent garbage: take that link out (the coordinator decides).
    std::fprintf(stderr, "ferry server %u: closing predecessor %u: %s\n", index_, pred,
                 status.ToString().c_str());
    u.ep->Close();
    Suspect(pred, status);
    return;
  }
  ++u.next_seq;
  last_forward_at_ = std::chrono::steady_clock::now();
  if ((fv.header.flags & kForwardCopy) != 0) {
    Status s = ApplyCopy(fv);
    if (!s.ok()) {
      if (fatal_.ok()) fatal_ = s.Annotate("apply a copy from server " + std::to_string(pred));
      return;
    }
    s = SendAck(pred, fv.header.seq);  // a joining spare is its chains' tail
    if (!s.ok()) Suspect(pred, s);
    return;
  }
  if ((fv.header.flags & kForwardRecord) != 0) {
    const int k = chain_.Slot(index_, fv.header.shard);
    Status s = ApplyRecord(static_cast<uint32_t>(k), fv);
    if (!s.ok()) {
      if (fatal_.ok()) fatal_ = s.Annotate("apply a row record of server " + std::to_string(pred));
      return;
    }
    Forward f;
    f.shard = fv.header.shard;
    f.worker = fv.header.worker;
    f.clock = fv.header.clock;
    f.push_id = fv.header.push_id;
    f.table = fv.header.table;
    f.flags = fv.header.flags;
    f.num_keys = fv.header.num_keys;
    f.payload_bytes = fv.header.payload_bytes;
    f.op_id = fv.header.op_id;
    const uint8_t* payload = reinterpret_cast<const uint8_t*>(fv.push.keys);
    if (f.payload_bytes > 0) f.record.assign(payload, payload + f.payload_bytes);
    f.from_worker = false;
    f.from = pred;
    f.from_seq = fv.header.seq;
    const int succ = chain_.Successor(f.shard, index_);
    if (succ >= 0 && !CatchingUp(static_cast<uint32_t>(succ), f.shard)) {
      QueueForward(std::move(f), static_cast<uint32_t>(succ));
      PostForwards(static_cast<uint32_t>(succ));
    } else {
      if (succ >= 0) ForwardToJoining(f, static_cast<uint32_t>(succ));
      Answer(f);
    }
    s = MaybeAnswerClock();
    if (!s.ok() && fatal_.ok()) fatal_ = s;
    return;
  }
  Forward f;
  f.shard = fv.header.shard;
  f.worker = fv.header.worker;
  f.TakePushFields(fv.header);
  f.payload_at = static_cast<uint64_t>(pred_rings_ - rings_) +
                 size_t{ring_no - 1} * forward_ring_bytes_ + fv.push.offset + sizeof(ForwardHeader);
  f.from_worker = false;
  f.from = pred;
  f.from_seq = fv.header.seq;
  Status s = AcceptPush(std::move(f), fv.push, static_cast<int32_t>(ring_no));
  if (!s.ok() && fatal_.ok())
    fatal_ = s.Annotate("apply a push forwarded by server " + std::to_string(pred));
}

Status Server::HandleServerDown(uint32_t dead, const std::string& why) {
  if (dead >= job_.server_members()) return Status::Ok();
  if (dead == index_) {
    return PeerFailure("server " + std::to_string(index_) +
                       " was removed from the job (its shards failed over): " + why);
  }
  if (chain_.dead(dead)) return Status::Ok();
  const uint32_t slots = slot_count_;
  std::vector<bool> headed(slots);
  for (uint32_t k = 0; k < slots; ++k) {
    headed[k] =
        chain_.Head(tables_[size_t{k} * job_.tables.size()].shard) == static_cast<int>(index_);
  }
  chain_.MarkDead(dead);
  ++stats_.failovers;
  std::erase_if(catching_up_, [dead](const auto& c) { return c.first == dead; });
  std::fprintf(stderr, "ferry server %u: server %u is out of the job, chains close over it\n",
               index_, dead);
  auto uit = upstream_.find(dead);
  if (uit != upstream_.end() && uit->second.ep) uit->second.ep->Close();
  // Shards this server heads now: it decides their rows from here on.
  for (uint32_t k = 0; k < slots; ++k) {
    const bool heads =
        chain_.Head(tables_[size_t{k} * job_.tables.size()].shard) == static_cast<int>(index_);
    if (heads && !headed[k] && records_) FERRY_RETURN_IF_ERROR(TakeOverRows(k));
  }
  auto dit = downstream_.find(dead);
  if (dit == downstream_.end()) return MaybeAnswerClock();
  Downstream& d = dit->second;
  if (d.ep) d.ep->Close();
  // Every forward the dead successor had not acknowledged, in the order they were accepted here:
  // to the next live member of its chain, or answered now that this server is the tail.
  std::vector<uint64_t> ids;
  for (const auto& [seq, id] : d.inflight) ids.push_back(id);
  ids.insert(ids.end(), d.queue.begin(), d.queue.end());
  std::sort(ids.begin(), ids.end());
  d.inflight.clear();
  d.queue.clear();
  d.held.clear();
  std::vector<uint32_t> touched;
  for (uint64_t id : ids) {
    auto it = forwards_.find(id);
    if (it == forwards_.end()) continue;
    Forward f = it->second;
    if (it->second.posted && !it->second.written) {
      it->second.abandoned = true;  // its cancelled write still completes here
    } else {
      forwards_.erase(it);
    }
    if (f.header_at >= 0) f.header_at = -1;  // freed with the old write's completion
    f.record_at = -1;                        // likewise
    ++stats_.forwards_rerouted;
    const int next = chain_.Successor(f.shard, index_);
    if (next < 0) {
      Answer(f);
    } else {
      QueueForward(std::move(f), static_cast<uint32_t>(next));
      touched.push_back(static_cast<uint32_t>(next));
    }
  }
  for (uint32_t j : touched) PostForwards(j);
  return MaybeAnswerClock();
}

void Server::Suspect(uint32_t server, const Status& why) {
  if (server >= job_.server_members() || chain_.dead(server)) return;
  auto dit = downstream_.find(server);
  auto uit = upstream_.find(server);
  bool already = false;
  if (dit != downstream_.end()) {
    already = already || dit->second.suspected;
    dit->second.suspected = true;
  }
  if (uit != upstream_.end()) {
    already = already || uit->second.suspected;
    uit->second.suspected = true;
  }
  if (already || control_ == nullptr) return;
  // No message here: connections also end when the job shuts down (the coordinator ignores a
  // suspicion then), and it reports a removal itself.
  ControlMessage m;
  m.kind = ControlKind::kSuspect;
  m.index = server;
  m.text = "server " + std::to_string(index_) + ": " + why.ToString();
  (void)control_->Send(m);
}

void Server::CheckPeers() {
  for (auto& [j, d] : downstream_) {
    if (!d.suspected && !chain_.dead(j) && d.ep && !d.ep->status().ok()) {
      Suspect(j, d.ep->status());
    }
  }
  for (auto& [p, u] : upstream_) {
    if (!u.suspected && !chain_.dead(p) && u.ep && !u.ep->status().ok()) {
      Suspect(p, u.ep->status());
    }
  }
}

}  // namespace ferry::ps
