// Unit tests of tools/plot: axis ticks (log byte sizes, decades, 1-2-5 linear steps), the SVG
// (well-formed XML checked by a strict little parser below, escaping of hostile strings, one
// marker per point carrying its exact data), spec errors, the JSON inputs (plot spec and
// ferry-lat/ferry-bw results, the latter made by tools/bench's own FormatJson) and WritePlot.
// Python's xml.etree reads the tools' real output in plot_e2e.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tools/bench/report.h"
#include "tools/plot/axis.h"
#include "tools/plot/command.h"
#include "tools/plot/json.h"
#include "tools/plot/plot.h"

namespace ferry::plot {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A strict XML well-formedness check for what the writer emits: one root element, balanced
// tags, quoted unique attributes, only the five named and numeric entities, no raw '<', '&' or
// '>' in text. Returns "" when well-formed, else what is wrong and where.
// (No std::regex: gcc 12's <regex> trips -Wmaybe-uninitialized at -O1 under ASan.)
bool IsNameStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsNameChar(char c) {
  return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
}

// Length of the XML name at x[j], 0 when none starts there.
size_t NameAt(const std::string& x, size_t j) {
  if (j >= x.size() || !IsNameStart(x[j])) return 0;
  size_t k = j + 1;
  while (k < x.size() && IsNameChar(x[k])) ++k;
  return k - j;
}

// Whether x[i] ('&') starts one of the five named entities or a numeric reference.
bool EntityAt(const std::string& x, size_t i) {
  for (const std::string named : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
    if (x.compare(i, named.size(), named) == 0) return true;
  }
  if (x.compare(i, 2, "&#") != 0) return false;
  size_t k = i + 2;
  const bool hex = k < x.size() && x[k] == 'x';
  if (hex) ++k;
  const size_t digits_from = k;
  while (k < x.size() && (hex ? std::isxdigit(static_cast<unsigned char>(x[k]))
                              : std::isdigit(static_cast<unsigned char>(x[k])))) {
    ++k;
  }
  return k > digits_from && k < x.size() && x[k] == ';';
}

std::string XmlProblem(const std::string& x) {
  auto entity_ok = [&](size_t i) { return EntityAt(x, i); };
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  if (x.rfind("<?xml ", 0) == 0) i = x.find("?>") + 2;
  while (i < x.size()) {
    const std::string at = " at byte " + std::to_string(i);
    if (x[i] == '&' && !entity_ok(i)) return "bad entity" + at;
    if (x[i] == '>') return "raw '>' in text" + at;
    if (x[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(x[i]))) {
        return "text outside the root" + at;
      }
      ++i;
      continue;
    }
    const bool closing = x.compare(i, 2, "</") == 0;
    size_t j = i + (closing ? 2 : 1);
    const size_t name_len = NameAt(x, j);
    if (name_len == 0) return "bad tag name" + at;
    const std::string name = x.substr(j, name_len);
    j += name.size();
    if (closing) {
      if (open.empty() || open.back() != name) return "unbalanced </" + name + ">" + at;
      open.pop_back();
      if (x[j] != '>') return "junk in </" + name + ">" + at;
      i = j + 1;
      continue;
    }
    std::set<std::string> attrs;
    while (true) {
      while (j < x.size() && std::isspace(static_cast<unsigned char>(x[j]))) ++j;
      if (j >= x.size()) return "unterminated <" + name + ">" + at;
      if (x[j] == '>' || x.compare(j, 2, "/>") == 0) break;
      const size_t attr_len = NameAt(x, j);
      if (attr_len == 0) return "bad attribute in <" + name + ">" + at;
      const std::string attr = x.substr(j, attr_len);
      if (!attrs.insert(attr).second) return "duplicate attribute " + attr + at;
      j += attr_len;
      if (x.compare(j, 2, "=\"") != 0) return "unquoted attribute " + attr + at;
      j += 2;
      for (; j < x.size() && x[j] != '"'; ++j) {
        if (x[j] == '<' || (x[j] == '&' && !entity_ok(j))) return "bad attribute value" + at;
      }
      ++j;
    }
    if (open.empty() && ++roots > 1) return "a second root element" + at;
    if (x[j] == '>') {
      open.push_back(name);
      i = j + 1;
    } else {
      i = j + 2;
    }
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  return roots == 1 ? "" : "no root element";
}

// data-x / data-y of every point marker, in document order.
std::vector<std::pair<std::string, std::string>> Points(const std::string& svg) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string marker = "<circle class=\"point\"";
  for (size_t at = svg.find(marker); at != std::string::npos; at = svg.find(marker, at + 1)) {
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    const size_t x = tag.find(" data-x=\"");
    const size_t y = tag.find("\" data-y=\"");
    if (x == std::string::npos || y == std::string::npos || y < x) continue;
    const size_t x_from = x + 9, y_from = y + 10;
    const size_t y_end = tag.find('"', y_from);
    if (y_end == std::string::npos) continue;
    out.emplace_back(tag.substr(x_from, y - x_from), tag.substr(y_from, y_end - y_from));
  }
  return out;
}

std::vector<std::string> Labels(const Axis& a) {
  std::vector<std::string> out;
  for (const Tick& t : a.ticks) out.push_back(t.label);
  return out;
}

PlotSpec Sweep() {
  PlotSpec s;
  s.title = "sweep";
  s.xlabel = "message size (bytes)";
  s.ylabel = "latency, µs";
  s.log_x = s.log_y = true;
  s.x_unit_format = "bytes";
  s.series.push_back({"median", {{2, 5.25}, {1024, 6.5}, {8388608, 3100}}});
  s.series.push_back({"p99", {{2, 7}, {8388608, 4000.125}}, true, 0});
  return s;
}

TEST(PlotAxis, LogBytesSweepTicksEveryOtherPowerOfTwo) {
  const Axis a = MakeAxis(2, 8388608, true, TickFormat::kBytes);
  EXPECT_EQ(a.lo, 2);
  EXPECT_EQ(a.hi, 8388608);
  EXPECT_THAT(Labels(a),
              ElementsAre("4", "16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "4M"));
  EXPECT_THAT(Labels(MakeAxis(64, 4096, true, TickFormat::kBytes)),
              ElementsAre("64", "128", "256", "512", "1K", "2K", "4K"));
  const Axis one = MakeAxis(1024, 1024, true, TickFormat::kBytes);  // one point: centred
  EXPECT_THAT(Labels(one), ElementsAre("512", "1K", "2K"));
  EXPECT_DOUBLE_EQ(one.Fraction(1024), 0.5);
  EXPECT_THAT(Labels(MakeAxis(100, 3000, true, TickFormat::kBytes)),  // not powers themselves
              ElementsAre("64", "128", "256", "512", "1K", "2K", "4K"));
}

TEST(PlotAxis, LogNumbersTickDecadesOrOneTwoFive) {
  const Axis a = MakeAxis(5.1, 3100, true, TickFormat::kNumber);
  EXPECT_EQ(a.lo, 1);
  EXPECT_EQ(a.hi, 10000);
  EXPECT_THAT(Labels(a), ElementsAre("1", "10", "100", "1000", "10000"));
  EXPECT_THAT(Labels(MakeAxis(3, 40, true, TickFormat::kNumber)),
              ElementsAre("2", "5", "10", "20", "50"));
  EXPECT_THAT(Labels(MakeAxis(0.02, 0.3, true, TickFormat::kNumber)),
              ElementsAre("0.02", "0.05", "0.1", "0.2", "0.5"));
  EXPECT_EQ(MakeAxis(1e-3, 1e12, true, TickFormat::kNumber).ticks.size(), 8u);  // every 2nd
}

TEST(PlotAxis, LinearUsesOneTwoFiveStepsFromZero) {
  Axis a = MakeAxis(0.4, 9.3, false, TickFormat::kNumber);
  EXPECT_THAT(Labels(a), ElementsAre("0", "2", "4", "6", "8", "10"));
  EXPECT_DOUBLE_EQ(a.Fraction(5), 0.5);
  EXPECT_THAT(Labels(MakeAxis(0.05, 0.93, false, TickFormat::kNumber)),
              ElementsAre("0.0", "0.2", "0.4", "0.6", "0.8", "1.0"));
  EXPECT_THAT(Labels(MakeAxis(-3, 7, false, TickFormat::kNumber)),
              ElementsAre("-4", "-2", "0", "2", "4", "6", "8"));
  const std::vector<std::string> big = Labels(MakeAxis(120, 41000, false, TickFormat::kNumber));
  ASSERT_EQ(big.size(), 10u);
  EXPECT_EQ(big[1], "5000");
  EXPECT_EQ(big.back(), "45000");
  EXPECT_EQ(MakeAxis(0, 0, false, TickFormat::kNumber).ticks.size(), 6u);
}

TEST(PlotAxis, TickAndDataNumberFormats) {
  EXPECT_EQ(FormatTick(8, TickFormat::kBytes, 0), "8");
  EXPECT_EQ(FormatTick(65536, TickFormat::kBytes, 0), "64K");
  EXPECT_EQ(FormatTick(3 << 20, TickFormat::kBytes, 0), "3M");
  EXPECT_EQ(FormatTick(double(uint64_t{1} << 31), TickFormat::kBytes, 0), "2G");
  EXPECT_EQ(FormatTick(1536, TickFormat::kBytes, 0), "1536");
  EXPECT_EQ(FormatTick(2.5, TickFormat::kBytes, 0.5), "2.5");
  EXPECT_EQ(ExactNumber(8388608), "8388608");
  EXPECT_EQ(ExactNumber(0.1), "0.1");
  EXPECT_EQ(std::stod(ExactNumber(1.0 / 3)), 1.0 / 3);
}

TEST(PlotSvg, OneMarkerPerPointWithExactData) {
  Result<std::string> svg = RenderSvg(Sweep());
  ASSERT_TRUE(svg.ok()) << svg.status().ToString();
  EXPECT_EQ(XmlProblem(*svg), "");
  EXPECT_THAT(Points(*svg), ElementsAre(std::pair{"2", "5.25"}, std::pair{"1024", "6.5"},
                                        std::pair{"8388608", "3100"}, std::pair{"2", "7"},
                                        std::pair{"8388608", "4000.125"}));
  EXPECT_THAT(*svg, HasSubstr("xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(*svg, HasSubstr("fill=\"#ffffff\""));  // white background
  EXPECT_THAT(*svg, HasSubstr("stroke-dasharray"));  // the p99 reference
  EXPECT_THAT(*svg, HasSubstr(">1K</text>"));        // byte ticks
  EXPECT_THAT(*svg, HasSubstr(">1000</text>"));      // decade ticks
  EXPECT_THAT(*svg, HasSubstr(">median</text>"));    // legend
  EXPECT_THAT(*svg, HasSubstr("latency, µs"));       // UTF-8 kept
}

TEST(PlotSvg, HostileStringsAreEscapedAndTheXmlStaysWellFormed) {
  PlotSpec s = Sweep();
  s.title = "A & B <c> \"d\" 'e'";
  s.ylabel = "bad UTF-8 \xff\xfe, control \x01, surrogate \xed\xa0\x80, cut \xe2\x82";
  s.series[0].name = "<script>alert(1)</script>&amp;";
  s.series[1].name = std::string(200, 'n');  // long legend entries are cut, data kept
  Result<std::string> svg = RenderSvg(s);
  ASSERT_TRUE(svg.ok()) << svg.status().ToString();
  EXPECT_EQ(XmlProblem(*svg), "");
  EXPECT_THAT(*svg, Not(HasSubstr("<script>")));
  EXPECT_THAT(*svg, HasSubstr("A &amp; B &lt;c&gt; &quot;d&quot; &apos;e&apos;"));
  EXPECT_THAT(*svg, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;"));
  EXPECT_THAT(*svg, Not(HasSubstr("\xff")));
  EXPECT_THAT(*svg, Not(HasSubstr("\x01")));
  EXPECT_THAT(*svg, HasSubstr("\xEF\xBF\xBD"));
  EXPECT_THAT(*svg, HasSubstr("data-series=\"" + std::string(200, 'n') + "\""));
  EXPECT_THAT(*svg, Not(HasSubstr(">" + std::string(200, 'n') + "</text>")));
  EXPECT_THAT(*svg, HasSubstr("\xE2\x80\xA6</text>"));  // the ellipsis of the cut name
  EXPECT_NE(XmlProblem("<svg><a></svg>"), "");          // the checker can fail
  EXPECT_NE(XmlProblem("<svg a=\"x\" a=\"y\"/>"), "");
  EXPECT_NE(XmlProblem("<svg>&nbsp;</svg>"), "");
}

TEST(PlotSvg, LinearAxesAndPlainNumbers) {
  PlotSpec s;
  s.series.push_back({"", {{1, 0.5}, {2, 1.5}, {3, 1.0}}});
  Result<std::string> svg = RenderSvg(s);
  ASSERT_TRUE(svg.ok());
  EXPECT_EQ(XmlProblem(*svg), "");
  EXPECT_EQ(Points(*svg).size(), 3u);
  EXPECT_THAT(*svg, HasSubstr(">1.5</text>"));  // x: 0.5 steps
  EXPECT_THAT(*svg, HasSubstr(">1.4</text>"));  // y: 0.2 steps
}

TEST(PlotSvg, BadSpecsAreRefusedNamingTheSeries) {
  auto error = [](const PlotSpec& s) {
    Result<std::string> r = RenderSvg(s);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_THAT(error(PlotSpec{}), HasSubstr("no series"));
  PlotSpec s = Sweep();
  s.series[1].points.clear();
  EXPECT_THAT(error(s), HasSubstr("series 'p99' has no points"));
  s = Sweep();
  s.series[1].points[0].second = 0;
  EXPECT_THAT(error(s), HasSubstr("series 'p99': y = 0 at x = 2 cannot be drawn on a log y"));
  s = Sweep();
  s.series[0].points[1].first = -1;
  EXPECT_THAT(error(s), HasSubstr("series 'median': x = -1 cannot be drawn on a log x"));
  s = Sweep();
  s.series[0].points[0].second = NAN;
  EXPECT_THAT(error(s), HasSubstr("not a finite number"));
  s = Sweep();
  s.series[0].name.clear();
  s.series[0].points.clear();
  EXPECT_THAT(error(s), HasSubstr("series #1"));
  s = Sweep();
  s.x_unit_format = "furlongs";
  EXPECT_THAT(error(s), HasSubstr("furlongs"));
  s = Sweep();
  s.width = 10;
  EXPECT_THAT(error(s), HasSubstr("10x540"));
}

TEST(PlotSvg, WriteSvgWritesTheRenderingOrSaysWhyNot) {
  char dir_template[] = "/tmp/ferry_plot_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string path = dir + "/p.svg";
  ASSERT_TRUE(WriteSvg(Sweep(), path).ok());
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  EXPECT_EQ(ss.str(), *RenderSvg(Sweep()));
  Status s = WriteSvg(Sweep(), dir + "/no/such/dir/p.svg");
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/no/such/dir/p.svg"));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
  EXPECT_EQ(WriteSvg(PlotSpec{}, path).code(), Code::kInvalidArgument);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(PlotJson, SpecFromJsonReadsEveryField) {
  Result<PlotSpec> s = SpecFromJson(R"({"title": "t", "xlabel": "x", "ylabel": "y",
      "log_x": true, "log_y": false, "x_unit_format": "bytes", "width": 640, "height": 480,
      "series": [{"name": "a", "points": [[8, 1.5], [4096, 3]], "dashed": true, "color": 3},
                 {"points": []}]})",
                                    "spec.json");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->title, "t");
  EXPECT_TRUE(s->log_x);
  EXPECT_FALSE(s->log_y);
  EXPECT_EQ(s->x_unit_format, "bytes");
  EXPECT_EQ(s->width, 640);
  ASSERT_EQ(s->series.size(), 2u);
  EXPECT_TRUE(s->series[0].dashed);
  EXPECT_EQ(s->series[0].color, 3);
  EXPECT_THAT(s->series[0].points, ElementsAre(std::pair{8.0, 1.5}, std::pair{4096.0, 3.0}));
  EXPECT_EQ(s->series[1].color, -1);
}

TEST(PlotJson, SpecFromJsonErrorsNameTheFileAndPlace) {
  auto error = [](const char* text) {
    Result<PlotSpec> s = SpecFromJson(text, "spec.json");
    EXPECT_FALSE(s.ok()) << text;
    return s.status().message();
  };
  EXPECT_THAT(error("{\"series\": [}"), HasSubstr("spec.json is not valid JSON"));
  EXPECT_THAT(error("{\"series\": [}"), HasSubstr("line 1"));
  EXPECT_THAT(error("[]"), HasSubstr("must be a JSON object"));
  EXPECT_THAT(error("{\"log_yy\": true, \"series\": []}"), HasSubstr("unknown key 'log_yy'"));
  EXPECT_THAT(error("{\"log_y\": 1, \"series\": []}"), HasSubstr("'log_y' must be true"));
  EXPECT_THAT(error("{}"), HasSubstr("needs \"series\""));
  EXPECT_THAT(error("{\"series\": [{\"name\": \"a\"}]}"), HasSubstr("series[0] needs"));
  EXPECT_THAT(error("{\"series\": [{\"points\": [[1, null]]}]}"),
              HasSubstr("series[0]: points[0] is not a pair of numbers"));
  EXPECT_THAT(error("{\"series\": [{\"points\": [], \"colour\": 1}]}"),
              HasSubstr("unknown key 'colour'"));
}

bench::Report LatencyReport() {
  bench::Report r;
  r.header.tool = "ferry-lat";
  r.header.transport = "tcp";
  for (uint64_t bytes : {2, 4096, 1048576}) {
    bench::LatencyRow row;
    row.bytes = bytes;
    row.iterations = 10;
    row.check = bench::Check::kRef;  // the timed pass of a default (--check both) run
    row.usec.typical = 1.5 + static_cast<double>(bytes) / 1000;
    row.usec.p99 = 2 * row.usec.typical;
    r.latency.push_back(row);
  }
  return r;
}

bench::Report BandwidthReport() {
  bench::Report r;
  r.header.tool = "ferry-bw";
  r.header.transport = "ucx";
  r.header.config.mode = bench::Mode::kBandwidth;
  r.header.config.op = bench::BenchOp::kWrite;
  r.header.config.bidir = true;
  for (uint64_t bytes : {64, 65536}) {
    bench::BandwidthRow row;
    row.bytes = bytes;
    row.check = bench::Check::kRef;
    row.bw.bw_avg_mb = static_cast<double>(bytes) / 10;
    row.bw.msg_rate_mpps = 0.25;
    r.bandwidth.push_back(row);
  }
  return r;
}

TEST(PlotJson, LatencyRunsDrawMedianAndDashedP99) {
  Result<PlotSpec> s =
      SpecFromRuns({{"lat.json", "", bench::FormatJson(LatencyReport())}}, Metric::kAuto);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->title, "ferry-lat: tcp send latency, median and p99");
  EXPECT_TRUE(s->log_x && s->log_y);
  EXPECT_EQ(s->x_unit_format, "bytes");
  EXPECT_THAT(s->ylabel, HasSubstr("half round trip"));
  ASSERT_EQ(s->series.size(), 2u);
  EXPECT_EQ(s->series[0].name, "tcp send median");
  EXPECT_EQ(s->series[1].name, "tcp send p99");
  EXPECT_FALSE(s->series[0].dashed);
  EXPECT_TRUE(s->series[1].dashed);
  EXPECT_EQ(s->series[0].color, s->series[1].color);
  EXPECT_THAT(s->series[0].points,
              ElementsAre(std::pair{2.0, 1.5 + 0.002}, std::pair{4096.0, 1.5 + 4.096},
                          std::pair{1048576.0, 1.5 + 1048.576}));
  EXPECT_EQ(s->series[1].points[2].second, 2 * (1.5 + 1048.576));
}

TEST(PlotJson, BandwidthAndRateRunsAndLabels) {
  const std::string lat = bench::FormatJson(LatencyReport());
  const std::string bw = bench::FormatJson(BandwidthReport());
  Result<PlotSpec> s = SpecFromRuns({{"a.json", "", bw}, {"b.json", "mine", bw}}, Metric::kAuto);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->title, "Ferry bandwidth");
  EXPECT_FALSE(s->log_y);
  ASSERT_EQ(s->series.size(), 2u);
  EXPECT_EQ(s->series[0].name, "ucx write bidir");
  EXPECT_EQ(s->series[1].name, "mine");
  EXPECT_NE(s->series[0].color, s->series[1].color);
  EXPECT_THAT(s->series[0].points, ElementsAre(std::pair{64.0, 6.4}, std::pair{65536.0, 6553.6}));
  Result<PlotSpec> rate = SpecFromRuns({{"a.json", "", bw}}, Metric::kRate);
  ASSERT_TRUE(rate.ok());
  EXPECT_EQ(rate->series[0].points[1].second, 0.25);
  EXPECT_THAT(rate->ylabel, HasSubstr("Mpps"));

  auto error = [](const std::vector<RunJson>& runs, Metric m) {
    Result<PlotSpec> r = SpecFromRuns(runs, m);
    EXPECT_FALSE(r.ok());
    return r.status().message();
  };
  EXPECT_THAT(error({{"l.json", "", lat}, {"b.json", "", bw}}, Metric::kAuto),
              HasSubstr("l.json is a latency run and b.json a bandwidth run"));
  EXPECT_THAT(error({{"l.json", "", lat}}, Metric::kBandwidth),
              HasSubstr("l.json is a latency run; the bandwidth metric needs ferry-bw"));
  EXPECT_THAT(error({{"x.json", "", "{\"a\": 1}"}}, Metric::kAuto),
              HasSubstr("x.json is not the --json output"));
  EXPECT_THAT(error({{"x.json", "", R"({"test": "latency", "results": []})"}}, Metric::kAuto),
              HasSubstr("x.json has no results"));
  EXPECT_THAT(
      error({{"x.json", "", R"({"test": "latency", "results": [{"bytes": 8}]})"}}, Metric::kAuto),
      HasSubstr("results[0] lacks a numeric 'bytes' or 't_typical_usec'"));
  EXPECT_THAT(error({}, Metric::kAuto), HasSubstr("no results"));
  EXPECT_FALSE(ParseMetric("speed").ok());
}

TEST(PlotCommandTest, UsageErrors) {
  PlotCommand c;
  EXPECT_THAT(CheckPlotCommand(c).message(), HasSubstr("-o"));
  c.out = "x.svg";
  EXPECT_THAT(CheckPlotCommand(c).message(), HasSubstr("either --spec"));
  c.runs = {"a.json", "b.json"};
  c.labels = {"one"};
  EXPECT_THAT(CheckPlotCommand(c).message(), HasSubstr("1 --label for 2 result files"));
  c.labels.clear();
  c.metric = "speed";
  EXPECT_THAT(CheckPlotCommand(c).message(), HasSubstr("metric 'speed'"));
  c.metric = "auto";
  EXPECT_TRUE(CheckPlotCommand(c).ok());
  c.spec_path = "s.json";
  EXPECT_FALSE(CheckPlotCommand(c).ok());
  EXPECT_EQ(ReadTextFile("/no/such/file.json").status().code(), Code::kIoError);
}

TEST(PlotFromBench, WritePlotDrawsEveryRow) {
  char dir_template[] = "/tmp/ferry_plot_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string path = dir + "/bw.svg";
  ASSERT_TRUE(bench::WritePlot(BandwidthReport(), path).ok());
  Result<std::string> svg = ReadTextFile(path);
  ASSERT_TRUE(svg.ok());
  EXPECT_EQ(XmlProblem(*svg), "");
  EXPECT_THAT(Points(*svg), ElementsAre(std::pair{"64", "6.4"}, std::pair{"65536", "6553.6"}));
  EXPECT_THAT(*svg, HasSubstr("ferry-bw: ucx write bidir bandwidth"));
  EXPECT_EQ(bench::WritePlot(BandwidthReport(), dir + "/none/bw.svg").code(), Code::kIoError);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace ferry::plot

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
