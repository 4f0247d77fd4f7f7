// ferry-lat: ping-pong latency of one Ferry transport operation, perftest style.
//
//   ferry-lat --transport tcp                      # server, waits on 127.0.0.1:18515
//   ferry-lat --transport tcp 127.0.0.1 -a         # client: sweep 2 B .. 8 MiB
//   ferry-lat --transport ucx --param UCX_TLS=shm,self --local --op write_imm
//
// send/write/write_imm/sparse_write report half the round trip; read/sparse_read the full round
// trip (as perftest's ib_read_lat does). Per size a checked pass verifies every transfer, then
// the timed pass sees arrival as ib_write_lat does (the last byte) and checks no more.
#include <CLI/CLI.hpp>

#include "tools/bench/cli.h"
#include "tools/common/command.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::bench::ToolOptions options;
  ferry::bench::AddFlags(app, options, ferry::bench::Mode::kLatency);
  ferry::tools::SetUpCommand(
      app,
      {.name = "ferry-lat",
       .summary = "latency of Ferry transport operations (ping-pong; columns as perftest)",
       .description = "Without an address it is the server; with one, the client; --local runs "
                      "both.\nsend/write/write_imm/sparse_write report half the round trip; "
                      "read/sparse_read the full\nround trip (as ib_read_lat). Per size: a checked "
                      "pass (every transfer verified),\nthen the timed pass, checked as perftest "
                      "checks (--check full|ref for one of them).",
       .examples = {"ferry-lat --transport tcp --local",
                    "ferry-lat --transport tcp --local -a --op write --json -",
                    "ferry-lat --transport tcp --local -a --plot lat.svg",
                    "ferry-lat --transport ucx --param UCX_TLS=shm,self --local --op "
                    "sparse_read --rows 32",
                    "ferry-lat --transport verbs -d rxe0 -x 1        (server)",
                    "ferry-lat --transport verbs -d rxe0 -x 1 HOST   (client)"},
       .see_also = {"ferry-bw", "ferry-plot", "ferry-info", "ib_write_lat(1)", "docs/tools.md"}});
  return ferry::bench::ParseAndExecute(app, options, argc, argv);
}
