// The server's part of one-sided pulls (docs/ps.md, "One-sided pulls"): answering a pull that
// wants slots, and the reuse generations one-sided readers check.
//
// A pull with kFlagWantSlots is answered with two writes on the worker's endpoint:
//
//   1. the rows, as for every pull (sparse, straight out of the rows buffer), NOT notified;
//   2. when (1) has completed here -- its bytes are in the worker's arena (transport.h's
//      completion semantics) -- the SlotReply out of `scratch`, notified with the request's seq.
//
// The transport does not order two ops, so the second is posted only after the first completed:
// a worker that handles the notification sees both. The chaining runs off HandleCompletion; the
// serve loop never waits for it. Scratch is a hint: when it is full the pull is answered as a
// plain pull and the worker simply learns no slots this time.
//
// Status words (remote-read, registered once, never moved):
//
//   struct Status { uint64_t reuse_generation[tables]; };   // 8 bytes apart
//
// BumpReuseGeneration(t) increments the word with release order BEFORE the first row of the
// table is erased, so a reader that reads the rows and then the word (after the rows' read
// completed) and finds it unchanged knows that no slot it read changed hands meanwhile.
#include <atomic>
#include <cstdio>
#include <cstring>

#include "ps/server/server.h"
#include "ps/store/range_allocator.h"

namespace ferry::ps {

struct Server::OneSided {
  // Members in construction order: registrations die before the memory they cover.
  std::vector<uint64_t> generations;  // one per table; never resized after creation
  std::vector<uint8_t> scratch;       // SlotReplies staged for their write
  RangeAllocator scratch_alloc;
  std::unique_ptr<MemoryRegion> status_region;   // generations, remote-read
  std::unique_ptr<MemoryRegion> scratch_region;  // scratch, local
  std::vector<uint8_t> status_descriptor;        // encoded once
  struct RowsDescriptor {
    uint64_t epoch = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<RowsDescriptor> rows_descriptors;  // per table, re-encoded when the epoch moves
  bool registration_failed = false;              // slots are a hint: stop offering them
};

void Server::OneSidedDeleter::operator()(OneSided* p) const {
  delete p;
}

Server::OneSided& Server::one_sided() {
  if (one_sided_ == nullptr) {
    one_sided_.reset(new OneSided);
    one_sided_->generations.assign(tables_.size(), 0);
    one_sided_->rows_descriptors.resize(tables_.size());
  }
  return *one_sided_;
}

void Server::BumpReuseGeneration(size_t t) {
  uint64_t& word = one_sided().generations[t];
  // Release: the bump is visible to any reader (a NIC, another process through cross-memory
  // attach, the tcp progress thread) before the erase that follows it.
  std::atomic_ref<uint64_t>(word).fetch_add(1, std::memory_order_release);
}

bool Server::RegisterOneSided() {
  OneSided& os = one_sided();
  if (os.registration_failed) return false;
  if (os.scratch_region != nullptr) return true;
  // Room for a few full-size replies in flight at once; more wait for none (they go without).
  const uint64_t one = SlotReplyBytes(job_.max_keys_per_request, 2 * kSlotsDescriptorRoom);
  os.scratch.assign(4 * one, 0);
  os.scratch_alloc = RangeAllocator(0, os.scratch.size(), 64);
  auto scratch = data_->RegisterMemory(os.scratch.data(), os.scratch.size(), kAccessLocal);
  auto status =
      data_->RegisterMemory(os.generations.data(), os.generations.size() * 8, kAccessRemoteRead);
  if (!scratch.ok() || !status.ok()) {
    std::fprintf(stderr, "ferry server %u: one-sided pulls unavailable: %s\n", index_,
                 (!scratch.ok() ? scratch.status() : status.status()).ToString().c_str());
    os.registration_failed = true;
    return false;
  }
  os.scratch_region = std::move(scratch).value();
  os.status_region = std::move(status).value();
  os.status_descriptor = EncodeRemoteRegion(os.status_region->descriptor());
  return true;
}

const std::vector<uint8_t>& Server::RowsDescriptorBytes(size_t table) {
  const ArrayHashMap& m = *tables_[table].map;
  OneSided::RowsDescriptor& rows = one_sided().rows_descriptors[table];
  if (rows.epoch != m.epoch()) {
    // The registration's own descriptor, not ArrayHashMap::descriptor(): that one carries the
    // table's epoch in RemoteRegion::epoch, which the ucx backend takes for its registration id
    // (a read with it is refused as stale). The table's epoch travels in the header instead.
    rows.bytes = m.region() != nullptr ? EncodeRemoteRegion(m.region()->descriptor())
                                       : std::vector<uint8_t>();
    rows.epoch = m.epoch();
  }
  return rows.bytes;
}

int64_t Server::StageSlotReply(const RequestView& req, const Table& t,
                               const std::vector<uint32_t>& slots, uint32_t* len) {
  if (!RegisterOneSided()) return -1;
  OneSided& os = one_sided();
  const size_t ti = static_cast<size_t>(&t - tables_.data());
  const ArrayHashMap& m = *t.map;
  const uint32_t n = req.header.num_keys;
  const std::vector<uint8_t>& rows = RowsDescriptorBytes(ti);
  uint64_t descriptors = 0;
  if (req.header.known_epoch != m.epoch() && !rows.empty()) {
    descriptors = rows.size() + os.status_descriptor.size();
    // Too big for what the worker set aside (or for the header's 16-bit sizes): slots only.
    if (rows.size() > 0xffff || os.status_descriptor.size() > 0xffff ||
        SlotReplyBytes(n, descriptors) > req.header.slots_bytes) {
      descriptors = 0;
    }
  }
  const uint64_t bytes = SlotReplyBytes(n, descriptors);
  const auto at = os.scratch_alloc.Allocate(bytes);
  if (!at) return -1;
  uint8_t* out = os.scratch.data() + *at;
  SlotReplyHeader h;
  h.seq = req.header.seq;
  h.epoch = m.epoch();
  h.generation = std::atomic_ref<uint64_t>(os.generations[ti]).load(std::memory_order_relaxed);
  h.num_keys = n;
  const bool bounded = t.spec.max_rows != 0;
  // A max_rows bound (ResolveSlots) and tick eviction (server_eviction.cc) erase rows while
  // serving. A bounded table whose rows buffer already holds max_rows never grows, so its
  // registration never changes.
  h.flags = (TableEvicts(t.spec) ? kSlotsMayReuse : 0u) |
            (bounded && m.capacity() >= t.spec.max_rows ? kSlotsStableRegion : 0u);
  h.row_stride = m.layout().stride;
  h.embedding_offset = m.layout().embedding_offset;
  h.status_offset = static_cast<uint32_t>(ti * 8);
  if (descriptors != 0) {
    h.rows_descriptor_bytes = static_cast<uint16_t>(rows.size());
    h.status_descriptor_bytes = static_cast<uint16_t>(os.status_descriptor.size());
  }
  std::memcpy(out, &h, sizeof h);
  uint8_t* p = out + sizeof h;
  for (uint32_t i = 0; i < n; ++i, p += 4) {
    const uint32_t s = slots[i] == ArrayHashMap::kNoSlot ? kNoSlotValue : slots[i];
    std::memcpy(p, &s, 4);
  }
  if (descriptors != 0) {
    if (rows.size() != 0)
      std::memcpy(p, rows.data(), rows.size());  // data() may be null when empty
    p += rows.size();
    if (os.status_descriptor.size() != 0)
      std::memcpy(p, os.status_descriptor.data(),
                  os.status_descriptor.size());  // data() may be null when empty
  }
  *len = static_cast<uint32_t>(bytes);
  ++stats_.slot_replies;
  return static_cast<int64_t>(*at);
}

void Server::FreeSlotReply(int64_t at, uint32_t len) {
  if (at >= 0) one_sided().scratch_alloc.Free(static_cast<uint64_t>(at), len);
}

Server::SlotsFollowUp Server::TakeSlotsFollowUp(Reply& r) {
  SlotsFollowUp f;
  f.at = r.slots_at;
  f.len = r.slots_len;
  f.worker = r.worker;
  f.seq = r.seq;
  f.dest = r.slots_dest;
  f.post = r.slots_follow;
  r.slots_at = -1;
  r.slots_len = 0;
  r.slots_follow = false;
  return f;
}

void Server::FinishSlotsFollowUp(const SlotsFollowUp& f, bool ok) {
  if (f.at < 0) return;
  Link& l = links_[f.worker];
  if (!f.post || !ok || l.failed) {  // the SlotReply's own write, or the rows never landed
    FreeSlotReply(f.at, f.len);
    return;
  }
  const uint32_t r = AllocReply();
  Reply& reply = replies_[r];
  reply.worker = f.worker;
  reply.slots_at = f.at;  // freed when this write completes
  reply.slots_len = f.len;
  Op op;
  op.type = OpType::kWrite;
  op.flags = kOpNotify;
  op.imm = ReplyImm(ReplyKind::kOk, f.seq);
  op.ep = l.ep.get();
  op.context = r;
  op.local = one_sided().scratch_region.get();
  op.local_offset = static_cast<uint64_t>(f.at);
  op.length = f.len;
  op.remote = l.arena.get();
  op.remote_offset = f.dest;
  Status status = data_->Post(std::span<const Op>(&op, 1));
  if (!status.ok()) {
    reply.busy = false;
    reply.slots_at = -1;
    free_replies_.push_back(r);
    FreeSlotReply(f.at, f.len);
    // The pull's only notification was this write: without it the worker would wait forever.
    FailWorker(f.worker, status.Annotate("post the slot reply"));
  }
}

}  // namespace ferry::ps
