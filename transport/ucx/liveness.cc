// The control connections' heartbeat thread (see liveness.h).
#include "transport/ucx/liveness.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/common/bytes.h"

namespace ferry::ucx {

namespace {

constexpr uint64_t kWakeKey = 0;  // epoll data of the eventfd (endpoint ids start at 1)

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Liveness::Clock::now().time_since_epoch())
      .count();
}

}  // namespace

Liveness::Liveness(std::chrono::milliseconds peer_timeout, std::function<void()> on_failure)
    : timeout_(peer_timeout), on_failure_(std::move(on_failure)) {}

Result<std::unique_ptr<Liveness>> Liveness::Start(std::chrono::milliseconds peer_timeout,
                                                  std::function<void()> on_failure) {
  std::unique_ptr<Liveness> l(new Liveness(peer_timeout, std::move(on_failure)));
  l->epoll_ = common::UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!l->epoll_) return IoError("ucx liveness: epoll_create1", errno);
  l->wake_ = common::UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!l->wake_) return IoError("ucx liveness: eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  if (epoll_ctl(l->epoll_.get(), EPOLL_CTL_ADD, l->wake_.get(), &ev) != 0) {
    return IoError("ucx liveness: epoll_ctl(ADD eventfd)", errno);
  }
  l->thread_ = std::thread([raw = l.get()] { raw->Main(); });
  return l;
}

Liveness::~Liveness() {
  stop_ = true;
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (auto& [id, s] : sockets_) s->fd.reset();
}

Result<std::shared_ptr<LiveSocket>> Liveness::Adopt(uint64_t id, common::UniqueFd fd,
                                                    std::vector<uint8_t> unread,
                                                    std::vector<uint8_t> unsent) {
  auto s = std::make_shared<LiveSocket>();
  s->id = id;
  s->heard_ns = NowNs();
  s->rbuf = std::move(unread);
  s->wbuf = std::move(unsent);
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoll_event ev{};
    // Edge-triggered: the thread reads (and writes) until EAGAIN on every event.
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLOUT | EPOLLET;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) {
      return IoError("ucx liveness: epoll_ctl(ADD control connection)", errno);
    }
    s->fd = std::move(fd);
    sockets_.emplace(id, s);
    // Frames that arrived with the end of the handshake, and what is still to send.
    if (ReadFrames(*s)) (void)Flush(*s);
  }
  return s;
}

void Liveness::Drop(const std::shared_ptr<LiveSocket>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s->dropped) return;
  s->dropped = true;
  sockets_.erase(s->id);
  if (s->fd) {
    (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
    (void)::shutdown(s->fd.get(), SHUT_RDWR);  // the peer sees EOF: its endpoint fails at once
    s->fd.reset();
  }
}

std::string Liveness::ErrorOf(const std::shared_ptr<LiveSocket>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  return s->error;
}

void Liveness::Queue(LiveSocket& s, uint8_t frame) {
  common::AppendLe32(&s.wbuf, 1);
  s.wbuf.push_back(frame);
}

void Liveness::Fail(LiveSocket& s, const std::string& why) {
  if (s.failed.load()) return;
  s.error = why;
  s.failed = true;
  (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd.get(), nullptr);
  if (on_failure_) on_failure_();
}

bool Liveness::Flush(LiveSocket& s) {
  size_t done = 0;
  while (done < s.wbuf.size()) {
    const ssize_t n =
        ::send(s.fd.get(), s.wbuf.data() + done, s.wbuf.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // EPOLLOUT brings us back
    Fail(s, "control connection: " + IoError("send", errno).message());
    return false;
  }
  s.wbuf.erase(s.wbuf.begin(), s.wbuf.begin() + static_cast<ptrdiff_t>(done));
  return true;
}

bool Liveness::ReadFrames(LiveSocket& s) {
  uint8_t buf[256];
  while (true) {
    const ssize_t n = ::recv(s.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      s.rbuf.insert(s.rbuf.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n == 0) {
      Fail(s, "closed the connection (process exited or endpoint closed)");
    } else {
      Fail(s, "connection error: " + IoError("recv", errno).message());
    }
    return false;
  }
  size_t off = 0;
  while (s.rbuf.size() - off >= 5) {
    const uint32_t len = common::GetLe32(s.rbuf.data() + off);
    const uint8_t frame = s.rbuf[off + 4];
    if (len != 1 || (frame != kPing && frame != kPong)) {
      Fail(s, "sent an unexpected control frame (" + std::to_string(len) + " bytes)");
      return false;
    }
    s.heard_ns = NowNs();
    if (frame == kPing) Queue(s, kPong);
    off += 5;
  }
  s.rbuf.erase(s.rbuf.begin(), s.rbuf.begin() + static_cast<ptrdiff_t>(off));
  return true;
}

void Liveness::Main() {
  const auto interval = std::max(std::chrono::milliseconds(1), timeout_ / 4);
  auto next_ping = Clock::now() + interval;
  epoll_event events[64];
  while (!stop_) {
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_ping - Clock::now());
    const int n = epoll_wait(epoll_.get(), events, 64,
                             static_cast<int>(std::clamp<int64_t>(wait.count() + 1, 0, 1000)));
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeKey) {
        uint64_t v;
        (void)!::read(wake_.get(), &v, sizeof v);
        continue;
      }
      auto it = sockets_.find(id);
      if (it == sockets_.end()) continue;  // dropped since
      LiveSocket& s = *it->second;
      if (s.failed) continue;
      if (ReadFrames(s)) (void)Flush(s);
    }
    if (Clock::now() >= next_ping) {
      // Every peer hears from us every interval, whatever the rest of this process is doing.
      next_ping = Clock::now() + interval;
      for (auto& [id, s] : sockets_) {
        if (s->failed) continue;
        Queue(*s, kPing);
        (void)Flush(*s);
      }
    }
  }
}

}  // namespace ferry::ucx
