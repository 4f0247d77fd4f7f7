// LoadTruth: reads a truth file written by Generator::WriteTruth back into a TruthTable.
// The format is line based (docs/data-formats.md): a header of "key value..." lines (a file
// without a layout line is ctr), then numeric_weight, hidden_unit and feature lines. Errors say
// "FILE:LINE: what".
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "models/data/gen.h"
#include "models/data/parse_internal.h"

namespace ferry::models {
namespace {

// Guards the allocation a hostile header could ask for.
constexpr uint64_t kMaxLoadedValues = uint64_t{1} << 31;

class LineReader {
 public:
  explicit LineReader(std::FILE* f) : f_(f) {}
  ~LineReader() {
    std::free(buf_);
    std::fclose(f_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  bool Next(std::string_view* line) {
    const ssize_t n = getline(&buf_, &cap_, f_);
    if (n < 0) return false;
    ++number_;
    *line = std::string_view(buf_, static_cast<size_t>(n));
    if (!line->empty() && line->back() == '\n') line->remove_suffix(1);
    *line = internal::StripCr(*line);
    return true;
  }
  uint64_t number() const { return number_; }

 private:
  std::FILE* f_;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  uint64_t number_ = 0;
};

bool ToU64(std::string_view s, uint64_t* v) {
  return internal::ParseU64(s, v);
}
bool ToDouble(std::string_view s, double* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(*v);
}

}  // namespace

Result<TruthTable> LoadTruth(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return IoError("open " + path, errno);
  LineReader reader(f);
  TruthTable t;
  std::string_view line;
  const auto bad = [&](const std::string& what) {
    return InvalidArgument(path + ":" + std::to_string(reader.number()) + ": " + what);
  };
  bool header = false, sized = false;
  std::vector<bool> seen;  // feature lines read, per value
  uint64_t features = 0;
  while (reader.Next(&line)) {
    if (line.empty() || line[0] == '#') continue;
    internal::Tokenizer tokens(line);
    std::string_view key, tok;
    tokens.Next(&key);
    if (!header) {
      if (key != "ferry-gen-truth" || !tokens.Next(&tok) || tok != "1") {
        return bad("not a ferry-gen truth file (want 'ferry-gen-truth 1' first)");
      }
      header = true;
      continue;
    }
    std::vector<std::string_view> args;
    while (tokens.Next(&tok)) args.push_back(tok);
    uint64_t u = 0;
    const bool shape = key == "kind" || key == "layout" || key == "fields" || key == "numeric" ||
                       key == "factors" || key == "hidden" || key == "vocab";
    if (shape && sized) {
      // The tables are sized by the vocab line: the shape cannot change behind it.
      return bad("'" + std::string(key) + "' after the vocab line");
    }
    if (key == "kind") {
      if (args.size() != 1) return bad("kind takes one word");
      Result<Truth> kind = ParseTruth(args[0]);
      if (!kind.ok()) return bad(kind.status().message());
      t.kind = *kind;
    } else if (key == "layout") {
      if (args.size() != 1) return bad("layout takes one word");
      Result<Layout> layout = ParseLayout(args[0]);
      if (!layout.ok()) return bad(layout.status().message());
      t.layout = *layout;
    } else if (key == "fields" || key == "numeric" || key == "factors" || key == "hidden") {
      if (args.size() != 1 || !ToU64(args[0], &u) || u > 100000) {
        return bad("bad " + std::string(key) + " (want one integer up to 100000)");
      }
      uint32_t* target = key == "fields"    ? &t.fields
                         : key == "numeric" ? &t.numeric
                         : key == "factors" ? &t.factors
                                            : &t.hidden;
      *target = static_cast<uint32_t>(u);
    } else if (key == "vocab") {
      if (args.size() != t.fields) return bad("vocab needs one count per field");
      if (t.layout == Layout::kText &&
          (t.kind != Truth::kLr || t.fields != 1 || t.numeric != 0 || t.factors != 0)) {
        return bad("a text truth is lr with fields 1, numeric 0 and factors 0");
      }
      t.offsets.assign(1, 0);
      for (std::string_view a : args) {
        if (!ToU64(a, &u) || u == 0 || u > kMaxLoadedValues) return bad("bad vocab count");
        t.vocab.push_back(u);
        t.offsets.push_back(t.offsets.back() + u);
      }
      const uint64_t values = t.offsets.back();
      const uint64_t hidden_weights = uint64_t{t.hidden} * t.fields * t.factors;  // < 2^50
      const uint64_t stride = t.VectorStride();                                   // < 2^34
      if (values > kMaxLoadedValues || (values > 0 && (1 + stride) > kMaxLoadedValues / values) ||
          hidden_weights > kMaxLoadedValues) {
        return bad("model too large to load (more than 2^31 parameters)");
      }
      seen.assign(values, false);
      t.weight.assign(t.kind == Truth::kMlp ? 0 : t.offsets.back(), 0.0);
      t.vectors.assign(t.offsets.back() * stride, 0.0);
      t.numeric_weight.assign(t.numeric, 0.0);
      t.hidden_bias.assign(t.hidden, 0.0);
      t.out_weight.assign(t.hidden, 0.0);
      t.in_weight.assign(size_t{t.hidden} * t.fields * t.factors, 0.0);
      sized = true;
    } else if (key == "bias") {
      if (args.size() != 1 || !ToDouble(args[0], &t.bias)) return bad("bad bias");
    } else if (!sized) {
      return bad("'" + std::string(key) + "' before the vocab line");
    } else if (key == "numeric_weight") {
      if (args.size() != 2 || !ToU64(args[0], &u) || u >= t.numeric ||
          !ToDouble(args[1], &t.numeric_weight[u])) {
        return bad("bad numeric_weight line");
      }
    } else if (key == "hidden_unit") {
      const size_t inputs = size_t{t.fields} * t.factors;
      if (args.size() != 3 + inputs || !ToU64(args[0], &u) || u >= t.hidden ||
          !ToDouble(args[1], &t.hidden_bias[u]) || !ToDouble(args[2], &t.out_weight[u])) {
        return bad("bad hidden_unit line");
      }
      for (size_t i = 0; i < inputs; ++i) {
        if (!ToDouble(args[3 + i], &t.in_weight[u * inputs + i])) return bad("bad hidden weight");
      }
    } else if (key == "feature") {
      uint64_t f, v;
      const size_t stride = t.VectorStride();
      const size_t want = 2 + (t.kind == Truth::kMlp ? 0 : 1) + stride;
      if (args.size() != want || !ToU64(args[0], &f) || f >= t.fields || !ToU64(args[1], &v) ||
          v >= t.vocab[f]) {
        return bad("bad feature line (want: feature FIELD VALUE" +
                   std::string(t.kind == Truth::kMlp ? "" : " WEIGHT") + " and " +
                   std::to_string(stride) + " vector entries)");
      }
      const uint64_t at = t.offsets[f] + v;
      if (seen[at]) return bad("feature " + std::to_string(f) + " " + std::to_string(v) + " twice");
      seen[at] = true;
      size_t i = 2;
      if (t.kind != Truth::kMlp && !ToDouble(args[i++], &t.weight[at])) return bad("bad weight");
      for (size_t j = 0; j < stride; ++j) {
        if (!ToDouble(args[i++], &t.vectors[at * stride + j])) return bad("bad vector entry");
      }
      ++features;
    } else {
      return bad("unknown key '" + std::string(key) + "'");
    }
  }
  if (!header || !sized) return InvalidArgument(path + ": truncated truth file (no vocab line)");
  if (features != t.offsets.back()) {
    return InvalidArgument(path + ": has " + std::to_string(features) + " feature lines, want " +
                           std::to_string(t.offsets.back()));
  }
  return t;
}

}  // namespace ferry::models
