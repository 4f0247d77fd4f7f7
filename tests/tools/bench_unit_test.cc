// Unit tests of ferry_bench: patterns, statistics, config encoding, and the text/JSON/CSV
// formatters (JSON parsed back with nlohmann::json, CSV checked column by column).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tools/bench/config.h"
#include "tools/bench/pattern.h"
#include "tools/bench/report.h"
#include "tools/bench/stats.h"

namespace ferry::bench {
namespace {

using ::testing::HasSubstr;

TEST(Pattern, FillThenCheckMatchesAcrossPeriods) {
  for (size_t len :
       {1ul, 2ul, 7ul, 4096ul, kPatternPeriod - 1, kPatternPeriod, 3 * kPatternPeriod + 5}) {
    std::vector<uint8_t> buf(len);
    FillPattern(buf.data(), len, 42, 13);
    EXPECT_TRUE(MatchesPattern(buf.data(), len, 42, 13)) << len;
    EXPECT_TRUE(CheckPattern(buf.data(), len, 42, 13, "buf").ok()) << len;
  }
}

TEST(Pattern, WindowAtOffsetEqualsSliceOfLongerFill) {
  std::vector<uint8_t> whole(200000);
  FillPattern(whole.data(), whole.size(), 7, 0);
  EXPECT_TRUE(MatchesPattern(whole.data() + 70000, 1000, 7, 70000));
  EXPECT_EQ(PatternByte(7, 123456), whole[123456]);
}

TEST(Pattern, DetectsFlippedByteAndNamesIt) {
  std::vector<uint8_t> buf(10000);
  FillPattern(buf.data(), buf.size(), 9);
  buf[5000] ^= 0x10;
  EXPECT_FALSE(MatchesPattern(buf.data(), buf.size(), 9));
  Status s = CheckPattern(buf.data(), buf.size(), 9, 0, "slot 3");
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_THAT(s.message(), HasSubstr("slot 3"));
  EXPECT_THAT(s.message(), HasSubstr("byte 5000"));
  EXPECT_THAT(s.message(), HasSubstr("1 bytes differ"));
}

TEST(Pattern, DetectsStaleDataShiftsAndOtherSeeds) {
  std::vector<uint8_t> a(8192), b(8192);
  FillPattern(a.data(), a.size(), 1);
  EXPECT_FALSE(MatchesPattern(a.data(), a.size(), 2));        // another seed (stale transfer)
  EXPECT_FALSE(MatchesPattern(a.data(), a.size(), 1, 4096));  // misplaced by 4 KiB
  FillPattern(b.data(), b.size(), 1, 65536);                  // shifted by a power of two
  EXPECT_FALSE(MatchesPattern(b.data(), b.size(), 1, 0));
  EXPECT_NE(MixSeed(1, 2, 3, 4), MixSeed(1, 2, 3, 5));
}

TEST(Stats, PercentileIsNearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 1000; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 99), 990);
  EXPECT_EQ(Percentile(v, 99.9), 999);
  EXPECT_EQ(Percentile(v, 100), 1000);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile({5.0}, 99.9), 5.0);
}

TEST(Stats, SummaryOfKnownSamples) {
  std::vector<double> v = {4, 1, 3, 2};
  LatencySummary s = SummarizeLatency(v);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.typical, 2.5);
  EXPECT_DOUBLE_EQ(s.avg, 2.5);
  EXPECT_NEAR(s.stdev, std::sqrt(1.25), 1e-12);
  EXPECT_EQ(s.p99, 4);
  std::vector<double> odd = {9, 1, 5};
  EXPECT_EQ(SummarizeLatency(odd).typical, 5);
  std::vector<double> empty;
  EXPECT_EQ(SummarizeLatency(empty).count, 0u);
}

TEST(Stats, BandwidthMeterAverageAndPeak) {
  BandwidthMeter m(1500000);  // peak over intervals of at least 1.5 ms
  m.Start(0);
  // 8 ops of 1 MB: the first 4 take 1 ms each, the last 4 arrive 0.5 ms apart.
  uint64_t t = 0;
  for (int i = 0; i < 4; ++i) m.Complete(t += 1000000, 1000000);
  for (int i = 0; i < 4; ++i) m.Complete(t += 500000, 1000000);
  EXPECT_EQ(m.ops(), 8u);
  EXPECT_EQ(m.bytes(), 8000000u);
  const double avg = 8e6 / 6e-3;
  EXPECT_NEAR(m.peak_bytes_per_sec(), 2e9, 1e3);  // 3 MB in the interval (4 ms, 5.5 ms]
  BandwidthSummary s = SummarizeBandwidth({m});
  EXPECT_NEAR(s.bw_avg_mb, avg / kMB, 1e-6);
  EXPECT_NEAR(s.bw_peak_mb, 2e9 / kMB, 1e-3);
  EXPECT_NEAR(s.msg_rate_mpps, 8 / 6e-3 / 1e6, 1e-9);
  BandwidthSummary both = AddBandwidth(s, s);
  EXPECT_NEAR(both.bw_avg_mb, 2 * s.bw_avg_mb, 1e-9);
}

TEST(Stats, PeakNeverBelowAverageAndIgnoresBursts) {
  BandwidthMeter m;  // 10 ms intervals
  m.Start(0);
  m.Complete(1000, 100);
  EXPECT_GE(m.peak_bytes_per_sec(), 100 / 1e-6 - 1);
  BandwidthMeter burst;
  burst.Start(0);
  for (int i = 0; i < 16; ++i) burst.Complete(20'000'000 + i, 1'000'000);  // reaped at once
  EXPECT_NEAR(burst.peak_bytes_per_sec(), 16e6 / 0.02, 1e3);               // not 16 MB per 15 ns
}

TEST(Config, RoundTripsAndRejectsHostileInput) {
  BenchConfig c;
  c.mode = Mode::kBandwidth;
  c.op = BenchOp::kSparseRead;
  c.sizes = {4096};
  c.depth = 7;
  c.bidir = true;
  c.rows = 3;
  c.row_size = 100;
  c.region_size = 1 << 20;
  c.duration_s = 0.5;
  c.check = CheckPolicy::kRef;
  auto d = DecodeConfig(EncodeConfig(c));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->op, BenchOp::kSparseRead);
  EXPECT_EQ(d->check, CheckPolicy::kRef);
  EXPECT_EQ(d->depth, 7u);
  EXPECT_TRUE(d->bidir);
  EXPECT_EQ(d->region_size, 1u << 20);
  EXPECT_DOUBLE_EQ(d->duration_s, 0.5);

  const std::vector<uint8_t> good = EncodeConfig(c);
  const std::string bad[] = {"", "[]", "{\"mode\":1}", "{not json",
                             std::string(good.begin(), good.end() - 1)};
  for (const std::string& s : bad) {
    auto r = DecodeConfig(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
    EXPECT_FALSE(r.ok()) << s;
  }
  nlohmann::json j = nlohmann::json::parse(std::string(good.begin(), good.end()));
  j["threads"] = 0;  // well-formed but invalid
  const std::string t = j.dump();
  EXPECT_FALSE(
      DecodeConfig(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.data()), t.size()))
          .ok());
  j = nlohmann::json::parse(std::string(good.begin(), good.end()));
  j["check"] = "sometimes";  // not a policy
  const std::string u = j.dump();
  EXPECT_FALSE(
      DecodeConfig(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(u.data()), u.size()))
          .ok());
}

// Both sides derive the phases from the config alone: every size, the checked pass first.
TEST(Config, PhasesAreSizesTimesPasses) {
  BenchConfig c;
  c.sizes = {8, 4096};
  std::vector<PhaseSpec> p = PhaseSpecs(c);  // kBoth
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].size, 8u);
  EXPECT_EQ(p[0].check, Check::kFull);
  EXPECT_EQ(p[1].size, 8u);
  EXPECT_EQ(p[1].check, Check::kRef);
  EXPECT_EQ(p[3].size, 4096u);
  EXPECT_EQ(p[3].check, Check::kRef);
  c.check = CheckPolicy::kFull;
  p = PhaseSpecs(c);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].check, Check::kFull);
  c.check = CheckPolicy::kRef;
  c.mode = Mode::kBandwidth;
  c.op = BenchOp::kPackWrite;
  c.rows = 10;
  c.row_size = 64;
  p = PhaseSpecs(c);  // rows ops have one size, rows * row_size
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].size, 640u);
  EXPECT_EQ(p[0].check, Check::kRef);
  EXPECT_EQ(*ParseCheckPolicy("both"), CheckPolicy::kBoth);
  EXPECT_FALSE(ParseCheckPolicy("all").ok());
}

TEST(Config, Validation) {
  BenchConfig c;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.sizes = {0};
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = BenchConfig();
  c.bidir = true;  // latency
  EXPECT_THAT(ValidateConfig(c).message(), HasSubstr("bidir"));
  c = BenchConfig();
  c.threads = 2;
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = BenchConfig();
  c.op = BenchOp::kSparseWrite;
  c.rows = 1000;
  c.row_size = 1024;
  c.region_size = 1 << 20;  // fewer than 2 * rows rows
  EXPECT_THAT(ValidateConfig(c).message(), HasSubstr("region size"));
  c = BenchConfig();
  c.op = BenchOp::kPackWrite;  // latency: the pack ops are bandwidth references only
  EXPECT_THAT(ValidateConfig(c).message(), HasSubstr("bandwidth reference"));
  c.mode = Mode::kBandwidth;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.op = BenchOp::kPackRead;
  c.depth = kMaxPackReadDepth + 1;
  EXPECT_THAT(ValidateConfig(c).message(), HasSubstr("pack_read"));
}

TEST(Config, ParsesSizesAndOps) {
  EXPECT_EQ(*ParseByteSize("64"), 64u);
  EXPECT_EQ(*ParseByteSize("4K"), 4096u);
  EXPECT_EQ(*ParseByteSize("1MiB"), 1u << 20);
  EXPECT_EQ(*ParseByteSize("2g"), 2ull << 30);
  EXPECT_FALSE(ParseByteSize("0").ok());
  EXPECT_FALSE(ParseByteSize("x").ok());
  EXPECT_FALSE(ParseByteSize("12Q").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_EQ(*ParseBenchOp("write_imm"), BenchOp::kWriteImm);
  EXPECT_EQ(*ParseBenchOp("pack_read"), BenchOp::kPackRead);
  EXPECT_FALSE(ParseBenchOp("writ").ok());
  const std::vector<uint64_t> sweep = SweepSizes();
  EXPECT_EQ(sweep.front(), 2u);
  EXPECT_EQ(sweep.back(), 8u << 20);
  EXPECT_EQ(sweep.size(), 23u);
}

Report SampleReport(Mode mode, BenchOp op) {
  Report r;
  r.header.tool = mode == Mode::kLatency ? "ferry-lat" : "ferry-bw";
  r.header.transport = "tcp";
  r.header.config.mode = mode;
  r.header.config.op = op;
  DeviceInfo d;
  d.name = "lo";
  d.kind = "netdev";
  d.attributes["mtu"] = "65536";
  d.attributes["odd\"key"] = "va\\lue\n";  // must be escaped in JSON
  r.header.devices = {d};
  // As a default run (--check both) makes them: per size the checked pass, then the timed one
  // (whose figures differ here so that tests can tell them apart).
  for (uint64_t bytes : {2ull, 65536ull}) {
    for (Check check : {Check::kFull, Check::kRef}) {
      const double speed = check == Check::kRef ? 2.0 : 1.0;
      if (mode == Mode::kLatency) {
        std::vector<double> v = {1.5 / speed, 2.5 / speed, 3.5 / speed};
        r.latency.push_back({bytes, 3, check, SummarizeLatency(v)});
      } else {
        BandwidthSummary b;
        b.bw_peak_mb = 1234.5 * speed;
        b.bw_avg_mb = 1000.25 * speed;
        b.msg_rate_mpps = 0.016 * speed;
        b.rows_per_sec = 5e6 * speed;
        b.seconds = std::nan("");  // never leaks into JSON
        r.bandwidth.push_back({bytes, 5000, check, b});
      }
    }
  }
  return r;
}

std::vector<std::string> Split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, sep)) out.push_back(cell);
  if (!line.empty() && line.back() == sep) out.push_back("");
  return out;
}

bool IsNumber(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

TEST(Format, JsonIsStrictlyValid) {
  for (Mode mode : {Mode::kLatency, Mode::kBandwidth}) {
    const Report r = SampleReport(mode, BenchOp::kSparseRead);
    const std::string text = FormatJson(r);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    EXPECT_EQ(j["transport"], "tcp");
    EXPECT_EQ(j["op"], "sparse_read");
    EXPECT_EQ(j["devices"][0]["attributes"]["odd\"key"], "va\\lue\n");
    // "results" is the timed pass (what ferry-plot draws), "checked_results" the checked one.
    ASSERT_EQ(j["results"].size(), 2u);
    ASSERT_EQ(j["checked_results"].size(), 2u);
    EXPECT_EQ(j["results"][1]["bytes"], 65536);
    EXPECT_EQ(j["results"][0]["check"], "ref");
    EXPECT_EQ(j["checked_results"][0]["check"], "full");
    EXPECT_EQ(j["config"]["check"], "both");
    if (mode == Mode::kLatency) {
      EXPECT_DOUBLE_EQ(j["results"][0]["t_typical_usec"].get<double>(), 1.25);
      EXPECT_DOUBLE_EQ(j["checked_results"][0]["t_typical_usec"].get<double>(), 2.5);
      EXPECT_EQ(j["latency_definition"], "round_trip");  // reads: full round trip
    } else {
      EXPECT_DOUBLE_EQ(j["results"][0]["bw_avg_mb_s"].get<double>(), 2000.5);
      EXPECT_DOUBLE_EQ(j["checked_results"][0]["bw_avg_mb_s"].get<double>(), 1000.25);
      EXPECT_TRUE(j["results"][0]["seconds"].is_number());  // NaN became a number
      EXPECT_DOUBLE_EQ(j["results"][0]["rows_per_sec"].get<double>(), 1e7);
    }
  }
}

TEST(Format, CsvHasFixedColumnsAndNumericFields) {
  for (Mode mode : {Mode::kLatency, Mode::kBandwidth}) {
    const Report r = SampleReport(mode, BenchOp::kWrite);
    std::stringstream ss(FormatCsv(r));
    std::string line;
    ASSERT_TRUE(std::getline(ss, line));
    const std::vector<std::string> header = Split(line, ',');
    EXPECT_EQ(header, CsvColumns(mode));
    ASSERT_EQ(header.back(), "check");
    int rows = 0;
    while (std::getline(ss, line)) {
      const std::vector<std::string> cells = Split(line, ',');
      ASSERT_EQ(cells.size(), header.size()) << line;
      EXPECT_EQ(cells[0], "tcp");
      EXPECT_EQ(cells[1], "write");
      for (size_t i = 2; i + 1 < cells.size(); ++i) EXPECT_TRUE(IsNumber(cells[i])) << cells[i];
      EXPECT_EQ(cells.back(), rows % 2 == 0 ? "full" : "ref") << line;
      ++rows;
    }
    EXPECT_EQ(rows, 4);
  }
}

TEST(Format, TextHasPerftestColumnsAndHeaderBlock) {
  const Report lat = SampleReport(Mode::kLatency, BenchOp::kSend);
  const std::string t = FormatText(lat);
  EXPECT_THAT(t, HasSubstr("#bytes #iterations"));
  EXPECT_THAT(t, HasSubstr("t_typical[usec]"));
  EXPECT_THAT(t, HasSubstr("99.9% percentile[usec]"));
  EXPECT_THAT(t, HasSubstr("Transport       : tcp"));
  EXPECT_THAT(t, HasSubstr("MTU             : 65536"));
  EXPECT_THAT(t, HasSubstr("GID index       : n/a"));
  EXPECT_THAT(t, HasSubstr("half round trip"));
  EXPECT_THAT(t, HasSubstr("Checks          : full (every transfer verified) pass, then ref"));
  EXPECT_THAT(t, HasSubstr("   full\n"));
  EXPECT_THAT(t, HasSubstr("   ref\n"));
  const Report bw = SampleReport(Mode::kBandwidth, BenchOp::kSparseWrite);
  const std::string b = FormatText(bw);
  EXPECT_THAT(b, HasSubstr("BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"));
  EXPECT_THAT(b, HasSubstr("Rows/s"));
  EXPECT_THAT(b, HasSubstr("1000.25"));
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
