// tcp backend setup: options, capabilities, devices, the progress engine (epoll loop, timers,
// optional progress thread), Poll/Wait, and the registry entry.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "transport/common/coarse_clock.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {
namespace {

constexpr uint64_t kWakeId = 0;

int64_t Ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
constexpr int kMaxEvents = 64;

Result<Params> ParseParams(const TransportOptions& options) {
  static const char* const kKnown[] = {"sndbuf", "rcvbuf", "max_unexpected_bytes", "bounce_max_row",
                                       "gather_max_row"};
  for (const auto& [key, value] : options.params) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) {
      return InvalidArgument("tcp: unknown parameter '" + key +
                             "' (known: sndbuf, rcvbuf, max_unexpected_bytes, bounce_max_row, "
                             "gather_max_row)");
    }
  }
  Params p;
  FERRY_ASSIGN_OR_RETURN(p.sndbuf, ParamUint(options, "sndbuf", 0));
  FERRY_ASSIGN_OR_RETURN(p.rcvbuf, ParamUint(options, "rcvbuf", 0));
  FERRY_ASSIGN_OR_RETURN(p.unexpected_limit,
                         ParamUint(options, "max_unexpected_bytes", kDefaultUnexpectedLimit));
  FERRY_ASSIGN_OR_RETURN(p.bounce_max_row,
                         ParamUint(options, "bounce_max_row", kDefaultBounceMaxRow));
  FERRY_ASSIGN_OR_RETURN(p.gather_max_row,
                         ParamUint(options, "gather_max_row", kDefaultGatherMaxRow));
  if (p.sndbuf > (1u << 30) || p.rcvbuf > (1u << 30)) {
    return InvalidArgument("tcp: sndbuf/rcvbuf above 1 GiB");
  }
  return p;
}

}  // namespace

Result<std::unique_ptr<Transport>> TcpTransport::Create(const TransportOptions& options) {
  FERRY_RETURN_IF_ERROR(common::CheckThreadMode(options, "tcp"));
  FERRY_ASSIGN_OR_RETURN(Params params, ParseParams(options));
  if (options.max_message_size == 0 || options.max_segments == 0) {
    return InvalidArgument("tcp: max_message_size and max_segments must be positive");
  }
  if (options.peer_timeout.count() <= 0) {
    return InvalidArgument("tcp: peer_timeout must be positive");
  }
  std::unique_ptr<TcpTransport> t(new TcpTransport(options, params));
  FERRY_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transport>(std::move(t));
}

TcpTransport::TcpTransport(const TransportOptions& options, Params params)
    : options_(options), params_(params), mu_(options.thread_mode), advertise_(options.advertise) {
  caps_.send_recv = caps_.write = caps_.read = true;
  caps_.sparse_write = caps_.sparse_read = true;
  caps_.notify = caps_.zero_copy_sparse = caps_.shared_recv = caps_.target_checks =
      caps_.final_deregistration = true;
  caps_.max_message_size = options.max_message_size;
  caps_.max_segments = options.max_segments;
  limits_ = {options.max_message_size, options.max_segments};
  heartbeat_interval_ = std::max<Millis>(Millis(1), options.peer_timeout / 4);
  next_timer_ = last_progress_ = Clock::now();
  next_timer_ns_.store(Ns(next_timer_), std::memory_order_relaxed);
}

Status TcpTransport::Init() {
  epfd_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epfd_) return IoError("tcp: epoll_create1", errno);
  wake_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) return IoError("tcp: eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    return IoError("tcp: epoll_ctl(eventfd)", errno);
  }
  if (options_.progress_thread) progress_thread_ = std::thread([this] { ProgressThreadMain(); });
  return Status::Ok();
}

TcpTransport::~TcpTransport() {
  {
    Lock lk(mu_);
    stop_ = true;
  }
  if (progress_thread_.joinable()) {
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
    (void)ignored;
    progress_thread_.join();
  }
  std::deque<std::shared_ptr<TcpEndpoint>> accepted;
  {
    Lock lk(mu_);
    for (auto& [id, c] : conns_) {
      if (c->handle != nullptr) {
        c->handle->transport_ = nullptr;
        c->handle->conn_ = nullptr;
      }
      c->fd.reset();
    }
    conns_.clear();
    accepted.swap(accepted_);
    for (auto& [key, e] : regions_) {
      if (e.owner != nullptr) e.owner->transport_ = nullptr;
    }
    listeners_.clear();  // closes the listening sockets
  }
  accepted.clear();  // handles are detached: their destructors do nothing
}  // epfd_ and wake_fd_ close with the members

std::vector<DeviceInfo> TcpTransport::devices() const {
  std::map<std::string, DeviceInfo> by_name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    DeviceInfo& d = by_name[a->ifa_name];
    if (d.name.empty()) {
      d.name = a->ifa_name;
      d.kind = "netdev";
      d.attributes["state"] = (a->ifa_flags & IFF_UP) ? "up" : "down";
      if (a->ifa_flags & IFF_LOOPBACK) d.attributes["loopback"] = "yes";
      ifreq req{};
      std::snprintf(req.ifr_name, sizeof(req.ifr_name), "%s", a->ifa_name);
      if (probe >= 0 && ioctl(probe, SIOCGIFMTU, &req) == 0) {
        d.attributes["mtu"] = std::to_string(req.ifr_mtu);
      }
    }
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      std::string& v4 = d.attributes["ipv4"];
      if (!v4.empty()) v4 += ',';  // appended piecewise: GCC 12 -O3 warns (-Wrestrict) on a + b
      v4 += buf;
    }
  }
  if (probe >= 0) close(probe);
  freeifaddrs(list);
  std::vector<DeviceInfo> out;
  for (auto& [name, d] : by_name) out.push_back(std::move(d));
  return out;
}

void TcpTransport::Advertise(std::vector<RemoteRegion> regions) {
  Lock lk(mu_);
  advertise_ = std::move(regions);
}

void TcpTransport::Complete(Completion c) {
  completions_.push(std::move(c));
  queued_.store(completions_.size(), std::memory_order_release);
}

void TcpTransport::Progress(Lock& lk, int timeout_ms) {
  epoll_event evs[kMaxEvents];
  int n;
  if (timeout_ms > 0) {
    lk.unlock();
    n = epoll_wait(epfd_.get(), evs, kMaxEvents, timeout_ms);
    lk.lock();
  } else {
    n = epoll_wait(epfd_.get(), evs, kMaxEvents, 0);
  }
  HandleEvents(evs, n);
}

void TcpTransport::HandleEvents(const epoll_event* evs, int n) {
  // Events gathered while unlocked may name connections that are gone by now: ids are never
  // reused, so a lookup miss is simply skipped.
  for (int i = 0; i < n; ++i) {
    const uint64_t id = evs[i].data.u64;
    if (id == kWakeId) {
      uint64_t value;
      ssize_t ignored = read(wake_fd_.get(), &value, sizeof(value));
      (void)ignored;
      continue;
    }
    bool listener = false;
    for (auto& [lid, fd] : listeners_) {
      if (lid == id) {
        AcceptNew(fd.get());
        listener = true;
        break;
      }
    }
    if (listener) continue;
    auto it = conns_.find(id);
    if (it != conns_.end()) HandleEvent(*it->second, evs[i].events);
  }
  const auto now = Clock::now();
  // If nobody drove progress for a while, our own silence is to blame, not the peers': their
  // heartbeats may be unread in our sockets. Give every peer a fresh peer_timeout from now. (A
  // lock-free idle Poll that found every socket empty counts as progress.)
  const Clock::time_point idle_check(
      std::chrono::nanoseconds(idle_check_ns_.load(std::memory_order_relaxed)));
  if (now - std::max(last_progress_, idle_check) > heartbeat_interval_) {
    for (auto& [id, c] : conns_) c->last_rx = std::max(c->last_rx, now);
  }
  last_progress_ = now;
  if (now >= next_timer_) RunTimers(now);
  Sweep();
  if (n > 0 || options_.progress_thread) cv_.notify_all();
}

void TcpTransport::RunTimers(Clock::time_point now) {
  next_timer_ = now + std::clamp<Millis>(heartbeat_interval_ / 2, Millis(1), Millis(100));
  next_timer_ns_.store(Ns(next_timer_), std::memory_order_relaxed);
  for (auto& [id, cp] : conns_) {
    Conn& c = *cp;
    if (c.state == Conn::State::kFailed) continue;
    if (c.state != Conn::State::kOpen) {
      if (now >= c.deadline) {
        Fail(c, Timeout("handshake with " + c.peer_address + " did not complete in time"));
      }
      continue;
    }
    if (now - c.last_rx > options_.peer_timeout) {
      Fail(c, PeerFailure("nothing received from " + c.peer_address + " for " +
                          std::to_string(options_.peer_timeout.count()) +
                          " ms (peer_timeout): the peer is stopped or unreachable"));
      continue;
    }
    if (now - c.last_tx >= heartbeat_interval_ && c.tx.empty()) {
      QueueHeartbeat(c);
      FlushTx(c);
    }
  }
}

void TcpTransport::ProgressThreadMain() {
  Lock lk(mu_);
  const int tick = static_cast<int>(std::clamp<int64_t>(heartbeat_interval_.count() / 2, 1, 100));
  while (!stop_) Progress(lk, tick);
}

size_t TcpTransport::TakeCompletions(std::span<Completion> out) {
  size_t n = 0;
  while (n < out.size() && !completions_.empty()) out[n++] = completions_.pop();
  if (n > 0) queued_.store(completions_.size(), std::memory_order_release);
  return n;
}

size_t TcpTransport::Poll(std::span<Completion> out) {
  if (mu_.enabled() && !options_.progress_thread) return PollShared(out);
  Lock lk(mu_);
  // Completions already queued (typically by a Wait() that just progressed) are returned
  // without another round; the next Poll on an empty queue progresses. Saves a system call
  // per Wait+Poll pair. An empty `out` only drives progress.
  if (!options_.progress_thread && (completions_.empty() || out.empty())) Progress(lk, 0);
  return TakeCompletions(out);
}

size_t TcpTransport::PollShared(std::span<Completion> out) {
  // The idle case without the lock: nothing queued for us, no timer due, and no socket event.
  // A busy-polling thread then costs the others nothing (it never holds mu_), and the PS's
  // control pump, which polls the data transport its owner polls too, never waits for it.
  epoll_event evs[kMaxEvents];
  int n = -1;  // -1: no events gathered, run a whole round under the lock
  if (out.empty() || queued_.load(std::memory_order_acquire) == 0) {
    if (Ns(common::CoarseNow()) < next_timer_ns_.load(std::memory_order_relaxed)) {
      n = epoll_wait(epfd_.get(), evs, kMaxEvents, 0);
      if (n == 0) {
        idle_check_ns_.store(Ns(common::CoarseNow()), std::memory_order_relaxed);
        return 0;
      }
    }
  } else {
    n = 0;  // completions are queued: hand them out, no round
  }
  Lock lk(mu_, std::try_to_lock);
  if (!lk.owns_lock()) return 0;  // its holder drives progress; the events stay reported
  if (n > 0) {
    HandleEvents(evs, n);
  } else if (n < 0) {
    Progress(lk, 0);
  }
  return TakeCompletions(out);
}

Status TcpTransport::Wait(Millis timeout) {
  Lock lk(mu_);
  const auto deadline = Clock::now() + timeout;
  // options_.progress_thread, not progress_thread_.joinable(): the thread object is written by
  // Init() while the thread already runs (a data race ThreadSanitizer reported).
  if (options_.progress_thread) {
    if (cv_.wait_until(lk, deadline, [&] {
          return !completions_.empty() ||
                 wake_requested_.exchange(false, std::memory_order_acq_rel);
        })) {
      return Status::Ok();
    }
    return Timeout("wait timed out");  // short: no allocation (transport.h)
  }
  // No non-blocking round first: a blocking epoll_wait returns at once when a socket is ready.
  if (DriveUntil(lk, deadline, [&] {
        return !completions_.empty() || wake_requested_.exchange(false, std::memory_order_acq_rel);
      })) {
    return Status::Ok();
  }
  return Timeout("wait timed out");  // short: no allocation (transport.h)
}

void TcpTransport::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  if (options_.progress_thread) {
    // Waiters sleep on cv_; taking the lock orders the flag before their predicate check.
    Lock lk(mu_);
    cv_.notify_all();
    return;
  }
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));  // interrupts epoll_wait
  (void)ignored;
}

}  // namespace ferry::tcp

namespace ferry {

const BackendEntry& TcpBackendEntry() {
  static const BackendEntry entry{"tcp", 10, +[]() -> std::string { return {}; },
                                  &tcp::TcpTransport::Create};
  return entry;
}

}  // namespace ferry
