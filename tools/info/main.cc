// ferry-info: what Ferry can use on this machine — backends (availability, capabilities,
// devices) and the hardware topology (NUMA nodes, cores, which device is near which node).
//
//   ferry-info                 human-readable sections
//   ferry-info --json          the same information as strictly valid JSON
//   ferry-info --backend tcp   only one backend
//
// Exit codes: 0 success (and --help); CLI11's non-zero code for a bad command line (the reason is
// on stderr); 3 unknown backend name; 1 internal failure.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "tools/common/command.h"
#include "tools/info/info.h"
#include "transport/transport.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app,
      {.name = "ferry-info",
       .summary = "Ferry backends, devices and machine topology",
       .description = "Which backends are built and usable here (with the reason when not), "
                      "their capabilities\nand devices, and the NUMA topology.",
       .examples = {"ferry-info", "ferry-info --json", "ferry-info --backend ucx"},
       .exit_status = "0 success; 3 unknown backend name; 1 internal failure; CLI11's non-zero "
                      "code for a bad\ncommand line.",
       .see_also = {"ferry-lat", "ferry-bw", "ibv_devinfo(1)", "ucx_info(1)"}});
  bool as_json = false;
  std::string backend;
  app.add_flag("--json", as_json, "print strictly valid JSON instead of text sections");
  app.add_option("--backend", backend, "show only this backend (verbs, ucx, tcp)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints the reason (or --help) and returns CLI11's exit code
  }

  try {
    if (!backend.empty()) {
      bool known = false;
      std::string names;
      for (const ferry::BackendInfo& b : ferry::ListBackends()) {
        known = known || b.name == backend;
        names += (names.empty() ? "" : ", ") + b.name;
      }
      if (!known) {
        std::cerr << "ferry-info: unknown backend '" << backend << "' (known: " << names << ")\n";
        return 3;
      }
    }
    nlohmann::ordered_json doc = ferry::info::Collect(backend);
    if (as_json) {
      // Replace invalid UTF-8 from device attributes instead of failing: output stays valid.
      std::cout << doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                << '\n';
    } else {
      ferry::info::PrintHuman(doc, std::cout);
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "ferry-info: internal error: " << e.what() << '\n';
    return 1;
  }
}
