// rendezvous_probe: checks ps/launch/rendezvous.h under a real launcher (ferry-launch, mpirun,
// srun).
//
// Every rank runs DetectLaunchEnv + FindCoordinator. Rank 0's start_on_rank0 opens a real TCP
// listener; every other rank connects (retrying until the deadline: rank 0 may be late under the
// FERRY_COORDINATOR and Slurm-port rules) and sends a hello:
//   struct Hello {            // network byte order
//     uint32_t rank;
//     uint32_t size;
//     uint16_t address_len;
//     char address[address_len];  // the coordinator address this rank found
//   };
// Rank 0 checks every rank 1..size-1 arrives exactly once with the same size and address, answers
// each with one byte 'K', and prints
//   RENDEZVOUS OK launcher=<name> size=<n> coordinator=<addr> rule=<rule>
// Any failure prints "rendezvous_probe rank R: FAIL ..." to stderr and exits 1. A watchdog ends the
// process with exit code 3 after --timeout-s seconds (default 60), so it can never hang a test.
// `rendezvous_probe --has-pmix` exits 0 when ps/ was built with PMIx, else 1.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ps/launch/launch_env.h"
#include "ps/launch/rendezvous.h"

namespace {

using ferry::Result;
using ferry::Status;
using ferry::ps::LaunchEnv;
using Clock = std::chrono::steady_clock;

int g_rank = -1;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "rendezvous_probe rank %d: FAIL %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  std::exit(1);
}

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return !port->empty();
}

// start_on_rank0: a real listener on `bind`; returns the bound "host:port".
Result<std::string> Listen(const std::string& bind, int backlog, int* fd_out) {
  std::string host, port;
  if (!SplitHostPort(bind, &host, &port)) return ferry::InvalidArgument("bad bind address " + bind);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return ferry::InvalidArgument("getaddrinfo " + bind + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return ferry::IoError("socket", errno);
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
    int err = errno;
    freeaddrinfo(res);
    close(fd);
    return ferry::IoError("bind/listen " + bind, err);
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  char text[INET6_ADDRSTRLEN] = {};
  uint16_t bound_port = 0;
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    bound_port = ntohs(a->sin6_port);
    *fd_out = fd;
    return "[" + std::string(text) + "]:" + std::to_string(bound_port);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
  bound_port = ntohs(a->sin_port);
  *fd_out = fd;
  return std::string(text) + ":" + std::to_string(bound_port);
}

void SetTimeouts(int fd, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  if (left.count() < 1000) left = std::chrono::microseconds(1000);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(left.count() / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(left.count() % 1000000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void ServeRank0(const LaunchEnv& env, int listen_fd, const std::string& coordinator,
                Clock::time_point deadline) {
  std::vector<int> seen(static_cast<size_t>(env.size), 0);
  seen[0] = 1;
  for (int got = 1; got < env.size; ++got) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd pfd{listen_fd, POLLIN, 0};
    int n = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n == 0) {
      std::string missing;
      for (int r = 1; r < env.size; ++r) {
        if (!seen[static_cast<size_t>(r)]) missing += " " + std::to_string(r);
      }
      Fail("timed out waiting for ranks:" + missing);
    }
    if (n < 0) Fail(Errno("poll"));
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) Fail(Errno("accept"));
    SetTimeouts(fd, deadline);
    uint32_t head[2];
    uint16_t len = 0;
    if (!ReadAll(fd, head, sizeof(head)) || !ReadAll(fd, &len, sizeof(len))) {
      Fail("short hello from a peer");
    }
    const uint32_t rank = ntohl(head[0]), size = ntohl(head[1]);
    len = ntohs(len);
    std::string address(len, '\0');
    if (!ReadAll(fd, address.data(), len)) Fail("short address in hello");
    if (size != static_cast<uint32_t>(env.size)) {
      Fail("rank " + std::to_string(rank) + " reports size " + std::to_string(size));
    }
    if (rank == 0 || rank >= size) Fail("hello from bad rank " + std::to_string(rank));
    if (seen[rank]++) Fail("rank " + std::to_string(rank) + " connected twice");
    if (address != coordinator) {
      Fail("rank " + std::to_string(rank) + " found coordinator " + address + ", rank 0 " +
           coordinator);
    }
    const char ack = 'K';
    if (!WriteAll(fd, &ack, 1)) Fail(Errno("ack"));
    close(fd);
  }
}

// Connects to `coordinator`, retrying while rank 0 is not listening yet.
int ConnectWithRetry(const std::string& coordinator, Clock::time_point deadline) {
  std::string host, port;
  if (!SplitHostPort(coordinator, &host, &port)) Fail("bad coordinator address " + coordinator);
  std::string last = "no attempt";
  while (Clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      last = std::string("getaddrinfo: ") + gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          freeaddrinfo(res);
          return fd;
        }
        last = Errno("connect");
        close(fd);
      }
      freeaddrinfo(res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Fail("could not connect to coordinator " + coordinator + " before the deadline: " + last);
}

std::string RuleName(const LaunchEnv& env) {
  if (!env.coordinator.empty()) return "variable";
  if (!env.coordinator_file.empty()) return "file";
  if (env.size == 1) return "local";
  if (env.pmix && ferry::ps::RendezvousHasPmix()) return "pmix";
  if (env.launcher == ferry::ps::Launcher::kSrun) return "slurm-port";
  return "none";
}

}  // namespace

int main(int argc, char** argv) {
  int timeout_s = 60;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--timeout-s" && i + 1 < argc) {
      timeout_s = std::atoi(argv[++i]);
    } else if (arg == "--has-pmix") {
      return ferry::ps::RendezvousHasPmix() ? 0 : 1;
    } else {
      std::fprintf(stderr, "usage: %s [--timeout-s N] | --has-pmix\n", argv[0]);
      return 2;
    }
  }
  if (timeout_s < 1) timeout_s = 1;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  std::thread([timeout_s] {
    std::this_thread::sleep_for(std::chrono::seconds(timeout_s) + std::chrono::milliseconds(500));
    std::fprintf(stderr, "rendezvous_probe rank %d: FAIL hard timeout after %d s\n", g_rank,
                 timeout_s);
    std::fflush(stderr);
    _exit(3);
  }).detach();

  Result<LaunchEnv> env = ferry::ps::DetectLaunchEnv();
  if (!env.ok()) Fail("DetectLaunchEnv: " + env.status().ToString());
  g_rank = env->rank;

  int listen_fd = -1;
  auto start = [&](const std::string& bind) { return Listen(bind, env->size, &listen_fd); };
  // Leave a margin of the deadline for the connections themselves.
  auto budget = std::chrono::duration_cast<ferry::Millis>(std::chrono::seconds(timeout_s)) * 3 / 4;
  Result<std::string> coordinator = ferry::ps::FindCoordinator(*env, start, budget);
  if (!coordinator.ok()) Fail("FindCoordinator: " + coordinator.status().ToString());

  if (env->rank == 0) {
    if (listen_fd < 0) Fail("FindCoordinator did not start the coordinator on rank 0");
    ServeRank0(*env, listen_fd, *coordinator, deadline);
    close(listen_fd);
    std::printf("RENDEZVOUS OK launcher=%s size=%d coordinator=%s rule=%s\n",
                std::string(ferry::ps::LauncherName(env->launcher)).c_str(), env->size,
                coordinator->c_str(), RuleName(*env).c_str());
    std::fflush(stdout);
    return 0;
  }
  int fd = ConnectWithRetry(*coordinator, deadline);
  SetTimeouts(fd, deadline);
  uint32_t head[2] = {htonl(static_cast<uint32_t>(env->rank)),
                      htonl(static_cast<uint32_t>(env->size))};
  uint16_t len = htons(static_cast<uint16_t>(coordinator->size()));
  if (!WriteAll(fd, head, sizeof(head)) || !WriteAll(fd, &len, sizeof(len)) ||
      !WriteAll(fd, coordinator->data(), coordinator->size())) {
    Fail(Errno("send hello"));
  }
  char ack = 0;
  if (!ReadAll(fd, &ack, 1) || ack != 'K') Fail("no ack from rank 0 at " + *coordinator);
  close(fd);
  return 0;
}
