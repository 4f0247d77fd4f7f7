// ferry-serve: online scoring over HTTP/1.1 with a model that follows an export directory
// (docs/serving.md). The hub of models/serve/:
//
//   server.{h,cc}       this: the HTTP endpoints (cpp-httplib), their answers and limits
//   request.{h,cc}      request decoding and response encoding: pure, fuzzed
//                       (tests/fuzz/fuzz_serve_request.cc)
//   model_store.{h,cc}  the served version, the follower that loads new ones and swaps them in
//   metrics.{h,cc}      counters and the Prometheus rendering
//
// Scoring is ferry-predict's: models/train/predict.h's Scorer, one per version.
//
// Endpoints (TensorFlow Serving's REST conventions):
//   POST /v1/models/NAME:predict  {"instances": [...]} -> {"predictions": [...], "model_version":
//   V} GET  /v1/models/NAME          the version, its load time, rows per table GET  /healthz 200
//   "ok" once a model is loaded (always, after Start) GET  /metrics                 Prometheus text
//   format (metrics.h)
// Every error is a JSON body {"error": "..."} with a 4xx status (400 a bad request, 404 an
// unknown model or endpoint, 413 a body over max_body) or 500 (a bug; logged).
//
// Threading: httplib's listener thread accepts; a pool of `threads` workers serves connections
// (one connection holds one worker while it is open, so idle keep-alive connections and slow
// clients are cut after `timeout_s`); the follower's thread loads versions. Handlers never block
// on a load: each takes the current version once (ModelFollower::Current) and scores with it.
// Lifetime: Stop() (or the destructor) stops accepting, lets the handlers running finish and
// joins every thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "models/serve/metrics.h"
#include "models/serve/model_store.h"
#include "models/serve/request.h"
#include "transport/status.h"

namespace ferry::models {

struct ServerOptions {
  FollowOptions follow;  // the export directory and how it is followed
  std::string model_name = "default";
  std::string host = "127.0.0.1";
  int port = 8500;              // 0: any free port (port() tells which)
  int threads = 8;              // connection workers
  size_t max_body = 64u << 20;  // bytes; a larger request is refused with 413
  int timeout_s = 5;            // read, write and keep-alive idle timeout per connection
  RequestLimits limits;
};

class Server {
 public:
  // Loads the newest version of the export directory, binds, and starts serving and following.
  // Errors: the directory has no version that loads (its reason), the address cannot be bound.
  static Result<std::unique_ptr<Server>> Start(ServerOptions o);
  ~Server();

  int port() const;
  ModelFollower& follower();
  const ServeMetrics& metrics() const;

  void Wait();  // blocks until the listener ends (after Stop)
  void Stop();  // idempotent; from any thread but a handler

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::models
