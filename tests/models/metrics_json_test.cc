#include "models/eval/metrics_json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/models/temp_path.h"

namespace ferry::models {
namespace {

using testing::TempPath;

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(MetricsJson, LinesAreValidJsonFlushedAsWritten) {
  const std::string path = TempPath("metrics.jsonl");
  auto writer = MetricsJsonWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EvalRecord r;
  r.epoch = 1;
  r.batches = 1200;
  r.samples = 1228800;
  r.train_logloss = 0.4712;
  r.logloss = 0.4655;
  r.auc = 0.7788;
  r.samples_per_sec = 152003.25;
  r.elapsed_s = 8.08;
  ASSERT_TRUE(writer->Write(EvalLine("eval", r)).ok());
  // Visible before the writer is closed: no user-space buffering.
  ASSERT_EQ(ReadLines(path).size(), 1u);

  r.epoch = 2;
  r.auc = std::numeric_limits<double>::quiet_NaN();
  r.train_logloss = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(writer->Write(EvalLine("eval", r)).ok());
  MetricsLine final_line = EvalLine("final", r);
  final_line.Set("auc", 0.7853).Set("note", "quote \" backslash \\ newline \n bad \xff utf8");
  ASSERT_TRUE(writer->Write(final_line).ok());

  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 3u);
  std::vector<nlohmann::json> parsed;
  for (const std::string& line : lines) {
    // Strict parse: throws (failing the test) on anything that is not valid JSON.
    parsed.push_back(nlohmann::json::parse(line));
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
  EXPECT_EQ(parsed[0]["event"], "eval");
  EXPECT_EQ(parsed[0]["epoch"], 1);
  EXPECT_EQ(parsed[0]["batches"], 1200);
  EXPECT_EQ(parsed[0]["samples"], 1228800);
  EXPECT_DOUBLE_EQ(parsed[0]["auc"].get<double>(), 0.7788);
  EXPECT_DOUBLE_EQ(parsed[0]["samples_per_sec"].get<double>(), 152003.25);
  EXPECT_TRUE(parsed[1]["auc"].is_null());
  EXPECT_TRUE(parsed[1]["train_logloss"].is_null());
  EXPECT_EQ(parsed[2]["event"], "final");
  EXPECT_DOUBLE_EQ(parsed[2]["auc"].get<double>(), 0.7853);
  EXPECT_EQ(parsed[2]["note"].get<std::string>().rfind("quote \" backslash \\ newline \n bad ", 0),
            0u);
  // Keys in the order they were set, "event" first.
  EXPECT_EQ(lines[0].rfind("{\"event\":\"eval\",\"epoch\":1,\"batches\":1200,", 0), 0u) << lines[0];
  ::unlink(path.c_str());
}

TEST(MetricsJson, SetReplacesInPlaceAndTypesSurvive) {
  MetricsLine line("custom");
  line.Set("a", 1).Set("b", true).Set("c", uint64_t{18446744073709551615ull}).Set("a", -2.5);
  const nlohmann::json j = nlohmann::json::parse(line.ToJson());
  EXPECT_EQ(line.ToJson().rfind("{\"event\":\"custom\",\"a\":-2.5,", 0), 0u) << line.ToJson();
  EXPECT_EQ(j["b"], true);
  EXPECT_EQ(j["c"].get<uint64_t>(), 18446744073709551615ull);
}

TEST(MetricsJson, OpenFailureNamesThePath) {
  auto w = MetricsJsonWriter::Open("/nonexistent-dir-ferry/metrics.jsonl");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), Code::kIoError);
  EXPECT_NE(w.status().message().find("/nonexistent-dir-ferry/metrics.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace ferry::models
