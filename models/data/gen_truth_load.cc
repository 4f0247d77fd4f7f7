// LoadTruth: reads a truth file written by Generator::WriteTruth back into a TruthTable.
// The format is line based (docs/data-formats.md): a header of "key value..." lines (a file
// without a layout line is ctr), then numeric_weight, hidden_unit and feature lines. Errors say
// "FILE:LINE: what".
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

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

// One load's state: the table as read so far, and what the checks at the end need.
class TruthLoad {
 public:
  // One "key args..." line after the header. kInvalidArgument "what" (the caller adds
  // FILE:LINE).
  Status Line(std::string_view key, const std::vector<std::string_view>& args) {
    const bool shape = key == "kind" || key == "layout" || key == "fields" || key == "numeric" ||
                       key == "factors" || key == "hidden" || key == "vocab";
    if (shape && sized_) {
      // The tables are sized by the vocab line: the shape cannot change behind it.
      return InvalidArgument("'" + std::string(key) + "' after the vocab line");
    }
    if (key == "vocab") return Vocab(args);
    if (shape) return Shape(key, args);
    if (key == "bias") {
      if (args.size() != 1 || !ToDouble(args[0], &t_.bias)) return InvalidArgument("bad bias");
      return Status::Ok();
    }
    if (!sized_) return InvalidArgument("'" + std::string(key) + "' before the vocab line");
    if (key == "numeric_weight") return NumericWeight(args);
    if (key == "hidden_unit") return HiddenUnit(args);
    if (key == "feature") return Feature(args);
    return InvalidArgument("unknown key '" + std::string(key) + "'");
  }

  bool sized() const { return sized_; }
  uint64_t features() const { return features_; }
  TruthTable& table() { return t_; }

 private:
  // kind, layout, fields, numeric, factors, hidden.
  Status Shape(std::string_view key, const std::vector<std::string_view>& args) {
    uint64_t u = 0;
    if (key == "kind") {
      if (args.size() != 1) return InvalidArgument("kind takes one word");
      Result<Truth> kind = ParseTruth(args[0]);
      if (!kind.ok()) return InvalidArgument(kind.status().message());
      t_.kind = *kind;
    } else if (key == "layout") {
      if (args.size() != 1) return InvalidArgument("layout takes one word");
      Result<Layout> layout = ParseLayout(args[0]);
      if (!layout.ok()) return InvalidArgument(layout.status().message());
      t_.layout = *layout;
    } else {
      if (args.size() != 1 || !ToU64(args[0], &u) || u > 100000) {
        return InvalidArgument("bad " + std::string(key) + " (want one integer up to 100000)");
      }
      uint32_t* target = key == "fields"    ? &t_.fields
                         : key == "numeric" ? &t_.numeric
                         : key == "factors" ? &t_.factors
                                            : &t_.hidden;
      *target = static_cast<uint32_t>(u);
    }
    return Status::Ok();
  }

  // The vocab line fixes the shape and sizes every table.
  Status Vocab(const std::vector<std::string_view>& args) {
    if (args.size() != t_.fields) return InvalidArgument("vocab needs one count per field");
    if (t_.layout == Layout::kText &&
        (t_.kind != Truth::kLr || t_.fields != 1 || t_.numeric != 0 || t_.factors != 0)) {
      return InvalidArgument("a text truth is lr with fields 1, numeric 0 and factors 0");
    }
    t_.offsets.assign(1, 0);
    uint64_t u = 0;
    for (std::string_view a : args) {
      if (!ToU64(a, &u) || u == 0 || u > kMaxLoadedValues) {
        return InvalidArgument("bad vocab count");
      }
      t_.vocab.push_back(u);
      t_.offsets.push_back(t_.offsets.back() + u);
    }
    const uint64_t values = t_.offsets.back();
    const uint64_t hidden_weights = uint64_t{t_.hidden} * t_.fields * t_.factors;  // < 2^50
    const uint64_t stride = t_.VectorStride();                                     // < 2^34
    if (values > kMaxLoadedValues || (values > 0 && (1 + stride) > kMaxLoadedValues / values) ||
        hidden_weights > kMaxLoadedValues) {
      return InvalidArgument("model too large to load (more than 2^31 parameters)");
    }
    seen_.assign(values, false);
    t_.weight.assign(t_.kind == Truth::kMlp ? 0 : t_.offsets.back(), 0.0);
    t_.vectors.assign(t_.offsets.back() * stride, 0.0);
    t_.numeric_weight.assign(t_.numeric, 0.0);
    t_.hidden_bias.assign(t_.hidden, 0.0);
    t_.out_weight.assign(t_.hidden, 0.0);
    t_.in_weight.assign(size_t{t_.hidden} * t_.fields * t_.factors, 0.0);
    sized_ = true;
    return Status::Ok();
  }

  Status NumericWeight(const std::vector<std::string_view>& args) {
    uint64_t u = 0;
    if (args.size() != 2 || !ToU64(args[0], &u) || u >= t_.numeric ||
        !ToDouble(args[1], &t_.numeric_weight[u])) {
      return InvalidArgument("bad numeric_weight line");
    }
    return Status::Ok();
  }

  Status HiddenUnit(const std::vector<std::string_view>& args) {
    uint64_t u = 0;
    const size_t inputs = size_t{t_.fields} * t_.factors;
    if (args.size() != 3 + inputs || !ToU64(args[0], &u) || u >= t_.hidden ||
        !ToDouble(args[1], &t_.hidden_bias[u]) || !ToDouble(args[2], &t_.out_weight[u])) {
      return InvalidArgument("bad hidden_unit line");
    }
    for (size_t i = 0; i < inputs; ++i) {
      if (!ToDouble(args[3 + i], &t_.in_weight[u * inputs + i])) {
        return InvalidArgument("bad hidden weight");
      }
    }
    return Status::Ok();
  }

  Status Feature(const std::vector<std::string_view>& args) {
    uint64_t f, v;
    const size_t stride = t_.VectorStride();
    const size_t want = 2 + (t_.kind == Truth::kMlp ? 0 : 1) + stride;
    if (args.size() != want || !ToU64(args[0], &f) || f >= t_.fields || !ToU64(args[1], &v) ||
        v >= t_.vocab[f]) {
      return InvalidArgument("bad feature line (want: feature FIELD VALUE" +
                             std::string(t_.kind == Truth::kMlp ? "" : " WEIGHT") + " and " +
                             std::to_string(stride) + " vector entries)");
    }
    const uint64_t at = t_.offsets[f] + v;
    if (seen_[at]) {
      return InvalidArgument("feature " + std::to_string(f) + " " + std::to_string(v) + " twice");
    }
    seen_[at] = true;
    size_t i = 2;
    if (t_.kind != Truth::kMlp && !ToDouble(args[i++], &t_.weight[at])) {
      return InvalidArgument("bad weight");
    }
    for (size_t j = 0; j < stride; ++j) {
      if (!ToDouble(args[i++], &t_.vectors[at * stride + j])) {
        return InvalidArgument("bad vector entry");
      }
    }
    ++features_;
    return Status::Ok();
  }

  TruthTable t_;
  bool sized_ = false;
  std::vector<bool> seen_;  // feature lines read, per value
  uint64_t features_ = 0;
};

}  // namespace

Result<TruthTable> LoadTruth(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return IoError("open " + path, errno);
  LineReader reader(f);
  TruthLoad load;
  std::string_view line;
  const auto bad = [&](const std::string& what) {
    return InvalidArgument(path + ":" + std::to_string(reader.number()) + ": " + what);
  };
  bool header = false;
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
    if (Status s = load.Line(key, args); !s.ok()) return bad(s.message());
  }
  if (!header || !load.sized()) {
    return InvalidArgument(path + ": truncated truth file (no vocab line)");
  }
  TruthTable& t = load.table();
  if (load.features() != t.offsets.back()) {
    return InvalidArgument(path + ": has " + std::to_string(load.features()) +
                           " feature lines, want " + std::to_string(t.offsets.back()));
  }
  return std::move(t);
}

}  // namespace ferry::models
