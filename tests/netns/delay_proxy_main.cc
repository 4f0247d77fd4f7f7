// netns_delay_proxy: the FaultProxy (proxy.h) as a process, for shell-driven cases
// (tests/netns/train-faults.sh): relays every connection a nat rule redirects to it to that
// connection's original destination (transparent mode), holding each byte DELAY ms and, with
// CHUNK > 0, re-segmenting the stream into random pieces of 1..CHUNK bytes.
//   netns_delay_proxy LISTEN_HOST DELAY_MS CHUNK
// Prints "ready HOST:PORT" once listening, then relays until stdin closes or it is signalled;
// prints its counters before it exits.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tests/netns/proxy.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s LISTEN_HOST DELAY_MS CHUNK\n", argv[0]);
    return 2;
  }
  auto proxy = ferry::netns::FaultProxy::Start(argv[1], "", 1);
  if (!proxy.ok()) {
    std::fprintf(stderr, "netns_delay_proxy: %s\n", proxy.status().ToString().c_str());
    return 1;
  }
  (*proxy)->SetDelay(std::chrono::milliseconds(std::atoi(argv[2])));
  (*proxy)->SetChunking(static_cast<size_t>(std::atoi(argv[3])));
  std::printf("ready %s\n", (*proxy)->address().c_str());
  std::fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  const ferry::netns::ProxyCounters c = (*proxy)->counters();
  std::printf("relayed %llu connections, %llu bytes up, %llu bytes down\n",
              static_cast<unsigned long long>(c.connections),
              static_cast<unsigned long long>(c.bytes_up),
              static_cast<unsigned long long>(c.bytes_down));
  return 0;
}
