// Rendering a PlotSpec as SVG 1.1. The canvas is laid out as
//
//   +--------------------------------------------------------------+
//   |                         title                                |  top
//   |  y   +-------------------------------------+   — name 1      |
//   |  l   | grid, polylines, markers            |   - - name 2    |  legend, outside
//   |  a   |  (inset 6 px from the frame so edge |                 |  right
//   |  b   |   markers do not sit on it)         |                 |
//   |  e   +-------------------------------------+                 |
//   |  l    x tick labels                                          |
//   |                         x label                              |  bottom
//   +--------------------------------------------------------------+
//
// Text widths are estimated (0.6 em per character): there is no font metrics library here, and
// the estimate only sizes the margins.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/common/output.h"
#include "tools/plot/axis.h"
#include "tools/plot/plot.h"

namespace ferry::plot {
namespace {

// Distinguishable in colour and in grey (Tableau 10 order).
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr int kPaletteSize = sizeof kPalette / sizeof kPalette[0];
constexpr double kCharWidth = 7.2;  // px per character at font-size 12
constexpr double kInset = 6;        // px between the frame and the data range
constexpr int kMaxLegendChars = 48;

using tools::Printf;

// Appends `s` as XML character data or attribute text. Invalid UTF-8 and characters XML 1.0
// forbids (C0 controls except tab/newline/return, U+FFFE, U+FFFF) become U+FFFD, so any input
// gives a well-formed document.
void AppendEscaped(std::string& out, std::string_view s) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  constexpr std::pair<unsigned char, const char*> kEntities[] = {
      {'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&apos;"}};
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      const char* entity = nullptr;
      for (const auto& [c, e] : kEntities) entity = b == c ? e : entity;
      if (entity != nullptr) {
        out += entity;
      } else if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') {
        out += kReplacement;
      } else {
        out += static_cast<char>(b);
      }
      ++i;
      continue;
    }
    // Lead byte -> length and the allowed range of the second byte (no overlongs, no
    // surrogates, nothing above U+10FFFF).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    }
    // U+FFFE and U+FFFF are EF BF BE / EF BF BF.
    if (ok && len == 3 && b == 0xEF && static_cast<unsigned char>(s[i + 1]) == 0xBF &&
        static_cast<unsigned char>(s[i + 2]) >= 0xBE) {
      ok = false;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += kReplacement;
      ++i;
    }
  }
}

std::string Esc(std::string_view s) {
  std::string out;
  AppendEscaped(out, s);
  return out;
}

// Characters (code points) of UTF-8 text, for width estimates.
size_t Chars(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The first `max_chars` characters of `s`, with an ellipsis when cut.
std::string Truncate(const std::string& s, size_t max_chars) {
  if (Chars(s) <= max_chars) return s;
  size_t n = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == max_chars - 1) break;
  }
  return s.substr(0, i) + "\xE2\x80\xA6";
}

std::string SeriesLabel(size_t index, const Series& s) {
  return s.name.empty() ? "series #" + std::to_string(index + 1) : "series '" + s.name + "'";
}

const char* Color(size_t index, const Series& s) {
  const int slot = s.color >= 0 ? s.color : static_cast<int>(index);
  return kPalette[slot % kPaletteSize];
}

// Where everything goes: the frame, the scales and the data -> pixel mapping.
struct Layout {
  double width = 0, height = 0;
  double x = 0, y = 0, w = 0, h = 0;  // the frame
  Axis ax, ay;
  TickFormat x_format = TickFormat::kNumber;
  size_t legend_chars = 0;  // legend names are cut to this many characters

  double Px(double v) const { return x + kInset + ax.Fraction(v) * (w - 2 * kInset); }
  double Py(double v) const { return y + h - kInset - ay.Fraction(v) * (h - 2 * kInset); }
};

Layout MakeLayout(const PlotSpec& spec) {
  Layout l;
  double x_min = INFINITY, x_max = -INFINITY, y_min = INFINITY, y_max = -INFINITY;
  for (const Series& s : spec.series) {
    for (const auto& [x, y] : s.points) {
      x_min = std::fmin(x_min, x), x_max = std::fmax(x_max, x);
      y_min = std::fmin(y_min, y), y_max = std::fmax(y_max, y);
    }
  }
  l.x_format = spec.x_unit_format == "bytes" ? TickFormat::kBytes : TickFormat::kNumber;
  l.ax = MakeAxis(x_min, x_max, spec.log_x, l.x_format, 8);
  l.ay = MakeAxis(y_min, y_max, spec.log_y, TickFormat::kNumber, 6);
  // Margins from the text they hold.
  l.width = spec.width;
  l.height = spec.height;
  size_t y_label_chars = 0;
  for (const Tick& t : l.ay.ticks) y_label_chars = std::max(y_label_chars, Chars(t.label));
  l.x = (spec.ylabel.empty() ? 12 : 34) + kCharWidth * static_cast<double>(y_label_chars) + 10;
  l.y = spec.title.empty() ? 16 : 40;
  for (const Series& s : spec.series) l.legend_chars = std::max(l.legend_chars, Chars(s.name));
  const auto fit = static_cast<size_t>((l.width * 0.35 - 40) / kCharWidth);
  l.legend_chars = std::min(l.legend_chars, std::clamp<size_t>(fit, 8, kMaxLegendChars));
  l.w = l.width - l.x - (16 + 36 + kCharWidth * static_cast<double>(l.legend_chars) + 12);
  l.h = l.height - l.y - (spec.xlabel.empty() ? 34 : 56);
  return l;
}

std::string Line(double x1, double y1, double x2, double y2, const char* extra = "") {
  return Printf("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"%s/>", x1, y1, x2, y2, extra);
}

std::string Text(double x, double y, const std::string& text, const char* extra = "") {
  return Printf("<text x=\"%.2f\" y=\"%.2f\"%s>", x, y, extra) + Esc(text) + "</text>\n";
}

void AppendAxes(std::string& o, const PlotSpec& spec, const Layout& l) {
  o += "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (const Tick& t : l.ax.ticks) o += Line(l.Px(t.value), l.y, l.Px(t.value), l.y + l.h) + "\n";
  for (const Tick& t : l.ay.ticks) o += Line(l.x, l.Py(t.value), l.x + l.w, l.Py(t.value)) + "\n";
  o += "</g>\n";
  o += Printf(
      "<rect class=\"frame\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
      "fill=\"none\" stroke=\"#444444\" stroke-width=\"1\"/>\n",
      l.x, l.y, l.w, l.h);
  constexpr const char* kTickStroke = " stroke=\"#444444\"";
  o += "<g class=\"x-ticks\" text-anchor=\"middle\" fill=\"#222222\">\n";
  for (const Tick& t : l.ax.ticks) {
    const double x = l.Px(t.value), y = l.y + l.h;
    o += Line(x, y, x, y + 5, kTickStroke) + Text(x, y + 19, t.label);
  }
  o += "</g>\n<g class=\"y-ticks\" text-anchor=\"end\" fill=\"#222222\">\n";
  for (const Tick& t : l.ay.ticks) {
    const double y = l.Py(t.value);
    o += Line(l.x - 5, y, l.x, y, kTickStroke) + Text(l.x - 8, y + 4, t.label);
  }
  o += "</g>\n";
  if (!spec.title.empty()) {
    o += Text(l.width / 2, 26, spec.title,
              " class=\"title\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\"");
  }
  if (!spec.xlabel.empty()) {
    o +=
        Text(l.x + l.w / 2, l.height - 14, spec.xlabel, " class=\"xlabel\" text-anchor=\"middle\"");
  }
  if (!spec.ylabel.empty()) {
    const double x = 18, y = l.y + l.h / 2;
    const std::string rotate = Printf(
        " class=\"ylabel\" text-anchor=\"middle\" transform=\"rotate(-90 %.2f %.2f)\"", x, y);
    o += Text(x, y, spec.ylabel, rotate.c_str());
  }
}

// The line joins the points in ascending x; the markers come after it, so they sit on top.
void AppendSeries(std::string& o, size_t index, const Series& s, const Layout& l) {
  const char* color = Color(index, s);
  std::vector<std::pair<double, double>> sorted = s.points;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  o += "<g class=\"series\" data-name=\"" + Esc(s.name) + "\">\n<title>" + Esc(s.name) +
       "</title>\n";
  o +=
      Printf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-linejoin=\"round\"%s",
             color, s.dashed ? " stroke-dasharray=\"7 4\"" : "");
  o += " points=\"";
  for (size_t k = 0; k < sorted.size(); ++k) {
    o += Printf(k ? " %.2f,%.2f" : "%.2f,%.2f", l.Px(sorted[k].first), l.Py(sorted[k].second));
  }
  o += "\"/>\n";
  for (const auto& [x, y] : s.points) {
    o += Printf(
        "<circle class=\"point\" cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\" "
        "stroke=\"%s\" stroke-width=\"1.5\"",
        l.Px(x), l.Py(y), s.dashed ? "#ffffff" : color, color);
    o += " data-series=\"" + Esc(s.name) + "\" data-x=\"" + ExactNumber(x) + "\" data-y=\"" +
         ExactNumber(y) + "\"><title>" + Esc(s.name) + ": " + Esc(FormatTick(x, l.x_format, 0)) +
         Printf(", %.4g", y) + "</title></circle>\n";
  }
  o += "</g>\n";
}

// Outside the frame on the right; entries close up when there are many.
void AppendLegend(std::string& o, const PlotSpec& spec, const Layout& l) {
  o += "<g class=\"legend\">\n";
  const double lx = l.x + l.w + 16;
  const double step = std::min(20.0, (l.h - 12) / static_cast<double>(spec.series.size()));
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const Series& s = spec.series[i];
    const char* color = Color(i, s);
    const double y = l.y + 12 + step * static_cast<double>(i);
    const std::string stroke = Printf(" stroke=\"%s\" stroke-width=\"2\"%s", color,
                                      s.dashed ? " stroke-dasharray=\"7 4\"" : "");
    o += Line(lx, y, lx + 28, y, stroke.c_str());
    o += Printf(
        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\" stroke=\"%s\" "
        "stroke-width=\"1.5\"/>",
        lx + 14, y, s.dashed ? "#ffffff" : color, color);
    o += Text(lx + 36, y + 4, Truncate(s.name, l.legend_chars));
  }
  o += "</g>\n";
}

}  // namespace

Status ValidateSpec(const PlotSpec& spec) {
  if (spec.width < 300 || spec.height < 200 || spec.width > 20000 || spec.height > 20000) {
    return InvalidArgument(Printf("plot size %dx%d is out of range (300x200 .. 20000x20000)",
                                  spec.width, spec.height));
  }
  if (!spec.x_unit_format.empty() && spec.x_unit_format != "bytes" &&
      spec.x_unit_format != "number") {
    return InvalidArgument("x_unit_format '" + spec.x_unit_format +
                           "' is unknown (use \"bytes\" or \"number\")");
  }
  if (spec.series.empty()) return InvalidArgument("the plot has no series to draw");
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const Series& s = spec.series[i];
    if (s.points.empty()) return InvalidArgument(SeriesLabel(i, s) + " has no points");
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        return InvalidArgument(SeriesLabel(i, s) + " has a point that is not a finite number");
      }
      if (spec.log_x && x <= 0) {
        return InvalidArgument(SeriesLabel(i, s) + ": x = " + ExactNumber(x) +
                               " cannot be drawn on a log x axis (values must be > 0)");
      }
      if (spec.log_y && y <= 0) {
        return InvalidArgument(SeriesLabel(i, s) + ": y = " + ExactNumber(y) +
                               " at x = " + ExactNumber(x) +
                               " cannot be drawn on a log y axis (values must be > 0)");
      }
    }
  }
  return Status::Ok();
}

Result<std::string> RenderSvg(const PlotSpec& spec) {
  FERRY_RETURN_IF_ERROR(ValidateSpec(spec));
  const Layout l = MakeLayout(spec);
  std::string o;
  o.reserve(16384);
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
  o += Printf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
      "font-size=\"12\">\n",
      spec.width, spec.height, spec.width, spec.height);
  o += "<title>" + Esc(spec.title) + "</title>\n";
  o += "<desc>Drawn by Ferry's plot writer (tools/plot).</desc>\n";
  o += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  AppendAxes(o, spec, l);
  for (size_t i = 0; i < spec.series.size(); ++i) AppendSeries(o, i, spec.series[i], l);
  AppendLegend(o, spec, l);
  o += "</svg>\n";
  return o;
}

Status WriteSvg(const PlotSpec& spec, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const std::string svg, RenderSvg(spec));
  if (path == "-") {
    if (std::fwrite(svg.data(), 1, svg.size(), stdout) != svg.size()) {
      return IoError("write the plot to stdout", errno);
    }
    std::fflush(stdout);
    return Status::Ok();
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return IoError("cannot open plot file " + path + " for writing", errno);
  const bool written = std::fwrite(svg.data(), 1, svg.size(), f) == svg.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    return IoError("cannot write plot file " + path, written ? errno : write_errno);
  }
  return Status::Ok();
}

}  // namespace ferry::plot
