// FaultProxy: a user-space TCP relay for faults the kernel cannot inject here (no netem):
// delay, re-segmentation ("reorder by chunking": the byte stream arrives in random small pieces
// with pauses between them; TCP itself never reorders bytes), stall and cut.
//
//   peer  --TCP-->  FaultProxy (listen_host:port)  --TCP-->  target (the transport's listener)
//
// Every accepted connection is relayed to `target`, or, in transparent mode (an empty target),
// to the destination the connection had before a nat rule redirected it to the proxy
// (SO_ORIGINAL_DST): e.g. nftables `meta mark != 0x66 ip daddr A tcp redirect to :PORT` sends every
// connection of a namespace toward A through the proxy, whose own connections carry mark
// kProxyMark (0x66) and pass. Bytes in each direction are queued with a
// release time (now + delay) and written in order. Stall() stops reading and writing on every
// connection while keeping the sockets open (a silent peer; kernel ACKs keep TCP itself happy);
// Cut() resets every current connection (SO_LINGER 0 + close: the peers see ECONNRESET).
//
// One internal thread runs the relay; sockets are created by the thread that calls Start() and by
// that internal thread, so both live in the network namespace of the caller of Start(). All
// methods are thread-safe. The destructor stops the thread and closes every socket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "transport/status.h"

namespace ferry::netns {

struct ProxyCounters {
  uint64_t connections = 0;  // accepted and relayed
  uint64_t bytes_up = 0;     // client -> target, written
  uint64_t bytes_down = 0;   // target -> client, written
  uint64_t resets = 0;       // connections reset by Cut()
};

inline constexpr uint32_t kProxyMark = 0x66;

class FaultProxy {
 public:
  // Listens on listen_host (port chosen by the kernel); relays to target "host:port", or to each
  // connection's original destination when `target` is empty (transparent mode).
  static Result<std::unique_ptr<FaultProxy>> Start(const std::string& listen_host,
                                                   const std::string& target, uint64_t seed);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // "host:port" peers connect to.
  const std::string& address() const { return address_; }
  // Every byte is held at least `delay` before it is forwarded.
  void SetDelay(std::chrono::milliseconds delay);
  // 0: forward what was read as it is. N > 0: forward in random pieces of 1..N bytes with
  // pauses of up to 1 ms between them.
  void SetChunking(size_t max_chunk);
  // Stops moving bytes on every connection (sockets stay open). Takes effect before it returns.
  void Stall();
  // Resets every current connection; later connections are relayed normally. Takes effect
  // before it returns.
  void Cut();
  ProxyCounters counters() const;

 private:
  struct Impl;
  FaultProxy() = default;
  void Loop();

  std::string address_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace ferry::netns
