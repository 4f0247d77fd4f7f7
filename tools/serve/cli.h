// ferry-serve's command line (cli.cc): flags in, models::Server (models/serve/server.h) run until
// SIGINT or SIGTERM. Kept out of main so tests can drive it.
#pragma once

#include <string>
#include <string_view>

#include "transport/status.h"

namespace ferry::serve {

struct ListenAddress {
  std::string host;
  int port = 0;
};

// "HOST:PORT" (PORT 0..65535; 0: any free port), "[V6ADDR]:PORT", or ":PORT" (127.0.0.1).
// InvalidArgument naming the text otherwise. Pure.
Result<ListenAddress> ParseListenAddress(std::string_view text);

// The whole command; returns the exit code (0 after a clean stop, 1 when serving could not
// start, 2 bad command line).
int ServeMain(int argc, char** argv);

}  // namespace ferry::serve
