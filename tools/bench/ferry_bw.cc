// ferry-bw: streaming bandwidth of one Ferry transport operation, perftest style.
//
//   ferry-bw --transport tcp                       # server, waits on 127.0.0.1:18515
//   ferry-bw --transport tcp 127.0.0.1 -a -t 32    # client: sweep with 32 ops in flight
//   ferry-bw --transport tcp --local --op sparse_write --rows 256 --row-size 512
//
// Each endpoint keeps --depth operations outstanding; --bidir makes both sides send and reports
// the sum. Per size a checked pass verifies every transfer (targets check sends and notified
// writes on arrival, plain writes by a final check; initiators check reads), then the timed
// pass runs as ib_write_bw / ucp_put_bw do: nothing checked, one buffer (--check picks one).
// pack_write / pack_read are the pack-then-send references of sparse_write / sparse_read.
#include "tools/bench/cli.h"

int main(int argc, char** argv) {
  return ferry::bench::BwMain(argc, argv);
}
