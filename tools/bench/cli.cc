#include "tools/bench/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <thread>

#include "tools/bench/local.h"
#include "tools/bench/report.h"
#include "tools/common/command.h"
#include "tools/common/output.h"

namespace ferry::bench {
void AddFlags(CLI::App& app, ToolOptions& o, Mode mode) {
  o.mode = mode;
  o.config.mode = mode;
  if (mode == Mode::kBandwidth) {
    o.config.iters = 5000;
    o.config.sizes = {65536};
  } else {
    o.config.iters = 1000;
    o.config.sizes = {2};
  }
  app.add_option("address", o.address,
                 "server to connect to (host or host:port); without it, run as the server");
  app.add_option("--transport", o.transport, "backend: verbs, ucx, tcp or auto")
      ->check(CLI::IsMember({"auto", "verbs", "ucx", "tcp"}));
  app.add_option("--param", o.params,
                 "backend parameter KEY=VALUE (repeatable), e.g. UCX_TLS=shm,self or device=rxe0");
  app.add_option("-d,--ib-dev", o.device, "verbs: device name (same as --param device=NAME)");
  app.add_option("-x,--gid-index", o.gid_index, "verbs: GID index (--param gid_index=N)");
  app.add_option("-i,--ib-port", o.ib_port, "verbs: device port (--param port=N)");
  app.add_option("-p,--port", o.port, "TCP port of the server's listener")->capture_default_str();
  app.add_option("--bind", o.bind, "server: address to listen on")->capture_default_str();
  app.add_flag("--local", o.local,
               "start a server process on 127.0.0.1 and run against it (single command)");
  app.add_flag("--report-port", o.report_port, "internal: print the listen banner")->group("");
  app.add_option("--accept-timeout", o.accept_timeout_s,
                 "server: seconds to wait for a client (0: forever)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--op", o.op, "send, write, read, write_imm, sparse_write or sparse_read")
      ->capture_default_str();
  app.add_flag("-a,--all", o.all_sizes, "sweep sizes 2 B .. 8 MiB (powers of two)");
  app.add_option("-s,--size", o.sizes, "message size(s), e.g. 64,4K,1M")->delimiter(',');
  app.add_option("-n,--iters", o.config.iters, "measured iterations per size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-D,--duration", o.config.duration_s,
                 "seconds per size instead of an iteration count")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.config.warmup, "unmeasured iterations before each size")
      ->capture_default_str();
  app.add_option("-q,--endpoints", o.config.endpoints, "data endpoints (connections)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--threads", o.config.threads, "worker threads per side")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--check", o.check,
                 "how transfers are checked: both (default: a checked pass, then the timed pass), "
                 "full (one pass, every transfer verified) or ref (one pass checked the way "
                 "perftest/ucx_perftest check: arrival only, one buffer)")
      ->check(CLI::IsMember({"both", "full", "ref"}));
  app.add_flag_callback(
      "--no-verify", [&o] { o.check = "ref"; }, "same as --check ref");
  app.add_option("--thread-mode", o.thread_mode,
                 "transport thread mode: single (the default with one worker thread and no "
                 "--progress-thread; a server picks it only when told) or multi")
      ->check(CLI::IsMember({"single", "multi"}));
  app.add_option("--rows", o.config.rows, "sparse ops: rows per operation")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--row-size", o.row_size, "sparse ops: bytes per row")->capture_default_str();
  app.add_option("--region-size", o.region_size,
                 "sparse ops: size of the registered region the rows are scattered in")
      ->capture_default_str();
  app.add_option("--seed", o.config.seed, "base seed of patterns and row choice")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds without progress before giving up")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  app.add_flag("--progress-thread", o.peer.progress_thread,
               "let the transport drive progress on an internal thread");
  app.add_option("--json", o.json_path, "write results as JSON to FILE (- for stdout)");
  app.add_option("--csv", o.csv_path, "write results as CSV to FILE (- for stdout)");
  app.add_option("--plot", o.plot_path,
                 mode == Mode::kLatency
                     ? "draw the sweep as an SVG plot to FILE: median and p99 latency vs "
                       "message size, log-log (ferry-plot draws --json files the same way)"
                     : "draw the sweep as an SVG plot to FILE: average bandwidth (MiB/s) vs "
                       "message size, log x (ferry-plot draws --json files the same way)")
      ->type_name("FILE.svg");
  if (mode == Mode::kBandwidth) {
    app.add_option("-t,--depth", o.config.depth, "outstanding operations per endpoint")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_flag("-b,--bidir", o.config.bidir, "both sides send at once");
  }
}

Status Resolve(ToolOptions& o) {
  BenchConfig& c = o.config;
  c.mode = o.mode;
  FERRY_ASSIGN_OR_RETURN(c.op, ParseBenchOp(o.op));
  if (!o.check.empty()) {
    FERRY_ASSIGN_OR_RETURN(c.check, ParseCheckPolicy(o.check));
  }
  o.peer.params.clear();
  for (const std::string& kv : o.params) {
    FERRY_ASSIGN_OR_RETURN(auto param, tools::SplitKeyValue("--param", kv));
    o.peer.params.insert_or_assign(std::move(param.first), std::move(param.second));
  }
  if (!o.device.empty()) o.peer.params["device"] = o.device;
  if (!o.gid_index.empty()) o.peer.params["gid_index"] = o.gid_index;
  if (!o.ib_port.empty()) o.peer.params["port"] = o.ib_port;
  if (o.transport == "auto") {
    o.peer.transport.clear();
    for (const BackendInfo& b : ListBackends()) {
      if (b.available) {
        o.peer.transport = b.name;
        break;
      }
    }
    if (o.peer.transport.empty()) return Unsupported("no transport backend is available here");
  } else {
    o.peer.transport = o.transport;
  }
  FERRY_ASSIGN_OR_RETURN(c.row_size, ParseByteSize(o.row_size));
  FERRY_ASSIGN_OR_RETURN(c.region_size, ParseByteSize(o.region_size));
  if (UsesRows(c.op)) {
    if (o.all_sizes || !o.sizes.empty()) {
      return InvalidArgument("sparse and pack ops take --rows and --row-size, not --size or -a");
    }
    c.sizes = {c.rows * c.row_size};
  } else if (o.all_sizes) {
    if (!o.sizes.empty()) return InvalidArgument("use either -a or --size, not both");
    c.sizes = SweepSizes();
  } else if (!o.sizes.empty()) {
    c.sizes.clear();
    for (const std::string& s : o.sizes) {
      FERRY_ASSIGN_OR_RETURN(uint64_t v, ParseByteSize(s));
      c.sizes.push_back(v);
    }
  }
  c.timeout_ms = static_cast<uint64_t>(o.timeout_s * 1000);
  if (c.timeout_ms == 0) c.timeout_ms = 1;
  o.peer.connect_timeout = Millis(c.timeout_ms);
  if (o.local && !o.address.empty()) {
    return InvalidArgument("--local starts its own server; do not give an address");
  }
  if (o.report_port && (o.local || !o.address.empty())) {
    return InvalidArgument("--report-port is for server mode only");
  }
  const bool server = o.address.empty() && !o.local;
  // One worker thread and no progress thread: the worker is the transport's only caller during
  // a phase, so the client runs it single-threaded (as ucx_perftest does by default). A server
  // learns the client's thread count only after creating its transport, so it is multi unless
  // told (--local tells it).
  if (o.thread_mode.empty()) {
    o.peer.thread_mode = !server && c.threads == 1 && !o.peer.progress_thread ? ThreadMode::kSingle
                                                                              : ThreadMode::kMulti;
  } else {
    o.peer.thread_mode = o.thread_mode == "single" ? ThreadMode::kSingle : ThreadMode::kMulti;
  }
  if (o.peer.thread_mode == ThreadMode::kSingle && o.peer.progress_thread) {
    return InvalidArgument("--thread-mode single cannot be combined with --progress-thread");
  }
  if (server && (!o.json_path.empty() || !o.csv_path.empty() || !o.plot_path.empty())) {
    return InvalidArgument(
        "--json/--csv/--plot are written by the client (the side that prints results)");
  }
  if ((o.json_path == "-") + (o.csv_path == "-") + (o.plot_path == "-") > 1) {
    return InvalidArgument("only one of --json, --csv and --plot can go to stdout");
  }
  return ValidateConfig(c);
}

std::vector<std::string> LocalServerArgs(const ToolOptions& o) {
  std::vector<std::string> args = {"--transport",
                                   o.peer.transport,
                                   "--bind",
                                   "127.0.0.1",
                                   "--port",
                                   "0",
                                   "--report-port",
                                   "--accept-timeout",
                                   std::to_string(o.timeout_s),
                                   "--timeout",
                                   std::to_string(o.timeout_s)};
  for (const auto& [k, v] : o.peer.params) {
    args.push_back("--param");
    args.push_back(k + "=" + v);
  }
  if (o.peer.progress_thread) args.push_back("--progress-thread");
  args.push_back("--thread-mode");
  args.push_back(o.peer.thread_mode == ThreadMode::kSingle ? "single" : "multi");
  return args;
}

std::string ClientAddress(const ToolOptions& o) {
  const std::string& a = o.address;
  if (!a.empty() && a.front() == '[') {
    return a.find("]:") != std::string::npos ? a : a + ":" + std::to_string(o.port);
  }
  const size_t colons = std::count(a.begin(), a.end(), ':');
  if (colons == 1) return a;
  if (colons > 1) return "[" + a + "]:" + std::to_string(o.port);  // bare IPv6 literal
  return a + ":" + std::to_string(o.port);
}

namespace {

const char* ToolName(const ToolOptions& o) {
  return o.mode == Mode::kLatency ? "ferry-lat" : "ferry-bw";
}

// Server mode: listen, serve one client session, say what it was.
int ServeOneClient(const ToolOptions& o) {
  // With --report-port stdout carries only the banner (the --local parent reads it).
  FILE* info = o.report_port ? stderr : stdout;
  auto server = BenchServer::Listen(o.peer, o.bind + ":" + std::to_string(o.port));
  if (!server.ok()) return tools::ReportError(ToolName(o), server.status().ToString(), 1);
  if (o.report_port) {
    std::printf("%s%s\n", kListenBanner, (*server)->address().c_str());
    std::fflush(stdout);
  } else {
    std::fprintf(info, "Waiting for a client on %s (transport %s)\n", (*server)->address().c_str(),
                 o.peer.transport.c_str());
    std::fflush(info);
  }
  const Millis wait = o.accept_timeout_s > 0
                          ? Millis(static_cast<int64_t>(o.accept_timeout_s * 1000))
                          : Millis(int64_t{365} * 24 * 3600 * 1000);
  Status s = (*server)->Serve(wait);
  if (!s.ok()) return tools::ReportError(ToolName(o), s.ToString(), 1);
  std::fprintf(info, "Client session finished (%s %s, %zu sizes)\n",
               std::string(ModeName((*server)->config().mode)).c_str(),
               std::string(BenchOpName((*server)->config().op)).c_str(),
               (*server)->config().sizes.size());
  return 0;
}

// The text table, a line at a time as the sizes finish, on `text`.
RunCallbacks PrintRows(FILE* text) {
  RunCallbacks cb;
  cb.on_header = [text](const RunHeader& h) {
    std::fputs(FormatTextHeader(h).c_str(), text);
    std::fflush(text);
  };
  cb.on_latency = [text](const RunHeader& h, const LatencyRow& r) {
    std::fputs(FormatTextRow(h, r).c_str(), text);
    std::fflush(text);
  };
  cb.on_bandwidth = [text](const RunHeader& h, const BandwidthRow& r) {
    std::fputs(FormatTextRow(h, r).c_str(), text);
    std::fflush(text);
  };
  return cb;
}

// --json, --csv, then --plot: last, so a plot that cannot be drawn or written never costs the
// numbers before it.
int WriteReports(const ToolOptions& o, const Report& report) {
  if (!o.json_path.empty()) {
    Status s = tools::WriteOutput(o.json_path, FormatJson(report));
    if (!s.ok()) return tools::ReportError(ToolName(o), s.ToString(), 1);
  }
  if (!o.csv_path.empty()) {
    Status s = tools::WriteOutput(o.csv_path, FormatCsv(report));
    if (!s.ok()) return tools::ReportError(ToolName(o), s.ToString(), 1);
  }
  if (!o.plot_path.empty()) {
    Status s = WritePlot(report, o.plot_path);
    if (!s.ok()) return tools::ReportError(ToolName(o), "--plot: " + s.ToString(), 1);
  }
  return 0;
}

// Client mode (and --local, which first starts its server): run, print, write the reports.
int RunAgainstServer(const ToolOptions& o) {
  std::optional<LocalServer> local;
  std::string address;
  if (o.local) {
    auto spawned = LocalServer::Spawn(LocalServerArgs(o), Millis(o.config.timeout_ms + 5000));
    if (!spawned.ok()) {
      return tools::ReportError(ToolName(o), "--local: " + spawned.status().ToString(), 1);
    }
    local.emplace(std::move(spawned).value());
    address = local->address();
  } else {
    address = ClientAddress(o);
  }
  // Text goes to stdout unless a machine-readable format claims it.
  FILE* text = (o.json_path == "-" || o.csv_path == "-" || o.plot_path == "-") ? stderr : stdout;
  Result<Report> report = RunClient(o.peer, o.config, address, PrintRows(text));
  Status server_status;
  if (local) server_status = local->Wait(Millis(o.config.timeout_ms + 5000));
  if (!report.ok()) return tools::ReportError(ToolName(o), report.status().ToString(), 1);
  std::fputs(FormatTextFooter().c_str(), text);
  std::fflush(text);
  if (!server_status.ok()) {
    return tools::ReportError(ToolName(o), "--local server: " + server_status.ToString(), 1);
  }
  return WriteReports(o, *report);
}

}  // namespace

int Execute(const ToolOptions& o) {
  const bool server_mode = o.address.empty() && !o.local;
  return server_mode ? ServeOneClient(o) : RunAgainstServer(o);
}

int ParseAndExecute(CLI::App& app, ToolOptions& o, int argc, char** argv) {
  if (std::optional<int> code = tools::ParseCommandLine(app, argc, argv)) return *code;
  Status s = Resolve(o);
  if (!s.ok()) return tools::ReportError(ToolName(o), s.message(), 2);
  return Execute(o);
}

int LatMain(int argc, char** argv) {
  CLI::App app;
  ToolOptions options;
  AddFlags(app, options, Mode::kLatency);
  tools::SetUpCommand(
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
  return ParseAndExecute(app, options, argc, argv);
}

int BwMain(int argc, char** argv) {
  CLI::App app;
  ToolOptions options;
  AddFlags(app, options, Mode::kBandwidth);
  tools::SetUpCommand(
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
  return ParseAndExecute(app, options, argc, argv);
}

}  // namespace ferry::bench
