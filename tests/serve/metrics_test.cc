// ferry-serve's counters and their Prometheus text (models/serve/metrics.h), and the --listen
// parser (tools/serve/cli.h), alone.
#include "models/serve/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tools/serve/cli.h"

namespace ferry::models {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServeMetrics, PrometheusTextCountsRequestsLatencyAndSwaps) {
  ServeMetrics m;
  m.CountRequest(Endpoint::kPredict, 200);
  m.CountRequest(Endpoint::kPredict, 200);
  m.CountRequest(Endpoint::kPredict, 400);
  m.CountRequest(Endpoint::kOther, 418);
  m.ObservePredict(0.0003, 5);  // bucket le=0.0005
  m.ObservePredict(3.0, 1);     // only +Inf
  m.SetModel(12, 0.25);
  m.CountSwap();
  m.CountLoadFailure();
  EXPECT_EQ(m.requests(Endpoint::kPredict, 200), 2u);
  const std::string t = m.RenderPrometheus();
  EXPECT_THAT(t, HasSubstr("ferry_serve_requests_total{endpoint=\"predict\",code=\"200\"} 2\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_requests_total{endpoint=\"predict\",code=\"400\"} 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_requests_total{endpoint=\"other\",code=\"other\"} 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_errors_total{endpoint=\"predict\"} 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_errors_total{endpoint=\"other\"} 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_instances_total 6\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_predict_seconds_bucket{le=\"0.00025\"} 0\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_predict_seconds_bucket{le=\"0.0005\"} 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_predict_seconds_bucket{le=\"2.5\"} 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_predict_seconds_bucket{le=\"+Inf\"} 2\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_predict_seconds_count 2\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_model_version 12\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_model_swaps_total 1\n"));
  EXPECT_THAT(t, HasSubstr("ferry_serve_model_load_failures_total 1\n"));
  EXPECT_THAT(t, HasSubstr("# TYPE ferry_serve_predict_seconds histogram\n"));
  EXPECT_THAT(t, Not(HasSubstr("code=\"404\"")));  // counters never hit are left out
}

TEST(ServeListen, HostPortForms) {
  auto a = serve::ParseListenAddress("127.0.0.1:8500");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8500);
  a = serve::ParseListenAddress(":0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 0);
  a = serve::ParseListenAddress("[::1]:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  for (const char* bad : {"8500", "host:", "host:x", "host:70000", "host:-1", "a]:1", "h:1 "}) {
    auto r = serve::ParseListenAddress(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("is not HOST:PORT")) << bad;
  }
}

}  // namespace
}  // namespace ferry::models
