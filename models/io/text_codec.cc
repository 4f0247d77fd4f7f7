// Text model format: encoder and parser. Line-level specification: docs/model-format.md.
//
//   ferry-model text 1                      first line: magic word, format, version
//   # comment                               '#' lines and blank lines are ignored anywhere
//   kind fm                                 exactly once, before everything else
//   param hash_bits 24                      "param <key> <value>": value = rest of the line,
//   param note two\x20spaces\nline2         escaped (\\ \n \r \t \xHH)
//   table linear 1                          "table <name> <dim>"
//   0 0.125                                 rows: "<key> <v1> ... <v_dim>", decimal
//   9223372036854775808 -1.5e-07
//   end-table linear 2                      name and row count must match what was read
//   end 1                                   table count; every line ends with '\n'
//
// Floats are written with std::to_chars (shortest form that reads back to the same float,
// "inf"/"nan" included), so text round trips are exact. The text format carries no checksum: it
// is meant to be read and edited by people; truncation is still always detected (the end line
// and the final newline are required) and every line is parsed strictly.
#include <charconv>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/io/codec.h"

namespace ferry::models::io_internal {
namespace {

constexpr size_t kFlushBytes = 1 << 20;

bool IsBlank(char c) {
  return c == ' ' || c == '\t';
}

std::string EscapeValue(std::string_view v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class TextEncoder final : public ModelEncoder {
 public:
  explicit TextEncoder(ByteSink* sink) : sink_(sink) {}

  Status Begin(ModelKind kind, const ModelParams& params) override {
    buffer_ += std::string(kTextMagic) + " text " + std::to_string(kTextVersion) + "\n";
    buffer_ += "# Ferry model export (docs/model-format.md). Rows: <key> <dim floats>.\n";
    buffer_ += "kind " + std::string(ModelKindName(kind)) + "\n";
    for (const auto& [key, value] : params) {
      buffer_ += "param " + key + " " + EscapeValue(value) + "\n";
    }
    return MaybeFlush();
  }

  Status BeginTable(std::string_view name, uint32_t dim) override {
    table_ = std::string(name);
    dim_ = dim;
    rows_ = 0;
    buffer_ += "table " + table_ + " " + std::to_string(dim) + "\n";
    return MaybeFlush();
  }

  Status AppendRows(std::span<const uint64_t> keys, std::span<const float> values) override {
    char num[64];
    for (size_t i = 0; i < keys.size(); ++i) {
      auto r = std::to_chars(num, num + sizeof(num), keys[i]);
      buffer_.append(num, r.ptr);
      for (size_t d = 0; d < dim_; ++d) {
        buffer_ += ' ';
        r = std::to_chars(num, num + sizeof(num), values[i * dim_ + d]);
        buffer_.append(num, r.ptr);
      }
      buffer_ += '\n';
      FERRY_RETURN_IF_ERROR(MaybeFlush());
    }
    rows_ += keys.size();
    return Status::Ok();
  }

  Status EndTable() override {
    ++tables_;
    buffer_ += "end-table " + table_ + " " + std::to_string(rows_) + "\n";
    return MaybeFlush();
  }

  Status Finish() override {
    buffer_ += "end " + std::to_string(tables_) + "\n";
    const Status s = sink_->Write(buffer_.data(), buffer_.size());
    buffer_.clear();
    return s;
  }

 private:
  Status MaybeFlush() {
    if (buffer_.size() < kFlushBytes) return Status::Ok();
    const Status s = sink_->Write(buffer_.data(), buffer_.size());
    buffer_.clear();
    return s;
  }

  ByteSink* sink_;
  std::string buffer_;
  std::string table_;
  uint32_t dim_ = 0;
  uint64_t rows_ = 0;
  uint64_t tables_ = 0;
};

// Splits at runs of spaces/tabs.
std::vector<std::string_view> Tokens(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !IsBlank(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

template <typename T>
bool ParseNumber(std::string_view token, T& value) {
  const char* end = token.data() + token.size();
  const auto r = std::from_chars(token.data(), end, value);
  return r.ec == std::errc() && r.ptr == end;
}

class TextParser {
 public:
  explicit TextParser(std::span<const uint8_t> bytes)
      : text_(reinterpret_cast<const char*>(bytes.data()), bytes.size()) {}

  Result<Model> Run() {
    Model model;
    std::string_view line;
    // Magic line: not skipped as a comment, it must come first.
    FERRY_ASSIGN_OR_RETURN(bool more, RawLine(line));
    std::vector<std::string_view> t = Tokens(line);
    if (!more || t.empty() || t[0] != kTextMagic) {
      return ProtocolError("not a Ferry text model: the first line must be \"ferry-model text " +
                           std::to_string(kTextVersion) + "\"");
    }
    uint32_t version = 0;
    if (t.size() != 3 || t[1] != "text" || !ParseNumber(t[2], version)) {
      return Error("the first line must be \"ferry-model text <version>\"");
    }
    if (version != kTextVersion) {
      return ProtocolError("text model version " + std::to_string(version) +
                           " is not supported; this build reads version " +
                           std::to_string(kTextVersion) + " (re-export the model or upgrade)");
    }
    FERRY_ASSIGN_OR_RETURN(more, NextLine(line));
    if (!more) return Truncated("the kind line");
    t = Tokens(line);
    if (t.size() != 2 || t[0] != "kind") return Error("expected \"kind <lr|ftrl|fm|mlp>\"");
    Result<ModelKind> kind = ParseModelKind(t[1]);
    if (!kind.ok()) return Error(kind.status().message());
    model.kind = *kind;
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(more, NextLine(line));
      if (!more) return Truncated("a param, table or end line");
      if (line.starts_with("param ") || line.starts_with("param\t")) {
        if (!model.tables.empty()) return Error("param lines must come before the first table");
        FERRY_RETURN_IF_ERROR(ParseParam(line, model));
        continue;
      }
      t = Tokens(line);
      if (!t.empty() && t[0] == "table") {
        FERRY_RETURN_IF_ERROR(ParseTable(t, model));
        continue;
      }
      if (!t.empty() && t[0] == "end") return ParseEnd(t, std::move(model));
      return Error("expected a param, table or end line");
    }
  }

 private:
  Status Error(std::string_view what) const {
    return ProtocolError("text model line " + std::to_string(line_no_) + ": " + std::string(what));
  }
  Status Truncated(std::string_view expected) const {
    return ProtocolError("text model is truncated: it ends after line " + std::to_string(line_no_) +
                         " where " + std::string(expected) + " was expected");
  }

  // The next line without its '\n' (and a '\r' before it); false at the end of the input.
  Result<bool> RawLine(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const size_t nl = text_.find('\n', pos_);
    ++line_no_;
    if (nl == std::string_view::npos) {
      return ProtocolError("text model line " + std::to_string(line_no_) +
                           " is not terminated by a newline: the file is truncated");
    }
    line = text_.substr(pos_, nl - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = nl + 1;
    return true;
  }

  // The next line that is not blank or a comment.
  Result<bool> NextLine(std::string_view& line) {
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(const bool more, RawLine(line));
      if (!more) return false;
      size_t i = 0;
      while (i < line.size() && IsBlank(line[i])) ++i;
      if (i == line.size() || line[i] == '#') continue;
      return true;
    }
  }

  Status ParseParam(std::string_view line, Model& model) {
    line.remove_prefix(6);
    const size_t space = line.find(' ');
    const std::string_view key = line.substr(0, space);
    const std::string_view raw = space == std::string_view::npos ? "" : line.substr(space + 1);
    const Status valid = ValidateModelName(key, "parameter key");
    if (!valid.ok()) return Error(valid.message());
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        value += raw[i];
        continue;
      }
      if (i + 1 >= raw.size()) return Error("parameter value ends with a lone backslash");
      const char e = raw[++i];
      if (e == '\\') {
        value += '\\';
      } else if (e == 'n') {
        value += '\n';
      } else if (e == 'r') {
        value += '\r';
      } else if (e == 't') {
        value += '\t';
      } else if (e == 'x' && i + 2 < raw.size() && HexDigit(raw[i + 1]) >= 0 &&
                 HexDigit(raw[i + 2]) >= 0) {
        value += static_cast<char>(HexDigit(raw[i + 1]) * 16 + HexDigit(raw[i + 2]));
        i += 2;
      } else {
        return Error("parameter value has an invalid escape (use \\\\ \\n \\r \\t \\xHH)");
      }
    }
    if (value.size() > kMaxModelParamValueBytes) return Error("parameter value is too long");
    if (model.params.size() >= kMaxModelParams) return Error("too many parameters");
    if (!model.params.emplace(std::string(key), std::move(value)).second) {
      return Error("parameter '" + std::string(key) + "' appears twice");
    }
    return Status::Ok();
  }

  Status ParseTable(const std::vector<std::string_view>& t, Model& model) {
    uint32_t dim = 0;
    if (t.size() != 3 || !ParseNumber(t[2], dim)) return Error("expected \"table <name> <dim>\"");
    const Status valid = ValidateModelName(t[1], "table name");
    if (!valid.ok()) return Error(valid.message());
    const std::string name(t[1]);
    if (dim == 0 || dim > kMaxModelDim) {
      return Error("table '" + name + "' has dim " + std::to_string(dim) + ", outside [1, " +
                   std::to_string(kMaxModelDim) + "]");
    }
    if (model.FindTable(name) != nullptr) return Error("table '" + name + "' appears twice");
    if (model.tables.size() >= kMaxModelTables) return Error("too many tables");
    model.tables.emplace_back(name, dim);
    ModelTable& table = model.tables.back();
    std::vector<float> row(dim);
    std::string_view line;
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(const bool more, NextLine(line));
      if (!more) {
        return Truncated("more rows or \"end-table " + name + " <rows>\" (table '" + name +
                         "' has " + std::to_string(table.size()) + " rows so far)");
      }
      size_t i = 0;
      while (i < line.size() && IsBlank(line[i])) ++i;
      if (i < line.size() && line[i] >= '0' && line[i] <= '9') {
        FERRY_RETURN_IF_ERROR(ParseRow(line.substr(i), table, row));
        continue;
      }
      const std::vector<std::string_view> end = Tokens(line);
      uint64_t rows = 0;
      if (end.size() != 3 || end[0] != "end-table" || end[1] != name ||
          !ParseNumber(end[2], rows)) {
        return Error("expected a row or \"end-table " + name + " <rows>\"");
      }
      if (rows != table.size()) {
        return Error("table '" + name + "' ends claiming " + std::to_string(rows) +
                     " rows but has " + std::to_string(table.size()));
      }
      return Status::Ok();
    }
  }

  Status ParseRow(std::string_view line, ModelTable& table, std::vector<float>& row) {
    const char* p = line.data();
    const char* end = line.data() + line.size();
    uint64_t key = 0;
    auto r = std::from_chars(p, end, key);
    if (r.ec != std::errc() || (r.ptr != end && !IsBlank(*r.ptr))) {
      return Error("row key is not an unsigned 64-bit integer");
    }
    p = r.ptr;
    for (size_t d = 0; d < row.size(); ++d) {
      const char* start = p;
      while (p < end && IsBlank(*p)) ++p;
      if (p == start || p == end) {
        return Error("row " + std::to_string(key) + " has " + std::to_string(d) +
                     " values; the table has dim " + std::to_string(row.size()));
      }
      r = std::from_chars(p, end, row[d]);
      if (r.ec != std::errc() || (r.ptr != end && !IsBlank(*r.ptr))) {
        return Error("row " + std::to_string(key) + ": value " + std::to_string(d + 1) +
                     " is not a float (or is outside the float range)");
      }
      p = r.ptr;
    }
    while (p < end && IsBlank(*p)) ++p;
    if (p != end) {
      return Error("row " + std::to_string(key) + " has more than " + std::to_string(row.size()) +
                   " values");
    }
    const Status appended = table.Append(std::span<const uint64_t>(&key, 1), row);
    if (!appended.ok()) return Error(appended.message());
    return Status::Ok();
  }

  Result<Model> ParseEnd(const std::vector<std::string_view>& t, Model model) {
    uint64_t tables = 0;
    if (t.size() != 2 || !ParseNumber(t[1], tables)) return Error("expected \"end <tables>\"");
    if (tables != model.tables.size()) {
      return Error("the end line claims " + std::to_string(tables) + " tables but " +
                   std::to_string(model.tables.size()) + " were read");
    }
    std::string_view line;
    FERRY_ASSIGN_OR_RETURN(const bool more, NextLine(line));
    if (more) return Error("content after the end line");
    return model;
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t line_no_ = 0;
};

}  // namespace

std::unique_ptr<ModelEncoder> MakeTextEncoder(ByteSink* sink) {
  return std::make_unique<TextEncoder>(sink);
}

Result<Model> ParseTextModel(std::span<const uint8_t> bytes) {
  return TextParser(bytes).Run();
}

}  // namespace ferry::models::io_internal
