// ferry-serve over real HTTP on 127.0.0.1 (models/serve/server.h, the ferry-serve command):
// every endpoint, every kind of bad request with its status and message, slow clients cut by
// the timeouts, and predictions equal to ferry-predict's for the same lines and model, bit for
// bit, for every model kind and input format.
#include "models/serve/server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "models/data/reader.h"
#include "models/io/export_dir.h"
#include "models/train/predict.h"
#include "tests/serve/serve_test_util.h"

namespace ferry::serve_test {
namespace {

using models::Format;
using nlohmann::json;
using ::testing::HasSubstr;

std::unique_ptr<models::Server> StartServer(const std::string& dir, size_t max_body = 1 << 20,
                                            int timeout_s = 5, int threads = 4) {
  models::ServerOptions o;
  o.follow.dir = dir;
  o.follow.poll_ms = 50;
  o.follow.log = [](const std::string&) {};
  o.model_name = "ctr";
  o.port = 0;
  o.max_body = max_body;
  o.timeout_s = timeout_s;
  o.threads = threads;
  auto s = models::Server::Start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

json Instances(const std::vector<std::string>& lines, Format f) {
  json inst = json::array();
  for (const std::string& l : lines) inst.push_back(FeaturePart(l, f));
  return json{{"instances", inst}};
}

// One small model of every kind, each on its own input format, shared by the tests.
class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    for (Format f : {Format::kLibsvm, Format::kLibffm, Format::kCriteo}) {
      (*data_)[f] = Generate(dir_->path(), f);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // The export directory of `model` trained on `format` (trained on first use).
  static std::string Export(const std::string& model, Format f) {
    const std::string ex = *dir_ / (model + "-" + std::string(models::FormatName(f)));
    if (!std::filesystem::exists(ex)) TrainExport((*data_)[f], model, ex);
    return ex;
  }
  static inline TempDir* dir_ = nullptr;
  static inline auto* data_ = new std::map<Format, Data>;
};

TEST_F(Serve, EveryEndpointAnswers) {
  auto server = StartServer(Export("fm", Format::kLibsvm));
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->port());
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  const std::vector<std::string> lines = Lines(Slurp((*data_)[Format::kLibsvm].test));
  auto pred =
      c.Post("/v1/models/ctr:predict",
             Instances({lines[0], lines[1], lines[2]}, Format::kLibsvm).dump(), "application/json");
  ASSERT_TRUE(pred);
  ASSERT_EQ(pred->status, 200) << pred->body;
  json p = json::parse(pred->body);
  ASSERT_EQ(p["predictions"].size(), 3u);
  for (const json& v : p["predictions"]) {
    EXPECT_GT(v.get<double>(), 0);
    EXPECT_LT(v.get<double>(), 1);
  }
  const uint64_t version = server->follower().Current()->version;
  EXPECT_EQ(p["model_version"].get<uint64_t>(), version);

  auto status = c.Get("/v1/models/ctr");
  ASSERT_TRUE(status);
  ASSERT_EQ(status->status, 200);
  json s = json::parse(status->body);
  EXPECT_EQ(s["model_version"].get<uint64_t>(), version);
  EXPECT_EQ(s["model_version_status"][0]["state"], "AVAILABLE");
  EXPECT_EQ(s["kind"], "fm");
  EXPECT_GT(s["load_time_unix_ms"].get<uint64_t>(), 1700000000000u);
  const models::Model& m = server->follower().Current()->model;
  ASSERT_EQ(s["rows"].size(), m.tables.size());
  for (const models::ModelTable& t : m.tables) EXPECT_EQ(s["rows"][t.name()], t.size());

  // A request is counted by httplib's logger after its answer is written: on a loaded host the
  // predict request's count may come a moment after its answer (each request here is a
  // connection of its own, served by any worker).
  const std::string predict_count =
      "ferry_serve_requests_total{endpoint=\"predict\",code=\"200\"} 1\n";
  auto metrics = c.Get("/metrics");
  for (int i = 0; i < 100 && metrics && metrics->body.find(predict_count) == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    metrics = c.Get("/metrics");
  }
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("text/plain"));
  EXPECT_THAT(metrics->body, HasSubstr(predict_count));
  EXPECT_THAT(metrics->body, HasSubstr("ferry_serve_instances_total 3\n"));
  EXPECT_THAT(metrics->body, HasSubstr("ferry_serve_predict_seconds_count 1\n"));
  EXPECT_THAT(metrics->body,
              HasSubstr("ferry_serve_model_version " + std::to_string(version) + "\n"));
  EXPECT_THAT(metrics->body, HasSubstr("ferry_serve_model_swaps_total 0\n"));
}

TEST_F(Serve, BadRequestsGetTheirStatusAndAMessage) {
  auto server = StartServer(Export("lr", Format::kLibsvm), /*max_body=*/4096);
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->port());
  struct Case {
    std::string method, path, body;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/models/ctr:predict", "{\"instances\": [", 400, "malformed JSON"},
      {"POST", "/v1/models/ctr:predict", R"({"instances": ["1:1", "2:oops"]})", 400,
       "instance 1: feature 1 '2:oops'"},
      {"POST", "/v1/models/ctr:predict", R"({"instances": []})", 400, "\"instances\" is empty"},
      {"POST", "/v1/models/ctr:predict", R"({"rows": []})", 400, "no \"instances\" array"},
      {"POST", "/v1/models/other:predict", R"({"instances": ["1:1"]})", 404,
       "unknown model 'other'; this server serves 'ctr'"},
      {"GET", "/v1/models/other", "", 404, "unknown model 'other'"},
      {"GET", "/v1/models/ctr:predict", "", 404, "no endpoint GET /v1/models/ctr:predict"},
      {"GET", "/nothing", "", 404, "the endpoints are POST /v1/models/NAME:predict"},
      {"POST", "/v1/models/ctr:predict", R"({"instances": [")" + std::string(5000, '1') + R"("]})",
       413, "over the limit of 4096 bytes (--max-body)"},
  };
  for (const Case& k : cases) {
    auto r = k.method == "GET" ? c.Get(k.path.c_str())
                               : c.Post(k.path.c_str(), k.body, "application/json");
    ASSERT_TRUE(r) << k.path;
    EXPECT_EQ(r->status, k.status) << k.method << " " << k.path << " " << k.body;
    json e = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << r->body;
    EXPECT_THAT(e["error"].get<std::string>(), HasSubstr(k.message)) << k.body;
  }
  // A chunked body is held to --max-body as well (the library checks Content-Length only); the
  // rest of it is read, so the answer reaches a client still sending.
  auto chunked = c.Post(
      "/v1/models/ctr:predict",
      [sent = 0](size_t, httplib::DataSink& sink) mutable {
        const std::string piece(1000, ' ');
        if (sent++ < 5) return sink.write(piece.data(), piece.size());
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413);
  EXPECT_THAT(chunked->body, HasSubstr("over the limit of 4096 bytes"));
  auto multipart = c.Post("/v1/models/ctr:predict",
                          httplib::MultipartFormDataItems{{"instances", "1:1", "", ""}});
  ASSERT_TRUE(multipart);
  EXPECT_EQ(multipart->status, 415);
  EXPECT_THAT(multipart->body, HasSubstr("post the JSON itself"));
  // curl -d sends application/x-www-form-urlencoded, which the library alone caps at 8 KiB: the
  // route reads its body itself, so a 1,000-instance body of that type is scored like any other.
  auto server2 = StartServer(Export("lr", Format::kLibsvm));
  httplib::Client c2("127.0.0.1", server2->port());
  std::string form = R"({"instances": [)";
  for (int i = 0; i < 1000; ++i) form += (i ? ", " : "") + std::string(R"("1:1 7:0.5")");
  form += "]}";
  ASSERT_GT(form.size(), 8192u);
  auto r = c2.Post("/v1/models/ctr:predict", form, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["predictions"].size(), 1000u);
  // Still serving, and every error counted.
  auto ok = c.Post("/v1/models/ctr:predict", R"({"instances": ["1:1"]})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(server->metrics().requests(models::Endpoint::kPredict, 400), 4u);
  EXPECT_EQ(server->metrics().requests(models::Endpoint::kPredict, 413), 2u);
  EXPECT_EQ(server->metrics().requests(models::Endpoint::kPredict, 415), 1u);
}

// A port nobody listens on now (bound to 0, read back, closed).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A raw connection to the server's port.
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

TEST_F(Serve, SlowAndIdleClientsAreCutAndFreeTheirThreads) {
  // 2 workers, a 1 s timeout: one client stops mid-request, one connects and says nothing.
  auto server = StartServer(Export("lr", Format::kLibsvm), 1 << 20, /*timeout_s=*/1,
                            /*threads=*/2);
  ASSERT_NE(server, nullptr);
  const int slow = Connect(server->port());
  const std::string partial = "POST /v1/models/ctr:predict HTTP/1.1\r\nContent-Length: 100\r\n";
  ASSERT_EQ(send(slow, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  const int idle = Connect(server->port());
  const auto start = std::chrono::steady_clock::now();
  // Each is closed by the server (after at most an error answer): reads reach the end.
  char buf[256];
  for (int fd : {slow, idle}) {
    ssize_t n = 0;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "the server did not close the connection";
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 5.0);
  close(slow);
  close(idle);
  // Both workers are free again.
  httplib::Client c("127.0.0.1", server->port());
  c.set_connection_timeout(2);
  auto r = c.Post("/v1/models/ctr:predict", R"({"instances": ["1:1"]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// For each model kind and input format: the test file's lines through HTTP in one request give
// ferry-predict's output for the same file (its "%.6g" text), and bit for bit the floats its
// engine (Scorer over the Reader's batch) computes.
class ServeEqualsPredict : public Serve,
                           public ::testing::WithParamInterface<std::pair<const char*, Format>> {};

TEST_P(ServeEqualsPredict, SameLinesSameProbabilities) {
  const auto [model, format] = GetParam();
  const std::string ex = Export(model, format);
  const Data& d = (*data_)[format];
  TempDir out;
  Proc p = train_test::Exec({train_test::PredictBin(), ex, d.test, "-o", out / "p.txt"}, 30);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  const std::vector<std::string> expected = Lines(Slurp(out / "p.txt"));
  const std::vector<std::string> lines = Lines(Slurp(d.test));
  ASSERT_EQ(expected.size(), lines.size());

  auto server = StartServer(ex, 16 << 20);
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->port());
  auto r = c.Post("/v1/models/ctr:predict", Instances(lines, format).dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body.substr(0, 300);
  const json got = json::parse(r->body)["predictions"];
  ASSERT_EQ(got.size(), lines.size());

  // ferry-predict's engine in this process, on the same file, one batch.
  uint64_t version = 0;
  auto m = models::LoadExportDir(ex, &version);
  ASSERT_TRUE(m.ok());
  auto scorer = models::Scorer::Create(*m, {});
  ASSERT_TRUE(scorer.ok()) << scorer.status().ToString();
  models::ReaderOptions ro;
  ro.files = {d.test};
  ro.format = scorer->format();
  ro.hash_seed = scorer->hash_seed();
  ro.hash_bits = scorer->hash_bits();
  ro.field_map = scorer->shared_field_map();
  auto reader = models::Reader::Open(ro);
  ASSERT_TRUE(reader.ok());
  models::Batch b;
  auto n = (*reader)->Next(4096, &b);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, lines.size());
  std::vector<float> probs(b.size());
  models::ScoreScratch scratch;
  ASSERT_TRUE(scorer->Score(b, probs, &scratch).ok());

  for (size_t i = 0; i < lines.size(); ++i) {
    const float f = static_cast<float>(got[i].get<double>());
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", static_cast<double>(f));
    ASSERT_EQ(text, expected[i]) << "line " << i << " of " << model;
    ASSERT_EQ(std::memcmp(&f, &probs[i], sizeof f), 0) << "line " << i << " of " << model;
  }
  EXPECT_EQ(json::parse(r->body)["model_version"].get<uint64_t>(), version);

  // Small batches through one scratch, as a server thread scores its requests (the rows it
  // keeps from batch to batch, and from one Scorer to the next of the same model: a swap), give
  // the floats of the whole batch bit for bit.
  auto again = models::Scorer::Create(*m, {});
  ASSERT_TRUE(again.ok());
  models::ScoreScratch reused;
  for (const models::Scorer* s : {&*scorer, &*again, &*scorer}) {
    for (size_t first = 0; first < b.size(); first += 7) {
      models::Batch part;
      ASSERT_TRUE(part.Append(b, first, std::min<size_t>(7, b.size() - first)).ok());
      std::vector<float> p(part.size());
      ASSERT_TRUE(s->Score(part, p, &reused).ok());
      for (size_t i = 0; i < part.size(); ++i) {
        ASSERT_EQ(std::memcmp(&p[i], &probs[first + i], sizeof(float)), 0)
            << "line " << first + i << " of " << model;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, ServeEqualsPredict,
    ::testing::Values(std::pair{"lr", Format::kLibsvm}, std::pair{"ftrl", Format::kLibsvm},
                      std::pair{"fm", Format::kLibffm}, std::pair{"ffm", Format::kLibffm},
                      std::pair{"mlp", Format::kCriteo}, std::pair{"deepfm", Format::kLibsvm}),
    [](const auto& info) {
      return std::string(info.param.first) + "_" +
             std::string(models::FormatName(info.param.second));
    });

// The command: its flags, a start on a free port, a request, SIGTERM ends it with status 0.
TEST_F(Serve, TheCommandServesAndStopsOnSigterm) {
  const std::string bin = train_test::EnvOr("FERRY_SERVE", "");
  ASSERT_FALSE(bin.empty()) << "FERRY_SERVE is not set (tests/serve/meson.build sets it)";
  Proc help = train_test::Exec({bin, "--help"}, 10);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--model-dir"));
  Proc no_dir = train_test::Exec({bin}, 10);
  EXPECT_EQ(no_dir.exit_code, 2);
  Proc bad_listen = train_test::Exec({bin, "--model-dir", "/tmp", "--listen", "nowhere"}, 10);
  EXPECT_EQ(bad_listen.exit_code, 2);
  EXPECT_THAT(bad_listen.err, HasSubstr("is not HOST:PORT"));
  TempDir empty;
  Proc none = train_test::Exec({bin, "--model-dir", empty.path(), "--listen", "127.0.0.1:0"}, 10);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr(empty.path()));

  // On a port that was free a moment ago (its stderr, which names the port it took, is Exec's
  // until it ends).
  const int port = FreePort();
  Background serve({bin, "--model-dir", Export("lr", Format::kLibsvm), "--listen",
                    "127.0.0.1:" + std::to_string(port), "--model-name", "ctr"},
                   30);
  httplib::Client c("127.0.0.1", port);
  int status = 0;
  for (int i = 0; i < 1000 && status == 0; ++i) {  // until it listens
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto r = c.Post("/v1/models/ctr:predict", R"({"instances": ["1:1"]})", "application/json");
    if (r) status = r->status;
  }
  EXPECT_EQ(status, 200);
  serve.Signal(SIGTERM);
  Proc p = serve.Wait();
  EXPECT_EQ(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("SIGTERM, stopping"));
}

}  // namespace
}  // namespace ferry::serve_test
