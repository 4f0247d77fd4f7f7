// Session setup, the control protocol and the phase loop of both sides (see runner.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "tools/bench/internal.h"
#include "tools/bench/runner.h"

namespace ferry::bench {
namespace internal {

void Side::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (first_error_.ok()) first_error_ = s;
  }
  abort.store(true, std::memory_order_release);
}

Status Side::FirstError() {
  std::lock_guard<std::mutex> lock(error_mu_);
  return first_error_;
}

Status EndpointsHealthy(Side& side) {
  if (side.control) {
    Status s = side.control->status();
    if (!s.ok()) return s.Annotate("control endpoint");
  }
  for (auto& st : side.streams) {
    if (!st->ep) continue;
    Status s = st->ep->status();
    if (!s.ok()) return s.Annotate("stream " + std::to_string(st->index));
  }
  return Status::Ok();
}

void Router::Init(Transport* transport, size_t owners) {
  transport_ = transport;
  boxes_.clear();
  for (size_t i = 0; i < owners; ++i) boxes_.push_back(std::make_unique<Mailbox>());
}

Status Router::Post(uint8_t owner, std::span<const Op> ops) {
  // Only the main thread sets the mode (before the worker starts), so an owner that reads "no
  // sole poller" cannot race with its start; only its end (ClearSolePoller) needs post_mu_.
  const int sole = sole_.load(std::memory_order_acquire);
  if (sole == kNoSole || sole == owner) return transport_->Post(ops);
  std::lock_guard<std::mutex> lock(post_mu_);
  if (sole_.load(std::memory_order_acquire) == kNoSole) return transport_->Post(ops);
  for (const Op& op : ops) outbox_.emplace_back(owner, op);
  outbox_nonempty_.store(true, std::memory_order_release);
  return Status::Ok();
}

void Router::FlushOutboxLocked() {
  for (const auto& [owner, op] : outbox_) {
    Status st = transport_->Post(std::span<const Op>(&op, 1));
    if (st.ok()) continue;
    // Nobody waits for Post's result any more: the owner learns it as a failed completion.
    Completion c;
    c.context = op.context;
    c.type = op.type;
    c.ep = op.ep;
    c.code = st.code();
    c.error = "post: " + st.message();
    Mailbox& box = *boxes_[owner < boxes_.size() ? owner : kMainOwner];
    std::lock_guard<std::mutex> box_lock(box.mu);
    box.items.push_back(std::move(c));
    box.nonempty.store(true, std::memory_order_release);
  }
  outbox_.clear();
  outbox_nonempty_.store(false, std::memory_order_release);
}

void Router::ClearSolePoller() {
  std::lock_guard<std::mutex> lock(post_mu_);
  if (sole_.load(std::memory_order_acquire) == kNoSole) return;
  FlushOutboxLocked();
  sole_.store(kNoSole, std::memory_order_release);
}

void Router::Map(Endpoint* ep, uint8_t owner, uint32_t stream) {
  eps_[ep] = {owner, stream};
}
void Router::Unmap(Endpoint* ep) {
  eps_.erase(ep);
}

uint8_t Router::Route(Completion& c) {
  if (c.type == OpType::kNotify) {
    auto it = eps_.find(c.ep);
    if (it == eps_.end()) {
      // Not a data endpoint of ours: the main thread reports it.
      c.context = MakeContext(kMainOwner, Kind::kNotify, 0xffff, 0);
      return kMainOwner;
    }
    c.context = MakeContext(it->second.first, Kind::kNotify, it->second.second, 0);
  }
  const uint8_t owner = ContextOwner(c.context);
  return owner < boxes_.size() ? owner : kMainOwner;
}

}  // namespace internal

namespace {

using internal::Kind;
using internal::NowNs;
using internal::Side;
using internal::Stream;
using json = nlohmann::json;

std::string Hex(const std::vector<uint8_t>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

Result<std::vector<uint8_t>> Unhex(const std::string& s) {
  if (s.size() % 2) return ProtocolError("odd-length hex string in a control message");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char ch = s[2 * i + k];
      int d = -1;
      if (ch >= '0' && ch <= '9') d = ch - '0';
      if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
      if (d < 0) return ProtocolError("bad hex digit in a control message");
      v = v * 16 + d;
    }
    out[i] = static_cast<uint8_t>(v);
  }
  return out;
}

Result<std::unique_ptr<uint8_t, internal::FreeDeleter>> Allocate(uint64_t bytes) {
  const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    return ResourceExhausted("cannot allocate " + std::to_string(rounded) +
                             " bytes of benchmark buffers; lower --depth, sizes or --endpoints");
  }
  std::memset(p, 0, rounded);  // touch every page before registration
  return std::unique_ptr<uint8_t, internal::FreeDeleter>(static_cast<uint8_t*>(p));
}

// How long the main thread sleeps between polls while it waits for control traffic. At 50 us
// the main threads of both processes woke ~20,000 times a second each, every time taking the
// router's and the transport's locks and a core away from the busy-polling workers. Measured
// (ferry-lat --transport tcp --local -s 14,4K, 3 alternating pairs, 2 cores): t_typical
// 9.6-10.0 -> 8.9-9.2 us at 14 B, and p99 up to 111 us -> at most 42 us. Control messages come
// once per phase; 500 us costs a few milliseconds per size.
constexpr auto kMainIdle = std::chrono::microseconds(500);
// While a sole worker polls for it (Router::SetSolePoller) the main thread only checks its
// mailbox, and every wake-up still preempts a busy-polling worker: in the two-vCPU soft-RoCE VM
// the 2 x 2000 wake-ups per second of both sides' main threads were the largest remaining
// context-switch source (perf: finish_task_switch ~10 % of samples). A control message during a
// measurement is at most this much later.
constexpr auto kMainIdleMeasuring = std::chrono::milliseconds(4);
std::chrono::microseconds MainIdle(const internal::Side& side) {
  return side.router.HasSolePoller() ? kMainIdleMeasuring : kMainIdle;
}

// The main thread's view of the control endpoint.
class Control {
 public:
  explicit Control(Side& side) : side_(side) {}

  Status Setup(std::shared_ptr<Endpoint> ep) {
    side_.control = std::move(ep);
    return PostRecv();
  }

  Status Send(const json& msg) {
    const std::string text = msg.dump();
    if (text.size() > side_.control_half) {
      return Internal("control message of " + std::to_string(text.size()) + " bytes too large");
    }
    std::memcpy(side_.control_memory.get(), text.data(), text.size());
    Op op;
    op.type = OpType::kSend;
    op.ep = side_.control.get();
    op.context = internal::MakeContext(internal::kMainOwner, Kind::kControl, 0, 1);
    op.local = side_.control_mr.get();
    op.local_offset = 0;
    op.length = text.size();
    send_done_ = false;
    FERRY_RETURN_IF_ERROR(side_.router.Post(internal::kMainOwner, std::span<const Op>(&op, 1)));
    const uint64_t deadline = NowNs() + side_.config.timeout_ms * 1000000ull;
    while (!send_done_) {
      FERRY_RETURN_IF_ERROR(PollMain());
      if (NowNs() > deadline) return Timeout("sending a control message timed out");
    }
    return Status::Ok();
  }

  // Waits for the next control message. Returns early with the side's first error when a worker
  // fails, and turns a peer's abort message into an error. `bounded`: fail after timeout_ms;
  // otherwise (a message that comes after a measurement of any length) wait as long as every
  // endpoint is healthy: the transport fails them within peer_timeout if the peer dies.
  Result<json> Receive(const std::string& what, bool bounded = true) {
    const uint64_t deadline = NowNs() + side_.config.timeout_ms * 1000000ull;
    uint64_t turns = 0;
    while (!received_) {
      // Control messages are not latency-critical: back off so the main thread does not
      // compete with the measuring workers for the CPU (and the transport's lock).
      if (PollMain(&turns) == 0) std::this_thread::sleep_for(MainIdle(side_));
      if (!poll_error_.ok()) return poll_error_;
      if (side_.abort.load()) {
        Status s = side_.FirstError();
        return s.ok() ? Cancelled("aborted") : s;
      }
      if (!bounded) {
        // While a sole worker polls, it is the transport's only caller and watches the
        // endpoints itself (it fails the side on a dead peer).
        if (turns % 256 == 0 && !side_.router.HasSolePoller()) {
          FERRY_RETURN_IF_ERROR(internal::EndpointsHealthy(side_));
        }
        continue;
      }
      if (NowNs() > deadline) {
        return Timeout("no " + what + " from the peer within " +
                       std::to_string(side_.config.timeout_ms) + " ms");
      }
    }
    std::string text = std::move(*received_);
    received_.reset();
    FERRY_RETURN_IF_ERROR(PostRecv());
    json msg = json::parse(text, nullptr, false);
    if (msg.is_discarded() || !msg.is_object() || !msg.contains("type") ||
        !msg["type"].is_string()) {
      std::string shown = text.substr(0, 64);
      for (char& ch : shown) ch = (ch >= 32 && ch < 127) ? ch : '.';
      return ProtocolError("malformed control message from the peer (" +
                           std::to_string(text.size()) + " bytes: '" + shown + "')");
    }
    if (msg["type"] == "abort") {
      const std::string err = msg.value("error", std::string("no reason given"));
      return Status(Code::kPeerFailure, "peer aborted: " + err);
    }
    return msg;
  }

  // Receive() that insists on a type (and phase).
  Result<json> Expect(const std::string& type, int64_t phase = -1, bool bounded = true) {
    FERRY_ASSIGN_OR_RETURN(json msg, Receive(type, bounded));
    if (msg["type"] != type) {
      return ProtocolError("expected a '" + type + "' control message, got '" +
                           msg["type"].get<std::string>() + "'");
    }
    if (phase >= 0 && (!msg.contains("phase") || !msg["phase"].is_number_integer() ||
                       msg["phase"].get<int64_t>() != phase)) {
      return ProtocolError("control message '" + type + "' for the wrong phase");
    }
    return msg;
  }

  // Polls as the main thread.
  Status PollMain() {
    Status error;
    side_.router.Poll(internal::kMainOwner, [&](Completion& c) { Handle(c, &error); });
    return error;
  }
  // Same, counting turns; a failure is left in poll_error_. Returns completions handled.
  size_t PollMain(uint64_t* turns) {
    ++*turns;
    return side_.router.Poll(internal::kMainOwner, [&](Completion& c) { Handle(c, &poll_error_); });
  }

  void Handle(Completion& c, Status* error) {
    if (internal::ContextKind(c.context) != Kind::kControl) {
      if (error->ok()) *error = ProtocolError("unexpected completion on the control endpoint");
      return;
    }
    if (!c.ok()) {
      if (error->ok()) {
        *error = Status(c.code, std::string("control ") + std::string(OpTypeName(c.type)) +
                                    " failed: " + c.error);
      }
      return;
    }
    if (c.type == OpType::kSend) {
      send_done_ = true;
    } else if (c.type == OpType::kRecv) {
      const uint8_t* rx = side_.control_memory.get() + side_.control_half;
      received_ = std::string(reinterpret_cast<const char*>(rx), c.bytes);
    }
  }

  // Best effort: tells the peer why this side stops.
  void SendAbort(const Status& why) {
    if (!side_.control || !side_.control->status().ok()) return;
    (void)Send(json{{"type", "abort"}, {"error", why.ToString()}});
  }

 private:
  Status PostRecv() {
    Op op;
    op.type = OpType::kRecv;
    op.ep = side_.control.get();
    op.context = internal::MakeContext(internal::kMainOwner, Kind::kControl, 0, 2);
    op.local = side_.control_mr.get();
    op.local_offset = side_.control_half;
    op.length = side_.control_half;
    return side_.router.Post(internal::kMainOwner, std::span<const Op>(&op, 1));
  }

  Side& side_;
  Status poll_error_;
  bool send_done_ = false;
  std::optional<std::string> received_;
};

uint32_t StreamCount(const BenchConfig& c) {
  return c.endpoints * (c.bidir ? 2 : 1);
}

// Control region plus one region per stream: [credit buffers | src area | target area].
Status CreateRegions(Side& side) {
  const BenchConfig& c = side.config;
  const uint32_t n = StreamCount(c);
  side.control_half = 65536 + 1024ull * n;
  FERRY_ASSIGN_OR_RETURN(side.control_memory, Allocate(2 * side.control_half));
  FERRY_ASSIGN_OR_RETURN(side.control_mr,
                         side.transport->RegisterMemory(side.control_memory.get(),
                                                        2 * side.control_half, kAccessLocal));
  const uint64_t src = internal::SrcAreaBytes(c, side.caps);
  const uint64_t target = internal::TargetAreaBytes(c, side.caps);
  side.router.Init(side.transport.get(), c.threads + 1);
  for (uint32_t i = 0; i < n; ++i) {
    auto s = std::make_unique<Stream>();
    s->index = i;
    const bool client_initiates = i < c.endpoints;
    s->initiator = side.client == client_initiates;
    const uint32_t local_index = client_initiates ? i : i - c.endpoints;
    s->owner = static_cast<uint8_t>(1 + local_index % c.threads);
    s->src = internal::kCreditAreaBytes;
    s->target = s->src + (src + 4095) / 4096 * 4096;
    s->memory_bytes = s->target + target;
    FERRY_ASSIGN_OR_RETURN(s->memory, ShareableMemory::Allocate(s->memory_bytes));
    std::memset(s->memory.data(), 0, s->memory.size());  // touch every page before registration
    FERRY_ASSIGN_OR_RETURN(
        s->mr, side.transport->RegisterMemory(s->memory.data(), s->memory_bytes, kAccessRemote));
    side.streams.push_back(std::move(s));
  }
  return Status::Ok();
}

json RegionsMessage(const Side& side, const char* type) {
  json regions = json::array();
  for (const auto& s : side.streams)
    regions.push_back(Hex(EncodeRemoteRegion(s->mr->descriptor())));
  return json{{"type", type}, {"regions", regions}};
}

Status TakePeerRegions(Side& side, const json& msg) {
  if (!msg.contains("regions") || !msg["regions"].is_array() ||
      msg["regions"].size() != side.streams.size()) {
    return ProtocolError("peer sent a region list of the wrong size");
  }
  for (size_t i = 0; i < side.streams.size(); ++i) {
    if (!msg["regions"][i].is_string()) return ProtocolError("peer region is not a string");
    FERRY_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Unhex(msg["regions"][i].get<std::string>()));
    FERRY_ASSIGN_OR_RETURN(side.streams[i]->peer, DecodeRemoteRegion(bytes));
    if (side.streams[i]->peer.length < side.streams[i]->memory_bytes) {
      return ProtocolError("peer region " + std::to_string(i) + " is smaller than the layout");
    }
  }
  return Status::Ok();
}

// Binds this phase's data endpoint to stream `s`.
Status AttachEndpoint(Side& side, Stream& s, std::shared_ptr<Endpoint> ep) {
  s.ep = std::move(ep);
  FERRY_ASSIGN_OR_RETURN(s.rkey, s.ep->Import(s.peer));
  side.router.Map(s.ep.get(), s.owner, s.index);
  return Status::Ok();
}

// Closes every data endpoint and reaps every op still posted on it (Close cancels them).
Status CloseAndDrain(Side& side, Control& control) {
  for (auto& s : side.streams) {
    if (s->ep) s->ep->Close();
  }
  const uint64_t deadline = NowNs() + side.config.timeout_ms * 1000000ull;
  Status first;
  for (;;) {
    bool pending = false;
    for (auto& s : side.streams) pending = pending || (s->ep && s->outstanding > 0);
    if (!pending) break;
    side.router.PollAll([&](Completion& c) {
      if (internal::ContextKind(c.context) == Kind::kControl) {
        control.Handle(c, &first);
        return;
      }
      const uint32_t index = internal::ContextStream(c.context);
      if (c.type != OpType::kNotify && index < side.streams.size() &&
          side.streams[index]->outstanding > 0) {
        --side.streams[index]->outstanding;
      }
    });
    if (NowNs() > deadline) {
      first = Timeout("closing the data endpoints: operations were not completed in time");
      break;
    }
  }
  for (auto& s : side.streams) {
    if (!s->ep) continue;
    side.router.Unmap(s->ep.get());
    s->rkey.reset();
    s->ep.reset();
    s->outstanding = 0;
  }
  return first;
}

// Runs the workers of one phase; joins them on destruction.
class Workers {
 public:
  Workers(Side& side, const internal::Phase& phase) : side_(side) {
    const uint32_t n = side.config.threads;
    workers_.resize(n);
    for (uint32_t i = 0; i < n; ++i) workers_[i].owner = static_cast<uint8_t>(i + 1);
    for (auto& s : side.streams) workers_[s->owner - 1].streams.push_back(s.get());
    side.initiators_done.store(0);
    // One worker: it alone polls the transport and routes the control completions to the main
    // thread's mailbox, so the main thread never contends for the transport's lock during a
    // measurement (futex waits and context switches in the soft-RoCE VM profile).
    if (n == 1) side.router.SetSolePoller(workers_[0].owner);
    for (auto& w : workers_) {
      threads_.emplace_back([this, &w, &phase] { (void)internal::RunWorker(side_, w, phase); });
    }
  }
  // Leaving the scope without Join() means an error path: stop the workers first.
  ~Workers() {
    bool running = false;
    for (auto& t : threads_) running = running || t.joinable();
    if (running) side_.abort.store(true);
    Join();
  }
  void Join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    side_.router.ClearSolePoller();
  }

 private:
  Side& side_;
  std::vector<internal::Worker> workers_;
  std::vector<std::thread> threads_;
};

uint32_t InitiatorCount(const Side& side) {
  uint32_t n = 0;
  for (const auto& s : side.streams) n += s->initiator ? 1 : 0;
  return n;
}

// Waits until this side's initiator streams are done (or a worker failed).
Status WaitInitiators(Side& side, Control& control) {
  const uint32_t want = InitiatorCount(side);
  while (side.initiators_done.load(std::memory_order_acquire) < want) {
    if (side.abort.load()) {
      Status s = side.FirstError();
      return s.ok() ? Cancelled("aborted") : s;
    }
    FERRY_RETURN_IF_ERROR(control.PollMain());
    std::this_thread::sleep_for(MainIdle(side));
  }
  return Status::Ok();
}

json Counts(const Side& side) {
  json counts = json::object();
  for (const auto& s : side.streams) {
    if (s->initiator) counts[std::to_string(s->index)] = s->posted;
  }
  return counts;
}

Status ApplyCounts(Side& side, const json& msg) {
  if (!msg.contains("counts") || !msg["counts"].is_object()) {
    return ProtocolError("control message without counts");
  }
  for (auto& s : side.streams) {
    if (s->initiator) continue;
    const std::string key = std::to_string(s->index);
    if (!msg["counts"].contains(key) || !msg["counts"][key].is_number_unsigned()) {
      return ProtocolError("peer did not report a count for stream " + key);
    }
    s->expected.store(msg["counts"][key].get<uint64_t>(), std::memory_order_release);
  }
  return Status::Ok();
}

json SummaryJson(const BandwidthSummary& b) {
  return json{{"ops", b.ops},
              {"bytes", b.bytes},
              {"rows", b.rows},
              {"seconds", b.seconds},
              {"peak", b.bw_peak_mb},
              {"avg", b.bw_avg_mb},
              {"rate", b.msg_rate_mpps},
              {"rows_per_sec", b.rows_per_sec}};
}

BandwidthSummary MySummary(const Side& side) {
  std::vector<BandwidthMeter> meters;
  for (const auto& s : side.streams) {
    if (s->initiator) meters.push_back(s->meter);
  }
  return SummarizeBandwidth(meters);
}

Result<BandwidthSummary> SummaryFromJson(const json& msg) {
  BandwidthSummary b;
  if (!msg.contains("bw") || !msg["bw"].is_object()) return b;
  try {
    const json& j = msg["bw"];
    b.ops = j.at("ops").get<uint64_t>();
    b.bytes = j.at("bytes").get<uint64_t>();
    b.rows = j.at("rows").get<uint64_t>();
    b.seconds = j.at("seconds").get<double>();
    b.bw_peak_mb = j.at("peak").get<double>();
    b.bw_avg_mb = j.at("avg").get<double>();
    b.msg_rate_mpps = j.at("rate").get<double>();
    b.rows_per_sec = j.at("rows_per_sec").get<double>();
  } catch (const json::exception&) {
    return ProtocolError("malformed bandwidth summary from the peer");
  }
  return b;
}

Status PrepareAll(Side& side, const internal::Phase& phase) {
  for (auto& s : side.streams) FERRY_RETURN_IF_ERROR(internal::PreparePhase(side, *s, phase));
  return Status::Ok();
}

// ---- client ---------------------------------------------------------------------------------

Status ClientPhase(Side& side, Control& control, const PeerOptions& peer,
                   const std::string& address, uint32_t k, const PhaseSpec& spec,
                   const RunHeader& header, const RunCallbacks& cb, Report* report) {
  const BenchConfig& c = side.config;
  for (auto& s : side.streams) {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> ep,
                           side.transport->Connect(address, peer.connect_timeout));
    FERRY_RETURN_IF_ERROR(AttachEndpoint(side, *s, std::move(ep)));
  }
  const internal::Phase phase = internal::MakePhase(c, k, spec, side.caps);
  FERRY_RETURN_IF_ERROR(PrepareAll(side, phase));
  FERRY_RETURN_IF_ERROR(control.Send(json{{"type", "prepared"}, {"phase", k}}));
  FERRY_RETURN_IF_ERROR(control.Expect("go", k).status());
  json verdict;
  {
    Workers workers(side, phase);
    FERRY_RETURN_IF_ERROR(WaitInitiators(side, control));
    FERRY_RETURN_IF_ERROR(
        control.Send(json{{"type", "done"}, {"phase", k}, {"counts", Counts(side)}}));
    FERRY_ASSIGN_OR_RETURN(verdict, control.Expect("verdict", k));
    FERRY_RETURN_IF_ERROR(ApplyCounts(side, verdict));
    workers.Join();
  }
  FERRY_RETURN_IF_ERROR(side.FirstError());
  if (side.abort.load()) return Cancelled("aborted");
  // Both sides' workers are done: only now may either side close the data endpoints (closing
  // earlier would fail receives the peer's workers still count on).
  FERRY_RETURN_IF_ERROR(control.Send(json{{"type", "end"}, {"phase", k}}));
  const uint64_t bytes = phase.g.size;
  if (c.mode == Mode::kLatency) {
    std::vector<double> samples;
    for (auto& s : side.streams)
      samples.insert(samples.end(), s->samples.begin(), s->samples.end());
    LatencyRow row;
    row.bytes = bytes;
    row.check = spec.check;
    row.iterations = samples.size() / c.endpoints;
    row.usec = SummarizeLatency(samples);
    report->latency.push_back(row);
    if (cb.on_latency) cb.on_latency(header, row);
  } else {
    BandwidthRow row;
    row.bytes = bytes;
    row.check = spec.check;
    row.bw = MySummary(side);
    row.iterations = row.bw.ops / c.endpoints;
    if (c.bidir) {
      FERRY_ASSIGN_OR_RETURN(BandwidthSummary theirs, SummaryFromJson(verdict));
      row.bw = AddBandwidth(row.bw, theirs);
    }
    report->bandwidth.push_back(row);
    if (cb.on_bandwidth) cb.on_bandwidth(header, row);
  }
  return CloseAndDrain(side, control);
}

Status ClientRun(Side& side, Control& control, const PeerOptions& peer, const std::string& address,
                 const RunCallbacks& cb, Report* report) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> ep,
                         side.transport->Connect(address, peer.connect_timeout));
  FERRY_RETURN_IF_ERROR(control.Setup(std::move(ep)));
  FERRY_ASSIGN_OR_RETURN(json hello, control.Expect("hello"));
  FERRY_RETURN_IF_ERROR(TakePeerRegions(side, hello));
  FERRY_RETURN_IF_ERROR(control.Send(RegionsMessage(side, "regions")));
  if (cb.on_header) cb.on_header(report->header);
  const std::vector<PhaseSpec> phases = PhaseSpecs(side.config);
  for (uint32_t k = 0; k < phases.size(); ++k) {
    Status s = ClientPhase(side, control, peer, address, k, phases[k], report->header, cb, report);
    if (!s.ok()) return s;
  }
  FERRY_RETURN_IF_ERROR(control.Send(json{{"type", "bye"}}));
  // The side that sends the last message closes last: closing a TCP socket with unread input
  // resets the connection, which could destroy 'bye' in the server's receive queue. So wait for
  // the server to close the control endpoint (its failure is the expected outcome here).
  Result<json> after = control.Receive("close");
  if (after.ok()) return ProtocolError("unexpected control message after 'bye'");
  return Status::Ok();
}

// ---- server ---------------------------------------------------------------------------------

Status ServerPhase(Side& side, Control& control, uint32_t k, const PhaseSpec& spec) {
  const BenchConfig& c = side.config;
  const uint64_t deadline = NowNs() + c.timeout_ms * 1000000ull;
  for (auto& s : side.streams) {
    for (;;) {
      Result<std::shared_ptr<Endpoint>> ep = side.transport->Accept(Millis(100));
      if (ep.ok()) {
        FERRY_RETURN_IF_ERROR(AttachEndpoint(side, *s, std::move(ep).value()));
        break;
      }
      if (ep.status().code() != Code::kTimeout) return ep.status();
      FERRY_RETURN_IF_ERROR(control.PollMain());
      if (NowNs() > deadline) return Timeout("the client did not connect its data endpoints");
    }
  }
  const internal::Phase phase = internal::MakePhase(c, k, spec, side.caps);
  FERRY_RETURN_IF_ERROR(PrepareAll(side, phase));
  FERRY_RETURN_IF_ERROR(control.Expect("prepared", k).status());
  {
    Workers workers(side, phase);
    FERRY_RETURN_IF_ERROR(control.Send(json{{"type", "go"}, {"phase", k}}));
    FERRY_ASSIGN_OR_RETURN(json done, control.Expect("done", k, /*bounded=*/false));
    FERRY_RETURN_IF_ERROR(ApplyCounts(side, done));
    FERRY_RETURN_IF_ERROR(WaitInitiators(side, control));
    workers.Join();
  }
  FERRY_RETURN_IF_ERROR(side.FirstError());
  json verdict = {{"type", "verdict"}, {"phase", k}, {"counts", Counts(side)}};
  if (c.mode == Mode::kBandwidth) verdict["bw"] = SummaryJson(MySummary(side));
  FERRY_RETURN_IF_ERROR(control.Send(verdict));
  FERRY_RETURN_IF_ERROR(control.Expect("end", k).status());
  return CloseAndDrain(side, control);
}

Status ServerRun(Side& side, Control& control) {
  FERRY_RETURN_IF_ERROR(control.Send(RegionsMessage(side, "hello")));
  FERRY_ASSIGN_OR_RETURN(json regions, control.Expect("regions"));
  FERRY_RETURN_IF_ERROR(TakePeerRegions(side, regions));
  const std::vector<PhaseSpec> phases = PhaseSpecs(side.config);
  for (uint32_t k = 0; k < phases.size(); ++k) {
    FERRY_RETURN_IF_ERROR(ServerPhase(side, control, k, phases[k]));
  }
  return control.Expect("bye").status();
}

// After a failure: stop the workers (already joined by then), tell the peer, release endpoints.
Status Finish(Side& side, Control& control, Status s) {
  if (s.ok()) return s;
  side.Fail(s);
  if (s.code() != Code::kPeerFailure) control.SendAbort(s);
  (void)CloseAndDrain(side, control);
  return s;
}

}  // namespace

Status CheckSupport(const BenchConfig& c, const Capabilities& caps, const std::string& transport) {
  auto no = [&](const std::string& what) {
    return Unsupported("the " + transport + " transport does not support " + what);
  };
  if (!caps.send_recv) return no("send/receive (needed for control messages)");
  switch (c.op) {
    case BenchOp::kSend:
      break;
    case BenchOp::kWrite:
      if (!caps.write) return no("write");
      break;
    case BenchOp::kRead:
      if (!caps.read) return no("read");
      break;
    case BenchOp::kWriteImm:
      if (!caps.write || !caps.notify) return no("write with notification (write_imm)");
      break;
    case BenchOp::kSparseWrite:
      if (!caps.sparse_write) return no("sparse write");
      break;
    case BenchOp::kSparseRead:
      if (!caps.sparse_read) return no("sparse read");
      break;
    case BenchOp::kPackWrite:
      if (!caps.write) return no("write (pack_write)");
      break;
    case BenchOp::kPackRead:
      break;  // send/receive only
  }
  if (IsSparse(c.op)) {
    if (c.rows > caps.max_segments) {
      return no(std::to_string(c.rows) + " segments per op (max " +
                std::to_string(caps.max_segments) + ")");
    }
  } else if (IsPack(c.op)) {
    if (c.rows * c.row_size > caps.max_message_size) {
      return no("packed messages of " + std::to_string(c.rows * c.row_size) + " bytes (max " +
                std::to_string(caps.max_message_size) + ")");
    }
  } else {
    for (uint64_t s : c.sizes) {
      if (s > caps.max_message_size) {
        return no("messages of " + std::to_string(s) + " bytes (max " +
                  std::to_string(caps.max_message_size) + ")");
      }
    }
  }
  return Status::Ok();
}

Result<Report> RunClient(const PeerOptions& peer, const BenchConfig& config,
                         const std::string& address, const RunCallbacks& callbacks) {
  FERRY_RETURN_IF_ERROR(ValidateConfig(config));
  Side side;
  side.client = true;
  side.config = config;
  TransportOptions options;
  options.params = peer.params;
  options.progress_thread = peer.progress_thread;
  options.thread_mode = peer.thread_mode;
  options.hello_info = EncodeConfig(config);
  if (peer.thread_mode == ThreadMode::kSingle && config.threads > 1) {
    return InvalidArgument(
        "--thread-mode single needs one worker thread (--threads 1): with more, several threads "
        "call into the transport at once");
  }
  FERRY_ASSIGN_OR_RETURN(side.transport, CreateTransport(peer.transport, options));
  side.caps = side.transport->capabilities();
  FERRY_RETURN_IF_ERROR(CheckSupport(config, side.caps, peer.transport));
  Report report;
  report.header.tool = config.mode == Mode::kLatency ? "ferry-lat" : "ferry-bw";
  report.header.transport = std::string(side.transport->name());
  report.header.config = config;
  report.header.devices = side.transport->devices();
  FERRY_RETURN_IF_ERROR(CreateRegions(side));
  Control control(side);
  Status s = ClientRun(side, control, peer, address, callbacks, &report);
  FERRY_RETURN_IF_ERROR(Finish(side, control, s));
  return report;
}

Result<std::unique_ptr<BenchServer>> BenchServer::Listen(const PeerOptions& peer,
                                                         const std::string& bind) {
  std::unique_ptr<BenchServer> server(new BenchServer());
  server->peer_ = peer;
  TransportOptions options;
  options.params = peer.params;
  options.progress_thread = peer.progress_thread;
  options.thread_mode = peer.thread_mode;
  FERRY_ASSIGN_OR_RETURN(server->transport_, CreateTransport(peer.transport, options));
  FERRY_ASSIGN_OR_RETURN(server->address_, server->transport_->Listen(bind));
  return server;
}

BenchServer::~BenchServer() = default;

Status BenchServer::Serve(Millis accept_timeout) {
  if (!transport_) return InvalidArgument("BenchServer::Serve may be called once");
  Side side;
  side.client = false;
  side.transport = std::move(transport_);
  side.caps = side.transport->capabilities();
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> ep, side.transport->Accept(accept_timeout));
  // The config arrives in the client's handshake; a bad one is answered with an abort message
  // once the control endpoint can carry it.
  Result<BenchConfig> config = DecodeConfig(ep->peer_info());
  Status setup = config.status();
  if (config.ok()) {
    side.config = *config;
    config_ = *config;
    setup = CheckSupport(side.config, side.caps, peer_.transport);
    if (setup.ok() && peer_.thread_mode == ThreadMode::kSingle && side.config.threads > 1) {
      setup = InvalidArgument(
          "this server runs --thread-mode single, which allows one worker thread, but the client "
          "asked for " +
          std::to_string(side.config.threads) + " (restart the server with --thread-mode multi)");
    }
  } else {
    side.config.timeout_ms = 2000;
  }
  if (setup.ok()) setup = CreateRegions(side);
  Control control(side);
  if (!setup.ok()) {
    if (!side.control_mr) {
      side.control_half = 65536;
      auto mem = Allocate(2 * side.control_half);
      if (mem.ok()) {
        side.control_memory = std::move(mem).value();
        auto mr = side.transport->RegisterMemory(side.control_memory.get(), 2 * side.control_half,
                                                 kAccessLocal);
        if (mr.ok()) side.control_mr = std::move(mr).value();
      }
    }
    if (side.control_mr) {
      side.router.Init(side.transport.get(), 1);
      if (control.Setup(ep).ok()) control.SendAbort(setup);
    }
    return setup;
  }
  FERRY_RETURN_IF_ERROR(control.Setup(std::move(ep)));
  return Finish(side, control, ServerRun(side, control));
}

}  // namespace ferry::bench
