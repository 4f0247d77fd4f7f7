// The measurement kernels: ping-pong latency and windowed streaming bandwidth for every op,
// contiguous, sparse and packed (payloads and checks in payload.cc).
//
// Latency (ping-pong, two rotating slots so a check never races the next transfer):
//   initiator                                  responder
//   fill request i -> src[i%2]                 (reply i prefilled in src[i%2])
//   t0; post request i ------------------->    request i seen (recv / notify / tag bytes)
//                                               post reply i; check request i; prefill i+1
//   reply i seen <-------------------------
//   t1; check reply i; latency = (t1-t0)/2     (read: t1-t0, the responder is passive)
//
// Arrival: send -> receive completion; write_imm -> kNotify; write/sparse_write -> the last
// byte of the message (of every row) carries a tag 1 + seq % 251 (ib_write_lat polls the last
// byte the same way). Check::kFull then checks the whole payload, retrying until it matches or
// times out; Check::kRef stops at the arrival, as perftest and ucx_perftest do.
//
// Bandwidth (window of `depth` ops per stream):
//   send, write_imm, checked sparse_write (notify): the target checks every arrival (kFull)
//     and returns credits (a 16-byte send per slots/2 arrivals); the initiator never has more
//     than `slots` unchecked ops, so no slot is overwritten before it was checked.
//   write, sparse_write without notify, pack_write: the target checks each slot's final content
//     after the initiator's count arrives (the "final check message"; kFull only).
//   read, sparse_read: the initiator checks every completion against the target's region
//     pattern (kFull); the first and last byte of each destination are poisoned before the read.
//   pack_read: the initiator posts a receive and a 16-byte request per op; the target gathers
//     the rows and sends them back; the reply is the op's completion (checked like a read).
//   Check::kRef checks nothing and uses one source and one target buffer for every op.
#include <algorithm>
#include <cstring>
#include <span>
#include <thread>

#include "tools/bench/internal.h"
#include "tools/bench/pattern.h"
#include "tools/bench/timer.h"

namespace ferry::bench::internal {
namespace {

struct Ctx {
  Side& side;
  const Phase& p;
  const BenchConfig& c;
  uint8_t owner;
  const Geometry& g() const { return p.g; }
  bool full() const { return p.g.check == Check::kFull; }
};

Status Post(Ctx& x, Stream& s, std::span<const Op> ops) {
  Status st = x.side.router.Post(x.owner, ops);
  if (!st.ok()) return st.Annotate(StreamName(s) + ": post");
  s.outstanding += ops.size();
  return Status::Ok();
}

// ---- posting helpers ------------------------------------------------------------------------

Op RecvOp(Ctx& x, Stream& s, Kind kind, uint64_t slot, uint64_t offset, uint64_t length) {
  Op op;
  op.type = OpType::kRecv;
  op.ep = s.ep.get();
  op.context = MakeContext(x.owner, kind, s.index, static_cast<uint32_t>(slot));
  op.local = s.mr.get();
  op.local_offset = offset;
  op.length = length;
  return op;
}

Op SendOp(Ctx& x, Stream& s, Kind kind, uint64_t slot, uint64_t offset, uint64_t length) {
  Op op = RecvOp(x, s, kind, slot, offset, length);
  op.type = OpType::kSend;
  return op;
}

Status PostCreditRecv(Ctx& x, Stream& s, uint32_t b) {
  const Op op =
      RecvOp(x, s, Kind::kCreditRecv, b, s.credit_rx + b * kCreditBufSize, kCreditBufSize);
  return Post(x, s, std::span<const Op>(&op, 1));
}

// A receive for the peer's op in `slot`: a message (send) or a pack_read request.
Status PostDataRecv(Ctx& x, Stream& s, uint64_t slot) {
  const Op op =
      x.g().requests
          ? RecvOp(x, s, Kind::kRecv, slot, kRequestArea + slot * kRequestBytes, kRequestBytes)
          : RecvOp(x, s, Kind::kRecv, slot, s.target + x.g().TargetOffset(slot), x.g().size);
  return Post(x, s, std::span<const Op>(&op, 1));
}

// Target: report the checked count once half the slots have been checked since the last report.
Status MaybeSendCredit(Ctx& x, Stream& s) {
  if (!x.g().credits || s.verified - s.credit_sent < std::max<uint64_t>(1, x.g().slots / 2)) {
    return Status::Ok();
  }
  for (uint32_t b = 0; b < kCreditBuffers; ++b) {
    if (s.credit_tx_busy & (1u << b)) continue;
    uint8_t* buf = Base(s) + s.credit_tx + b * kCreditBufSize;
    const uint64_t words[2] = {kCreditMagic, s.verified};
    std::memcpy(buf, words, sizeof words);
    const Op op =
        SendOp(x, s, Kind::kCreditSend, b, s.credit_tx + b * kCreditBufSize, sizeof words);
    FERRY_RETURN_IF_ERROR(Post(x, s, std::span<const Op>(&op, 1)));
    s.credit_tx_busy |= 1u << b;
    s.credit_sent = s.verified;
    return Status::Ok();
  }
  return Status::Ok();  // all buffers in flight: retried on the next loop turn
}

Op MakeDataOp(Ctx& x, Stream& s, uint64_t seq) {
  const Geometry& g = x.g();
  const uint64_t slot = seq % g.slots;
  Op op;
  op.ep = s.ep.get();
  op.context = MakeContext(x.owner, Kind::kData, s.index, static_cast<uint32_t>(slot));
  op.local = s.mr.get();
  op.local_offset = s.src + g.SrcOffset(slot);
  op.length = g.size;
  op.remote = s.rkey.get();
  op.remote_offset = s.target + g.TargetOffset(slot);
  if (g.notify) {
    op.flags = kOpNotify;
    op.imm = static_cast<uint32_t>(seq);
  }
  switch (x.c.op) {
    case BenchOp::kSend:
    case BenchOp::kPackRead:  // (its ops are built by PostPackRead)
      op.type = OpType::kSend;
      op.remote = nullptr;
      break;
    case BenchOp::kWrite:
    case BenchOp::kWriteImm:
      op.type = OpType::kWrite;
      break;
    case BenchOp::kPackWrite:
      op.type = OpType::kWrite;
      op.remote_offset = s.target + g.PackOffset(slot);
      break;
    case BenchOp::kRead:
      op.type = OpType::kRead;
      break;
    case BenchOp::kSparseWrite:
    case BenchOp::kSparseRead:
      op.type = x.c.op == BenchOp::kSparseWrite ? OpType::kSparseWrite : OpType::kSparseRead;
      op.segments = s.segs[slot].data();
      op.num_segments = s.segs[slot].size();
      op.length = 0;
      op.local_offset = 0;
      op.remote_offset = 0;
      break;
  }
  return op;
}

// pack_read, initiator: a receive for the packed rows in the src slot, then the request.
void AddPackRead(Ctx& x, Stream& s, uint64_t seq, Op* ops) {
  const uint64_t slot = seq % x.g().slots;
  const uint64_t request = kRequestArea + slot * kRequestBytes;
  const uint64_t words[2] = {kRequestMagic, seq};
  std::memcpy(Base(s) + request, words, sizeof words);
  ops[0] = RecvOp(x, s, Kind::kData, slot, s.src + x.g().SrcOffset(slot), x.g().size);
  ops[1] = SendOp(x, s, Kind::kRequestSend, slot, request, kRequestBytes);
}

// ---- completions ----------------------------------------------------------------------------

// Target side of a bandwidth stream: one arrival (receive or notification) of op `seq`.
Status OnBandwidthArrival(Ctx& x, Stream& s, uint64_t seq, uint32_t slot) {
  const uint64_t want_slot = seq % x.g().slots;
  if (x.c.op == BenchOp::kSend || x.g().requests) {
    const uint64_t want_bytes = x.g().requests ? kRequestBytes : x.g().size;
    if (slot != want_slot) {
      return ProtocolError(StreamName(s) + ": message " + std::to_string(seq) +
                           " landed in receive slot " + std::to_string(slot) + ", expected " +
                           std::to_string(want_slot) + " (receives completed out of order)");
    }
    if (s.last_recv_bytes != want_bytes) {
      return ProtocolError(StreamName(s) + ": message " + std::to_string(seq) + " has " +
                           std::to_string(s.last_recv_bytes) + " bytes, expected " +
                           std::to_string(want_bytes));
    }
  }
  // pack_read requests are served in order by BandwidthTargetStep (ServeRequests).
  if (x.g().requests) return Status::Ok();
  if (x.full()) {
    const uint64_t seed = RequestSeed(x.c, s, x.p, seq);
    if (!IncomingMatches(x.c, x.p, s, seq, seed)) return IncomingError(x.c, x.p, s, seq, seed);
  }
  if (x.c.op == BenchOp::kSend) FERRY_RETURN_IF_ERROR(PostDataRecv(x, s, want_slot));
  ++s.verified;
  return MaybeSendCredit(x, s);
}

Status OnCompletion(Ctx& x, Completion& comp) {
  const Kind kind = ContextKind(comp.context);
  const uint32_t index = ContextStream(comp.context);
  const uint32_t slot = ContextSlot(comp.context);
  if (index >= x.side.streams.size()) {
    return Internal("completion for unknown stream " + std::to_string(index));
  }
  Stream& s = *x.side.streams[index];
  if (kind != Kind::kNotify && s.outstanding > 0) --s.outstanding;
  if (!comp.ok()) {
    return Status(comp.code, StreamName(s) + ": " + std::string(OpTypeName(comp.type)) +
                                 " failed: " + comp.error);
  }
  const bool bw = x.c.mode == Mode::kBandwidth;
  switch (kind) {
    case Kind::kData: {
      const uint64_t seq = slot < s.slot_seq.size() ? s.slot_seq[slot] : s.completed;
      if (slot < s.slot_busy.size()) s.slot_busy[slot] &= static_cast<uint8_t>(~kSlotData);
      const uint64_t idx = s.completed++;
      if (bw) {
        if (x.g().requests && comp.bytes != x.g().size) {
          return ProtocolError(StreamName(s) + ": packed reply of " + std::to_string(comp.bytes) +
                               " bytes, expected " + std::to_string(x.g().size));
        }
        // The meter started when the first measured op was posted (BandwidthInitiatorStep).
        if (idx >= x.c.warmup) {
          s.meter.Complete(NowNs(), x.g().size, UsesRows(x.c.op) ? x.c.rows : 0);
        }
        if (IsRead(x.c.op) || x.g().requests) return CheckRead(x.c, x.p, s, seq);
      }
      return Status::Ok();
    }
    case Kind::kRecv: {
      const uint64_t seq = s.arrivals++;
      s.last_recv_bytes = comp.bytes;
      return bw ? OnBandwidthArrival(x, s, seq, slot) : Status::Ok();
    }
    case Kind::kNotify: {
      const uint64_t seq = s.arrivals++;
      if (comp.imm != static_cast<uint32_t>(seq)) {
        return ProtocolError(StreamName(s) + ": notification " + std::to_string(seq) +
                             " carries immediate " + std::to_string(comp.imm));
      }
      return bw ? OnBandwidthArrival(x, s, seq, slot) : Status::Ok();
    }
    case Kind::kCreditRecv: {
      uint64_t words[2];
      std::memcpy(words, Base(s) + s.credit_rx + slot * kCreditBufSize, sizeof words);
      if (comp.bytes != sizeof words || words[0] != kCreditMagic || words[1] < s.granted ||
          words[1] > s.posted) {
        return ProtocolError(StreamName(s) + ": malformed credit message");
      }
      s.granted = words[1];
      return PostCreditRecv(x, s, slot);
    }
    case Kind::kCreditSend:
      s.credit_tx_busy &= ~(1u << slot);
      return Status::Ok();
    case Kind::kRequestSend:
      if (slot < s.slot_busy.size()) s.slot_busy[slot] &= static_cast<uint8_t>(~kSlotRequest);
      return Status::Ok();
    case Kind::kReplySend:
      if (slot < s.slot_busy.size()) s.slot_busy[slot] &= static_cast<uint8_t>(~kSlotData);
      ++s.completed;
      return Status::Ok();
    case Kind::kControl:
      break;
  }
  return Internal("unexpected completion kind on a worker");
}

size_t PollOnce(Ctx& x, Status* error) {
  return x.side.router.Poll(x.owner, [&](Completion& c) {
    Status s = OnCompletion(x, c);
    if (!s.ok() && error->ok()) *error = s;
  });
}

// Loop turns between two clock reads while waiting for a timeout of `timeout_ms` (>= 1 ms): a
// turn takes well under a microsecond, and clock reads were 7-10 % of each ping-pong process's
// samples (perf, ucx shm), more than the transport's own progress.
constexpr uint64_t kTurnsPerClockRead = 64;

// Arrival seen by a tag byte (contiguous latency writes): ib_write_lat and ucp_put_lat spin on
// the last byte without driving progress. Between two polls of the transport (which backends
// without offload need for the bytes to land at all) the waiting loops spin on it too, this
// many loads, so that a byte that landed is seen within a load rather than a poll turn later.
// ~64 L1 loads cost less than one turn of a transport that must progress (tcp: ~1 us).
constexpr int kTagSpins = 64;
bool Spins(const Ctx& x) {
  return x.g().tags && !IsSparse(x.c.op);
}

// The seed of op `seq`'s pattern, where the pass checks patterns (kFull); 0 otherwise: the
// timed pass fills and checks tags only, and hashing a seed per op was 3-5 % of its samples.
template <typename SeedFn>
uint64_t SeedIfFull(const Ctx& x, SeedFn seed, const Stream& s, uint64_t seq) {
  return x.full() ? seed(x.c, s, x.p, seq) : 0;
}

// Polls until `done()` or the timeout (no hang on a silent peer); with `spin`, re-checks
// `done()` kTagSpins times between polls. `what()` names the wait in the timeout's message: a
// callable, so the timed loop builds no string per op.
template <typename Pred, typename What>
Status WaitFor(Ctx& x, Pred done, What what, bool spin = false) {
  // The deadline starts at the first clock read (kTurnsPerClockRead turns in), not at entry:
  // most waits of a timed loop end sooner, and then read no clock at all.
  uint64_t deadline = 0;
  Status error;
  uint64_t turns = 0;
  while (!done()) {
    PollOnce(x, &error);
    if (!error.ok()) return error;
    for (int k = 0; spin && k < kTagSpins; ++k) {
      if (done()) return Status::Ok();
    }
    if (x.side.abort.load(std::memory_order_relaxed)) return Cancelled("aborted");
    if (++turns % kTurnsPerClockRead == 0) {
      const uint64_t now = NowNs();
      if (deadline == 0) {
        deadline = now + x.c.timeout_ms * 1000000ull;
      } else if (now > deadline) {
        return Timeout("no progress for " + std::to_string(x.c.timeout_ms) + " ms waiting for " +
                       what());
      }
    }
  }
  return Status::Ok();
}

// Has the peer's op `seq` arrived in my target area (latency)?
bool Arrived(Ctx& x, Stream& s, uint64_t seq) {
  if (x.c.op == BenchOp::kSend || x.g().notify) return s.arrivals > seq;
  const uint8_t* area = Base(s) + s.target;
  if (!IsSparse(x.c.op)) {
    return LoadByte(area + x.g().TargetOffset(seq % 2) + x.g().size - 1) == Tag(seq);
  }
  RowWalk walk(x.c, x.p, s, seq);
  for (uint64_t k = 0; k < x.c.rows; ++k) {
    if (LoadByte(area + walk.Next() + x.c.row_size - 1) != Tag(seq)) return false;
  }
  return true;
}

// Checks the peer's op `seq` in my target area (kFull). Data behind a tag may trail it on
// backends that place bytes out of order, so a mismatch is retried until the timeout.
Status CheckIncoming(Ctx& x, Stream& s, uint64_t seq, uint64_t seed) {
  if (!x.full()) return Status::Ok();
  if (x.c.op == BenchOp::kSend && s.last_recv_bytes != x.g().size) {
    return ProtocolError(StreamName(s) + ": message " + std::to_string(seq) + " has " +
                         std::to_string(s.last_recv_bytes) + " bytes, expected " +
                         std::to_string(x.g().size));
  }
  if (IncomingMatches(x.c, x.p, s, seq, seed)) return Status::Ok();
  if (x.g().tags) {
    Status st = WaitFor(
        x, [&] { return IncomingMatches(x.c, x.p, s, seq, seed); },
        [&] { return "the payload of op " + std::to_string(seq); });
    if (st.ok()) return st;
    if (st.code() != Code::kTimeout) return st;
  }
  return IncomingError(x.c, x.p, s, seq, seed);
}

// ---- latency --------------------------------------------------------------------------------

Status LatencyInitiator(Ctx& x, Stream& s) {
  const TickClock& clock = TickClock::Get();
  const bool read = IsRead(x.c.op);
  const uint64_t duration_ns = static_cast<uint64_t>(x.c.duration_s * 1e9);
  uint64_t measure_start = NowNs();
  for (uint64_t i = 0;; ++i) {
    if (i == x.c.warmup) measure_start = NowNs();
    if (duration_ns > 0) {
      if (i >= x.c.warmup && NowNs() - measure_start >= duration_ns) break;
    } else if (i == x.c.warmup + x.c.iters) {
      break;
    }
    if (x.side.abort.load(std::memory_order_relaxed)) return Cancelled("aborted");
    if (read) {
      PoisonRead(x.c, x.p, s, i);
    } else {
      FillOutgoing(x.c, x.p, s, i, SeedIfFull(x, RequestSeed, s, i));
      if (x.c.op == BenchOp::kSend) FERRY_RETURN_IF_ERROR(PostDataRecv(x, s, i % 2));
    }
    const Op op = MakeDataOp(x, s, i);
    const uint64_t t0 = clock.Now();
    FERRY_RETURN_IF_ERROR(Post(x, s, std::span<const Op>(&op, 1)));
    ++s.posted;
    FERRY_RETURN_IF_ERROR(WaitFor(
        x, [&] { return s.completed > i && (read || Arrived(x, s, i)); },
        [&] { return StreamName(s) + (read ? " read " : " reply ") + std::to_string(i); },
        Spins(x)));
    const uint64_t t1 = clock.Now();
    if (i >= x.c.warmup) {
      s.samples.push_back(clock.ToNs(t1 - t0) / (read ? 1e3 : 2e3));
    }
    if (read) {
      FERRY_RETURN_IF_ERROR(CheckRead(x.c, x.p, s, i));
    } else {
      FERRY_RETURN_IF_ERROR(CheckIncoming(x, s, i, SeedIfFull(x, ReplySeed, s, i)));
    }
  }
  return Status::Ok();
}

Status LatencyResponder(Ctx& x, Worker& w) {
  const bool read = IsRead(x.c.op);
  uint64_t last_progress = NowNs();
  bool progressed = false;
  uint64_t turns = 0;
  Status error;
  for (;;) {
    bool all_done = true;
    for (Stream* sp : w.streams) {
      Stream& s = *sp;
      if (s.finished) continue;
      all_done = false;
      const uint64_t expected = s.expected.load(std::memory_order_acquire);
      if (read) {
        s.finished = expected != UINT64_MAX;
        continue;
      }
      if (s.handled < expected && Arrived(x, s, s.handled)) {
        const uint64_t i = s.handled;
        // The next request's receive and reply i (prefilled), in one Post.
        Op ops[2];
        size_t n = 0;
        if (x.c.op == BenchOp::kSend) {
          ops[n++] = RecvOp(x, s, Kind::kRecv, (i + 1) % 2,
                            s.target + x.g().TargetOffset((i + 1) % 2), x.g().size);
        }
        ops[n++] = MakeDataOp(x, s, i);
        FERRY_RETURN_IF_ERROR(Post(x, s, std::span<const Op>(ops, n)));
        ++s.posted;
        FERRY_RETURN_IF_ERROR(CheckIncoming(x, s, i, SeedIfFull(x, RequestSeed, s, i)));
        s.handled = i + 1;
        // Reply i+1 reuses the slot of reply i-1: wait for it, then prefill.
        FERRY_RETURN_IF_ERROR(WaitFor(
            x, [&] { return s.completed >= i; }, [&] { return StreamName(s) + " reply completion"; }));
        FillOutgoing(x.c, x.p, s, i + 1, SeedIfFull(x, ReplySeed, s, i + 1));
        progressed = true;
      }
      if (expected != UINT64_MAX) {
        if (s.handled > expected) {
          return ProtocolError(StreamName(s) + ": answered " + std::to_string(s.handled) +
                               " requests but the peer reports " + std::to_string(expected));
        }
        if (s.handled == expected) {
          FERRY_RETURN_IF_ERROR(WaitFor(
              x, [&] { return s.completed == s.posted; },
              [&] { return StreamName(s) + " final reply completion"; }));
          s.finished = true;
        }
      }
    }
    if (all_done) return Status::Ok();
    if (PollOnce(x, &error) > 0) progressed = true;
    if (!error.ok()) return error;
    if (x.side.abort.load(std::memory_order_relaxed)) return Cancelled("aborted");
    if (Spins(x) && w.streams.size() == 1) {
      Stream& s = *w.streams.front();
      for (int k = 0; k < kTagSpins && !Arrived(x, s, s.handled); ++k) {
      }
    }
    ++turns;
    if (read) {
      // Passive target of one-sided reads: nothing to observe but endpoint health.
      if (turns % 1024 == 0) FERRY_RETURN_IF_ERROR(EndpointsHealthy(x.side));
    } else if (turns % kTurnsPerClockRead == 0) {
      // The clock is read once per kTurnsPerClockRead turns, not per request: progress seen in
      // between moves last_progress to this read.
      const uint64_t now = NowNs();
      if (progressed) {
        last_progress = now;
        progressed = false;
      } else if (now - last_progress > x.c.timeout_ms * 1000000ull) {
        return Timeout("no request from the peer for " + std::to_string(x.c.timeout_ms) + " ms");
      }
    }
  }
}

// ---- bandwidth ------------------------------------------------------------------------------

// Target: after the peer's count is known, check what a final-check op left in each slot.
Status FinalCheck(Ctx& x, Stream& s, uint64_t count) {
  if (!x.full() || IsRead(x.c.op) || x.g().credits || x.g().requests) return Status::Ok();
  const uint64_t slots = x.g().slots;
  for (uint64_t j = 0; j < std::min(slots, count); ++j) {
    const uint64_t seq = j + slots * ((count - 1 - j) / slots);  // the last op in slot j
    const uint64_t seed = RequestSeed(x.c, s, x.p, seq);
    if (IncomingMatches(x.c, x.p, s, seq, seed)) continue;
    Status st = WaitFor(
        x, [&] { return IncomingMatches(x.c, x.p, s, seq, seed); },
        [&] { return "the final content of slot " + std::to_string(j); });
    if (!st.ok() && st.code() != Code::kTimeout) return st;
    if (!st.ok()) return IncomingError(x.c, x.p, s, seq, seed);
  }
  return Status::Ok();
}

Status BandwidthInitiatorStep(Ctx& x, Stream& s, uint64_t duration_ns, bool* progressed) {
  const Geometry& g = x.g();
  if (!s.stop_posting) {
    if (duration_ns > 0) {
      s.stop_posting = s.completed >= x.c.warmup && s.meter.start_ns() != 0 &&
                       NowNs() - s.meter.start_ns() >= duration_ns;
    } else {
      s.stop_posting = s.posted >= x.c.warmup + x.c.iters;
    }
  }
  constexpr size_t kBatch = 64;
  Op batch[kBatch];
  size_t n = 0;
  bool starts_measurement = false;
  while (!s.stop_posting && n + 2 <= kBatch && s.posted - s.completed < g.depth &&
         (!g.credits || s.posted < s.granted + g.slots) && !s.slot_busy[s.posted % g.slots]) {
    const uint64_t seq = s.posted;
    const uint64_t slot = seq % g.slots;
    s.slot_seq[slot] = seq;
    if (g.requests) {
      AddPackRead(x, s, seq, batch + n);
      n += 2;
      s.slot_busy[slot] = kSlotData | kSlotRequest;
    } else {
      if (IsRead(x.c.op)) {
        PoisonRead(x.c, x.p, s, seq);
      } else {
        FillOutgoing(x.c, x.p, s, seq, SeedIfFull(x, RequestSeed, s, seq));
      }
      batch[n++] = MakeDataOp(x, s, seq);
      s.slot_busy[slot] = kSlotData;
    }
    starts_measurement = starts_measurement || (seq == x.c.warmup && x.c.warmup > 0);
    ++s.posted;
    if (duration_ns == 0 && s.posted >= x.c.warmup + x.c.iters) s.stop_posting = true;
  }
  if (n > 0) {
    // The measured interval starts when the first measured op is posted, as perftest's does
    // (from the first post to the last completion). Starting it at the last warmup completion
    // instead was wrong whenever completions arrive in bunches: with fewer ops than the window
    // (-n 5 -t 16) every op is posted at once, a transport that completes them together (tcp
    // reaps a whole batch in one Poll) gave an interval of microseconds for megabytes
    // (2.6 million MiB/s at 1 MiB). Warmup ops posted in the same batch are still on the wire:
    // the figure errs low by at most their share, never high.
    if (starts_measurement) s.meter.Start(NowNs());
    FERRY_RETURN_IF_ERROR(Post(x, s, std::span<const Op>(batch, n)));
    *progressed = true;
  }
  if (s.stop_posting && s.completed == s.posted) {
    s.finished = true;
    x.side.initiators_done.fetch_add(1, std::memory_order_acq_rel);
  }
  return Status::Ok();
}

// pack_read, target: answers the requests that arrived, in order, each once its slot's previous
// reply has left: gathers the rows and sends them.
Status ServeRequests(Ctx& x, Stream& s, bool* progressed) {
  const Geometry& g = x.g();
  while (s.handled < s.arrivals && !s.slot_busy[s.handled % g.slots]) {
    const uint64_t seq = s.handled;
    const uint64_t slot = seq % g.slots;
    uint64_t words[2];
    std::memcpy(words, Base(s) + kRequestArea + slot * kRequestBytes, sizeof words);
    if (words[0] != kRequestMagic || words[1] != seq) {
      return ProtocolError(StreamName(s) + ": malformed pack_read request " + std::to_string(seq));
    }
    GatherRows(x.c, x.p, s, seq);
    // The request buffer is free again (read above): its receive goes first, then the reply.
    const Op ops[2] = {
        RecvOp(x, s, Kind::kRecv, slot, kRequestArea + slot * kRequestBytes, kRequestBytes),
        SendOp(x, s, Kind::kReplySend, slot, s.src + g.SrcOffset(slot), g.size)};
    FERRY_RETURN_IF_ERROR(Post(x, s, std::span<const Op>(ops, 2)));
    s.slot_busy[slot] = kSlotData;
    ++s.posted;
    s.handled = seq + 1;
    *progressed = true;
  }
  return Status::Ok();
}

Status BandwidthTargetStep(Ctx& x, Stream& s, bool* progressed) {
  FERRY_RETURN_IF_ERROR(MaybeSendCredit(x, s));
  if (x.g().requests) FERRY_RETURN_IF_ERROR(ServeRequests(x, s, progressed));
  const uint64_t expected = s.expected.load(std::memory_order_acquire);
  if (expected == UINT64_MAX) return Status::Ok();
  if (x.g().requests) {
    if (s.handled > expected) {
      return ProtocolError(StreamName(s) + ": served " + std::to_string(s.handled) +
                           " requests but the peer reports " + std::to_string(expected));
    }
    if (s.handled < expected || s.completed < s.posted) return Status::Ok();
  } else if (x.c.op == BenchOp::kSend || x.g().notify) {
    if (s.verified > expected) {
      return ProtocolError(StreamName(s) + ": received " + std::to_string(s.verified) +
                           " ops but the peer reports " + std::to_string(expected));
    }
    if (s.verified < expected) return Status::Ok();
  } else {
    FERRY_RETURN_IF_ERROR(FinalCheck(x, s, expected));
  }
  s.finished = true;
  return Status::Ok();
}

Status BandwidthWorker(Ctx& x, Worker& w) {
  const uint64_t duration_ns = static_cast<uint64_t>(x.c.duration_s * 1e9);
  const uint64_t now = NowNs();
  for (Stream* s : w.streams) {
    if (s->initiator && x.c.warmup == 0) s->meter.Start(now);
  }
  // A worker that only serves one-sided ops it cannot observe (reads; writes checked at the
  // end) sees no completions for the whole phase: it watches endpoint health instead.
  bool passive = true;
  for (Stream* s : w.streams) {
    passive = passive && !s->initiator && !x.g().credits && !x.g().requests;
  }
  // A passive verbs target has nothing to do until the final count arrives: the HCA (rxe: the
  // kernel) serves the peer's writes and reads without it. It sleeps in Wait() instead of
  // spinning, like perftest's server; spinning took a whole vCPU of the two-vCPU soft-RoCE VM
  // from the initiator and rxe (docs/perf/transport-analysis.md). Other backends may need the
  // target to drive progress at full speed (tcp, ucx over tcp), so they keep polling.
  const bool passive_sleeps = passive && x.side.transport->name() == "verbs";
  uint64_t last_progress = now;
  uint64_t turns = 0;
  Status error;
  for (;;) {
    bool all_done = true;
    bool progressed = false;
    for (Stream* sp : w.streams) {
      Stream& s = *sp;
      if (s.finished) continue;
      if (s.initiator) {
        FERRY_RETURN_IF_ERROR(BandwidthInitiatorStep(x, s, duration_ns, &progressed));
      } else {
        FERRY_RETURN_IF_ERROR(BandwidthTargetStep(x, s, &progressed));
      }
      all_done = all_done && s.finished;
    }
    if (all_done) return Status::Ok();
    if (PollOnce(x, &error) > 0) progressed = true;
    if (!error.ok()) return error;
    if (x.side.abort.load(std::memory_order_relaxed)) return Cancelled("aborted");
    if (passive) {
      if (passive_sleeps) {
        FERRY_RETURN_IF_ERROR(x.side.transport->Wait(Millis(1)));
        turns += 255;  // health checks about every 4 ms of sleeping
      }
      if (++turns % 1024 == 0) FERRY_RETURN_IF_ERROR(EndpointsHealthy(x.side));
      continue;
    }
    const uint64_t t = NowNs();
    if (progressed) {
      last_progress = t;
    } else if (t - last_progress > x.c.timeout_ms * 1000000ull) {
      return Timeout("bandwidth phase made no progress for " + std::to_string(x.c.timeout_ms) +
                     " ms");
    }
  }
}

}  // namespace

void ResetPhase(Stream& s, const Phase& p) {
  s.posted = s.completed = s.arrivals = s.verified = s.granted = s.credit_sent = 0;
  s.credit_tx_busy = 0;
  s.handled = 0;
  s.stop_posting = s.finished = false;
  s.last_recv_bytes = 0;
  s.slot_busy.assign(p.g.slots, 0);
  s.slot_seq.assign(p.g.slots, 0);
  s.segs.assign(p.g.slots, {});
  s.expected.store(UINT64_MAX);
  s.meter = BandwidthMeter();
  s.samples.clear();
  s.error = Status::Ok();
}

Status PreparePhase(Side& side, Stream& s, const Phase& p) {
  Ctx x{side, p, side.config, s.owner};
  const Geometry& g = p.g;
  const BenchConfig& c = side.config;
  ResetPhase(s, p);
  const uint64_t used_target = UsesRows(c.op) ? c.region_size : g.slots * g.size;
  uint8_t* target = Base(s) + s.target;
  if (!x.full()) {
    // Unchecked passes still move defined bytes; filled once instead of per op.
    FillPattern(Base(s) + s.src, g.slots * g.size, RequestSeed(c, s, p, 0));
  }
  if (g.tags) std::memset(target, 0, used_target);
  const bool target_role = c.mode == Mode::kLatency ? !side.client : !s.initiator;
  // The region pattern where rows or reads come from: a read's or pack_read's target, and a
  // pack_write's initiator (it gathers from its own region).
  const bool source_region = (IsRead(c.op) || c.op == BenchOp::kPackRead) ? target_role
                             : c.op == BenchOp::kPackWrite                ? !target_role
                                                                          : false;
  if (source_region && x.full()) FillPattern(target, used_target, RegionSeed(c, s, p), 0);
  if (c.mode == Mode::kLatency) {
    if (target_role && !IsRead(c.op)) {
      FillOutgoing(c, p, s, 0, ReplySeed(c, s, p, 0));  // reply 0
      if (c.op == BenchOp::kSend) FERRY_RETURN_IF_ERROR(PostDataRecv(x, s, 0));
    }
    return Status::Ok();
  }
  if (s.initiator && g.credits) {
    for (uint32_t b = 0; b < kCreditBuffers; ++b) FERRY_RETURN_IF_ERROR(PostCreditRecv(x, s, b));
  }
  if (!s.initiator && (c.op == BenchOp::kSend || g.requests)) {
    for (uint64_t slot = 0; slot < g.slots; ++slot) FERRY_RETURN_IF_ERROR(PostDataRecv(x, s, slot));
  }
  return Status::Ok();
}

Status RunWorker(Side& side, Worker& w, const Phase& p) {
  Ctx x{side, p, side.config, w.owner};
  Status st;
  if (side.config.mode == Mode::kLatency) {
    if (side.client) {
      for (Stream* s : w.streams) {
        st = LatencyInitiator(x, *s);
        if (!st.ok()) break;
        side.initiators_done.fetch_add(1, std::memory_order_acq_rel);
      }
    } else {
      st = LatencyResponder(x, w);
    }
  } else {
    st = BandwidthWorker(x, w);
  }
  // After this worker's last Poll(): what the main thread queued is posted, and from then on the
  // main thread calls the transport itself.
  side.router.ClearSolePoller();
  if (!st.ok() && st.code() != Code::kCancelled) side.Fail(st);
  w.status = st;
  return st;
}

}  // namespace ferry::bench::internal
