// The worker's request path: dedupe, group by server, place keys and gradients in registered
// memory, reserve ring space, post one sparse write per request (see worker.h, protocol.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "ps/worker/worker.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {

namespace {

constexpr uint64_t kMaxRequestsPerTicket = (uint64_t{1} << kContextShift) - 1;

// Space that no amount of waiting can provide: more than the whole buffer. Checked before
// waiting for space, which would otherwise end only in a timeout that blames the wrong thing.
// `describe` names what needs the bytes; called only on failure (a small request's path
// allocates nothing).
template <typename Describe>
Status FitsAtAll(const RangeAllocator& a, uint64_t bytes, const Describe& describe,
                 const char* option) {
  if ((bytes + 63) / 64 * 64 <= a.capacity()) return Status::Ok();
  const std::string what = describe();
  return ResourceExhausted(
      what + " need " + std::to_string(bytes) + " bytes, more than the whole " +
      std::string(option) + " (" + std::to_string(a.capacity()) +
      " usable bytes): raise JobSpec::" + option + " or split the call into smaller ones");
}

}  // namespace

Result<TicketState*> Worker::NewTicket(uint32_t table, RequestType type, bool fp16_rows) {
  FERRY_RETURN_IF_ERROR(Usable());
  if (table >= job_.tables.size()) {
    return NotFound("table " + std::to_string(table) + " does not exist");
  }
  if (fp16_rows && !job_.tables[table].fp16_pull) {
    return InvalidArgument("table '" + job_.tables[table].name +
                           "' keeps no fp16 mirror (TableSpec::fp16_pull)");
  }
  TicketState* tk = st_->tickets.Create();  // a recycled state: no allocation once warm
  tk->table = table;
  tk->type = type;
  tk->fp16_rows = fp16_rows;
  tk->clock = clock_;
  return tk;
}

// Dedupe (unless `unique`), then counting-sort the unique keys by server straight into the
// registered send buffer: the position of a key there is also the position of its row in the
// arena and of its gradient row.
Status Worker::PrepareKeys(TicketState& tk, std::span<const uint64_t> keys, bool unique) {
  State& st = *st_;
  const size_t n = keys.size();
  if (n > (size_t{1} << 31)) return InvalidArgument("more than 2^31 keys in one call");
  std::span<const uint64_t> uniq = keys;
  if (!unique) {
    st.dedupe.Reset(n);
    st.unique_keys.clear();
    st.unique_of.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bool inserted;
      const uint32_t u =
          st.dedupe.FindOrInsert(keys[i], static_cast<uint32_t>(st.unique_keys.size()), &inserted);
      if (inserted) st.unique_keys.push_back(keys[i]);
      st.unique_of[i] = u;
    }
    uniq = st.unique_keys;
  }
  const uint32_t m = static_cast<uint32_t>(uniq.size());
  // The ticket's own SendData when it kept one (TicketState::Recycle): no allocation.
  std::shared_ptr<SendData> send = std::move(tk.send);
  if (send == nullptr) send = std::make_shared<SendData>();
  send->n = m;
  const uint32_t servers = job_.num_shards();  // keys group by shard
  send->begin.assign(servers + 1, 0);
  FERRY_RETURN_IF_ERROR(FitsAtAll(
      st.send_alloc, uint64_t{m} * 8, [m] { return std::to_string(m) + " keys"; }, "send_bytes"));
  auto at = st.send_alloc.Allocate(uint64_t{m} * 8);
  while (!at) {  // send space returns when older tickets' sends complete and they are released
    stats_.waits_for_space++;
    FERRY_RETURN_IF_ERROR(
        WaitFor([&] { return (at = st.send_alloc.Allocate(uint64_t{m} * 8)).has_value(); },
                job_.peer_timeout * 4, "send-buffer space (release tickets?)"));
  }
  send->keys = Block(&st.send_alloc, *at, uint64_t{m} * 8);
  uint64_t* out = reinterpret_cast<uint64_t*>(st.send->data() + *at);
  std::vector<uint32_t>& pos_of_unique = st.fill;
  if (servers == 1) {
    if (uint64_t{m} * 8 != 0)
      std::memcpy(out, uniq.data(), uint64_t{m} * 8);  // data() may be null when empty
    send->begin[1] = m;
    tk.pos.resize(n);
    if (unique) {
      for (uint32_t i = 0; i < n; ++i) tk.pos[i] = i;
    } else {
      if (n * 4 != 0)
        std::memcpy(tk.pos.data(), st.unique_of.data(), n * 4);  // data() may be null when empty
    }
  } else {
    st.server_of.resize(m);
    for (uint32_t u = 0; u < m; ++u) {
      const uint32_t s = partition_.ServerOf(uniq[u]);
      st.server_of[u] = s;
      ++send->begin[s + 1];
    }
    for (uint32_t s = 0; s < servers; ++s) send->begin[s + 1] += send->begin[s];
    std::vector<uint32_t>& cursor = st.cursor;
    cursor.assign(send->begin.begin(), send->begin.end() - 1);
    pos_of_unique.resize(m);
    for (uint32_t u = 0; u < m; ++u) {
      const uint32_t p = cursor[st.server_of[u]]++;
      pos_of_unique[u] = p;
      out[p] = uniq[u];
    }
    tk.pos.resize(n);
    if (unique) {
      if (n * 4 != 0)
        std::memcpy(tk.pos.data(), pos_of_unique.data(), n * 4);  // data() may be null when empty
    } else {
      for (size_t i = 0; i < n; ++i) tk.pos[i] = pos_of_unique[st.unique_of[i]];
    }
  }
  tk.send = std::move(send);
  return Status::Ok();
}

Status Worker::AllocRows(TicketState& tk) {
  State& st = *st_;
  const TableSpec& t = job_.tables[tk.table];
  if (tk.row_bytes == 0) tk.row_bytes = RowWireBytes(t.dim, tk.fp16_rows);  // one-sided: set
  const uint64_t bytes = uint64_t{tk.send->n} * tk.row_bytes;
  const uint32_t keys = tk.send->n;
  FERRY_RETURN_IF_ERROR(FitsAtAll(
      st.rows_alloc, bytes, [keys] { return "the rows of " + std::to_string(keys) + " keys"; },
      "arena_bytes"));
  auto at = st.rows_alloc.Allocate(bytes);
  if (!at) {
    stats_.waits_for_space++;
    FERRY_RETURN_IF_ERROR(WaitFor([&] { return (at = st.rows_alloc.Allocate(bytes)).has_value(); },
                                  job_.peer_timeout * 4,
                                  "arena space for " + std::to_string(bytes) +
                                      " bytes of rows (release tickets, or raise arena_bytes)"));
  }
  tk.rows = Block(&st.rows_alloc, *at, bytes);
  // Keys a table may refuse (admission, a row bound) or not hold (a read-only pull) read as
  // zeros: the server skips them.
  if (TableTracksSightings(t) || tk.read_only) {
    std::memset(st.arena->data() + *at, 0, bytes);
  }
  return Status::Ok();
}

Status Worker::AllocGrads(SendData& send, uint32_t dim) {
  State& st = *st_;
  const uint64_t bytes = uint64_t{send.n} * dim * 4;
  // The keys are held meanwhile: both must fit together.
  const uint32_t keys = send.n;
  FERRY_RETURN_IF_ERROR(FitsAtAll(
      st.send_alloc, bytes + uint64_t{keys} * 8,
      [keys] { return "the keys and gradients of " + std::to_string(keys) + " keys"; },
      "send_bytes"));
  auto at = st.send_alloc.Allocate(bytes);
  if (!at) {
    stats_.waits_for_space++;
    FERRY_RETURN_IF_ERROR(WaitFor([&] { return (at = st.send_alloc.Allocate(bytes)).has_value(); },
                                  job_.peer_timeout * 4, "send-buffer space for gradients"));
  }
  send.grads = Block(&st.send_alloc, *at, bytes);
  std::memset(st.send->data() + *at, 0, bytes);
  return Status::Ok();
}

Status Worker::AggregateGrads(TicketState& tk, std::span<const float> grads) {
  const uint32_t dim = job_.tables[tk.table].dim;
  if (grads.size() != tk.pos.size() * dim) {
    return InvalidArgument("push of " + std::to_string(tk.pos.size()) + " keys of width " +
                           std::to_string(dim) + " needs " + std::to_string(tk.pos.size() * dim) +
                           " gradient floats, got " + std::to_string(grads.size()));
  }
  FERRY_RETURN_IF_ERROR(AllocGrads(*tk.send, dim));
  float* g = reinterpret_cast<float*>(st_->send->data() + tk.send->grads.offset);
  for (size_t i = 0; i < tk.pos.size(); ++i) {
    float* dst = g + size_t{tk.pos[i]} * dim;
    const float* src = grads.data() + i * dim;
    for (uint32_t d = 0; d < dim; ++d) dst[d] += src[d];
  }
  return Status::Ok();
}

Result<std::shared_ptr<SendData>> Worker::PushData(const std::shared_ptr<SendData>& src,
                                                   uint32_t dim) {
  const float thr = job_.push_filter;
  if (thr <= 0.0f && !job_.fp16_push) return src;
  State& st = *st_;
  const float* g = reinterpret_cast<const float*>(st.send->data() + src->grads.offset);
  const uint64_t* k = reinterpret_cast<const uint64_t*>(st.send->data() + src->keys.offset);
  // Which rows survive the significance filter (largest |g| >= threshold).
  std::vector<uint32_t> keep;
  keep.reserve(src->n);
  auto out = std::make_shared<SendData>();
  out->begin.assign(job_.num_shards() + 1, 0);
  for (uint32_t s = 0; s < job_.num_shards(); ++s) {
    for (uint32_t p = src->begin[s]; p < src->begin[s + 1]; ++p) {
      bool significant = thr <= 0.0f;
      for (uint32_t d = 0; d < dim && !significant; ++d) {
        significant = std::fabs(g[size_t{p} * dim + d]) >= thr;
      }
      if (significant) {
        keep.push_back(p);
      } else {
        ++stats_.filtered;
      }
    }
    out->begin[s + 1] = static_cast<uint32_t>(keep.size());
  }
  out->n = static_cast<uint32_t>(keep.size());
  out->fp16 = job_.fp16_push;
  if (out->n == 0) return out;
  const uint64_t elem = out->fp16 ? 2 : 4;
  const uint64_t kbytes = uint64_t{out->n} * 8, gbytes = uint64_t{out->n} * dim * elem;
  // The copy is made while `src` is held: both must fit together. Space held by earlier
  // tickets' sends comes back as they complete, so wait for it as the other allocations do.
  FERRY_RETURN_IF_ERROR(FitsAtAll(
      st.send_alloc, kbytes + gbytes + src->keys.bytes + src->grads.bytes,
      [&] {
        return "a " + std::string(out->fp16 ? "fp16" : "filtered") + " copy of " +
               std::to_string(out->n) + " gradient rows (and the rows it is made from)";
      },
      "send_bytes"));
  std::optional<uint64_t> ka, ga;
  auto take = [&] {
    if (!ka) ka = st.send_alloc.Allocate(kbytes);
    if (ka && !ga) ga = st.send_alloc.Allocate(gbytes);
    return ka.has_value() && ga.has_value();
  };
  if (!take()) {
    stats_.waits_for_space++;
    Status s = WaitFor(take, job_.peer_timeout * 4, "send-buffer space for a push's copy");
    if (!s.ok()) {
      if (ka) st.send_alloc.Free(*ka, kbytes);
      return s;
    }
  }
  out->keys = Block(&st.send_alloc, *ka, kbytes);
  out->grads = Block(&st.send_alloc, *ga, gbytes);
  uint64_t* ko = reinterpret_cast<uint64_t*>(st.send->data() + *ka);
  uint8_t* go = st.send->data() + *ga;
  for (uint32_t j = 0; j < out->n; ++j) {
    const uint32_t p = keep[j];
    ko[j] = k[p];
    const float* row = g + size_t{p} * dim;
    if (out->fp16) {
      uint16_t* h = reinterpret_cast<uint16_t*>(go) + size_t{j} * dim;
      for (uint32_t d = 0; d < dim; ++d) h[d] = FloatToHalf(row[d]);
    } else {
      std::memcpy(go + size_t{j} * dim * 4, row, dim * 4);
    }
  }
  return out;
}

std::optional<uint64_t> RingSpace(const ServerLink& l, uint64_t bytes, uint32_t max_outstanding) {
  // First free range after the newest slot, or at the start when the ring wraps.
  if (l.unreplied >= max_outstanding) return std::nullopt;
  if (l.slots.empty()) return uint64_t{0};
  const uint64_t first = l.slots.front().offset;
  const uint64_t end = l.slots.back().offset + l.slots.back().bytes;
  if (end > first) {
    if (l.ring_bytes - end >= bytes) return end;
    if (first >= bytes) return uint64_t{0};
    return std::nullopt;
  }
  if (first - end >= bytes) return end;
  return std::nullopt;
}

std::optional<uint64_t> Worker::TryReserveRing(uint32_t server, uint64_t bytes, Ticket ticket,
                                               uint32_t* seq) {
  ServerLink& l = st_->servers[server];
  if (l.dead) return std::nullopt;
  const auto at = RingSpace(l, bytes, job_.max_outstanding);
  if (!at) return std::nullopt;
  RingSlot slot;
  slot.offset = *at;
  slot.bytes = bytes;
  slot.seq = l.next_seq++;
  slot.ticket = ticket;
  l.slots.push(slot);
  ++l.unreplied;
  *seq = slot.seq;
  return at;
}

Result<uint64_t> Worker::ReserveRing(uint32_t shard, uint64_t bytes, Ticket ticket,
                                     uint32_t* server, uint32_t* seq, std::vector<Op>* pending) {
  while (true) {
    const uint32_t s = HeadOf(shard);
    if (chain_.dead(s)) {
      return PeerFailure("worker " + std::to_string(index_) + ": shard " + std::to_string(shard) +
                         " has no live replica");
    }
    ServerLink& l = st_->servers[s];
    if (bytes > l.ring_bytes) {
      return InvalidArgument("a request of " + std::to_string(bytes) +
                             " bytes does not fit the staging ring (" +
                             std::to_string(l.ring_bytes) +
                             " bytes): lower max_keys_per_request or raise staging_bytes");
    }
    *server = s;
    if (auto at = TryReserveRing(s, bytes, ticket, seq)) return *at;
    stats_.waits_for_space++;
    if (!pending->empty()) {
      FERRY_RETURN_IF_ERROR(data_->Post(*pending));
      pending->clear();
    }
    // Space returns with replies. Under BSP, staged pushes hold their space until the clock
    // is applied: if nothing is outstanding and still nothing fits, waiting cannot help. A head
    // removed meanwhile (replicas) hands the shard to the next one: try again there.
    std::optional<uint64_t> at;
    bool moved = false;
    FERRY_RETURN_IF_ERROR(WaitFor(
        [&] {
          if (l.dead) {
            moved = true;
            return true;
          }
          at = RingSpace(l, bytes, job_.max_outstanding);
          return at.has_value() || (l.unreplied == 0 && !l.slots.empty() && !l.slots.front().free &&
                                    l.slots.front().replied);
        },
        job_.peer_timeout * 4, "staging-ring space on server " + std::to_string(s)));
    if (moved) continue;
    if (!at) {
      return ResourceExhausted(
          "the staging ring on server " + std::to_string(s) + " (" + std::to_string(l.ring_bytes) +
          " bytes) is full of pushes waiting for the BSP clock: call Clock() (or raise "
          "staging_bytes)");
    }
    // Nothing else reserved meanwhile: this thread is the only one posting.
    at = TryReserveRing(s, bytes, ticket, seq);
    if (!at) return Internal("staging-ring space vanished while reserving it");
    return *at;
  }
}

uint32_t Worker::KeysPerRequest(const TicketState& tk, bool grads) const {
  // At most max_keys_per_request keys per request, and few enough that a request takes at most
  // half of the staging ring (wide rows: otherwise it could never fit, and with half two
  // requests are always in flight).
  const uint32_t dim = job_.tables[tk.table].dim;
  const uint64_t grad_elem = job_.fp16_push ? 2 : 4;
  const uint64_t per_key = 8 + (grads ? uint64_t{dim} * grad_elem : 0);
  const uint64_t half_ring = job_.staging_bytes / 2 / kRequestAlign * kRequestAlign;
  const uint64_t fit =
      half_ring > sizeof(RequestHeader) ? (half_ring - sizeof(RequestHeader)) / per_key : 0;
  return static_cast<uint32_t>(
      std::max<uint64_t>(1, std::min<uint64_t>(job_.max_keys_per_request, fit)));
}

Op Worker::BuildRequest(TicketState& tk, const SendData& data, uint32_t shard, uint32_t s,
                        uint32_t b, uint32_t n, uint64_t at, uint32_t seq, uint8_t flags,
                        uint64_t header_at, uint64_t push_id) {
  State& st = *st_;
  const uint32_t dim = job_.tables[tk.table].dim;
  const bool pushes = tk.type != RequestType::kPull;
  const uint64_t grad_elem = (flags & kFlagFp16Grads) ? 2 : 4;
  if (header_at == UINT64_MAX) {
    header_at = tk.headers.offset + tk.headers_used++ * sizeof(RequestHeader);
  }
  RequestHeader* hdr = reinterpret_cast<RequestHeader*>(st.send->data() + header_at);
  *hdr = RequestHeader{};
  hdr->type = static_cast<uint8_t>(tk.type);
  hdr->table = static_cast<uint16_t>(tk.table);
  hdr->seq = seq;
  hdr->num_keys = n;
  hdr->dim = dim;
  // A re-sent request keeps its ticket's clock: BSP applies it with the pushes of that clock.
  hdr->clock = static_cast<uint32_t>(tk.clock);
  hdr->shard = static_cast<uint16_t>(shard);
  if (pushes) {
    if (push_id == 0) push_id = ++st.push_ids[shard];
    hdr->push_id = push_id;
  }
  if (tk.rows) {
    // One-sided pulls keep a prefix (key word, metadata) before each embedding: the request
    // path's rows land after it, where PulledRows points.
    hdr->dest_offset = tk.rows.offset + uint64_t{b} * tk.row_bytes + tk.row_prefix;
    hdr->dest_stride = tk.row_bytes;
  }
  if ((flags & kFlagWantSlots) != 0 && !PlanSlotReply(tk, s, b, n, seq, hdr)) {
    flags &= static_cast<uint8_t>(~kFlagWantSlots);  // no arena room now: a plain pull
  }
  hdr->flags = flags;
  hdr->payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(tk.type, flags, n, dim));
  tk.requests.emplace_back();
  Request& r = tk.requests.back();
  r.server = s;
  r.seq = seq;
  r.shard = shard;
  r.begin = b;
  r.n = n;
  r.flags = flags;
  r.push_id = push_id;
  r.segs[0] = Segment{header_at, at, sizeof(RequestHeader)};
  r.segs[1] =
      Segment{data.keys.offset + uint64_t{b} * 8, at + sizeof(RequestHeader), uint64_t{n} * 8};
  r.nsegs = 2;
  if (pushes) {
    r.segs[2] =
        Segment{data.grads.offset + uint64_t{b} * dim * grad_elem,
                at + sizeof(RequestHeader) + uint64_t{n} * 8, uint64_t{n} * dim * grad_elem};
    r.nsegs = 3;
  }
  Op op;
  op.type = OpType::kSparseWrite;
  op.flags = kOpNotify;
  op.imm = static_cast<uint32_t>(at / kRequestAlign);
  op.ep = st.servers[s].ep.get();
  op.context = (tk.id << kContextShift) | (tk.requests.size() - 1);
  op.local = st.send.get();
  op.remote = st.servers[s].ring.get();
  op.segments = r.segs;
  op.num_segments = r.nsegs;
  ++tk.unreplied;
  ++tk.unsent;
  ++stats_.requests;
  return op;
}

Status Worker::AllocHeaders(TicketState& tk, uint64_t headers) {
  State& st = *st_;
  if (headers == 0) return Status::Ok();
  auto hat = st.send_alloc.Allocate(headers * sizeof(RequestHeader));
  if (!hat) {
    FERRY_RETURN_IF_ERROR(WaitFor(
        [&] { return (hat = st.send_alloc.Allocate(headers * sizeof(RequestHeader))).has_value(); },
        job_.peer_timeout * 4, "send-buffer space for request headers"));
  }
  tk.headers = Block(&st.send_alloc, *hat, headers * sizeof(RequestHeader));
  tk.headers_used = 0;
  tk.headers_cap = headers;
  return Status::Ok();
}

Status Worker::PostRequests(TicketState& tk, const std::vector<RangePlan>* ranges,
                            uint64_t spare_headers) {
  const TableSpec& table = job_.tables[tk.table];
  const uint32_t dim = table.dim;
  std::shared_ptr<SendData> data = tk.send;
  const bool pushes = tk.type != RequestType::kPull;
  if (pushes) {
    FERRY_ASSIGN_OR_RETURN(data, PushData(tk.send, dim));
    // Rows of a push-pull land by the pull's positions: the filter may not drop any.
    if (tk.type == RequestType::kPushPull && data->n != tk.send->n) {
      return InvalidArgument("the significance filter cannot be combined with push-pull");
    }
    // The ticket holds what its requests read (a re-sent request reads it again).
    tk.send = data;
  }
  uint8_t flags = 0;
  if (pushes && data->fp16) flags |= kFlagFp16Grads;
  if (tk.fp16_rows) flags |= kFlagFp16Rows;
  if (tk.read_only) flags |= kFlagReadOnly;
  // Scratch lent for this call (a nested call, from Progress inside a wait, takes its own).
  ScratchStack<RangePlan>::Lease all(st_->range_scratch);
  if (ranges == nullptr) {
    for (uint32_t s = 0; s < job_.num_shards(); ++s) {
      all->push_back(RangePlan{s, data->begin[s], data->begin[s + 1], false});
    }
    ranges = &*all;
  }
  ScratchStack<RequestChunk>::Lease plan(st_->plan_scratch);
  PlanRequests(*ranges, KeysPerRequest(tk, pushes), &*plan);
  const uint64_t nreq = plan->size();
  if (nreq + spare_headers > kMaxRequestsPerTicket) {
    return InvalidArgument("too many requests in one call");
  }
  if (!tk.headers) {
    FERRY_RETURN_IF_ERROR(AllocHeaders(tk, nreq + spare_headers));
  } else if (tk.headers_cap - tk.headers_used < nreq) {
    return Internal("request headers set aside too early are too few");
  }
  if (nreq == 0) return Status::Ok();  // every gradient filtered out: nothing to send
  ScratchStack<Op>::Lease lease(st_->op_scratch);
  std::vector<Op>& ops = *lease;
  for (const RequestChunk& c : *plan) {
    const uint8_t f = flags | (c.want_slots ? kFlagWantSlots : 0);
    uint32_t seq = 0, server = 0;
    auto at =
        ReserveRing(c.shard, RequestRingBytes(tk.type, f, c.n, dim), tk.id, &server, &seq, &ops);
    if (!at.ok()) {
      if (!ops.empty()) FERRY_RETURN_IF_ERROR(data_->Post(ops));
      return at.status();
    }
    ops.push_back(BuildRequest(tk, *data, c.shard, server, c.begin, c.n, *at, seq, f));
    // Post in batches so that a long request list starts moving before it is complete.
    if (ops.size() == 16) {
      FERRY_RETURN_IF_ERROR(data_->Post(ops));
      ops.clear();
    }
  }
  if (!ops.empty()) FERRY_RETURN_IF_ERROR(data_->Post(ops));
  return Status::Ok();
}

Result<Ticket> Worker::Issued(TicketState& tk, const Status& s) {
  if (!s.ok()) {
    // Whatever was posted completes into the ticket; the caller never sees it.
    tk.released = true;
    Retire(tk.id);
    return s;
  }
  const uint64_t n = tk.send->n;
  if (tk.type != RequestType::kPull) {
    ++stats_.pushes;
    ++pushes_since_clock_;
    stats_.keys_pushed += n;
  }
  if (tk.type != RequestType::kPush) {
    ++stats_.pulls;
    stats_.keys_pulled += n;
  }
  return tk.id;
}

Result<Ticket> Worker::Pull(uint32_t table, std::span<const uint64_t> keys,
                            const PullOptions& options) {
  if (options.one_sided && !options.fp16) return PullOneSided(table, keys, options);
  FERRY_ASSIGN_OR_RETURN(TicketState * tk, NewTicket(table, RequestType::kPull, options.fp16));
  tk->read_only = options.read_only;
  Status s = PrepareKeys(*tk, keys, options.keys_unique);
  if (s.ok()) s = AllocRows(*tk);
  if (s.ok()) s = PostRequests(*tk);
  return Issued(*tk, s);
}

Result<Ticket> Worker::Push(uint32_t table, std::span<const uint64_t> keys,
                            std::span<const float> grads, const PushOptions& options) {
  FERRY_ASSIGN_OR_RETURN(TicketState * tk, NewTicket(table, RequestType::kPush, false));
  Status s = PrepareKeys(*tk, keys, options.keys_unique);
  if (s.ok()) s = AggregateGrads(*tk, grads);
  if (s.ok()) s = PostRequests(*tk);
  return Issued(*tk, s);
}

Result<Ticket> Worker::PushPull(uint32_t table, std::span<const uint64_t> keys,
                                std::span<const float> grads, const PullOptions& options) {
  if (options.read_only) {
    return InvalidArgument("a push-pull creates the rows it pushes to: read_only is for pulls");
  }
  FERRY_ASSIGN_OR_RETURN(TicketState * tk, NewTicket(table, RequestType::kPushPull, options.fp16));
  Status s = PrepareKeys(*tk, keys, options.keys_unique);
  if (s.ok()) s = AggregateGrads(*tk, grads);
  if (s.ok()) s = AllocRows(*tk);
  if (s.ok()) s = PostRequests(*tk);
  return Issued(*tk, s);
}

Result<GradRows> Worker::Gradients(Ticket pulled) {
  TicketState* it = st_->tickets.Find(pulled);
  if (it == nullptr || it->released) {
    return InvalidArgument("ticket " + std::to_string(pulled) + " is unknown or released");
  }
  TicketState& tk = *it;
  if (tk.type != RequestType::kPull) return InvalidArgument("Gradients needs a pull ticket");
  if (tk.grads_pushed) {
    return InvalidArgument("the gradients of ticket " + std::to_string(pulled) +
                           " were pushed: they are the push's source until it completes");
  }
  const uint32_t dim = job_.tables[tk.table].dim;
  if (!tk.send->grads) {
    FERRY_RETURN_IF_ERROR(AllocGrads(*tk.send, dim));
  } else if (!tk.grads_ready) {
    std::memset(st_->send->data() + tk.send->grads.offset, 0, tk.send->grads.bytes);
  }
  tk.grads_ready = true;
  GradRows g;
  g.base_ = reinterpret_cast<float*>(st_->send->data() + tk.send->grads.offset);
  g.pos_ = tk.pos.data();
  g.n_ = tk.pos.size();
  g.dim_ = dim;
  return g;
}

Result<Ticket> Worker::PushGradients(Ticket pulled) {
  TicketState* it = st_->tickets.Find(pulled);
  if (it == nullptr || it->released) {
    return InvalidArgument("ticket " + std::to_string(pulled) + " is unknown or released");
  }
  TicketState& src = *it;
  if (!src.grads_ready) return InvalidArgument("call Gradients() before PushGradients()");
  if (src.grads_pushed) {
    return InvalidArgument("the gradients of ticket " + std::to_string(pulled) +
                           " were pushed already");
  }
  src.grads_pushed = true;
  FERRY_ASSIGN_OR_RETURN(TicketState * tk, NewTicket(src.table, RequestType::kPush, false));
  // The push reads the pull's keys and the gradient rows in place; sharing SendData keeps them
  // alive until the push's writes complete, whatever happens to the pull ticket.
  tk->send = src.send;
  return Issued(*tk, PostRequests(*tk));
}

}  // namespace ferry::ps
