// One-sided pulls on the worker (worker.h PullOptions::one_sided; docs/ps.md "One-sided pulls").
//
// A pull splits each server's group of keys into the keys whose slot this worker knows (the
// slot cache of that table and server) and the others:
//
//   group of server s in the send buffer, after the split (positions = arena rows):
//     [ begin[s] ........ uncached ........ | ........ cached ........ begin[s+1] )
//       request path, kFlagWantSlots          ONE sparse read of [key word .. embedding end)
//                                             of each cached slot, straight into the arena
//
// Arena rows of such a ticket carry a prefix, so that a read lands the row as the server keeps it
// and a request-path reply lands its embedding at the same place:
//
//   struct ArenaRow {             // stride = round_up(embedding_offset + 4 * dim, 8)
//     uint64_t key;               // one-sided reads only: checked against the pulled key
//     uint8_t  meta[16];          // one-sided reads only (version travels for free)
//     float    embedding[dim];    // PulledRows points here, whichever path filled it
//   };
//
// A read counts as one reply of its ticket. When it completes it is checked: on a table that may
// erase rows (kSlotsMayReuse), an 8-byte read of the server's reuse generation posted after the
// rows' read completed must find the generation the slots were learned under (else a slot may
// have changed hands meanwhile); then every row's key word must be the pulled key. A read that
// fails a check, or that the transport refused (stale or unknown key after the table grew), is
// replaced by request-path pulls of the same positions (a Fallback), which also refresh the slots
// and the descriptor; only then does the read's reply count go. Nothing unchecked is ever
// counted, so a caller never sees a wrong row.
//
// Fallbacks are posted from completion handlers (inside Progress), so they never wait: they take
// ring space when there is some and are retried after every reply (OnNotify) until they fit.
#include <algorithm>
#include <cstring>
#include <string>

#include "ps/wire/row_format.h"
#include "ps/worker/worker.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {

namespace {

constexpr uint64_t kReadIndexMask = (uint64_t{1} << kContextShift) - 1;
// Slots cached per (table, server) before the cache starts over (a worker that sees an endless
// stream of new keys must not grow without bound).
constexpr size_t kMaxCachedSlots = size_t{1} << 24;
// Segments per sparse read, below every backend's limit and any peer's max_segments default.
constexpr uint64_t kMaxReadSegments = uint64_t{1} << 16;

// Whether a one-sided access the target refuses leaves the endpoint usable. tcp and ucx answer
// a stale key with an error completion; on verbs an RDMA READ with a deregistered rkey is a
// remote access error that moves the RC queue pair (requests included) to the error state.
// Capabilities has no bit for this yet (docs/ps.md): until it has, verbs reads only
// registrations the server declares stable.
bool RefusalsAreHarmless(const Transport& t) {
  return t.name() != "verbs";
}

bool DescriptorGone(Code code) {
  return code == Code::kStale || code == Code::kPermissionDenied || code == Code::kOutOfRange;
}

}  // namespace

bool Worker::OneSidedPossible(uint32_t table) const {
  // With replicas a shard's rows may move to another server at any time (a failover): the
  // request path follows the shard's head, cached slots would not. With more shards than shard
  // servers a server's rows are in several tables (one per shard) and the reads address one. In
  // an elastic job a shard's rows change server when it moves.
  return data_->capabilities().sparse_read && table < job_.tables.size() && job_.replicas == 1 &&
         job_.num_shards() == job_.shard_servers() && !job_.elastic;
}

Result<Ticket> Worker::PullOneSided(uint32_t table, std::span<const uint64_t> keys,
                                    const PullOptions& options) {
  State& st = *st_;
  if (!OneSidedPossible(table)) {
    PullOptions plain = options;
    plain.one_sided = false;
    return Pull(table, keys, plain);
  }
  if (st.slot_caches.empty()) {
    st.slot_caches.assign(job_.tables.size(), std::vector<SlotCache>(job_.shard_servers()));
  }
  LearnSlots();
  FERRY_ASSIGN_OR_RETURN(TicketState * tk, NewTicket(table, RequestType::kPull, false));
  tk->read_only = options.read_only;
  const uint64_t read_len = RemoteRowFormat::ReadBytes(job_.tables[table].dim);
  tk->row_prefix = RemoteRowFormat::kEmbeddingOffset;
  tk->row_bytes = static_cast<uint32_t>((read_len + 7) / 8 * 8);
  Status s = PrepareKeys(*tk, keys, options.keys_unique);
  if (!s.ok()) return Issued(*tk, s);
  const SendData& send = *tk->send;
  std::span<uint64_t> pulled(reinterpret_cast<uint64_t*>(st.send->data() + send.keys.offset),
                             send.n);
  LookUpSlots(table, send, pulled, read_len);
  CacheSplit plan = SplitByCache(send.begin, pulled, st.slot_of);
  if (!plan.new_position.empty()) {
    for (uint32_t& p : tk->pos) p = plan.new_position[p];
  }
  // What the slots were taken with: waiting for arena space below runs completion handlers,
  // which may change the caches (a failed check starts a cache over).
  std::vector<RemoteRows> taken;
  for (const RangePlan& r : plan.cached) taken.push_back(RemoteRowsOf(table, r.shard));
  s = AllocRows(*tk);
  if (!s.ok()) return Issued(*tk, s);
  PlanReads(*tk, plan.cached, taken, read_len, &plan.requests);
  // Request headers for the uncached keys and for fallbacks of the cached ones, set aside before
  // any read can complete (a completion handler posts fallbacks and cannot wait for space).
  const uint32_t cap = KeysPerRequest(*tk, false);
  uint64_t headers = 0;
  for (const RangePlan& r : plan.requests) headers += RequestsFor(r.end - r.begin, cap);
  for (const OneSidedRead& rd : tk->reads) headers += RequestsFor(rd.end - rd.begin, cap);
  s = AllocHeaders(*tk, headers);
  if (!s.ok()) return Issued(*tk, s);
  // Reads first: a request of this very pull may grow the table, and the reads (served in
  // order on tcp, at once through cross-memory attach) then still find the registration they
  // name.
  PostReads(*tk, &plan.requests);
  return Issued(*tk, PostRequests(*tk, &plan.requests));
}

std::vector<bool> Worker::PushesInFlight(uint32_t table) const {
  const State& st = *st_;
  std::vector<bool> in_flight(job_.shard_servers(), false);
  for (uint32_t srv = 0; srv < job_.shard_servers(); ++srv) {
    for (const RingSlot& r : st.servers[srv].slots) {
      if (r.replied) continue;
      TicketState* it = st.tickets.Find(r.ticket);
      if (it != nullptr && it->table == table && it->type != RequestType::kPull) {
        in_flight[srv] = true;
      }
    }
  }
  return in_flight;
}

void Worker::LookUpSlots(uint32_t table, const SendData& send, std::span<const uint64_t> pulled,
                         uint64_t read_len) {
  State& st = *st_;
  // Which servers may be read, and which of their keys: cached, with a slot inside the
  // descriptor this worker holds. A server with one of this worker's pushes of the table not yet
  // acknowledged goes through the request path, which orders the pull behind the push.
  const std::vector<bool> push_in_flight = PushesInFlight(table);
  st.slot_of.assign(send.n, kNoSlotValue);
  for (uint32_t srv = 0; srv < job_.shard_servers(); ++srv) {
    const SlotCache& c = st.slot_caches[table][srv];
    const RemoteRows& r = c.remote;
    if (r.rows == nullptr || c.disabled || (r.may_reuse && !r.status) || push_in_flight[srv]) {
      continue;
    }
    const uint64_t length = r.rows->region().length;
    for (uint32_t p = send.begin[srv]; p < send.begin[srv + 1]; ++p) {
      auto it = c.slots.find(pulled[p]);
      if (it == c.slots.end()) continue;
      if (uint64_t{it->second} * r.row_stride + read_len > length) continue;  // grew since
      st.slot_of[p] = it->second;
    }
  }
}

RemoteRows Worker::RemoteRowsOf(uint32_t table, uint32_t server) const {
  return st_->slot_caches[table][server].remote;
}

void Worker::PlanReads(TicketState& tk, const std::vector<RangePlan>& cached,
                       const std::vector<RemoteRows>& taken, uint64_t read_len,
                       std::vector<RangePlan>* requests) {
  State& st = *st_;
  // One read per server group (generation word first: without arena room for it, the group
  // takes the request path).
  tk.reads.reserve(cached.size());
  for (size_t k = 0; k < cached.size(); ++k) {
    const RangePlan& r = cached[k];
    const RemoteRows& c = taken[k];
    OneSidedRead rd;
    rd.server = r.shard;
    rd.begin = r.begin;
    rd.end = r.end;
    rd.remote = c;
    if (c.may_reuse) {
      auto at = st.rows_alloc.Allocate(8);
      if (!at) {
        requests->push_back(RangePlan{r.shard, r.begin, r.end, true});
        continue;
      }
      rd.generation_word = std::make_unique<Block>(&st.rows_alloc, *at, 8);
    }
    rd.segments = ReadSegments(st.slot_of, r.begin, r.end, tk.rows.offset, tk.row_bytes,
                               c.row_stride, read_len);
    tk.reads.push_back(std::move(rd));
  }
}

void Worker::PostReads(TicketState& tk, std::vector<RangePlan>* requests) {
  State& st = *st_;
  const Capabilities& caps = data_->capabilities();
  const uint64_t max_segments = std::min<uint64_t>(caps.max_segments, kMaxReadSegments);
  for (size_t i = 0; i < tk.reads.size(); ++i) {
    OneSidedRead& rd = tk.reads[i];
    std::vector<Op> ops;
    for (const auto& [first, last] :
         ChunkSegments(rd.segments, max_segments, caps.max_message_size)) {
      Op op;
      op.type = OpType::kSparseRead;
      op.ep = st.servers[rd.server].ep.get();
      op.context = kReadContextBit | (tk.id << kContextShift) | i;
      op.local = st.arena.get();
      op.remote = rd.remote.rows.get();
      op.segments = rd.segments.data() + first;
      op.num_segments = last - first;
      ops.push_back(op);
    }
    if (!data_->Post(ops).ok()) {  // nothing of it was posted: the group takes the request path
      requests->push_back(RangePlan{rd.server, rd.begin, rd.end, true});
      continue;
    }
    ++tk.unreplied;
    rd.ops_left = static_cast<uint32_t>(ops.size());
    stats_.one_sided_reads += ops.size();
  }
}

bool Worker::PlanSlotReply(TicketState& tk, uint32_t server, uint32_t begin, uint32_t n,
                           uint32_t seq, RequestHeader* hdr) {
  State& st = *st_;
  if (st.slot_caches.empty()) return false;
  const uint64_t bytes = SlotReplyBytes(n, kSlotsDescriptorRoom);
  const auto at = st.rows_alloc.Allocate(bytes);
  if (!at) return false;
  auto area = std::make_shared<Block>(&st.rows_alloc, *at, bytes);
  // No magic until the server writes one: a pull answered without slots leaves none.
  std::memset(st.arena->data() + *at, 0, sizeof(SlotReplyHeader));
  const SlotCache& c = st.slot_caches[tk.table][server];
  hdr->slots_offset = *at;
  hdr->slots_bytes = static_cast<uint32_t>(bytes);
  hdr->known_epoch = c.remote.rows != nullptr ? c.epoch : 0;
  st.learning.push_back(SlotLearning{tk.id, tk.table, server, seq, begin, n, tk.send, area});
  return true;
}

void Worker::LearnSlots() {
  State& st = *st_;
  for (auto e = st.learning.begin(); e != st.learning.end();) {
    // Every reply of the ticket is in (or the ticket is gone, which needs them all): the
    // SlotReply, written before its request's notification, is complete.
    TicketState* t = st.tickets.Find(e->ticket);
    if (t != nullptr && t->unreplied != 0) {
      ++e;
      continue;
    }
    SlotCache& c = st.slot_caches[e->table][e->server];
    const TableSpec& spec = job_.tables[e->table];
    SlotReplyView v;
    const std::span<const uint8_t> area(st.arena->data() + e->area->offset, e->area->bytes);
    Status s = ReadSlotReply(area, e->seq, e->n, &v);
    const SlotReplyHeader& h = v.header;
    const uint32_t prefix = RemoteRowFormat::kEmbeddingOffset;
    if (s.ok() && (h.embedding_offset != prefix || h.row_stride < prefix + spec.dim * 4)) {
      c.disabled = true;  // the server keeps another layout than this worker reads
      s = ProtocolError("slot reply names another row layout");
    }
    // On a backend where a refused read breaks the connection, only stable registrations.
    if (s.ok() && (h.flags & kSlotsStableRegion) == 0 && !RefusalsAreHarmless(*data_)) {
      s = Unsupported("rows registration may change");
    }
    if (s.ok()) Learn(*e, v, c);
    e = st.learning.erase(e);
  }
}

void Worker::Learn(const SlotLearning& e, const SlotReplyView& v, SlotCache& c) {
  State& st = *st_;
  const SlotReplyHeader& h = v.header;
  ServerLink& l = st.servers[e.server];
  RemoteRows& r = c.remote;
  if (!v.rows_descriptor.empty() && h.epoch >= c.epoch) {
    auto region = DecodeRemoteRegion(v.rows_descriptor);
    auto key =
        region.ok() ? l.ep->Import(*region) : Result<std::unique_ptr<RemoteKey>>(region.status());
    if (key.ok()) {
      r.rows = std::shared_ptr<RemoteKey>(std::move(key).value());
      c.epoch = h.epoch;
    }
  } else if (h.epoch > c.epoch) {
    r.rows.reset();  // newer than ours and no descriptor came with it: ours is stale
    c.epoch = 0;
  }
  if (!v.status_descriptor.empty() && r.status == nullptr) {
    auto region = DecodeRemoteRegion(v.status_descriptor);
    auto key =
        region.ok() ? l.ep->Import(*region) : Result<std::unique_ptr<RemoteKey>>(region.status());
    if (key.ok()) r.status = std::shared_ptr<RemoteKey>(std::move(key).value());
  }
  r.row_stride = h.row_stride;
  r.status_offset = h.status_offset;
  r.may_reuse = (h.flags & kSlotsMayReuse) != 0;
  if (h.generation > r.generation) {  // rows were erased since the cached slots were learned
    c.slots.clear();
    r.generation = h.generation;
  }
  if (h.generation != r.generation) return;
  if (c.slots.size() + e.n > kMaxCachedSlots) c.slots.clear();
  const uint64_t* keys =
      reinterpret_cast<const uint64_t*>(st.send->data() + e.send->keys.offset) + e.begin;
  for (uint32_t i = 0; i < e.n; ++i) {
    const uint32_t slot = v.slot(i);
    if (slot == kNoSlotValue) {
      c.slots.erase(keys[i]);  // refused by admission: stays on the request path
    } else {
      c.slots[keys[i]] = slot;
      ++stats_.slots_learned;
    }
  }
}

void Worker::OnReadDone(const Completion& c) {
  State& st = *st_;
  const Ticket t = (c.context & ~kReadContextBit) >> kContextShift;
  const size_t i = c.context & kReadIndexMask;
  TicketState* it = st.tickets.Find(t);
  if (it == nullptr || i >= it->reads.size()) return;  // unreachable
  TicketState& tk = *it;
  OneSidedRead& rd = tk.reads[i];
  if (!c.ok() && rd.error.ok()) rd.error = Status(c.code, c.error);
  if (rd.ops_left == 0 || --rd.ops_left > 0) return;
  FinishRead(tk, i);
}

void Worker::FinishRead(TicketState& tk, size_t i) {
  OneSidedRead& rd = tk.reads[i];
  if (tk.released) {
    --tk.unreplied;
    Retire(tk.id);
    return;
  }
  if (rd.error.ok() && rd.remote.may_reuse && !rd.generation_phase && PostGenerationRead(tk, i)) {
    return;  // this read finishes again when the generation word is here
  }
  if (!rd.error.ok() && !DescriptorGone(rd.error.code())) {  // the server or the connection failed
    if (tk.error.ok()) {
      tk.error = rd.error.Annotate("one-sided read of server " + std::to_string(rd.server));
    }
    --tk.unreplied;
    Retire(tk.id);
    return;
  }
  if (ReadRowsValid(tk, rd)) {
    stats_.keys_one_sided += rd.end - rd.begin;
    --tk.unreplied;
    Retire(tk.id);
    return;
  }
  FallBack(tk, rd);
}

bool Worker::PostGenerationRead(TicketState& tk, size_t i) {
  State& st = *st_;
  OneSidedRead& rd = tk.reads[i];
  // Posted only now that the rows are here: a generation unchanged after them means that no
  // row this read returned was erased (and its slot reused) before the read.
  rd.generation_phase = true;
  Op op;
  op.type = OpType::kRead;
  op.ep = st.servers[rd.server].ep.get();
  op.context = kReadContextBit | (tk.id << kContextShift) | i;
  op.local = st.arena.get();
  op.local_offset = rd.generation_word->offset;
  op.length = 8;
  op.remote = rd.remote.status.get();
  op.remote_offset = rd.remote.status_offset;
  rd.ops_left = 1;
  Status s = data_->Post(std::span<const Op>(&op, 1));
  if (s.ok()) return true;
  rd.ops_left = 0;
  rd.error = s;
  return false;
}

bool Worker::ReadRowsValid(TicketState& tk, const OneSidedRead& rd) {
  State& st = *st_;
  SlotCache& cache = st.slot_caches[tk.table][rd.server];
  if (!rd.error.ok()) {
    // The registration went away (the table grew): forget it; the fallback brings the new one.
    // Slots stay: growth moves no row.
    if (cache.remote.rows == rd.remote.rows) {
      cache.remote.rows.reset();
      cache.epoch = 0;
    }
    return false;
  }
  if (rd.remote.may_reuse) {
    uint64_t now;
    std::memcpy(&now, st.arena->data() + rd.generation_word->offset, 8);
    if (now != rd.remote.generation) {
      // Rows were erased since the slots were learned: any of them may have changed hands.
      if (cache.remote.generation == rd.remote.generation) {
        cache.slots.clear();
        cache.remote.generation = now;
      }
      return false;
    }
  }
  const uint64_t* keys = reinterpret_cast<const uint64_t*>(st.send->data() + tk.send->keys.offset);
  const uint8_t* rows = st.arena->data() + tk.rows.offset;
  bool valid = true;
  for (uint32_t p = rd.begin; p < rd.end; ++p) {
    uint64_t k;
    std::memcpy(&k, rows + uint64_t{p} * tk.row_bytes, 8);
    if (k != keys[p]) {  // the slot holds another key now
      cache.slots.erase(keys[p]);
      valid = false;
    }
  }
  return valid;
}

void Worker::FallBack(TicketState& tk, const OneSidedRead& rd) {
  State& st = *st_;
  // The read left bytes where the request path writes nothing for a key the table refuses
  // (admission, or evicted within its own batch at a max_rows bound): such rows read as zeros.
  std::memset(st.arena->data() + tk.rows.offset + uint64_t{rd.begin} * tk.row_bytes, 0,
              uint64_t{rd.end - rd.begin} * tk.row_bytes);
  stats_.one_sided_fallbacks += rd.end - rd.begin;
  st.fallbacks.push_back(Fallback{tk.id, rd.server, rd.begin, rd.end});
  PostFallbacks();
}

void Worker::PostFallbacks() {
  State& st = *st_;
  for (auto f = st.fallbacks.begin(); f != st.fallbacks.end();) {
    TicketState* it = st.tickets.Find(f->ticket);
    if (it == nullptr) {  // unreachable: the fallback holds a reply count
      f = st.fallbacks.erase(f);
      continue;
    }
    TicketState& tk = *it;
    Status why;
    bool waiting = false;
    const uint32_t dim = job_.tables[tk.table].dim;
    const uint32_t cap = KeysPerRequest(tk, false);
    while (!tk.released && f->next < f->end) {
      const uint32_t n = std::min(cap, f->end - f->next);
      if (tk.headers_used >= tk.headers_cap) {
        why = Internal("no request header left for a one-sided pull's fallback");
        break;
      }
      uint32_t seq = 0;
      const uint64_t bytes = RequestRingBytes(RequestType::kPull, kFlagWantSlots, n, dim);
      const auto at = TryReserveRing(f->server, bytes, tk.id, &seq);
      if (!at) {
        const ServerLink& l = st.servers[f->server];
        // Nothing outstanding and still no room: BSP pushes hold the ring until the clock.
        if (l.unreplied == 0 && !l.slots.empty() && l.slots.front().replied &&
            !l.slots.front().free) {
          why = ResourceExhausted("the staging ring on server " + std::to_string(f->server) +
                                  " is full of pushes waiting for the BSP clock: call Clock()");
        } else {
          waiting = true;  // replies free space; OnNotify calls us again
        }
        break;
      }
      const Op op = BuildRequest(tk, *tk.send, f->server, f->server, f->next, n, *at, seq,
                                 kFlagWantSlots | (tk.read_only ? kFlagReadOnly : 0));
      Status s = data_->Post(std::span<const Op>(&op, 1));
      if (!s.ok()) {  // malformed, so never posted: no reply will come
        --tk.unreplied;
        --tk.unsent;
        why = s.Annotate("post a one-sided pull's fallback");
        break;
      }
      f->next += n;
    }
    if (waiting) {
      ++f;
      continue;
    }
    if (!why.ok() && tk.error.ok()) tk.error = why;
    --tk.unreplied;  // the read's count: its keys' requests carry the ticket now
    const Ticket id = tk.id;
    f = st.fallbacks.erase(f);
    Retire(id);
  }
}

}  // namespace ferry::ps
