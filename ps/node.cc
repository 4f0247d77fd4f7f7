// One rank of a job: environment, rendezvous, roles, start barrier (see node.h).
#include "ps/node.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ps/job/checkpoint.h"
#include "ps/launch/rendezvous.h"

namespace ferry::ps {
namespace {

// Set by SIGTERM in an elastic job's server rank (lock-free: safe in a handler).
std::atomic<bool> g_sigterm_leave{false};

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The local IPv4 address this host uses to reach `address` ("host:port"): a connected UDP
// socket sends nothing but gets a source address from the routing table.
std::string LocalAddressToward(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return "127.0.0.1";
  const std::string host = address.substr(0, colon);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "127.0.0.1";
  std::string out = "127.0.0.1";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      sockaddr_in local{};
      socklen_t len = sizeof local;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        char text[INET_ADDRSTRLEN] = {};
        if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr) out = text;
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

// Waits for `kind` on `control`; a kReject or kFailure becomes the error, and so does `stop`.
Result<ControlMessage> Expect(ControlClient* control, ControlKind kind, Millis timeout,
                              const std::string& who, const std::atomic<bool>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (stop) return Cancelled(who + ": stopped while starting");
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Timeout(who + ": no " + std::string(ControlKindName(kind)) +
                     " from the coordinator within " + std::to_string(timeout.count()) + " ms");
    }
    auto m = control->Receive(std::min(left, Millis(100)));
    if (!m.ok()) {
      if (m.status().code() == Code::kTimeout) continue;
      return m.status().Annotate(who);
    }
    if (m->kind == kind) return m;
    if (m->kind == ControlKind::kReject) {
      return InvalidArgument(who + ": the coordinator refused this rank: " + m->text);
    }
    if (m->kind == ControlKind::kFailure) {
      return PeerFailure(who + ": job failed before it started: " + m->text);
    }
    // Only a join slot hears it before its start (the job ended while it waited to join).
    if (m->kind == ControlKind::kShutdown) {
      return Cancelled(who + ": the job ended before this rank joined it (" +
                       (m->text.empty() ? std::string("shut down") : m->text) + ")");
    }
  }
}

}  // namespace

bool Node::worker_leave_requested() const {
  return worker_ != nullptr && job_worker_leaves_ && g_sigterm_leave.load();
}

Result<std::string> ResolveTransportName(const JobSpec& job) {
  if (job.transport != "auto") return job.transport;
  for (const BackendInfo& b : ListBackends()) {
    if (b.available) return b.name;
  }
  return Unsupported("no transport backend is available");
}

Result<std::unique_ptr<Node>> Node::Start(const JobSpec& job) {
  FERRY_ASSIGN_OR_RETURN(LaunchEnv env, DetectLaunchEnv());
  return Start(job, env);
}

Result<std::unique_ptr<Node>> Node::Start(const JobSpec& spec, const LaunchEnv& env) {
  FERRY_RETURN_IF_ERROR(ValidateJob(spec));
  JobSpec job = spec;
  if (!job.restore_dir.empty()) {
    // A directory of periodic checkpoints means its newest. Every rank resolves it alone; the
    // fingerprint (which covers the result) makes sure they all found the same one.
    auto dir = ResolveCheckpoint(job.restore_dir);
    if (!dir.ok()) return dir.status().Annotate("rank " + std::to_string(env.rank));
    job.restore_dir = *dir;
  }
  std::unique_ptr<Node> n(new Node());
  n->env_ = env;
  FERRY_ASSIGN_OR_RETURN(n->roles_, RolesOf(job, env.rank, env.size));
  Node* raw = n.get();
  auto start = [raw, &job](const std::string& bind) -> Result<std::string> {
    FERRY_ASSIGN_OR_RETURN(raw->coordinator_, Coordinator::Start(job, bind));
    return raw->coordinator_->address();
  };
  auto addr = FindCoordinator(env, start, job.startup_timeout);
  if (!addr.ok()) return addr.status().Annotate("rank " + std::to_string(env.rank));
  n->coordinator_address_ = *addr;
  const char* dh = std::getenv("FERRY_DATA_HOST");
  n->data_host_ = dh != nullptr && *dh != '\0' ? dh : LocalAddressToward(*addr);
  Status s = n->StartRoles(job);
  if (!s.ok()) {
    s = s.Annotate("rank " + std::to_string(env.rank));
    n->ReportStartFailure(job, s);
    return s;
  }
  return n;
}

Result<std::unique_ptr<Transport>> Node::CreateDataTransport(const JobSpec& job, Role role,
                                                             uint32_t index) {
  TransportOptions o = DataTransportOptions(
      job, role == Role::kWorker ? EncodeWorkerHello(index) : EncodeServerHello(index));
  FERRY_ASSIGN_OR_RETURN(std::string name, ResolveTransportName(job));
  auto t = CreateTransport(name, o);
  if (!t.ok()) {
    return t.status().Annotate(std::string(RoleName(role)) + " " + std::to_string(index) +
                               ": create the " + name + " data transport");
  }
  if (!job.wrap_data_transport) return t;
  std::unique_ptr<Transport> wrapped = job.wrap_data_transport(std::move(*t), role, index);
  if (wrapped == nullptr) {
    return InvalidArgument(std::string(RoleName(role)) + " " + std::to_string(index) +
                           ": JobSpec::wrap_data_transport returned no transport");
  }
  return wrapped;
}

Result<ControlClient*> Node::RegisterRole(const JobSpec& job, Role role, uint32_t index,
                                          const std::string& data_address, Transport* data,
                                          std::unique_ptr<ControlClient>* out) {
  FERRY_ASSIGN_OR_RETURN(
      *out, ControlClient::Connect(
                coordinator_address_, job, [data] { data->Wake(); }, job.startup_timeout));
  // A worker computes between calls, and a role waits on the control plane alone while the job
  // starts (Expect): nothing would drive its data transport, and a tcp peer that hears nothing
  // for peer_timeout declares the connection dead. The pump thread drives it meanwhile; an
  // empty Poll takes no completions from the owner.
  (*out)->SetIdleHook([data] { (void)data->Poll(std::span<Completion>()); },
                      std::max(Millis(1), job.peer_timeout / 4));
  ControlMessage reg;
  reg.kind = ControlKind::kRegister;
  reg.rank = static_cast<uint32_t>(env_.rank);
  reg.role = role;
  reg.index = index;
  reg.value = job.Fingerprint();
  reg.text = standby_address_;  // this rank's standby coordinator, if it runs one
  MemberInfo self;
  self.rank = reg.rank;
  self.role = role;
  self.index = index;
  self.data_address = data_address;
  self.host = HostName();
  self.pid = static_cast<uint32_t>(getpid());
  reg.members.push_back(self);
  FERRY_RETURN_IF_ERROR((*out)->Send(reg));
  return out->get();
}

Status Node::StartRoles(const JobSpec& job) {
  if (job.replicas > 1 && job.coordinator_standby && env_.rank == kStandbyRank &&
      env_.size > kStandbyRank) {
    // The standby coordinator (coordinator.h): it listens where this rank's data does, which
    // every rank reaches; its address goes to everyone in the membership.
    FERRY_ASSIGN_OR_RETURN(coordinator_,
                           Coordinator::StartStandby(job, data_host_ + ":0", kStandbyRank));
    standby_address_ = coordinator_->address();
  }
  // Bring every role up to "registered" first: the coordinator publishes the membership only
  // once every member of the job registered, and a server rank is server_threads members (a
  // colocated rank one more).
  if (roles_.server >= 0 || roles_.spare >= 0 || roles_.join >= 0) {
    // A spare rank runs one server, index shard_servers() + j (job.h "spares"); a join slot's
    // rank one, first_join_slot() + j, which joins the running job (job.h "join_slots").
    const bool one = roles_.spare >= 0 || roles_.join >= 0;
    const uint32_t n = one ? 1 : job.server_threads;
    servers_ = std::vector<ShardServer>(n);
    for (uint32_t t = 0; t < n; ++t) {
      ShardServer& s = servers_[t];
      s.index = roles_.join >= 0    ? job.first_join_slot() + static_cast<uint32_t>(roles_.join)
                : roles_.spare >= 0 ? job.shard_servers() + static_cast<uint32_t>(roles_.spare)
                                    : ShardServerOf(job, static_cast<uint32_t>(roles_.server), t);
      FERRY_ASSIGN_OR_RETURN(auto data, CreateDataTransport(job, Role::kServer, s.index));
      FERRY_ASSIGN_OR_RETURN(s.server, Server::Create(job, s.index, std::move(data), data_host_));
      FERRY_RETURN_IF_ERROR(RegisterRole(job, Role::kServer, s.index, s.server->data_address(),
                                         s.server->transport(), &s.control)
                                .status());
    }
  }
  if (roles_.worker >= 0) {
    const uint32_t i = static_cast<uint32_t>(roles_.worker);
    FERRY_ASSIGN_OR_RETURN(auto data, CreateDataTransport(job, Role::kWorker, i));
    FERRY_ASSIGN_OR_RETURN(worker_, Worker::Create(job, i, std::move(data)));
    FERRY_RETURN_IF_ERROR(
        RegisterRole(job, Role::kWorker, i, "", worker_->transport(), &worker_control_).status());
  }
  // Elastic jobs: SIGTERM on a server rank is a graceful leave (its shards move to the other
  // servers first; Server::RequestLeave), not an end; so it is on a worker rank with worker join
  // slots (the program leaves at its next clock boundary: worker_leave_requested).
  if (job.elastic && (!servers_.empty() || (worker_ != nullptr && job.worker_join_slots > 0))) {
    struct sigaction sa = {};
    sa.sa_handler = [](int) { g_sigterm_leave.store(true); };
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, nullptr) != 0) {
      return IoError("install the SIGTERM handler", errno);
    }
    for (ShardServer& s : servers_) s.server->LeaveWhenSet(&g_sigterm_leave);
    job_worker_leaves_ = job.worker_join_slots > 0;
  }
  // Each shard server accepts on its own thread while this thread's worker (if any) connects.
  for (ShardServer& s : servers_) {
    s.thread =
        std::thread([this, &s, timeout = job.startup_timeout] { RunShardServer(&s, timeout); });
  }
  if (worker_ != nullptr) {
    Status s = StartWorker(job);
    if (roles_.worker_join && s.code() == Code::kCancelled && !stopping_) {
      // The job ended before this worker join slot joined: nothing to do, and nothing failed.
      std::fprintf(stderr, "ferry worker %d: %s\n", roles_.worker, s.message().c_str());
      // The control client first, as in ~Node: its pump thread calls into the worker's data
      // transport (Wake, the idle hook) until it stops. (The other way round crashed now and
      // then in PsWorkers.AClosedJoinGateTurnsAWorkerJoinSlotAwayCleanly.)
      worker_control_.reset();
      worker_.reset();
    } else {
      FERRY_RETURN_IF_ERROR(s);
    }
  }
  // The contract (node.h): Start returns once the whole job passed the start barrier, on a
  // server-only rank too. (Measured without this: rank 0 = coordinator + server 0 returned
  // at once, and a test that killed it "1 s into the job" killed it before the others joined.)
  for (ShardServer& s : servers_) {
    Status st = s.started.get_future().get();
    if (!st.ok()) return st.Annotate("server " + std::to_string(s.index));
  }
  return Status::Ok();
}

Status Node::StartWorker(const JobSpec& job) {
  const std::string who = "worker " + std::to_string(roles_.worker);
  FERRY_ASSIGN_OR_RETURN(ControlMessage mem, Expect(worker_control_.get(), ControlKind::kMembership,
                                                    job.startup_timeout, who, stopping_));
  if (roles_.worker_join) {
    // A worker join slot joins the running job (job.h "worker_join_slots").
    FERRY_RETURN_IF_ERROR(
        worker_->ConnectJoining(mem.members, mem.data, worker_control_.get(), job.startup_timeout));
  } else {
    FERRY_RETURN_IF_ERROR(
        worker_->ConnectServers(mem.members, worker_control_.get(), job.startup_timeout));
  }
  ControlMessage ready;
  ready.kind = ControlKind::kReady;
  FERRY_RETURN_IF_ERROR(worker_control_->Send(ready));
  FERRY_ASSIGN_OR_RETURN(ControlMessage start, Expect(worker_control_.get(), ControlKind::kStart,
                                                      job.startup_timeout, who, stopping_));
  if (roles_.worker_join) FERRY_RETURN_IF_ERROR(worker_->StartAt(start));
  return Status::Ok();
}

void Node::RunShardServer(ShardServer* ss, Millis timeout) {
  const std::string who = "server " + std::to_string(ss->index);
  Server* server = ss->server.get();
  ControlClient* control = ss->control.get();
  auto mem = Expect(control, ControlKind::kMembership, timeout, who, stopping_);
  Status s = mem.status();
  if (s.ok()) s = server->SetMembership(*mem);
  if (s.ok()) {
    // With replicas every server also connects to its successors while it accepts its
    // predecessors: the connections form a ring, so both happen at once (the transport is
    // thread-safe).
    Status connected;
    std::thread successors([&] {
      connected = server->ConnectSuccessors(mem->members, timeout);
      if (!connected.ok()) server->RequestStop();  // ends AcceptWorkers' wait
    });
    s = server->AcceptWorkers(control, timeout);
    successors.join();
    if (!connected.ok()) s = connected;
  }
  if (s.ok()) {
    ControlMessage ready;
    ready.kind = ControlKind::kReady;
    s = control->Send(ready);
  }
  if (s.ok()) s = Expect(control, ControlKind::kStart, timeout, who, stopping_).status();
  if (roles_.join >= 0 && s.code() == Code::kCancelled && !stopping_) {
    // The job ended before this join slot joined: nothing to serve, and nothing failed.
    std::fprintf(stderr, "ferry %s: %s\n", who.c_str(), s.message().c_str());
    ss->started.set_value(Status::Ok());
    return;
  }
  ss->started.set_value(s);
  if (s.ok()) s = server->Serve(control);
  ss->status = s.ok() ? s : s.Annotate(who + " (rank " + std::to_string(env_.rank) + ")");
}

void Node::ReportStartFailure(const JobSpec& job, const Status& why) {
  // Without this the others would wait for this rank until the startup timeout.
  ControlClient* c = worker_control_     ? worker_control_.get()
                     : !servers_.empty() ? servers_.front().control.get()
                                         : nullptr;
  std::unique_ptr<ControlClient> own;
  if (c == nullptr) {
    auto fresh = ControlClient::Connect(coordinator_address_, job, nullptr, Millis(5000));
    if (!fresh.ok()) return;
    own = std::move(fresh).value();
    c = own.get();
  }
  ControlMessage f;
  f.kind = ControlKind::kFailure;
  f.rank = static_cast<uint32_t>(env_.rank);
  f.text = why.ToString();
  if (c->Send(f).ok()) (void)c->Receive(Millis(200));  // let it leave before closing
  // Rank 0 hosts the coordinator: keep it up while it tells the ranks still registering.
  if (coordinator_ != nullptr && !coordinator_->standing_by()) (void)coordinator_->Join();
}

Status Node::Join() {
  Status first;
  if (worker_ != nullptr && !worker_finished_) {
    worker_finished_ = true;
    Status s = worker_->Finish();
    if (!s.ok() && first.ok()) first = s;
  }
  for (ShardServer& s : servers_) {
    if (s.thread.joinable()) s.thread.join();
    if (!s.status.ok() && first.ok()) first = s.status;
  }
  // Leave the job: the coordinator ends once every member's control connection closed.
  worker_control_.reset();
  for (ShardServer& s : servers_) s.control.reset();
  if (coordinator_ != nullptr && coordinator_->standing_by()) {
    coordinator_.reset();  // the job ended (or this rank left it) with its coordinator alive
  } else if (coordinator_ != nullptr) {
    Status s = coordinator_->Join();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Node::~Node() {
  // A Node destroyed without Join (an error path): stop the server threads, then tear down in
  // reverse order of creation.
  stopping_ = true;
  for (ShardServer& s : servers_) {
    if (s.server != nullptr) s.server->RequestStop();
  }
  for (ShardServer& s : servers_) {
    if (s.thread.joinable()) s.thread.join();
  }
  // The control clients go first: their pump threads call into the roles' data transports
  // (Wake on each message or failure, the idle hook), which die with the worker and the servers.
  // Leaving the control plane first also tells the coordinator at once that this rank is gone.
  worker_control_.reset();
  for (ShardServer& s : servers_) s.control.reset();
  // A colocated rank's worker and servers are connected to each other, and a rank's shard
  // servers to each other (replica chains): closing an endpoint (ucx) waits for the peer's
  // transport to take part, and one destroyed after the other would wait its whole close
  // timeout for a peer nobody drives any more. All go down at once.
  std::vector<std::thread> ends;
  for (ShardServer& s : servers_) ends.emplace_back([&s] { s.server.reset(); });
  worker_.reset();
  for (std::thread& t : ends) t.join();
  servers_.clear();
  coordinator_.reset();
}

}  // namespace ferry::ps
