// The heartbeat of the ucx backend's control connections, on a thread of its own.
//
// Every ucx endpoint has a TCP control connection beside its UCP endpoint (the handshake runs on
// it; connect.cc). Once the endpoint is ready, the connection carries only 1-byte frames: pings
// and pongs. Liveness adopts it then: its thread pings every peer_timeout/4, answers the peer's
// pings, and records when it last heard from the peer. Nothing here takes the transport's mutex
// or touches UCX, so a process whose transport is busy in one long call (a Post that rxe spends a
// second in under emulation, a caller computing without driving progress) keeps answering and is
// not taken for dead; a process that is stopped (SIGSTOP), hung in the kernel, or gone stops
// answering, and its peers fail their endpoints to it within peer_timeout
// (UcxTransport::CheckLiveness reads heard_ns and failed).
//
// Threading: Adopt/Drop and LiveSocket's atomics may be used from any thread; the thread's own
// state is guarded by mu_. Blocking: Drop() may wait for the thread to finish its current pass
// (microseconds: it never blocks while holding mu_).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/common/fd.h"
#include "transport/status.h"

namespace ferry::ucx {

// Frames on a ready control connection, written by connect.cc and the Liveness thread alike:
// u32 little-endian length 1, then the byte.
inline constexpr uint8_t kPing = 'P';
inline constexpr uint8_t kPong = 'O';

// One adopted control connection, shared by its endpoint and the Liveness thread.
struct LiveSocket {
  uint64_t id = 0;
  std::atomic<int64_t> heard_ns{0};  // steady_clock of the last frame from the peer
  std::atomic<bool> failed{false};   // the connection ended or broke: `error` says how
  // Guarded by Liveness::mu_.
  common::UniqueFd fd;
  std::vector<uint8_t> rbuf;  // bytes of an unfinished frame
  std::vector<uint8_t> wbuf;  // bytes the socket did not take yet
  std::string error;
  bool dropped = false;
};

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the thread. `on_failure` runs on it when an adopted connection fails (it must not
  // block: the transport signals its worker).
  static Result<std::unique_ptr<Liveness>> Start(std::chrono::milliseconds peer_timeout,
                                                 std::function<void()> on_failure);
  ~Liveness();  // stops the thread; sockets not dropped yet are closed
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // Takes over the control connection of a ready endpoint, with the bytes read from it and not
  // parsed yet and the bytes not sent yet (both may hold ping/pong frames).
  Result<std::shared_ptr<LiveSocket>> Adopt(uint64_t id, common::UniqueFd fd,
                                            std::vector<uint8_t> unread,
                                            std::vector<uint8_t> unsent);
  // Stops watching `s` and closes its socket (the peer sees EOF). Idempotent. The failure text
  // of a socket that failed stays readable afterwards (ErrorOf).
  void Drop(const std::shared_ptr<LiveSocket>& s);
  std::string ErrorOf(const std::shared_ptr<LiveSocket>& s);

 private:
  Liveness(std::chrono::milliseconds peer_timeout, std::function<void()> on_failure);
  void Main();
  // With mu_ held: parse the frames in s.rbuf; send what is queued. False when `s` failed.
  bool ReadFrames(LiveSocket& s);
  bool Flush(LiveSocket& s);
  void Queue(LiveSocket& s, uint8_t frame);
  void Fail(LiveSocket& s, const std::string& why);

  const std::chrono::milliseconds timeout_;
  std::function<void()> on_failure_;
  common::UniqueFd epoll_;
  common::UniqueFd wake_;  // eventfd: Adopt and the destructor wake the thread
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<LiveSocket>> sockets_;  // adopted, not dropped
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ferry::ucx
