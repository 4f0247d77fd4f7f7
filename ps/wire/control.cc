// Control messages (FlatBuffers), the registered mailbox and the coordinator client.
#include "ps/wire/control.h"

#include <flatbuffers/flatbuffers.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "control_generated.h"
#include "ps/wire/control_journal.h"
#include "ps/wire/protocol.h"

namespace ferry::ps {

namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view RoleName(Role role) {
  return role == Role::kServer ? "server" : "worker";
}

std::string_view ControlKindName(ControlKind kind) {
  switch (kind) {
    case ControlKind::kRegister:
      return "register";
    case ControlKind::kMembership:
      return "membership";
    case ControlKind::kReject:
      return "reject";
    case ControlKind::kReady:
      return "ready";
    case ControlKind::kStart:
      return "start";
    case ControlKind::kBarrier:
      return "barrier";
    case ControlKind::kBarrierRelease:
      return "barrier-release";
    case ControlKind::kClock:
      return "clock";
    case ControlKind::kApplyClock:
      return "apply-clock";
    case ControlKind::kClockApplied:
      return "clock-applied";
    case ControlKind::kClockUpdate:
      return "clock-update";
    case ControlKind::kGather:
      return "gather";
    case ControlKind::kGatherPart:
      return "gather-part";
    case ControlKind::kFinish:
      return "finish";
    case ControlKind::kShutdown:
      return "shutdown";
    case ControlKind::kFailure:
      return "failure";
    case ControlKind::kCheckpoint:
      return "checkpoint";
    case ControlKind::kCheckpointDone:
      return "checkpoint-done";
    case ControlKind::kServerDown:
      return "server-down";
    case ControlKind::kSuspect:
      return "suspect";
    case ControlKind::kRejoin:
      return "rejoin";
    case ControlKind::kChainRepair:
      return "chain-repair";
    case ControlKind::kChainJoined:
      return "chain-joined";
    case ControlKind::kMoveShards:
      return "move-shards";
    case ControlKind::kMoveBegin:
      return "move-begin";
    case ControlKind::kMoveCopied:
      return "move-copied";
    case ControlKind::kMoveDrain:
      return "move-drain";
    case ControlKind::kMoveDrained:
      return "move-drained";
    case ControlKind::kMoveFinish:
      return "move-finish";
    case ControlKind::kServerLeave:
      return "server-leave";
    case ControlKind::kServerJoin:
      return "server-join";
    case ControlKind::kWorkerJoin:
      return "worker-join";
    case ControlKind::kWorkerLeave:
      return "worker-leave";
    case ControlKind::kWorkTake:
      return "work-take";
  }
  return "?";
}

TableStats& TableStats::operator+=(const TableStats& o) {
  live_rows += o.live_rows;
  admitted += o.admitted;
  evicted += o.evicted;
  refused += o.refused;
  bytes_resident += o.bytes_resident;
  return *this;
}

std::vector<uint8_t> EncodeWorkerSet(std::span<const uint32_t> workers) {
  std::vector<uint8_t> out;
  out.reserve(workers.size() * 4);
  for (uint32_t w : workers) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(w >> (8 * i)));
  }
  return out;
}

Result<std::vector<uint32_t>> DecodeWorkerSet(std::span<const uint8_t> bytes, uint32_t workers) {
  if (bytes.size() % 4 != 0) {
    return ProtocolError("a worker set of " + std::to_string(bytes.size()) +
                         " bytes (not a multiple of 4)");
  }
  std::vector<uint32_t> out;
  for (size_t at = 0; at < bytes.size(); at += 4) {
    const uint32_t w = uint32_t{bytes[at]} | uint32_t{bytes[at + 1]} << 8 |
                       uint32_t{bytes[at + 2]} << 16 | uint32_t{bytes[at + 3]} << 24;
    if (w >= workers) {
      return ProtocolError("worker " + std::to_string(w) + " in a worker set of a job " + "of " +
                           std::to_string(workers) + " workers");
    }
    out.push_back(w);
  }
  return out;
}

std::vector<uint8_t> EncodeMoves(std::span<const ShardMove> moves) {
  std::vector<uint32_t> words;
  words.reserve(moves.size() * 3);
  for (const ShardMove& m : moves) words.insert(words.end(), {m.shard, m.from, m.to});
  return EncodeWorkerSet(words);
}

Result<std::vector<ShardMove>> DecodeMoves(std::span<const uint8_t> bytes, uint32_t shards,
                                           uint32_t servers) {
  if (bytes.size() % 12 != 0) {
    return ProtocolError("a move list of " + std::to_string(bytes.size()) +
                         " bytes (not a multiple of 12)");
  }
  FERRY_ASSIGN_OR_RETURN(const std::vector<uint32_t> words, DecodeWorkerSet(bytes, UINT32_MAX));
  std::vector<ShardMove> out;
  for (size_t at = 0; at < words.size(); at += 3) {
    const ShardMove m{words[at], words[at + 1], words[at + 2]};
    if (m.shard >= shards || m.from >= servers || m.to >= servers) {
      return ProtocolError("move of shard " + std::to_string(m.shard) + " from server " +
                           std::to_string(m.from) + " to server " + std::to_string(m.to) +
                           " in a job of " + std::to_string(shards) + " shards and " +
                           std::to_string(servers) + " servers");
    }
    out.push_back(m);
  }
  return out;
}

std::vector<uint8_t> EncodeControl(const ControlMessage& m) {
  flatbuffers::FlatBufferBuilder b(256 + m.data.size() + m.text.size());
  std::vector<flatbuffers::Offset<wire::Member>> members;
  members.reserve(m.members.size());
  for (const MemberInfo& mi : m.members) {
    members.push_back(wire::CreateMember(b, mi.rank, static_cast<uint8_t>(mi.role), mi.index,
                                         b.CreateString(mi.data_address), b.CreateString(mi.host),
                                         mi.pid));
  }
  auto text = b.CreateString(m.text);
  auto mv = b.CreateVector(members);
  auto data = b.CreateVector(m.data);
  std::vector<wire::TableStats> stats;
  stats.reserve(m.table_stats.size());
  for (const TableStats& t : m.table_stats) {
    stats.emplace_back(t.live_rows, t.admitted, t.evicted, t.refused, t.bytes_resident);
  }
  auto sv = b.CreateVectorOfStructs(stats);
  b.Finish(wire::CreateMessage(b, static_cast<uint8_t>(m.kind), m.rank,
                               static_cast<uint8_t>(m.role), m.index, m.value, m.value2, text, mv,
                               data, sv));
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

Result<ControlMessage> DecodeControl(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8 || bytes.size() > kMaxControlMessage) {
    return ProtocolError("control message of " + std::to_string(bytes.size()) +
                         " bytes is truncated or too large");
  }
  // FlatBuffers reads scalars in place: verify and read from 8-byte-aligned storage.
  std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
  if (bytes.size() != 0)
    std::memcpy(aligned.data(), bytes.data(), bytes.size());  // data() may be null when empty
  const auto* p = reinterpret_cast<const uint8_t*>(aligned.data());
  flatbuffers::Verifier v(p, bytes.size(), flatbuffers::Verifier::Options{});
  if (!wire::VerifyMessageBuffer(v)) return ProtocolError("control message does not verify");
  const wire::Message* msg = wire::GetMessage(p);
  ControlMessage m;
  const uint8_t kind = msg->kind();
  if (kind < static_cast<uint8_t>(ControlKind::kRegister) ||
      kind > static_cast<uint8_t>(ControlKind::kWorkTake)) {
    return ProtocolError("control message kind " + std::to_string(kind) + " is unknown");
  }
  if (msg->role() > 1) return ProtocolError("control message role is unknown");
  m.kind = static_cast<ControlKind>(kind);
  m.rank = msg->rank();
  m.role = static_cast<Role>(msg->role());
  m.index = msg->index();
  m.value = msg->value();
  m.value2 = msg->value2();
  if (msg->text() != nullptr) m.text = msg->text()->str();
  if (msg->data() != nullptr) m.data.assign(msg->data()->begin(), msg->data()->end());
  if (const auto* stats = msg->table_stats(); stats != nullptr) {
    // The verifier checks the vector's 4-byte length, not its 8-byte structs: a forged message
    // could place them misaligned, and reading a field in place would then be undefined.
    if (stats->size() != 0 &&
        reinterpret_cast<uintptr_t>(stats->Data()) % alignof(wire::TableStats) != 0) {
      return ProtocolError("control message table statistics are misaligned");
    }
    for (const wire::TableStats* t : *stats) {
      m.table_stats.push_back(
          {t->live_rows(), t->admitted(), t->evicted(), t->refused(), t->bytes_resident()});
    }
  }
  if (msg->members() != nullptr) {
    for (const wire::Member* w : *msg->members()) {
      if (w->role() > 1) return ProtocolError("membership names an unknown role");
      MemberInfo mi;
      mi.rank = w->rank();
      mi.role = static_cast<Role>(w->role());
      mi.index = w->index();
      if (w->data_address() != nullptr) mi.data_address = w->data_address()->str();
      if (w->host() != nullptr) mi.host = w->host()->str();
      mi.pid = w->pid();
      m.members.push_back(std::move(mi));
    }
  }
  return m;
}

TransportOptions DataTransportOptions(const JobSpec& job, std::vector<uint8_t> hello) {
  TransportOptions o;
  o.params = job.transport_params;
  o.peer_timeout = job.peer_timeout;
  o.secret = job.secret;
  o.max_endpoints = job.server_members() + job.workers + 16;
  // The largest op: a request of max_keys_per_request keys with fp32 gradients of the widest
  // table, or a reply of that many rows.
  uint64_t widest = 1;
  for (const TableSpec& t : job.tables) widest = std::max<uint64_t>(widest, t.dim);
  o.max_message_size = std::max<uint64_t>(
      job.arena_bytes,
      RequestRingBytes(RequestType::kPushPull, 0, job.max_keys_per_request, widest));
  o.max_segments = std::max<uint64_t>(1u << 20, job.max_keys_per_request + 8);
  o.hello_info = std::move(hello);
  return o;
}

TransportOptions ControlTransportOptions(const JobSpec& job) {
  TransportOptions o;
  o.peer_timeout = job.peer_timeout;
  o.secret = job.secret;
  o.max_message_size = kMaxControlMessage;
  o.max_segments = 1;
  return o;
}

// ---- ControlMailbox --------------------------------------------------------------------------
//
// One registered buffer: kSlots send slots then `receives` receive buffers, each
// kMaxControlMessage bytes. Completion contexts: kTag << 56 | 0 << 32 | slot for sends,
// kTag << 56 | 1 << 32 | buffer for receives.

ControlMailbox::ControlMailbox(Transport* t, size_t receives) : t_(t), receives_(receives) {}

ControlMailbox::~ControlMailbox() = default;

Result<std::unique_ptr<ControlMailbox>> ControlMailbox::Create(Transport* t, size_t receives) {
  std::unique_ptr<ControlMailbox> m(new ControlMailbox(t, receives));
  m->memory_.resize((kSlots + receives) * kMaxControlMessage);
  FERRY_ASSIGN_OR_RETURN(m->region_,
                         t->RegisterMemory(m->memory_.data(), m->memory_.size(), kAccessLocal));
  for (size_t i = kSlots; i-- > 0;) m->free_.push_back(i);
  return m;
}

Status ControlMailbox::PostReceives() {
  std::vector<Op> ops(receives_);
  for (size_t i = 0; i < receives_; ++i) {
    Op& op = ops[i];
    op.type = OpType::kRecv;
    op.ep = nullptr;
    op.local = region_.get();
    op.local_offset = (kSlots + i) * kMaxControlMessage;
    op.length = kMaxControlMessage;
    op.context = (kTag << 56) | (uint64_t{1} << 32) | i;
  }
  return t_->Post(ops);
}

Status ControlMailbox::Send(Endpoint* ep, const ControlMessage& m) {
  std::vector<uint8_t> bytes = EncodeControl(m);
  if (bytes.size() > kMaxControlMessage) {
    return InvalidArgument("control message of " + std::to_string(bytes.size()) +
                           " bytes exceeds " + std::to_string(kMaxControlMessage));
  }
  if (free_.empty()) return ResourceExhausted("control send slots are all in flight");
  const size_t slot = free_.back();
  if (bytes.size() != 0)
    std::memcpy(memory_.data() + slot * kMaxControlMessage, bytes.data(),
                bytes.size());  // data() may be null when empty
  Op op;
  op.type = OpType::kSend;
  op.ep = ep;
  op.local = region_.get();
  op.local_offset = slot * kMaxControlMessage;
  op.length = bytes.size();
  op.context = (kTag << 56) | slot;
  FERRY_RETURN_IF_ERROR(t_->Post(std::span<const Op>(&op, 1)));
  free_.pop_back();
  return Status::Ok();
}

Result<std::optional<ControlMessage>> ControlMailbox::Handle(const Completion& c) {
  const bool recv = ((c.context >> 32) & 0xffffff) == 1;
  const size_t i = c.context & 0xffffffffu;
  if (!recv) {
    if (i < kSlots) free_.push_back(i);
    if (!c.ok()) return Status(c.code, c.error);
    return std::optional<ControlMessage>();
  }
  if (i >= receives_) return Internal("control receive completion for unknown buffer");
  Result<ControlMessage> m = Status(c.code, c.error.empty() ? "receive failed" : c.error);
  if (c.ok()) {
    m = DecodeControl(
        std::span<const uint8_t>(memory_.data() + (kSlots + i) * kMaxControlMessage, c.bytes));
  }
  // Repost the buffer whatever happened (a failed receive on a shared queue affects one peer).
  Op op;
  op.type = OpType::kRecv;
  op.local = region_.get();
  op.local_offset = (kSlots + i) * kMaxControlMessage;
  op.length = kMaxControlMessage;
  op.context = c.context;
  Status repost = t_->Post(std::span<const Op>(&op, 1));
  if (!m.ok()) return m.status();
  if (!repost.ok()) return repost.Annotate("repost control receive");
  return std::optional<ControlMessage>(std::move(m).value());
}

// ---- ControlClient ---------------------------------------------------------------------------

Result<std::unique_ptr<ControlClient>> ControlClient::Connect(const std::string& address,
                                                              const JobSpec& job,
                                                              std::function<void()> on_message,
                                                              Millis timeout) {
  std::unique_ptr<ControlClient> c(new ControlClient());
  c->address_ = address;
  // The standby listens from the job's start: this bounds only a standby's rank that died too.
  c->rejoin_timeout_ = std::max(Millis(2000), job.peer_timeout);
  c->on_message_ = std::move(on_message);
  c->owner_seen_ns_ = SteadyNs();
  FERRY_ASSIGN_OR_RETURN(c->transport_, CreateTransport("tcp", ControlTransportOptions(job)));
  FERRY_ASSIGN_OR_RETURN(c->mailbox_, ControlMailbox::Create(c->transport_.get(), 4));
  FERRY_RETURN_IF_ERROR(c->mailbox_->PostReceives());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last;
  while (true) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Timeout("could not reach the coordinator at " + address + " within " +
                     std::to_string(timeout.count()) + " ms: " + last.ToString());
    }
    auto ep = c->transport_->Connect(address, std::min(left, Millis(5000)));
    if (ep.ok()) {
      c->ep_ = std::move(ep).value();
      break;
    }
    last = ep.status();
    // Refused: not listening yet. Anything else (bad secret, bad address) is final.
    if (last.code() != Code::kPeerFailure && last.code() != Code::kTimeout &&
        last.code() != Code::kIoError) {
      return last.Annotate("connect to the coordinator at " + address);
    }
    std::this_thread::sleep_for(Millis(50));
  }
  c->pump_ = std::thread([p = c.get()] { p->PumpMain(); });
  return c;
}

ControlClient::ControlClient() : journal_(std::make_unique<ControlJournal>()) {}

ControlClient::~ControlClient() {
  // Messages still queued (a last failure report, typically) get a moment to leave: the peer
  // that reads them is the coordinator, which names the failure after them.
  if (pump_.joinable()) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kCloseFlush,
                 [&] { return (outbox_.empty() && in_flight_ == 0) || !failed_.ok(); });
  }
  stop_ = true;
  if (transport_) transport_->Wake();
  if (pump_.joinable()) pump_.join();
  if (ep_) ep_->Close();
  ep_.reset();
  mailbox_.reset();
  transport_.reset();
}

Status ControlClient::Send(const ControlMessage& m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    journal_->Sent(m);
    outbox_.push_back(m);
  }
  transport_->Wake();
  return Status::Ok();
}

std::optional<ControlMessage> ControlClient::TryReceive() {
  owner_seen_ns_.store(SteadyNs(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (inbox_.empty()) return std::nullopt;
  ControlMessage m = std::move(inbox_.front());
  inbox_.pop_front();
  return m;
}

Result<ControlMessage> ControlClient::Receive(Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !inbox_.empty() || !failed_.ok(); })) {
    return Timeout("no control message within " + std::to_string(timeout.count()) + " ms");
  }
  if (!inbox_.empty()) {
    ControlMessage m = std::move(inbox_.front());
    inbox_.pop_front();
    return m;
  }
  return failed_;
}

Status ControlClient::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void ControlClient::SetIdleHook(std::function<void()> hook, Millis idle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_hook_ = std::move(hook);
  idle_ = idle;
}

void ControlClient::ReportFailure(const Status& why) {
  ControlMessage f;
  f.kind = ControlKind::kFailure;
  f.value = kFailureWhileRunning;
  f.text = why.ToString();
  (void)Send(f);  // fails only when the coordinator is gone: nobody left to tell
}

void ControlClient::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return;  // the first failure is the one reported
    // Rank 0 hosts the coordinator: say so, the survivors' errors must name the dead member.
    const std::string what =
        "connection to the " +
        std::string(failed_over_ ? "standby coordinator (" : "coordinator (rank 0, ") + address_ +
        ") failed";
    failed_ = s.ok() ? PeerFailure(what) : s.Annotate(what);
  }
  cv_.notify_all();
  if (on_message_) on_message_();
}

void ControlClient::Lost(const Status& why) {
  Status s = FailOver(why);
  if (!s.ok()) Fail(s);
}

Status ControlClient::FailOver(const Status& why) {
  std::string standby;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_over_ || !failed_.ok() || !journal_->started || journal_->shutdown ||
        journal_->standby.empty()) {
      return why;
    }
    failed_over_ = true;
    standby = journal_->standby;
  }
  std::fprintf(stderr,
               "ferry %s %u: lost the coordinator at %s (%s); rejoining the standby at %s\n",
               std::string(RoleName(journal_->role)).c_str(), journal_->index, address_.c_str(),
               why.ToString().c_str(), standby.c_str());
  old_ep_ = ep_;
  old_ep_->Close();
  const auto deadline = std::chrono::steady_clock::now() + rejoin_timeout_;
  Status last;
  std::shared_ptr<Endpoint> ep;
  while (ep == nullptr && std::chrono::steady_clock::now() < deadline && !stop_) {
    auto c = transport_->Connect(standby, Millis(500));
    if (c.ok()) {
      ep = std::move(c).value();
      break;
    }
    last = c.status();
    // The owner's peers must keep hearing from it meanwhile (SetIdleHook).
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = idle_hook_;
    }
    if (hook) hook();
    std::this_thread::sleep_for(Millis(50));
  }
  if (ep == nullptr) {
    return why.Annotate("the standby coordinator at " + standby + " is unreachable too (" +
                        last.ToString() + ")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  address_ = standby;
  ep_ = std::move(ep);
  // The rejoin first, then what the standby may not have had (the replay), then what was
  // queued and is not stood for by either.
  std::erase_if(outbox_, [](const ControlMessage& m) { return ControlJournal::Covers(m.kind); });
  for (auto it = journal_->replay.rbegin(); it != journal_->replay.rend(); ++it) {
    outbox_.push_front(*it);
  }
  outbox_.push_front(journal_->Rejoin());
  return Status::Ok();
}

void ControlClient::PumpMain() {
  Completion comps[16];
  while (!stop_) {
    std::function<void()> idle_hook;
    int64_t idle_ns = 0;
    // Sends queued by the owner go out from this thread (the mailbox has one user).
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (idle_hook_) {
        idle_hook = idle_hook_;
        idle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(idle_).count();
      }
      while (!outbox_.empty() && mailbox_->free_slots() > 0 && failed_.ok()) {
        ControlMessage m = std::move(outbox_.front());
        outbox_.pop_front();
        lock.unlock();
        Status s = mailbox_->Send(ep_.get(), m);
        lock.lock();
        if (!s.ok()) {
          lock.unlock();
          Lost(s);
          lock.lock();
        }
      }
    }
    (void)transport_->Wait(Millis(100));
    const size_t n = transport_->Poll(comps);
    bool got = false;
    for (size_t i = 0; i < n; ++i) {
      if (!mailbox_->Owns(comps[i])) continue;
      auto r = mailbox_->Handle(comps[i]);
      if (!r.ok()) {
        const bool old = comps[i].ep != nullptr && comps[i].ep == old_ep_.get();
        if (!stop_ && !old) Lost(r.status());
        continue;
      }
      if (r->has_value() && failed_over_ && (*r)->kind == ControlKind::kReject) {
        // The standby did not take this member (its rank still has the coordinator, or it took
        // over without it): the owner fails as it would have without a standby.
        Fail(PeerFailure("the standby coordinator at " + address_ +
                         " refused this member: " + (*r)->text));
        continue;
      }
      if (r->has_value()) {
        std::lock_guard<std::mutex> lock(mu_);
        journal_->Heard(**r);
        inbox_.push_back(std::move(**r));
        got = true;
      }
    }
    if (!ep_->status().ok() && !stop_) Lost(ep_->status());
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = ControlMailbox::kSlots - mailbox_->free_slots();
    }
    // Woken for new messages, and for the destructor's flush (outbox and in_flight_).
    cv_.notify_all();
    if (got && on_message_) on_message_();
    // The owner is computing (or waiting on the control plane only): drive its data transport
    // so that its peers keep hearing from it (heartbeats) and it notices theirs.
    if (idle_hook && SteadyNs() - owner_seen_ns_.load(std::memory_order_relaxed) > idle_ns) {
      idle_hook();
    }
  }
}

}  // namespace ferry::ps
