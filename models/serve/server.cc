// ferry-serve's HTTP endpoints over cpp-httplib (server.h).
#include "models/serve/server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

namespace ferry::models {

namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kEndpointList =
    "the endpoints are POST /v1/models/NAME:predict, GET /v1/models/NAME, GET /healthz, GET "
    "/metrics";

Endpoint EndpointOf(const std::string& path) {
  if (path.rfind("/v1/models/", 0) == 0) {
    return path.ends_with(":predict") ? Endpoint::kPredict : Endpoint::kModel;
  }
  if (path == "/healthz") return Endpoint::kHealth;
  if (path == "/metrics") return Endpoint::kMetrics;
  return Endpoint::kOther;
}

void Fail(httplib::Response& res, int status, std::string_view message) {
  res.status = status;
  res.set_content(EncodeError(message), kJson);
}

}  // namespace

struct Server::Impl {
  ServerOptions o;
  ServeMetrics metrics;
  std::unique_ptr<ModelFollower> follower;
  httplib::Server http;
  int port = 0;
  std::thread listener;

  // The model a request names: the one we serve, or a 404 saying which that is.
  bool KnownModel(const std::string& name, httplib::Response& res) const {
    if (name == o.model_name) return true;
    Fail(res, 404, "unknown model '" + name + "'; this server serves '" + o.model_name + "'");
    return false;
  }

  // The body, read by the route itself rather than by the library: the library caps
  // application/x-www-form-urlencoded bodies at 8 KiB (a constant of Debian's build) and parses
  // them as a query string, and `curl -d` sends that type; TensorFlow Serving's clients post JSON
  // under any type. Chunked bodies are held to --max-body here too. A refused body is still read
  // to its end (a chunked one up to as much again, then the connection is closed), so that a
  // client still sending gets the answer rather than a reset. False: `res` says why.
  bool ReadBody(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& read, std::string* body) const {
    const uint64_t drain_limit = 2 * o.max_body;
    if (req.is_multipart_form_data()) {
      uint64_t seen = 0;
      const bool drained = read([](const httplib::MultipartFormData&) { return true; },
                                [&](const char*, size_t n) { return (seen += n) <= drain_limit; });
      if (!drained) res.set_header("Connection", "close");
      Fail(res, 415,
           "a multipart/form-data body is not a predict request: post the JSON itself "
           "(Content-Type: application/json)");
      return false;
    }
    // Each thread keeps its buffer between requests, but not one a rare huge body grew.
    if (body->capacity() > (size_t{1} << 20)) std::string().swap(*body);
    body->clear();
    uint64_t seen = 0;
    const bool ok = read([&](const char* data, size_t n) {
      seen += n;
      if (seen <= o.max_body) body->append(data, n);
      return seen <= drain_limit;
    });
    const bool over = seen > o.max_body;
    if (ok && !over) return true;
    if (over || res.status == 413) {  // 413 set by the library: a Content-Length over the limit
      if (!ok) res.set_header("Connection", "close");  // the rest of the chunks is unread
      Fail(res, 413, OverLimit());
    } else {
      Fail(res, 400, "the request body could not be read (truncated or malformed chunks)");
    }
    return false;
  }

  std::string OverLimit() const {
    return "the request body is over the limit of " + std::to_string(o.max_body) +
           " bytes (--max-body)";
  }

  void Predict(const httplib::Request& req, httplib::Response& res,
               const httplib::ContentReader& read) {
    const auto start = std::chrono::steady_clock::now();
    // The body first, whatever the answer: one left unread would be taken for the next request.
    thread_local std::string body;
    if (!ReadBody(req, res, read, &body)) return;
    if (!KnownModel(req.matches[1], res)) return;
    // One version from start to end: this pointer keeps it alive whatever swaps meanwhile.
    std::shared_ptr<const ServedModel> m = follower->Current();
    const Scorer& scorer = *m->scorer;
    thread_local Batch batch;
    thread_local std::vector<float> probs;
    thread_local ScoreScratch scratch;
    const InputSpec spec{scorer.format(), scorer.hash_seed(), scorer.hash_bits(),
                         scorer.field_map()};
    if (Status s = DecodePredictRequest(body, spec, &batch, o.limits); !s.ok()) {
      return Fail(res, 400, s.message());
    }
    probs.resize(batch.size());
    if (Status s = scorer.Score(batch, probs, &scratch); !s.ok()) {
      return Fail(res, 500, "scoring failed: " + s.ToString());
    }
    // Moved in, not copied (set_content copies its argument).
    res.body = EncodePredictResponse(probs, m->version);
    res.set_header("Content-Type", kJson);
    metrics.ObservePredict(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        batch.size());
  }

  void ModelStatus(const httplib::Request& req, httplib::Response& res) {
    if (!KnownModel(req.matches[1], res)) return;
    std::shared_ptr<const ServedModel> m = follower->Current();
    nlohmann::json tables = nlohmann::json::object();
    for (const auto& [name, rows] : m->rows) tables[name] = rows;
    nlohmann::json j = {
        // TensorFlow Serving's model status shape, then ours.
        {"model_version_status",
         {{{"version", std::to_string(m->version)},
           {"state", "AVAILABLE"},
           {"status", {{"error_code", "OK"}, {"error_message", ""}}}}}},
        {"name", o.model_name},
        {"model_version", m->version},
        {"kind", std::string(ModelKindName(m->model.kind))},
        {"format", std::string(FormatName(m->scorer->format()))},
        {"load_time_unix_ms", m->load_unix_ms},
        {"load_seconds", m->load_seconds},
        {"rows", tables},
        {"model_dir", o.follow.dir},
    };
    res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", kJson);
  }

  void Routes() {
    http.Post(R"(/v1/models/([^/:]+):predict)",
              [this](const httplib::Request& req, httplib::Response& res,
                     const httplib::ContentReader& read) { Predict(req, res, read); });
    http.Get(R"(/v1/models/([^/:]+))", [this](const httplib::Request& req, httplib::Response& res) {
      ModelStatus(req, res);
    });
    http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.RenderPrometheus(), "text/plain; version=0.0.4");
    });
    // Every 4xx/5xx without a body of ours (no route, a body over the limit, httplib's own
    // refusals) gets one that says what is wrong.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message;
          if (res.status == 413) {
            message = OverLimit();
          } else if (res.status == 404) {
            message = "no endpoint " + req.method + " " + req.path + "; " + kEndpointList;
          } else {
            message = "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path;
          }
          Fail(res, res.status, message);
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          std::fprintf(stderr, "ferry-serve: internal error: %s\n", what.c_str());
          Fail(res, 500, "internal error: " + what);
        });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.CountRequest(EndpointOf(req.path), res.status);
    });
  }
};

Result<std::unique_ptr<Server>> Server::Start(ServerOptions o) {
  if (o.threads < 1) return InvalidArgument("ferry-serve needs at least 1 thread");
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(o);
  FERRY_ASSIGN_OR_RETURN(impl->follower, ModelFollower::Open(impl->o.follow, &impl->metrics));
  const ServerOptions& opt = impl->o;
  const size_t threads = static_cast<size_t>(opt.threads);
  impl->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->http.set_payload_max_length(opt.max_body);
  impl->http.set_read_timeout(opt.timeout_s, 0);
  impl->http.set_write_timeout(opt.timeout_s, 0);
  impl->http.set_keep_alive_timeout(opt.timeout_s);
  impl->http.set_keep_alive_max_count(1000);
  // cpp-httplib 0.11 writes an answer's header and body in two writes and leaves Nagle on: the
  // body then waits for the client's delayed ACK, ~40 ms per request (perf/serving measured 180
  // requests/s at p50 44 ms without this, 31k/s at 0.23 ms for a constant handler with it).
  impl->http.set_tcp_nodelay(true);
  impl->Routes();
  if (opt.port == 0) {
    impl->port = impl->http.bind_to_any_port(opt.host);
    if (impl->port < 0) impl->port = 0;
  } else if (impl->http.bind_to_port(opt.host, opt.port)) {
    impl->port = opt.port;
  }
  if (impl->port == 0) {
    return IoError("listen on " + opt.host + ":" + std::to_string(opt.port) +
                       " (in use, or not an address of this host)",
                   errno);
  }
  impl->listener = std::thread([s = impl.get()] { s->http.listen_after_bind(); });
  impl->follower->Start();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  Stop();
}

int Server::port() const {
  return impl_->port;
}
ModelFollower& Server::follower() {
  return *impl_->follower;
}
const ServeMetrics& Server::metrics() const {
  return impl_->metrics;
}

void Server::Wait() {
  if (impl_->listener.joinable()) impl_->listener.join();
}

void Server::Stop() {
  impl_->http.stop();
  Wait();
  impl_->follower->Stop();
}

}  // namespace ferry::models
