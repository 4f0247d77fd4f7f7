// The worker's side of chain replication (JobSpec::replicas > 1; see worker.h and chain.h):
// routing each shard to its live head, reporting a lost server, and sending the requests a
// removed server never answered to the shard's next head.
//
// A request re-sent this way is the same request: same keys, same gradients (still in the send
// buffer: the ticket holds them), rows landing at the same arena place, and for a push the same
// push_id, so that a member of the chain that already has the push (the old head forwarded it
// before it died) applies it once. Its clock is the ticket's, so that BSP applies it with the
// pushes of the clock it was made in. The ticket's reply count stays held from the moment the
// server is removed until the copy is posted: waiting calls never see a half-answered ticket as
// done.
#include <cstring>

#include "ps/worker/worker.h"
#include "ps/worker/worker_state.h"

namespace ferry::ps {
namespace {

constexpr uint32_t kMaxMovedAnswers = 1000;

}  // namespace

uint32_t Worker::HeadOf(uint32_t shard) const {
  if (job_.replicas == 1 && job_.num_shards() == job_.shard_servers() && !job_.elastic) {
    return shard;
  }
  const int head = chain_.Head(shard);
  // No live member left: the coordinator fails the job; until it says so, the dead head stands
  // (ReserveRing refuses it).
  return head < 0 ? chain_.Member(shard, 0) : static_cast<uint32_t>(head);
}

void Worker::SuspectServer(uint32_t server) {
  State& st = *st_;
  ServerLink& l = st.servers[server];
  if (l.suspected || l.dead || l.failed.ok()) return;
  l.suspected = true;
  if (l.failed_at == std::chrono::steady_clock::time_point()) {
    l.failed_at = std::chrono::steady_clock::now();
  }
  if (control_ == nullptr) return;
  ControlMessage m;
  m.kind = ControlKind::kSuspect;
  m.index = server;
  m.text = "worker " + std::to_string(index_) + ": " + l.failed.ToString();
  (void)control_->Send(m);
}

void Worker::OnServerDown(uint32_t server) {
  State& st = *st_;
  if (!job_.forwards() || server >= st.servers.size() || chain_.dead(server)) return;
  chain_.MarkDead(server);
  ServerLink& l = st.servers[server];
  l.dead = true;
  if (l.ep) l.ep->Close();  // writes still pending there complete as cancelled
  // Every request it has not answered, in the order they were posted.
  for (const RingSlot& r : l.slots) {
    if (r.replied) continue;
    TicketState* it = st.tickets.Find(r.ticket);
    if (it == nullptr) continue;
    TicketState& tk = *it;
    for (uint32_t i = 0; i < tk.requests.size(); ++i) {
      Request& q = tk.requests[i];
      if (q.server == server && q.seq == r.seq && !q.abandoned) {
        q.abandoned = true;
        st.reroutes.push_back(Reroute{tk.id, i});
        break;
      }
    }
  }
  l.slots.clear();
  l.unreplied = 0;
}

void Worker::OnMoved(uint32_t s, const RingSlot& slot, TicketState& tk) {
  State& st = *st_;
  ReplyRecord rec;
  std::memcpy(&rec, st.arena->data() + ReplySlotOffset(s, slot.seq, job_.max_outstanding),
              sizeof rec);
  auto after = DecodeMovedRecord(rec, slot.seq);
  // A move answers a request "moved" once or twice; far more means the chains disagree (a bug):
  // the ticket fails instead of going round for ever.
  if (after.ok() && ++tk.moved > kMaxMovedAnswers) {
    after = Internal("worker " + std::to_string(index_) + ": a " +
                     std::string(RequestTypeName(tk.type)) + " was answered \"moved\" " +
                     std::to_string(kMaxMovedAnswers) + " times (server " + std::to_string(s) +
                     " last): the chains disagree");
  }
  for (uint32_t i = 0; i < tk.requests.size(); ++i) {
    Request& q = tk.requests[i];
    if (q.server != s || q.seq != slot.seq || q.abandoned) continue;
    if (!after.ok()) break;
    q.abandoned = true;
    st.reroutes.push_back(Reroute{tk.id, i, true, *after});
    ++stats_.moved_resends;
    return;
  }
  // Not a request of this ticket's in flight there, or a malformed record: the ticket fails.
  if (tk.error.ok()) {
    tk.error = after.ok() ? ProtocolError("server " + std::to_string(s) +
                                          " answered \"moved\" to a request not in flight")
                          : after.status();
  }
  --tk.unreplied;
  Retire(tk.id);
}

void Worker::PostReroutes() {
  State& st = *st_;
  while (!st.reroutes.empty()) {
    const Reroute r = st.reroutes.front();
    // A request answered "moved" waits for the move's finish (the ones behind it too: they are
    // few, and the finish follows within a chain's round trip).
    if (r.moved && chain_.version() <= r.after_version) return;
    TicketState* it = st.tickets.Find(r.ticket);
    if (it == nullptr) {
      st.reroutes.pop_front();
      continue;
    }
    TicketState& tk = *it;
    const Request q = tk.requests[r.request];  // a copy: BuildRequest grows the deque
    const uint32_t head = HeadOf(q.shard);
    if (chain_.dead(head)) {
      // Every replica of the shard is gone: the job fails (the coordinator says so); the ticket
      // carries the reason meanwhile.
      if (tk.error.ok()) {
        tk.error = PeerFailure("worker " + std::to_string(index_) + ": shard " +
                               std::to_string(q.shard) + " has no live replica");
      }
      --tk.unreplied;
      st.reroutes.pop_front();
      Retire(r.ticket);
      continue;
    }
    const uint64_t bytes = RequestRingBytes(tk.type, q.flags, q.n, job_.tables[tk.table].dim);
    auto header = st.send_alloc.Allocate(sizeof(RequestHeader));
    if (!header) return;  // send-buffer space returns as tickets complete
    uint32_t seq = 0;
    const auto at = TryReserveRing(head, bytes, tk.id, &seq);
    if (!at) {
      st.send_alloc.Free(*header, sizeof(RequestHeader));
      const ServerLink& l = st.servers[head];
      if (l.unreplied == 0 && !l.slots.empty() && !l.slots.front().free &&
          l.slots.front().replied) {
        // Only BSP pushes waiting for the clock hold the ring, and this clock cannot end before
        // the re-sent request is answered: no amount of waiting helps.
        if (tk.error.ok()) {
          tk.error = ResourceExhausted(
              "worker " + std::to_string(index_) + ": the staging ring on server " +
              std::to_string(head) + " cannot also hold the pushes of failed server's shard " +
              std::to_string(q.shard) + " for this clock: raise staging_bytes");
        }
        --tk.unreplied;
        st.reroutes.pop_front();
        Retire(r.ticket);
        continue;
      }
      return;  // ring space on the new head returns with its replies
    }
    tk.reroute_headers.push_back(
        std::make_unique<Block>(&st.send_alloc, *header, sizeof(RequestHeader)));
    const Op op = BuildRequest(tk, *tk.send, q.shard, head, q.begin, q.n, *at, seq, q.flags,
                               *header, q.push_id);
    --tk.unreplied;  // BuildRequest counted the copy; the abandoned request's count goes
    st.reroutes.pop_front();
    Status s = data_->Post(std::span<const Op>(&op, 1));
    if (!s.ok()) {
      // Nothing was posted: the copy will never complete or be answered, and its ring slot
      // returns.
      ServerLink& l = st.servers[head];
      for (RingSlot& slot : l.slots) {
        if (slot.seq == seq && !slot.replied) {
          slot.replied = slot.free = true;
          --l.unreplied;
        }
      }
      FreeRingSlots(l);
      --tk.unsent;
      --tk.unreplied;
      if (tk.error.ok())
        tk.error = s.Annotate("re-send a request to server " + std::to_string(head));
      Retire(r.ticket);
    }
  }
}

}  // namespace ferry::ps
