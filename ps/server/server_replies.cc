// A server's replies (see server.h): a pull's rows, written straight out of the table's rows
// into the worker's arena as one sparse write; a record (a push's acknowledgement, an error);
// and the batching of both: the requests of one Poll batch are answered with one Post.
#include <chrono>

#include "ps/server/reply_plan.h"
#include "ps/server/server.h"

namespace ferry::ps {

Status Server::ReplyRows(uint32_t w, const RequestView& req, Table& t) {
  Link& l = links_[w];
  ArrayHashMap& m = *t.map;
  const uint32_t n = req.header.num_keys;
  if ((req.header.flags & kFlagReadOnly) != 0) {
    // Scoring reads (evaluation, prediction): absent keys stay kNoSlot and read as zeros; the
    // table neither grows nor counts them (a test set's features must not enter the model).
    slots_.resize(n);
    FERRY_RETURN_IF_ERROR(m.FindBatch(std::span<const uint64_t>(req.keys, n), slots_));
  } else if (LeadsRows(t)) {
    // A chain head's creations and evictions go down the chain (server_records.cc).
    BeginRowLog(t);
    const Status resolved = ResolveSlots(t, req.keys, n, &slots_);
    EndRowLog(t, 0, 0, 0, 0);
    FERRY_RETURN_IF_ERROR(resolved);
  } else {
    FERRY_RETURN_IF_ERROR(ResolveSlots(t, req.keys, n, &slots_));
  }
  const bool fp16 = (req.header.flags & kFlagFp16Rows) != 0;
  const ReplyRowShape shape{m.layout().stride, fp16 ? t.mirror_offset : m.layout().embedding_offset,
                            RowWireBytes(t.spec.dim, fp16)};
  const uint32_t r = AllocReply();
  Reply& reply = replies_[r];
  reply.worker = w;
  std::vector<Segment>& segs = reply.segments;
  // Keys refused by admission have no slot: their rows stay zero.
  PlanReplySegments(std::span<const uint32_t>(slots_.data(), n), ArrayHashMap::kNoSlot, shape,
                    req.header.dest_offset, req.header.dest_stride, &segs);
  if (segs.empty()) {  // every key refused: acknowledge without data
    reply.busy = false;
    free_replies_.push_back(r);
    return SendRecord(w, req.header.seq, Status::Ok());
  }
  // A pull that wants slots: the rows go unnotified, the SlotReply follows them once they have
  // landed and carries the notification (server_onesided.cc).
  uint32_t slots_len = 0;
  const int64_t slots_at =
      (req.header.flags & kFlagWantSlots) != 0 ? StageSlotReply(req, t, slots_, &slots_len) : -1;
  Op op;
  op.type = OpType::kSparseWrite;
  op.flags = slots_at >= 0 ? kOpNone : kOpNotify;
  op.imm = slots_at >= 0 ? 0 : ReplyImm(ReplyKind::kOk, req.header.seq);
  op.ep = l.ep.get();
  op.context = r;
  op.local = m.region();
  op.remote = l.arena.get();
  op.segments = segs.data();
  op.num_segments = segs.size();
  reply.slots_at = slots_at;
  reply.slots_len = slots_len;
  reply.seq = req.header.seq;
  reply.slots_dest = req.header.slots_offset;
  reply.slots_follow = slots_at >= 0;
  reply.table = static_cast<int>(&t - tables_.data());
  ++t.inflight;
  return PostReply(op);
}

Status Server::SendRecord(uint32_t w, uint32_t seq, const Status& status,
                          std::optional<uint32_t> moved_after) {
  Link& l = links_[w];
  // A scratch record stays untouched until its write completes.
  Completion comps[64];
  const auto deadline = std::chrono::steady_clock::now() + job_.peer_timeout * 2;
  while (l.free_scratch.empty()) {
    FlushReplies();  // the records queued in this batch return their scratch once posted
    const size_t n = data_->Poll(comps);
    for (size_t i = 0; i < n; ++i) HandleCompletion(comps[i], /*defer_notifies=*/true);
    if (n == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Timeout("reply records to worker " + std::to_string(w) + " never completed");
      }
      (void)data_->Wait(Millis(10));
    }
    if (l.failed) return PeerFailure("worker " + std::to_string(w) + " failed");
  }
  const uint32_t s = l.free_scratch.back();
  l.free_scratch.pop_back();
  ReplyRecord& rec = scratch_[s];
  uint64_t length = 8;
  ReplyKind kind = status.ok() ? ReplyKind::kOk : ReplyKind::kError;
  if (moved_after) {
    MakeMovedRecord(seq, *moved_after, &rec);
    length = sizeof(ReplyRecord);
    kind = ReplyKind::kMoved;
  } else if (status.ok()) {
    rec.magic = kReplyMagic;
    rec.seq = seq;
  } else {
    MakeErrorRecord(seq, status, &rec);
    length = sizeof(ReplyRecord);
  }
  const uint32_t r = AllocReply();
  replies_[r].worker = w;
  replies_[r].scratch = static_cast<int>(s);
  Op op;
  op.type = OpType::kWrite;
  op.flags = kOpNotify;
  op.imm = ReplyImm(kind, seq);
  op.ep = l.ep.get();
  op.context = r;
  op.local = scratch_region_.get();
  op.local_offset = uint64_t{s} * sizeof(ReplyRecord);
  op.length = length;
  op.remote = l.arena.get();
  op.remote_offset = ReplySlotOffset(index_, seq, job_.max_outstanding);
  return PostReply(op);
}

Status Server::PostReply(const Op& op) {
  // One path for both: outside a batch the queue holds this one write and is flushed at once.
  queued_replies_.push_back(op);
  if (!batching_) FlushReplies();
  return Status::Ok();
}

void Server::FlushReplies() {
  if (queued_replies_.empty()) return;
  // Taken out first: answering a failure below sends a record, which may queue again (or, in
  // SendRecord's wait, flush again). The buffer comes back for its capacity when it can.
  std::vector<Op> ops;
  ops.swap(queued_replies_);
  if (!data_->Post(ops).ok()) {
    // Post validates the whole batch before posting any of it: one bad write must not hold back
    // the others, so post them one by one and answer the bad ones alone.
    for (const Op& op : ops) {
      const Status posted = data_->Post(std::span<const Op>(&op, 1));
      if (!posted.ok()) ReplyPostFailed(static_cast<uint32_t>(op.context), posted);
    }
  }
  ops.clear();
  if (queued_replies_.empty()) queued_replies_.swap(ops);
}

// A reply write that could not be posted: released as if it had completed, then a pull (its
// rows) is answered with an error record, and a record's own failure fails the worker (it
// would wait forever for that seq).
void Server::ReplyPostFailed(uint32_t r, const Status& why) {
  const bool rows = replies_[r].table >= 0;
  const uint32_t w = replies_[r].worker;
  const uint32_t seq = replies_[r].seq;
  const SlotsFollowUp slots = ReleaseReply(r);
  FinishSlotsFollowUp(slots, /*ok=*/false);
  if (!rows) {
    FailWorker(w, why.Annotate("post a reply record"));
    return;
  }
  ++stats_.errors;
  const Status sent = SendRecord(w, seq, why.Annotate("post the rows reply"));
  if (!sent.ok()) FailWorker(w, sent);
}

}  // namespace ferry::ps
