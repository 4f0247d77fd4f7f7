// FieldMap: parsing "FIRST-LAST FIELD" / "INDEX FIELD" lines and the sorted range table.
//
// Overlaps are found after sorting by FIRST: if no range starts at or before the end of the
// range sorted just before it, no two ranges overlap at all, so checking neighbours suffices.
#include "models/data/field_map.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "models/data/parse_internal.h"

namespace ferry::models {
namespace {

constexpr const char* kLineShape = "expected 'FIRST-LAST FIELD' or 'INDEX FIELD'";

struct Entry {
  uint64_t first = 0;
  uint64_t last = 0;
  uint32_t field = 0;
  uint64_t line = 0;  // 1-based, for errors
};

std::string RangeText(const Entry& e) {
  return e.first == e.last ? std::to_string(e.first)
                           : std::to_string(e.first) + "-" + std::to_string(e.last);
}

// One non-blank line (comment and '\r' already dropped) into *e; the error says why not.
Status ParseEntry(std::string_view line, Entry* e) {
  internal::Tokenizer tokens(line);
  std::string_view range, field, extra;
  if (!tokens.Next(&range) || !tokens.Next(&field) || tokens.Next(&extra)) {
    return InvalidArgument(std::string(kLineShape) + ", got " + internal::Quote(line));
  }
  const size_t dash = range.find('-');
  const std::string_view first = range.substr(0, dash);
  const std::string_view last = dash == std::string_view::npos ? first : range.substr(dash + 1);
  if (!internal::ParseU64(first, &e->first) || !internal::ParseU64(last, &e->last)) {
    return InvalidArgument("feature index range " + internal::Quote(range) +
                           " is not INDEX or FIRST-LAST (non-negative integers below 2^64)");
  }
  if (e->first > e->last) {
    return InvalidArgument("feature index range " + internal::Quote(range) +
                           " is empty (FIRST > LAST)");
  }
  uint64_t f;
  if (!internal::ParseU64(field, &f) || f >= FieldMap::kMaxFields) {
    return InvalidArgument("field " + internal::Quote(field) + " is not an integer in 0.." +
                           std::to_string(FieldMap::kMaxFields - 1));
  }
  e->field = static_cast<uint32_t>(f);
  return Status::Ok();
}

}  // namespace

Result<FieldMap> FieldMap::Load(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return IoError("open field map " + path, errno);
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return IoError("read field map " + path, err);
  return ParseNamed(text, path);
}

std::string FieldMap::Encode() const {
  std::string out;
  for (const Range& r : ranges_) {
    out += std::to_string(r.first) + "-" + std::to_string(r.last) + " " + std::to_string(r.field) +
           "\n";
  }
  return out;
}

Result<FieldMap> FieldMap::Parse(std::string_view text) {
  return ParseNamed(text, "");
}

Result<FieldMap> FieldMap::ParseNamed(std::string_view text, const std::string& path) {
  const auto where = [&](uint64_t line) {
    return path.empty() ? "field map line " + std::to_string(line) + ": "
                        : path + ":" + std::to_string(line) + ": ";
  };
  std::vector<Entry> entries;
  uint64_t number = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++number;
    line = internal::StripComment(internal::StripCr(line));
    std::string_view token;
    if (!internal::Tokenizer(line).Next(&token)) continue;  // blank or comment only
    Entry e;
    e.line = number;
    Status s = ParseEntry(line, &e);
    if (!s.ok()) return InvalidArgument(where(number) + s.message());
    entries.push_back(e);
  }
  if (entries.empty()) {
    return InvalidArgument((path.empty() ? std::string("field map") : "field map " + path) +
                           " maps no feature indices (only blank or comment lines)");
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.first < b.first; });
  FieldMap map;
  map.ranges_.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (i > 0 && e.first <= entries[i - 1].last) {
      // Name the later line of the two: the earlier one was fine when it was read.
      const Entry& a = entries[i - 1].line < e.line ? entries[i - 1] : e;
      const Entry& b = entries[i - 1].line < e.line ? e : entries[i - 1];
      return InvalidArgument(where(b.line) + "feature indices " + RangeText(b) + " overlap " +
                             RangeText(a) + " of line " + std::to_string(a.line));
    }
    map.ranges_.push_back({e.first, e.last, e.field});
    map.num_fields_ = std::max(map.num_fields_, e.field + 1);
  }
  return map;
}

}  // namespace ferry::models
