// Rank 0 dealing a stream to the worker ranks over TCP (see stream_ranks.h).
#include "tools/train/stream_ranks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "models/data/input.h"
#include "tools/train/stream_launch.h"

namespace ferry::train {
namespace {

using Clock = std::chrono::steady_clock;

// The hello a worker sends: the prefix, the coordinator's address, its index; rank 0's answer.
constexpr std::string_view kHello = "ferry-stream 1 ";
constexpr std::string_view kAnswer = "ferry-stream ok\n";
constexpr size_t kMaxHello = 512;
// How long one connection may take to say its hello (a stranger that says nothing is dropped).
constexpr std::chrono::seconds kHelloTimeout{5};
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

struct HostPort {
  std::string host;  // without IPv6 brackets
  uint16_t port = 0;
};

Result<uint16_t> ParsePort(std::string_view text, const std::string& what) {
  uint32_t v = 0;
  if (text.empty() || text.size() > 5) return InvalidArgument(what + " is not a port");
  for (char c : text) {
    if (c < '0' || c > '9') return InvalidArgument(what + " is not a port");
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0 || v > 65535) return InvalidArgument(what + " is not a port (1-65535)");
  return static_cast<uint16_t>(v);
}

Result<HostPort> SplitAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("'" + address + "' is not host:port");
  }
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  FERRY_ASSIGN_OR_RETURN(hp.port, ParsePort(std::string_view(address).substr(colon + 1),
                                            "the port of '" + address + "'"));
  return hp;
}

bool NumericHost(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits until fd has `events` or the deadline passed (false).
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, MillisLeft(deadline));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

// Reads one '\n'-terminated line of at most kMaxHello bytes, byte by byte: what follows it (the
// stream) is not this function's to take. "" on EOF, an error or the deadline.
std::string ReadLine(int fd, Clock::time_point deadline) {
  std::string line;
  while (line.size() < kMaxHello) {
    if (!WaitFor(fd, POLLIN, deadline)) return "";
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    line.push_back(c);
    if (c == '\n') return line;
  }
  return "";
}

bool WriteAll(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return false;
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

struct AddrInfoFree {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfo = std::unique_ptr<addrinfo, AddrInfoFree>;

Result<AddrInfo> Resolve(const char* host, uint16_t port, int flags, const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* out = nullptr;
  const int rc = getaddrinfo(host, std::to_string(port).c_str(), &hints, &out);
  if (rc != 0) return Status(Code::kIoError, "resolve " + address + ": " + gai_strerror(rc));
  return AddrInfo(out);
}

// rank 0: a non-blocking listener on the dealer address (the wildcard for a host name).
Result<models::Fd> Listen(const HostPort& hp, const std::string& address, int backlog) {
  const bool numeric = NumericHost(hp.host);
  FERRY_ASSIGN_OR_RETURN(AddrInfo ai,
                         Resolve(numeric ? hp.host.c_str() : nullptr, hp.port,
                                 AI_PASSIVE | (numeric ? AI_NUMERICHOST : 0), address));
  models::Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return IoError("socket for the stream dealer", errno);
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
    const int err = errno;
    return Status(Code::kIoError, std::string("rank 0 cannot listen for the stream's workers on ") +
                                      address + " (" + std::strerror(err) + "): set " +
                                      kStreamPortEnv + " to a free port, the same for every rank");
  }
  return fd;
}

// rank 0: one connection from the listener, checked by its hello
// ("ferry-stream 1 <coordinator> <worker>\n"): a worker w of [first, end) not yet
// taken[w - first], answered. Worker -1: a stranger, another job's worker or one connected
// before (dropped), or nothing to accept yet.
std::pair<int, models::Fd> AcceptOne(int listener, const std::string& expect, uint32_t first,
                                     uint32_t end, const std::vector<bool>& taken,
                                     Clock::time_point deadline, int* error) {
  *error = 0;
  models::Fd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (fd.get() < 0) {
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) *error = errno;
    return {-1, models::Fd()};
  }
  const std::string hello = ReadLine(fd.get(), std::min(deadline, Clock::now() + kHelloTimeout));
  if (hello.size() < expect.size() + 2 || hello.compare(0, expect.size(), expect) != 0) {
    return {-1, models::Fd()};
  }
  uint32_t w = 0;
  bool digits = true;
  for (size_t i = expect.size(); i + 1 < hello.size(); ++i) {
    digits &= hello[i] >= '0' && hello[i] <= '9' && w < end;
    w = w * 10 + static_cast<uint32_t>(hello[i] - '0');
  }
  if (!digits || w < first || w >= end || taken[w - first]) return {-1, models::Fd()};
  if (!WriteAll(fd.get(), kAnswer, deadline)) return {-1, models::Fd()};
  const int nodelay = 1;
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
  return {static_cast<int>(w), std::move(fd)};
}

// rank 0: one connection per worker whose sink is still empty (AcceptOne); (*sinks)[w] becomes
// worker w's.
Status AcceptWorkers(int listener, const std::string& coordinator, const std::string& address,
                     std::vector<models::Fd>* out) {
  std::vector<models::Fd>& sinks = *out;
  const uint32_t workers = static_cast<uint32_t>(sinks.size());
  std::vector<bool> taken(workers);  // (colocated rank 0's own worker has its sink already)
  uint32_t joined = 0;
  for (uint32_t w = 0; w < workers; ++w) {
    taken[w] = sinks[w].get() >= 0;
    joined += taken[w] ? 1 : 0;
  }
  const std::string expect = std::string(kHello) + coordinator + " ";
  const Clock::time_point deadline = Clock::now() + kStreamConnectTimeout;
  while (joined < workers) {
    if (!WaitFor(listener, POLLIN, deadline)) {
      std::string missing;
      for (uint32_t w = 0; w < workers; ++w) {
        if (sinks[w].get() < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(w);
      }
      return Timeout("rank 0 dealt the stream to " + std::to_string(joined) + " of " +
                     std::to_string(workers) + " workers: worker " + missing +
                     " did not connect to " + address + " within " +
                     std::to_string(kStreamConnectTimeout.count()) + " s");
    }
    int error = 0;
    auto [w, fd] = AcceptOne(listener, expect, 0, workers, taken, deadline, &error);
    if (error != 0) return IoError("accept a worker's stream connection on " + address, error);
    if (w < 0) continue;
    sinks[static_cast<size_t>(w)] = std::move(fd);
    taken[static_cast<size_t>(w)] = true;
    ++joined;
  }
  return Status::Ok();
}

// Colocated rank 0's own worker: its share through a pipe that becomes descriptor 0; a stream on
// standard input is read first from a duplicate, *saved ("/dev/fd/N" in *input). The pipe's
// write end is the sink.
Result<models::Fd> OwnWorkerPipe(std::string* input, models::Fd* saved) {
  if (*input == "-") {
    *saved = models::Fd(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
    if (saved->get() < 0) return IoError("duplicate standard input for the stream dealer", errno);
    *input = "/dev/fd/" + std::to_string(saved->get());
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe for rank 0's own worker", errno);
  models::Fd read_end(fds[0]), write_end(fds[1]);
  (void)::fcntl(write_end.get(), F_SETPIPE_SZ, kStreamPipeBytes);
  if (::dup2(read_end.get(), STDIN_FILENO) < 0) {
    return IoError("make rank 0's share of the stream standard input", errno);
  }
  return write_end;
}

// One connection attempt; -errno when the connection itself failed.
int ConnectOnce(const addrinfo& ai, Clock::time_point deadline, models::Fd* out) {
  models::Fd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return -errno;
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return -errno;
    if (!WaitFor(fd.get(), POLLOUT, deadline)) return -ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return -errno;
    if (err != 0) return -err;
  }
  *out = std::move(fd);
  return 0;
}

// Rank 0's dealer while it lives, for the signal handler (StreamDealer::Stop is
// async-signal-safe: an atomic store and a write to an eventfd).
std::atomic<models::StreamDealer*> signal_dealer{nullptr};
struct sigaction previous[std::size(kSignals)];

void OnStopSignal(int) {
  if (models::StreamDealer* d = signal_dealer.load()) d->Stop();
}

}  // namespace

Result<std::vector<std::string>> StreamDealerAddresses(const std::string& coordinator,
                                                       const char* port_override) {
  FERRY_ASSIGN_OR_RETURN(HostPort hp, SplitAddress(coordinator));
  std::vector<uint16_t> ports;
  if (port_override != nullptr && *port_override != '\0') {
    FERRY_ASSIGN_OR_RETURN(
        const uint16_t port,
        ParsePort(port_override, std::string(kStreamPortEnv) + "='" + port_override + "'"));
    ports.push_back(port);
  } else if (hp.port == 65535) {
    return InvalidArgument(
        "the coordinator listens on port 65535, so the stream dealer has no "
        "port next to it: set " +
        std::string(kStreamPortEnv));
  } else {
    for (uint32_t p = hp.port + 1u; p <= 65535u && ports.size() < kStreamPortTries; ++p) {
      ports.push_back(static_cast<uint16_t>(p));
    }
  }
  const bool v6 = hp.host.find(':') != std::string::npos;
  std::vector<std::string> out;
  for (uint16_t p : ports)
    out.push_back((v6 ? "[" + hp.host + "]" : hp.host) + ":" + std::to_string(p));
  return out;
}

RankStreamDealer::RankStreamDealer(std::unique_ptr<models::StreamDealer> dealer)
    : dealer_(std::move(dealer)) {}

void RankStreamDealer::AcceptJoiners(const std::string& expect, uint32_t first, uint32_t end) {
  std::vector<bool> taken(end - first, false);  // a join slot connects once
  while (true) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (p[1].revents != 0) return;  // Finish
    if (p[0].revents == 0) continue;
    int error = 0;
    auto [w, fd] =
        AcceptOne(listener_.get(), expect, first, end, taken, Clock::now() + kHelloTimeout, &error);
    if (w < 0) continue;
    taken[static_cast<size_t>(w) - first] = true;
    dealer_->AddSink(std::move(fd));
  }
}

Result<std::unique_ptr<RankStreamDealer>> RankStreamDealer::Start(const models::TrainOptions& o,
                                                                  const std::string& coordinator,
                                                                  uint32_t workers, int own_worker,
                                                                  uint32_t join_slots) {
  models::DealerOptions d = StreamDealerOptions(o);
  d.open = join_slots > 0;
  std::vector<models::Fd> sinks(workers);
  models::Fd saved_stdin;
  if (own_worker >= 0) {
    FERRY_ASSIGN_OR_RETURN(sinks[static_cast<size_t>(own_worker)],
                           OwnWorkerPipe(&d.input, &saved_stdin));
  }
  models::Fd listener_kept;
  if (own_worker < 0 || workers > 1 || join_slots > 0) {
    FERRY_ASSIGN_OR_RETURN(std::vector<std::string> addresses,
                           StreamDealerAddresses(coordinator, std::getenv(kStreamPortEnv)));
    // The first candidate free: the workers try them in the same order.
    Result<models::Fd> listener = Internal("no stream dealer address");
    std::string address;
    for (const std::string& a : addresses) {
      FERRY_ASSIGN_OR_RETURN(HostPort hp, SplitAddress(a));
      address = a;
      listener = Listen(hp, a, static_cast<int>(std::min(workers + 8, 4096u)));
      if (listener.ok()) break;
    }
    if (!listener.ok()) return listener.status();
    FERRY_RETURN_IF_ERROR(AcceptWorkers(listener->get(), coordinator, address, &sinks));
    listener_kept = std::move(*listener);
  }
  for (models::Fd& s : sinks) d.sinks.push_back(s.release());
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<models::StreamDealer> dealer,
                         models::StreamDealer::Start(std::move(d)));
  std::unique_ptr<RankStreamDealer> r(new RankStreamDealer(std::move(dealer)));
  r->saved_stdin_ = std::move(saved_stdin);
  if (join_slots > 0) {
    // Worker join slots connect while the stream runs (their hello names W + j).
    r->listener_ = std::move(listener_kept);
    r->wake_ = models::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (r->wake_.get() < 0) return IoError("eventfd for the stream dealer's joiners", errno);
    r->joiners_ =
        std::thread(&RankStreamDealer::AcceptJoiners, r.get(),
                    std::string(kHello) + coordinator + " ", workers, workers + join_slots);
  }
  // The first SIGINT, SIGTERM or SIGHUP ends the stream; SA_RESETHAND makes a second one act as
  // it did before (kill). A signal that was ignored (nohup) stays ignored.
  signal_dealer.store(r->dealer_.get());
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    (void)::sigaction(kSignals[i], &sa, &previous[i]);
    if (previous[i].sa_handler == SIG_IGN) (void)::sigaction(kSignals[i], &previous[i], nullptr);
  }
  r->signals_ = true;
  return r;
}

void RankStreamDealer::StopJoiners() {
  if (!joiners_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  joiners_.join();
}

void RankStreamDealer::RestoreSignals() {
  if (!signals_) return;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    (void)::sigaction(kSignals[i], &previous[i], nullptr);
  }
  signal_dealer.store(nullptr);
  signals_ = false;
}

RankStreamDealer::~RankStreamDealer() {
  StopJoiners();
  RestoreSignals();
}

int RankStreamDealer::Finish(const models::TrainOptions& o, int job_code) {
  // The job is over: whatever the dealer still holds has no reader.
  dealer_->Stop();
  StopJoiners();
  Status dealt = dealer_->Join();
  RestoreSignals();
  return ReportDealtStream(o, *dealer_, dealt, job_code);
}

Status ReceiveDealtStream(const std::string& coordinator, uint32_t worker) {
  const std::string who = "worker " + std::to_string(worker) + ": ";
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> addresses,
                         StreamDealerAddresses(coordinator, std::getenv(kStreamPortEnv)));
  const Clock::time_point deadline = Clock::now() + kStreamConnectTimeout;
  int last_error = 0;
  std::string stranger;  // a candidate where something else answered
  while (true) {
    // Rank 0 listens on the first candidate it could take: each in turn, again until it does.
    for (const std::string& address : addresses) {
      FERRY_ASSIGN_OR_RETURN(HostPort hp, SplitAddress(address));
      FERRY_ASSIGN_OR_RETURN(AddrInfo ai, Resolve(hp.host.c_str(), hp.port, 0, address));
      models::Fd fd;
      for (const addrinfo* a = ai.get(); a != nullptr && fd.get() < 0; a = a->ai_next) {
        last_error = -ConnectOnce(*a, deadline, &fd);
      }
      if (fd.get() < 0) continue;
      const std::string hello =
          std::string(kHello) + coordinator + " " + std::to_string(worker) + "\n";
      if (!WriteAll(fd.get(), hello, deadline) || ReadLine(fd.get(), deadline) != kAnswer) {
        stranger = address;  // not this job's dealer: another program listens there
        continue;
      }
      // The dealt share is read with blocking reads, as a pipe on standard input.
      const int flags = ::fcntl(fd.get(), F_GETFL);
      if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0 ||
          ::dup2(fd.get(), STDIN_FILENO) < 0) {
        return IoError(who + "make the stream connection standard input", errno);
      }
      return Status::Ok();
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 not listening yet
  }
  const std::string where =
      addresses.size() == 1 ? addresses.front() : addresses.front() + " .. " + addresses.back();
  return Timeout(
      who + "could not reach rank 0's stream dealer at " + where + " within " +
      std::to_string(kStreamConnectTimeout.count()) + " s (" + std::strerror(last_error) + ")" +
      (stranger.empty() ? std::string()
                        : "; " + stranger + " answered but not as rank 0's dealer of this job") +
      ": set " + kStreamPortEnv + " to a free port, the same for every rank");
}

void DrainStandardInput() {
  // A duplicate: a worker's descriptor 0 becomes its share of the stream soon after.
  const int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return;
  std::thread([fd] {
    std::vector<char> buf(1 << 16);
    while (true) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    ::close(fd);
  }).detach();
}

}  // namespace ferry::train
