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
#include <CLI/CLI.hpp>

#include "tools/bench/cli.h"
#include "tools/common/command.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::bench::ToolOptions options;
  ferry::bench::AddFlags(app, options, ferry::bench::Mode::kBandwidth);
  ferry::tools::SetUpCommand(
      app,
      {.name = "ferry-bw",
       .summary = "bandwidth of Ferry transport operations (columns as perftest)",
       .description =
           "Without an address it is the server; with one, the client; --local runs "
           "both.\nEach endpoint keeps --depth operations outstanding; --bidir makes "
           "both sides send.\nPer size: a checked pass (every transfer verified), then the timed "
           "pass, checked as perftest\nchecks (--check full|ref for one of them).",
       .examples = {"ferry-bw --transport tcp --local -a",
                    "ferry-bw --transport tcp --local -a --plot bw.svg",
                    "ferry-bw --transport tcp --local --op write -s 64K,1M --csv results.csv",
                    "ferry-bw --transport ucx --param UCX_TLS=shm,self --local --op read -b",
                    "ferry-bw --transport tcp --local --op sparse_read --rows 128 --row-size "
                    "1K",
                    "ferry-bw --transport tcp --local --op pack_write --rows 10000 --row-size 64 "
                    "--check ref"},
       .see_also = {"ferry-lat", "ferry-plot", "ferry-info", "ib_write_bw(1)", "docs/tools.md"}});
  return ferry::bench::ParseAndExecute(app, options, argc, argv);
}
