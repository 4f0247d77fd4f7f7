#include "tests/netns/proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <list>
#include <random>
#include <vector>

namespace ferry::netns {
namespace {

using Clock = std::chrono::steady_clock;

// Queued bytes per direction before the proxy stops reading that side (backpressure).
constexpr size_t kMaxQueued = 4u << 20;

struct Piece {
  Clock::time_point due;
  std::string bytes;
  size_t written = 0;
};

// One relayed direction: bytes read from `from` and written, in order, to `to`.
struct Direction {
  int from = -1;
  int to = -1;
  std::deque<Piece> queue;
  size_t queued = 0;
  bool eof = false;   // `from` reached end of stream
  bool shut = false;  // shutdown(to, SHUT_WR) done after the queue drained
  uint64_t* counter = nullptr;
};

struct Connection {
  int client = -1;
  int upstream = -1;
  Direction up, down;
  bool dead = false;
};

Status ParseAddress(const std::string& hostport, sockaddr_in* sa) {
  size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("proxy: bad address " + hostport);
  *sa = {};
  sa->sin_family = AF_INET;
  sa->sin_port = htons(static_cast<uint16_t>(std::stoul(hostport.substr(colon + 1))));
  if (inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &sa->sin_addr) != 1) {
    return InvalidArgument("proxy: bad IPv4 address " + hostport);
  }
  return Status::Ok();
}

void SetNoDelayNonBlock(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void Reset(int fd) {
  if (fd < 0) return;
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

}  // namespace

struct FaultProxy::Impl {
  int listen_fd = -1;
  int wake_fd = -1;
  sockaddr_in target{};
  bool transparent = false;  // target: each connection's original destination (see proxy.h)
  std::mt19937_64 rng;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::chrono::milliseconds delay{0};
  size_t max_chunk = 0;
  bool stalled = false;
  uint64_t cut_requested = 0;
  uint64_t cut_done = 0;
  bool stop = false;
  ProxyCounters counters;

  std::list<Connection> conns;

  void Wake() const {
    uint64_t one = 1;
    ssize_t r = write(wake_fd, &one, sizeof(one));
    (void)r;
  }
};

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& listen_host,
                                                      const std::string& target, uint64_t seed) {
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  p->impl_ = std::make_unique<Impl>();
  Impl& im = *p->impl_;
  im.rng.seed(seed);
  im.transparent = target.empty();
  if (!im.transparent) FERRY_RETURN_IF_ERROR(ParseAddress(target, &im.target));
  sockaddr_in sa{};
  FERRY_RETURN_IF_ERROR(ParseAddress(listen_host + ":0", &sa));
  im.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (im.listen_fd < 0) return IoError("proxy: socket", errno);
  if (bind(im.listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return IoError("proxy: bind " + listen_host, errno);
  }
  if (listen(im.listen_fd, 64) != 0) return IoError("proxy: listen", errno);
  socklen_t len = sizeof(sa);
  getsockname(im.listen_fd, reinterpret_cast<sockaddr*>(&sa), &len);
  p->address_ = listen_host + ":" + std::to_string(ntohs(sa.sin_port));
  im.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (im.wake_fd < 0) return IoError("proxy: eventfd", errno);
  p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
  return p;
}

FaultProxy::~FaultProxy() {
  if (impl_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  if (thread_.joinable()) {
    impl_->Wake();
    thread_.join();
  }
  for (Connection& c : impl_->conns) {
    if (c.client >= 0) close(c.client);
    if (c.upstream >= 0) close(c.upstream);
  }
  if (impl_->listen_fd >= 0) close(impl_->listen_fd);
  if (impl_->wake_fd >= 0) close(impl_->wake_fd);
}

void FaultProxy::SetDelay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->delay = delay;
}

void FaultProxy::SetChunking(size_t max_chunk) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->max_chunk = max_chunk;
}

void FaultProxy::Stall() {
  // The loop reads `stalled` under the lock before every read or write, so once this returns no
  // further byte moves.
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->stalled = true;
}

void FaultProxy::Cut() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  const uint64_t want = ++impl_->cut_requested;
  impl_->Wake();
  impl_->cv.wait(lk, [&] { return impl_->cut_done >= want || impl_->stop; });
}

ProxyCounters FaultProxy::counters() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->counters;
}

void FaultProxy::Loop() {
  Impl& im = *impl_;
  std::vector<pollfd> fds;
  std::vector<Direction*> owners;  // per pollfd after the first two: direction reading/writing
  for (;;) {
    std::chrono::milliseconds delay;
    size_t max_chunk;
    bool stalled;
    {
      std::lock_guard<std::mutex> lk(im.mu);
      if (im.stop) break;
      if (im.cut_done < im.cut_requested) {
        for (Connection& c : im.conns) {
          Reset(c.client);
          Reset(c.upstream);
          ++im.counters.resets;
        }
        im.conns.clear();
        im.cut_done = im.cut_requested;
        im.cv.notify_all();
      }
      delay = im.delay;
      max_chunk = im.max_chunk;
      stalled = im.stalled;
    }
    const auto now = Clock::now();
    auto next_due = now + std::chrono::milliseconds(50);

    // Writes of everything due, unless stalled.
    for (Connection& c : im.conns) {
      for (Direction* d : {&c.up, &c.down}) {
        while (!stalled && !c.dead && !d->queue.empty() && d->queue.front().due <= now) {
          Piece& p = d->queue.front();
          ssize_t w =
              send(d->to, p.bytes.data() + p.written, p.bytes.size() - p.written, MSG_NOSIGNAL);
          if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          if (w <= 0) {
            c.dead = true;
            break;
          }
          p.written += static_cast<size_t>(w);
          {
            std::lock_guard<std::mutex> lk(im.mu);
            *d->counter += static_cast<uint64_t>(w);
          }
          if (p.written == p.bytes.size()) {
            d->queued -= p.bytes.size();
            d->queue.pop_front();
          }
        }
        if (!d->queue.empty() && d->queue.front().due > now) {
          next_due = std::min(next_due, d->queue.front().due);
        }
        if (!c.dead && d->eof && d->queue.empty() && !d->shut) {
          shutdown(d->to, SHUT_WR);
          d->shut = true;
        }
      }
      if (c.up.shut && c.down.shut) c.dead = true;
    }
    for (auto it = im.conns.begin(); it != im.conns.end();) {
      if (it->dead) {
        close(it->client);
        close(it->upstream);
        it = im.conns.erase(it);
      } else {
        ++it;
      }
    }

    fds.clear();
    owners.clear();
    fds.push_back({im.wake_fd, POLLIN, 0});
    fds.push_back({im.listen_fd, POLLIN, 0});
    for (Connection& c : im.conns) {
      for (Direction* d : {&c.up, &c.down}) {
        short ev = 0;
        if (!stalled && !d->eof && d->queued < kMaxQueued) ev |= POLLIN;
        if (ev != 0) {
          fds.push_back({d->from, ev, 0});
          owners.push_back(d);
        }
        if (!stalled && !d->queue.empty() && d->queue.front().due <= now) {
          fds.push_back({d->to, POLLOUT, 0});
          owners.push_back(nullptr);  // writes happen at the top of the loop
        }
      }
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_due - Clock::now());
    int timeout = static_cast<int>(std::max<int64_t>(1, wait.count() + 1));
    if (stalled) timeout = 50;
    int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t r = read(im.wake_fd, &v, sizeof(v));
      (void)r;
    }
    if (fds[1].revents & POLLIN) {
      int cfd = accept4(im.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (cfd >= 0) {
        int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in to = im.target;
        bool have_target = true;
        if (im.transparent) {
          // The nat rule that brought the connection here kept its real destination; the
          // relayed connection carries kProxyMark so that the rule lets it pass.
          socklen_t len = sizeof(to);
          have_target = getsockopt(cfd, SOL_IP, SO_ORIGINAL_DST, &to, &len) == 0;
          const int mark = static_cast<int>(kProxyMark);
          if (ufd >= 0) setsockopt(ufd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark));
        }
        if (ufd >= 0 && have_target &&
            connect(ufd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
          SetNoDelayNonBlock(cfd);
          SetNoDelayNonBlock(ufd);
          Connection& c = im.conns.emplace_back();
          c.client = cfd;
          c.upstream = ufd;
          std::lock_guard<std::mutex> lk(im.mu);
          c.up = {cfd, ufd, {}, 0, false, false, &im.counters.bytes_up};
          c.down = {ufd, cfd, {}, 0, false, false, &im.counters.bytes_down};
          ++im.counters.connections;
        } else {
          if (ufd >= 0) close(ufd);
          Reset(cfd);
        }
      }
    }
    {
      std::lock_guard<std::mutex> lk(im.mu);
      stalled = im.stalled;  // a Stall() during poll() wins over bytes that became readable
    }
    if (stalled) continue;
    for (size_t i = 2; i < fds.size(); ++i) {
      Direction* d = owners[i - 2];
      if (d == nullptr || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t r = recv(d->from, buf, sizeof(buf), 0);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r <= 0) {
        d->eof = true;
        if (r < 0) {
          // A reset on one side is passed on as a reset on the other.
          for (Connection& c : im.conns) {
            if (&c.up == d || &c.down == d) c.dead = true;
          }
        }
        continue;
      }
      auto due = Clock::now() + delay;
      size_t off = 0;
      while (off < static_cast<size_t>(r)) {
        size_t take = static_cast<size_t>(r) - off;
        if (max_chunk > 0) {
          take = std::min(take, 1 + static_cast<size_t>(im.rng() % max_chunk));
          if (!d->queue.empty()) {
            due = std::max(due, d->queue.back().due) + std::chrono::microseconds(im.rng() % 1000);
          }
        }
        d->queue.push_back({due, std::string(buf + off, take), 0});
        d->queued += take;
        off += take;
      }
    }
  }
  std::lock_guard<std::mutex> lk(im.mu);
  im.stop = true;
  im.cv.notify_all();
}

}  // namespace ferry::netns
