// Hostile and wrong requests (ps/wire/protocol.h "Errors"): a bad request gets an error reply
// naming what is wrong and touches nothing; a framing violation closes that worker's connection and
// only that one; the server keeps serving the others.
//
// Through the Worker API where it can express the mistake (unknown table, wrong gradient count,
// fp16 pull of a table without a mirror), and through a RAW worker otherwise: the test builds a
// job by hand (a Coordinator, a Server driven by Serve() on a thread, a real Worker 0 and a raw
// worker 1 that speaks the data-path protocol itself over its own Transport) and writes crafted
// requests into worker 1's staging ring with a notification.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <ostream>
#include <thread>

#include "ps/coordinator/coordinator.h"
#include "ps/server/server.h"
#include "ps/store/optimizer.h"
#include "ps/wire/control.h"
#include "ps/wire/protocol.h"
#include "ps/worker/worker.h"
#include "tests/ps/job_util.h"
#include "transport/pool.h"

namespace ferry::ps::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;

// ---- Through the Worker API --------------------------------------------------------------------

class PsBadRequest : public ::testing::TestWithParam<BackendConfig> {};

TEST_P(PsBadRequest, WorkerApiRefusesWrongCallsAndKeepsWorking) {
  JobSpec job = SgdJob(GetParam(), 2, 1, 4);
  auto outcomes = RunJob(job, [&](Node& node) -> Status {
    Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    const std::vector<uint64_t> keys = {1, 2, 3, 2};
    auto unknown = w->Pull(7, keys);
    FERRY_RETURN_IF_ERROR(Expect(!unknown.ok() && unknown.status().code() == Code::kNotFound &&
                                     unknown.status().message().find("7") != std::string::npos,
                                 "pull of table 7: " + unknown.status().ToString()));
    auto name = w->TableId("nope");
    FERRY_RETURN_IF_ERROR(Expect(!name.ok() && name.status().code() == Code::kNotFound,
                                 "TableId of an unknown name"));
    const std::vector<float> short_grads(keys.size() * 4 - 1, 1.0f);
    auto wrong = w->Push(0, keys, short_grads);
    FERRY_RETURN_IF_ERROR(Expect(!wrong.ok() && wrong.status().code() == Code::kInvalidArgument &&
                                     wrong.status().message().find("15") != std::string::npos,
                                 "push with 15 gradient floats: " + wrong.status().ToString()));
    auto wrong_pp = w->PushPull(0, keys, short_grads);
    FERRY_RETURN_IF_ERROR(
        Expect(!wrong_pp.ok() && wrong_pp.status().code() == Code::kInvalidArgument,
               "push-pull with 15 gradient floats"));
    PullOptions half;
    half.fp16 = true;
    auto fp16 = w->Pull(0, keys, half);
    FERRY_RETURN_IF_ERROR(Expect(!fp16.ok() && fp16.status().code() == Code::kInvalidArgument &&
                                     fp16.status().message().find("fp16") != std::string::npos,
                                 "fp16 pull without a mirror: " + fp16.status().ToString()));
    FERRY_RETURN_IF_ERROR(
        Expect(w->Wait(12345).code() == Code::kInvalidArgument, "wait for an unknown ticket"));
    FERRY_RETURN_IF_ERROR(Expect(!w->Rows(12345).ok(), "rows of an unknown ticket"));
    FERRY_RETURN_IF_ERROR(Expect(!w->Gradients(12345).ok(), "gradients of an unknown ticket"));
    // None of it changed anything: the keys still read their initial zeros, and a correct push
    // lands once.
    const std::vector<float> grads(keys.size() * 4, 0.25f);
    FERRY_RETURN_IF_ERROR(PushAndWait(*w, 0, keys, grads));
    FERRY_RETURN_IF_ERROR(PullAndCheck(*w, 0, keys, [&](const PulledRows& rows) -> Status {
      for (size_t i = 0; i < keys.size(); ++i) {
        const float want = keys[i] == 2 ? -0.5f : -0.25f;  // key 2 is pushed twice
        FERRY_RETURN_IF_ERROR(Expect(rows[i][0] == want && rows[i][3] == want,
                                     "key " + std::to_string(keys[i]) + " after one push"));
      }
      return Status::Ok();
    }));
    // A ticket that is not a pull has no gradients; PushGradients needs Gradients() first.
    FERRY_ASSIGN_OR_RETURN(Ticket r, w->Pull(0, keys));
    FERRY_RETURN_IF_ERROR(w->Wait(r));
    FERRY_RETURN_IF_ERROR(Expect(!w->PushGradients(r).ok(), "PushGradients before Gradients"));
    w->Release(r);
    return Status::Ok();
  });
  EXPECT_OK(AllOk(outcomes));
}

// ---- A hand-built job with a raw worker ---------------------------------------------------------

// The data transport options Node gives a role (ps/node.cc), with `hello` as the handshake info.
Status Register(ControlClient& c, const JobSpec& job, uint32_t rank, Role role, uint32_t index,
                const std::string& data_address) {
  ControlMessage m;
  m.kind = ControlKind::kRegister;
  m.rank = rank;
  m.role = role;
  m.index = index;
  m.value = job.Fingerprint();
  MemberInfo self;
  self.rank = rank;
  self.role = role;
  self.index = index;
  self.data_address = data_address;
  self.host = "test";
  m.members.push_back(self);
  return c.Send(m);
}

Result<ControlMessage> ExpectKind(ControlClient& c, ControlKind kind) {
  const auto deadline = SteadyClock::now() + std::chrono::seconds(20);
  while (SteadyClock::now() < deadline) {
    auto m = c.Receive(Millis(100));
    if (!m.ok()) {
      if (m.status().code() == Code::kTimeout) continue;
      return m.status();
    }
    if (m->kind == kind) return m;
    if (m->kind == ControlKind::kReject || m->kind == ControlKind::kFailure) {
      return Internal("coordinator said " + std::string(ControlKindName(m->kind)) + ": " + m->text);
    }
  }
  return Timeout("no " + std::string(ControlKindName(kind)) + " from the coordinator");
}

Status SendKind(ControlClient& c, ControlKind kind, uint64_t value = 0) {
  ControlMessage m;
  m.kind = kind;
  m.value = value;
  return c.Send(m);
}

// Worker 1 of the job, speaking the data path by hand.
class RawWorker {
 public:
  ~RawWorker() {
    ring_.reset();
    if (ep_) ep_->Close();
    ep_.reset();
    arena_.reset();
    send_.reset();
    control.reset();
    t_.reset();
  }

  Status Init(const JobSpec& job, uint32_t index) {
    job_ = job;
    FERRY_ASSIGN_OR_RETURN(
        t_, CreateTransport(job.transport, DataTransportOptions(job, EncodeWorkerHello(index))));
    FERRY_ASSIGN_OR_RETURN(arena_mem_, ShareableMemory::Allocate(job.arena_bytes));
    FERRY_ASSIGN_OR_RETURN(send_mem_, ShareableMemory::Allocate(1u << 20));
    FERRY_ASSIGN_OR_RETURN(
        arena_, t_->RegisterMemory(arena_mem_.data(), job.arena_bytes, kAccessRemoteWrite));
    FERRY_ASSIGN_OR_RETURN(send_, t_->RegisterMemory(send_mem_.data(), 1u << 20, kAccessLocal));
    t_->Advertise({arena_->descriptor()});
    return Status::Ok();
  }

  Status Connect(const std::string& address, uint32_t index) {
    FERRY_ASSIGN_OR_RETURN(ep_, t_->Connect(address, Millis(20000)));
    const auto& regions = ep_->peer_regions();
    if (regions.size() != job_.workers + job_.tables.size()) {
      return Internal("server advertised " + std::to_string(regions.size()) + " regions");
    }
    ring_bytes = regions[index].length;
    FERRY_ASSIGN_OR_RETURN(ring_, ep_->Import(regions[index]));
    return Status::Ok();
  }

  // Writes `bytes` at `offset` of the staging ring; with `notify`, the server is told imm.
  Status Write(uint64_t offset, const std::vector<uint8_t>& bytes, bool notify, uint32_t imm) {
    std::memcpy(send_mem_.data(), bytes.data(), bytes.size());
    Op op;
    op.type = OpType::kWrite;
    op.flags = notify ? kOpNotify : kOpNone;
    op.imm = imm;
    op.ep = ep_.get();
    op.context = 1;
    op.local = send_.get();
    op.length = bytes.size();
    op.remote = ring_.get();
    op.remote_offset = offset;
    FERRY_RETURN_IF_ERROR(t_->Post(std::span<const Op>(&op, 1)));
    // The write's own completion: the send buffer is reused by the next one.
    const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
    while (SteadyClock::now() < deadline) {
      Completion c[8];
      const size_t n = t_->Poll(c);
      bool done = false;
      for (size_t i = 0; i < n; ++i) {
        if (c[i].type == OpType::kNotify) {
          notifies_.push_back(c[i]);
        } else if (c[i].context == 1) {
          if (!c[i].ok()) return Status(c[i].code, "raw write: " + c[i].error);
          done = true;
        }
      }
      if (done) return Status::Ok();
      if (n == 0) (void)t_->Wait(Millis(10));
    }
    return Timeout("raw write did not complete");
  }

  // Sends a request at the next ring position (`offset` overrides it) with a notification.
  Status Send(const std::vector<uint8_t>& bytes, uint64_t* at = nullptr) {
    const uint64_t size = (bytes.size() + kRequestAlign - 1) / kRequestAlign * kRequestAlign;
    if (cursor_ + size > ring_bytes) cursor_ = 0;
    const uint64_t offset = cursor_;
    cursor_ += size;
    if (at != nullptr) *at = offset;
    return Write(offset, bytes, true, static_cast<uint32_t>(offset / kRequestAlign));
  }

  // The next notification (a server reply).
  Result<uint32_t> NextReply(Millis timeout = Millis(10000)) {
    const auto deadline = SteadyClock::now() + timeout;
    while (notifies_.empty()) {
      if (SteadyClock::now() > deadline) return Timeout("no reply from the server");
      Completion c[8];
      const size_t n = t_->Poll(c);
      for (size_t i = 0; i < n; ++i) {
        if (c[i].type == OpType::kNotify) notifies_.push_back(c[i]);
      }
      if (n == 0) (void)t_->Wait(Millis(10));
    }
    Completion c = notifies_.front();
    notifies_.erase(notifies_.begin());
    if (!c.ok()) return Status(c.code, "notification failed: " + c.error);
    return c.imm;
  }

  // Waits until the server has closed this connection; kTimeout otherwise. A reply that
  // arrives meanwhile is an error.
  Status WaitClosed(Millis timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (ep_->status().ok()) {
      if (SteadyClock::now() > deadline) return Timeout("the server kept the connection open");
      Completion c[8];
      const size_t n = t_->Poll(c);
      for (size_t i = 0; i < n; ++i) {
        if (c[i].type == OpType::kNotify && c[i].ok()) {
          return Internal("the server replied (imm " + std::to_string(c[i].imm) +
                          ") to a request it should have refused by closing");
        }
      }
      if (n == 0) (void)t_->Wait(Millis(10));
    }
    return Status::Ok();
  }

  ReplyRecord Slot(uint32_t seq) const {
    ReplyRecord r;
    std::memcpy(&r, arena_mem_.data() + ReplySlotOffset(0, seq, job_.max_outstanding), sizeof r);
    return r;
  }
  const uint8_t* arena() const { return arena_mem_.data(); }
  uint64_t rows_begin() const {
    return ReplySlotsBytes(job_.shard_servers(), job_.max_outstanding);
  }

  uint64_t ring_bytes = 0;
  uint32_t next_seq = 0;
  std::unique_ptr<ControlClient> control;

 private:
  JobSpec job_;
  // Declared so that the memory outlives the registrations, and those the transport's end.
  ShareableMemory arena_mem_, send_mem_;
  std::unique_ptr<Transport> t_;
  std::unique_ptr<MemoryRegion> arena_, send_;
  std::shared_ptr<Endpoint> ep_;
  std::unique_ptr<RemoteKey> ring_;
  std::vector<Completion> notifies_;
  uint64_t cursor_ = 0;
};

// Request bytes: header + keys (+ gradients of `dim` floats for pushes, all `g`).
std::vector<uint8_t> Request(RequestHeader h, const std::vector<uint64_t>& keys, uint32_t grad_dim,
                             float g = 1.0f) {
  std::vector<uint8_t> b(sizeof h + keys.size() * 8 + keys.size() * grad_dim * 4);
  std::memcpy(b.data(), &h, sizeof h);
  if (!keys.empty()) std::memcpy(b.data() + sizeof h, keys.data(), keys.size() * 8);
  float* gp = reinterpret_cast<float*>(b.data() + sizeof h + keys.size() * 8);
  for (size_t i = 0; i < keys.size() * grad_dim; ++i) gp[i] = g;
  return b;
}

RequestHeader Header(RequestType type, uint32_t seq, uint32_t n, uint32_t dim,
                     uint64_t dest_offset) {
  RequestHeader h;
  h.type = static_cast<uint8_t>(type);
  h.seq = seq;
  h.num_keys = n;
  h.dim = dim;
  if (type != RequestType::kPush) {
    h.dest_offset = dest_offset;
    h.dest_stride = dim * 4;
  }
  h.payload_bytes = static_cast<uint32_t>(RequestPayloadBytes(type, 0, n, dim));
  return h;
}

// Coordinator + server 0 (Serve on a thread) + real worker 0 + raw worker 1, all started.
class HandJob {
 public:
  static constexpr uint32_t kDim = 4;

  explicit HandJob(const BackendConfig& config, Consistency consistency = Consistency::kAsp) {
    job = SmallJob(config, 1, 2, kDim);
    job.consistency.kind = consistency;
    job.max_keys_per_request = 16;
    job.max_outstanding = 8;
    job.staging_bytes = 64u << 10;
    job.arena_bytes = 256u << 10;
    job.send_bytes = 256u << 10;
    TableSpec& t = job.tables[0];
    t.optimizer.kind = Optimizer::kSgd;
    t.optimizer.learning_rate = 1.0f;
    t.init = UniformInit(4);
  }

  ~HandJob() {
    if (server_thread_.joinable()) {
      server->RequestStop();
      server_thread_.join();
    }
    // The control clients first: their pump threads wake the server's and the worker's data
    // transports (the callbacks Start gave them), which must not be gone yet (TSan saw the
    // server's TcpTransport destroyed under a Wake from the pump).
    worker_control.reset();
    server_control.reset();
    // The data transports go down together: closing an endpoint (ucx) waits a while for the
    // peer to take part, as it does when every rank of a job ends at once.
    std::thread w([this] { worker.reset(); });
    std::thread r([this] { raw.reset(); });
    server.reset();
    w.join();
    r.join();
    coordinator.reset();
  }

  Status Start() {
    FERRY_ASSIGN_OR_RETURN(coordinator, Coordinator::Start(job, "127.0.0.1:0"));
    const std::string coord = coordinator->address();
    FERRY_ASSIGN_OR_RETURN(auto st, CreateTransport(job.transport, DataTransportOptions(job, {})));
    FERRY_ASSIGN_OR_RETURN(server, Server::Create(job, 0, std::move(st), "127.0.0.1"));
    Transport* server_t = server->transport();
    FERRY_ASSIGN_OR_RETURN(server_control,
                           ControlClient::Connect(
                               coord, job, [server_t] { server_t->Wake(); }, Millis(20000)));
    FERRY_RETURN_IF_ERROR(
        Register(*server_control, job, 0, Role::kServer, 0, server->data_address()));
    FERRY_ASSIGN_OR_RETURN(
        auto wt, CreateTransport(job.transport, DataTransportOptions(job, EncodeWorkerHello(0))));
    FERRY_ASSIGN_OR_RETURN(worker, Worker::Create(job, 0, std::move(wt)));
    Transport* worker_t = worker->transport();
    FERRY_ASSIGN_OR_RETURN(worker_control,
                           ControlClient::Connect(
                               coord, job, [worker_t] { worker_t->Wake(); }, Millis(20000)));
    FERRY_RETURN_IF_ERROR(Register(*worker_control, job, 1, Role::kWorker, 0, ""));
    raw = std::make_unique<RawWorker>();
    FERRY_RETURN_IF_ERROR(raw->Init(job, 1));
    FERRY_ASSIGN_OR_RETURN(raw->control,
                           ControlClient::Connect(coord, job, nullptr, Millis(20000)));
    FERRY_RETURN_IF_ERROR(Register(*raw->control, job, 2, Role::kWorker, 1, ""));
    FERRY_ASSIGN_OR_RETURN(ControlMessage members,
                           ExpectKind(*worker_control, ControlKind::kMembership));
    FERRY_RETURN_IF_ERROR(ExpectKind(*raw->control, ControlKind::kMembership).status());
    FERRY_RETURN_IF_ERROR(ExpectKind(*server_control, ControlKind::kMembership).status());
    server_thread_ = std::thread([this] {
      Status s = server->AcceptWorkers(server_control.get(), Millis(20000));
      if (s.ok()) s = SendKind(*server_control, ControlKind::kReady);
      if (s.ok()) s = ExpectKind(*server_control, ControlKind::kStart).status();
      if (s.ok()) s = server->Serve(server_control.get());
      serve_status_ = s;
    });
    FERRY_RETURN_IF_ERROR(
        worker->ConnectServers(members.members, worker_control.get(), Millis(20000)));
    FERRY_RETURN_IF_ERROR(raw->Connect(server->data_address(), 1));
    FERRY_RETURN_IF_ERROR(SendKind(*worker_control, ControlKind::kReady));
    FERRY_RETURN_IF_ERROR(SendKind(*raw->control, ControlKind::kReady));
    FERRY_RETURN_IF_ERROR(ExpectKind(*worker_control, ControlKind::kStart).status());
    FERRY_RETURN_IF_ERROR(ExpectKind(*raw->control, ControlKind::kStart).status());
    return Status::Ok();
  }

  // Ends the job cleanly (every worker finishes) and returns what Serve() returned.
  Status Finish() {
    FERRY_RETURN_IF_ERROR(SendKind(*raw->control, ControlKind::kFinish));
    FERRY_RETURN_IF_ERROR(worker->Finish());
    server_thread_.join();
    return serve_status_;
  }

  // Pulls `keys` through the real worker 0 (keys unique).
  Result<std::vector<float>> Pull(const std::vector<uint64_t>& keys) {
    return PullRows(*worker, keys, false, kDim);
  }
  Status Push(const std::vector<uint64_t>& keys, float g) {
    return PushAndWait(*worker, 0, keys, std::vector<float>(keys.size() * kDim, g));
  }

  JobSpec job;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<Server> server;
  std::unique_ptr<ControlClient> server_control;
  std::unique_ptr<ControlClient> worker_control;
  std::unique_ptr<Worker> worker;
  std::unique_ptr<RawWorker> raw;

 private:
  std::thread server_thread_;
  Status serve_status_;
};

std::vector<uint64_t> GoodKeys() {
  std::vector<uint64_t> k(10);
  std::iota(k.begin(), k.end(), 100);
  return k;
}
// Keys only bad requests carry: they must never get a row.
std::vector<uint64_t> PoisonKeys(size_t n = 4) {
  std::vector<uint64_t> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = 0xdead0000 + i;
  return k;
}

void ExpectNoPoison(Server& server, size_t rows) {
  ArrayHashMap& t = server.table(0);
  for (uint64_t k : PoisonKeys(32)) EXPECT_EQ(t.Find(k), nullptr) << "poison key " << k;
  EXPECT_EQ(t.size(), rows);
}

class PsRawWorker : public ::testing::TestWithParam<BackendConfig> {};

TEST_P(PsRawWorker, BadRequestsGetErrorRepliesAndTouchNothing) {
  HandJob hj(GetParam());
  ASSERT_TRUE(hj.Start().ok());
  RawWorker& raw = *hj.raw;
  const auto good = GoodKeys();
  auto v0 = hj.Pull(good);
  ASSERT_TRUE(v0.ok()) << v0.status().ToString();
  ASSERT_TRUE(hj.Push(good, 0.5f).ok());
  auto v1 = hj.Pull(good);
  ASSERT_TRUE(v1.ok());
  for (size_t i = 0; i < v1->size(); ++i) ASSERT_EQ((*v1)[i], (*v0)[i] - 0.5f);

  const uint32_t dim = HandJob::kDim;
  const uint64_t rows = raw.rows_begin();
  // Bad requests mix good keys with poison: neither may change.
  std::vector<uint64_t> mixed = PoisonKeys();
  mixed.insert(mixed.end(), good.begin(), good.begin() + 3);
  const uint32_t n = static_cast<uint32_t>(mixed.size());
  struct Case {
    std::string what;
    std::vector<uint8_t> bytes;
    Code code;
    std::string text;
  };
  std::vector<Case> cases;
  auto add = [&](std::string what, RequestHeader h, const std::vector<uint64_t>& keys,
                 uint32_t grad_dim, Code code, std::string text) {
    h.seq = raw.next_seq++;
    cases.push_back({std::move(what), Request(h, keys, grad_dim, 9.0f), code, std::move(text)});
  };
  {
    RequestHeader h = Header(RequestType::kPush, 0, n, dim, 0);
    h.table = 3;
    add("unknown table", h, mixed, dim, Code::kNotFound, "table 3 does not exist");
  }
  add("wrong width", Header(RequestType::kPush, 0, n, dim + 1, 0), mixed, dim + 1,
      Code::kInvalidArgument, "width 4, the request says 5");
  {
    std::vector<uint64_t> many = PoisonKeys(17);
    add("too many keys", Header(RequestType::kPull, 0, 17, dim, rows), many, 0,
        Code::kResourceExhausted, "limit is 16");
    add("too many keys (push)", Header(RequestType::kPush, 0, 17, dim, 0), many, dim,
        Code::kResourceExhausted, "limit is 16");
  }
  add("rows past the arena", Header(RequestType::kPull, 0, n, dim, hj.job.arena_bytes - 16), mixed,
      0, Code::kOutOfRange, "outside the worker's row area");
  add("rows over the reply slots", Header(RequestType::kPushPull, 0, n, dim, 0), mixed, dim,
      Code::kOutOfRange, "outside the worker's row area");
  {
    RequestHeader h = Header(RequestType::kPush, 0, n, dim, 0);
    h.flags = 0x40;
    add("unknown flag", h, mixed, dim, Code::kInvalidArgument, "flags");
  }
  {
    RequestHeader h = Header(RequestType::kPull, 0, n, dim, rows);
    h.flags = kFlagFp16Rows;
    h.dest_stride = dim * 2;
    add("fp16 rows without a mirror", h, mixed, 0, Code::kInvalidArgument, "no fp16 mirror");
  }
  add("no keys", Header(RequestType::kPush, 0, 0, dim, 0), {}, dim, Code::kInvalidArgument,
      "no key");
  {
    RequestHeader h = Header(RequestType::kPushPull, 0, n, dim, rows);
    h.dest_stride = 8;
    add("short stride", h, mixed, dim, Code::kInvalidArgument, "stride");
  }
  for (const Case& c : cases) {
    RequestHeader h;
    std::memcpy(&h, c.bytes.data(), sizeof h);
    ASSERT_TRUE(raw.Send(c.bytes).ok()) << c.what;
    auto imm = raw.NextReply();
    ASSERT_TRUE(imm.ok()) << c.what << ": " << imm.status().ToString();
    EXPECT_EQ(ReplyImmKind(*imm), ReplyKind::kError) << c.what;
    EXPECT_EQ(ReplyImmSeq(*imm), h.seq) << c.what;
    const ReplyRecord r = raw.Slot(h.seq);
    EXPECT_EQ(r.magic, kReplyMagic) << c.what;
    EXPECT_EQ(r.seq, h.seq) << c.what;
    Status why = DecodeErrorRecord(r, h.seq);
    EXPECT_EQ(why.code(), c.code) << c.what << ": " << why.ToString();
    EXPECT_NE(why.message().find(c.text), std::string::npos) << c.what << ": " << why.message();
  }
  // Nothing landed in the raw worker's rows area.
  for (uint64_t i = rows; i < hj.job.arena_bytes; ++i) {
    ASSERT_EQ(raw.arena()[i], 0) << "arena byte " << i << " written by a refused request";
  }
  // The connection is healthy and the seqs of the refused requests were consumed: a correct
  // pull with the next seq is served, and sees the weights unchanged.
  {
    RequestHeader h = Header(RequestType::kPull, raw.next_seq++, 10, dim, rows);
    ASSERT_TRUE(raw.Send(Request(h, good, 0)).ok());
    auto imm = raw.NextReply();
    ASSERT_TRUE(imm.ok()) << imm.status().ToString();
    EXPECT_EQ(ReplyImmKind(*imm), ReplyKind::kOk);
    EXPECT_EQ(ReplyImmSeq(*imm), h.seq);
    const float* got = reinterpret_cast<const float*>(raw.arena() + rows);
    for (size_t i = 0; i < v1->size(); ++i) EXPECT_EQ(got[i], (*v1)[i]) << "weight " << i;
  }
  // And a correct push from the raw worker is applied once.
  {
    RequestHeader h = Header(RequestType::kPush, raw.next_seq++, 10, dim, 0);
    ASSERT_TRUE(raw.Send(Request(h, good, dim, 0.25f)).ok());
    auto imm = raw.NextReply();
    ASSERT_TRUE(imm.ok());
    EXPECT_EQ(ReplyImmKind(*imm), ReplyKind::kOk);
  }
  auto v2 = hj.Pull(good);
  ASSERT_TRUE(v2.ok());
  for (size_t i = 0; i < v2->size(); ++i) EXPECT_EQ((*v2)[i], (*v1)[i] - 0.25f);
  Status fin = hj.Finish();
  EXPECT_TRUE(fin.ok()) << fin.ToString();
  ExpectNoPoison(*hj.server, good.size());
  EXPECT_EQ(hj.server->stats().errors, cases.size());
}

// Framing violations: the server closes worker 1's connection (no reply), keeps serving worker
// 0, and creates nothing. One job per violation.
struct Violation {
  const char* name;
  // The request bytes and the ring offset to announce (UINT64_MAX: the raw worker's next one;
  // an offset past the ring is announced while the bytes go to offset 0).
  void (*make)(RawWorker&, std::vector<uint8_t>*, uint64_t*);
};

const Violation kViolations[] = {
    {"bad_magic",
     [](RawWorker&, std::vector<uint8_t>* b, uint64_t*) {
       RequestHeader h = Header(RequestType::kPush, 0, 4, HandJob::kDim, 0);
       h.magic = 0x0badf00d;
       *b = Request(h, PoisonKeys(), HandJob::kDim);
     }},
    {"unknown_type",
     [](RawWorker&, std::vector<uint8_t>* b, uint64_t*) {
       RequestHeader h = Header(RequestType::kPush, 0, 4, HandJob::kDim, 0);
       h.type = 9;
       *b = Request(h, PoisonKeys(), HandJob::kDim);
     }},
    {"payload_bytes_mismatch",
     [](RawWorker&, std::vector<uint8_t>* b, uint64_t*) {
       RequestHeader h = Header(RequestType::kPush, 0, 4, HandJob::kDim, 0);
       h.payload_bytes -= 4;
       *b = Request(h, PoisonKeys(), HandJob::kDim);
     }},
    {"payload_past_the_ring",
     [](RawWorker& r, std::vector<uint8_t>* b, uint64_t* at) {
       RequestHeader h = Header(RequestType::kPush, 0, 4, HandJob::kDim, 0);
       *b = Request(h, PoisonKeys(), HandJob::kDim);
       b->resize(sizeof h);  // only the header fits at the ring's last 64 bytes
       *at = r.ring_bytes - 64;
     }},
    {"offset_outside_the_ring",
     [](RawWorker& r, std::vector<uint8_t>* b, uint64_t* at) {
       *b = Request(Header(RequestType::kPull, 0, 4, HandJob::kDim, r.rows_begin()), PoisonKeys(),
                    0);
       *at = r.ring_bytes;
     }},
    {"seq_out_of_order",
     [](RawWorker& r, std::vector<uint8_t>* b, uint64_t*) {
       *b = Request(Header(RequestType::kPush, 1, 4, HandJob::kDim, r.rows_begin()), PoisonKeys(),
                    HandJob::kDim);
     }},
    {"seq_out_of_order_with_bad_content",
     [](RawWorker&, std::vector<uint8_t>* b, uint64_t*) {
       RequestHeader h = Header(RequestType::kPush, 5, 4, HandJob::kDim, 0);
       h.table = 9;
       *b = Request(h, PoisonKeys(), HandJob::kDim);
     }},
};

struct ViolationParam {
  BackendConfig config;
  size_t violation;
};

void PrintTo(const ViolationParam& p, std::ostream* os) {
  *os << p.config.name << " " << kViolations[p.violation].name;
}

class PsFraming : public ::testing::TestWithParam<ViolationParam> {};

TEST_P(PsFraming, ViolationClosesOnlyThatWorker) {
  const Violation& v = kViolations[GetParam().violation];
  HandJob hj(GetParam().config);
  ASSERT_TRUE(hj.Start().ok());
  const auto good = GoodKeys();
  auto v0 = hj.Pull(good);
  ASSERT_TRUE(v0.ok()) << v0.status().ToString();
  std::vector<uint8_t> bytes;
  uint64_t at = UINT64_MAX;
  v.make(*hj.raw, &bytes, &at);
  if (at == UINT64_MAX) {
    ASSERT_TRUE(hj.raw->Send(bytes).ok());
  } else {
    const uint64_t write_at = at < hj.raw->ring_bytes ? at : 0;
    ASSERT_TRUE(
        hj.raw->Write(write_at, bytes, true, static_cast<uint32_t>(at / kRequestAlign)).ok());
  }
  Status closed = hj.raw->WaitClosed(hj.job.peer_timeout + Millis(2000));
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  // Worker 0 is still served, and sees nothing changed.
  ASSERT_TRUE(hj.Push(good, 1.0f).ok());
  auto v1 = hj.Pull(good);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  for (size_t i = 0; i < v1->size(); ++i) EXPECT_EQ((*v1)[i], (*v0)[i] - 1.0f);
  Status fin = hj.Finish();
  // The job may end by shutdown, or by the server reporting worker 1 lost (after its grace).
  EXPECT_TRUE(fin.ok() || fin.message().find("worker 1") != std::string::npos) << fin.ToString();
  ExpectNoPoison(*hj.server, good.size());
}

std::vector<ViolationParam> ViolationParams() {
  std::vector<ViolationParam> out;
  for (const BackendConfig& c : JobConfigs()) {
    for (size_t i = 0; i < std::size(kViolations); ++i) out.push_back({c, i});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, PsFraming, ::testing::ValuesIn(ViolationParams()),
                         [](const ::testing::TestParamInfo<ViolationParam>& info) {
                           return info.param.config.TestName() + "_" +
                                  kViolations[info.param.violation].name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsFraming);

// BSP stages pushes in the ring until the clock is applied. A worker that rewrites a staged
// push before then (into another request type, or garbage) loses its connection; the server
// survives and applies everyone else's pushes.
TEST_P(PsRawWorker, StagedPushRewrittenBeforeItsClockIsRefused) {
  const uint32_t dim = HandJob::kDim;
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant == 0   ? "rewritten into a pull"
                 : variant == 1 ? "magic overwritten"
                                : "left alone");
    HandJob hj(GetParam(), Consistency::kBsp);
    ASSERT_TRUE(hj.Start().ok());
    RawWorker& raw = *hj.raw;
    const auto good = GoodKeys();
    const auto poison = PoisonKeys();
    auto v0 = hj.Pull(good);
    ASSERT_TRUE(v0.ok()) << v0.status().ToString();
    // Worker 1 stages a push of poison keys; the server acknowledges it.
    RequestHeader h = Header(RequestType::kPush, raw.next_seq++, 4, dim, 0);
    uint64_t at = 0;
    ASSERT_TRUE(raw.Send(Request(h, poison, dim), &at).ok());
    auto imm = raw.NextReply();
    ASSERT_TRUE(imm.ok()) << imm.status().ToString();
    ASSERT_EQ(ReplyImmKind(*imm), ReplyKind::kOk);
    if (variant == 0) {
      RequestHeader pull = Header(RequestType::kPull, h.seq, 4, dim, raw.rows_begin());
      ASSERT_TRUE(raw.Write(at, Request(pull, poison, 0), false, 0).ok());
    } else if (variant == 1) {
      RequestHeader junk = h;
      junk.magic = 0;
      ASSERT_TRUE(raw.Write(at, Request(junk, poison, dim), false, 0).ok());
    }
    // Worker 0 pushes in the same clock; both clock.
    std::vector<float> grads(good.size() * dim, 0.5f);
    auto push = hj.worker->Push(0, good, grads);
    ASSERT_TRUE(push.ok());
    ASSERT_TRUE(hj.worker->Wait(*push).ok());
    hj.worker->Release(*push);
    ASSERT_TRUE(SendKind(*raw.control, ControlKind::kClock, 1).ok());
    Status clocked = hj.worker->Clock();
    ASSERT_TRUE(clocked.ok()) << clocked.ToString();
    if (variant != 2) {
      EXPECT_TRUE(raw.WaitClosed(hj.job.peer_timeout + Millis(2000)).ok());
    }
    auto v1 = hj.Pull(good);
    ASSERT_TRUE(v1.ok()) << v1.status().ToString();
    for (size_t i = 0; i < v1->size(); ++i) EXPECT_EQ((*v1)[i], (*v0)[i] - 0.5f);
    if (variant == 2) {
      // The untouched staged push was applied: its keys exist, moved by -1 from their init.
      auto p = hj.Pull(poison);
      ASSERT_TRUE(p.ok());
      std::vector<float> init(dim);
      for (size_t i = 0; i < poison.size(); ++i) {
        InitWeights(hj.job.tables[0].init, poison[i], dim, init.data());
        for (uint32_t d = 0; d < dim; ++d) EXPECT_EQ((*p)[i * dim + d], init[d] - 1.0f);
      }
    }
    Status fin = hj.Finish();
    EXPECT_TRUE(fin.ok() || fin.message().find("worker 1") != std::string::npos) << fin.ToString();
    if (variant != 2) ExpectNoPoison(*hj.server, good.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PsBadRequest, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsBadRequest);
INSTANTIATE_TEST_SUITE_P(Backends, PsRawWorker, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsRawWorker);

}  // namespace
}  // namespace ferry::ps::testing
