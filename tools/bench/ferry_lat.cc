// ferry-lat: ping-pong latency of one Ferry transport operation, perftest style.
//
//   ferry-lat --transport tcp                      # server, waits on 127.0.0.1:18515
//   ferry-lat --transport tcp 127.0.0.1 -a         # client: sweep 2 B .. 8 MiB
//   ferry-lat --transport ucx --param UCX_TLS=shm,self --local --op write_imm
//
// send/write/write_imm/sparse_write report half the round trip; read/sparse_read the full round
// trip (as perftest's ib_read_lat does). Per size a checked pass verifies every transfer, then
// the timed pass sees arrival as ib_write_lat does (the last byte) and checks no more.
#include "tools/bench/cli.h"

int main(int argc, char** argv) {
  return ferry::bench::LatMain(argc, argv);
}
