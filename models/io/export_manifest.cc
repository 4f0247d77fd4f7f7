// The export directory's MANIFEST (export_manifest.h): a line format checksummed as a whole, so
// that a manifest cut anywhere or changed in any byte is refused rather than half-read.
#include "models/io/export_manifest.h"

#include <xxhash.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <vector>

#include "models/io/codec.h"

namespace ferry::models {
namespace {

constexpr std::string_view kMagic = "ferry-export";
constexpr size_t kMaxManifestBytes = 64u << 20;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    const size_t j = line.find(' ', i);
    const size_t end = j == std::string_view::npos ? line.size() : j;
    out.push_back(line.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

bool ParseU64(std::string_view s, uint64_t* v, int base = 10) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A file name inside the directory: no separator, not "." or "..", printable.
bool PlainName(std::string_view s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 255) return false;
  for (char c : s) {
    if (c == '/' || c < '!' || c > '~') return false;
  }
  return true;
}

}  // namespace

std::string RemovedTableName(std::string_view table) {
  return "removed:" + std::string(table);
}

std::string ExportFileName(uint64_t version, bool base) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%06llu.model", base ? "base" : "delta",
                static_cast<unsigned long long>(version));
  return buf;
}

std::string EncodeExportManifest(const ExportManifest& m) {
  std::string out = std::string(kMagic) + " " + std::to_string(kExportFormatVersion) + "\n";
  for (const ExportEntry& e : m.entries) {
    out += "v " + std::to_string(e.version) + (e.base ? " base " : " delta ") + e.file + " " +
           std::to_string(e.samples) + " " + std::to_string(e.unix_ms) + "\n";
  }
  const uint64_t sum = XXH3_64bits(out.data(), out.size());
  out += "end " + std::to_string(m.entries.size()) + " " + Hex16(sum) + "\n";
  return out;
}

Result<ExportManifest> ParseExportManifest(std::string_view text) {
  ExportManifest m;
  size_t at = 0, line_no = 0;
  bool ended = false;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) {
      return ProtocolError("export manifest is truncated: line " + std::to_string(line_no + 1) +
                           " has no end of line");
    }
    const std::string_view line = text.substr(at, nl - at);
    const std::string where = "export manifest line " + std::to_string(++line_no) + ": ";
    const std::vector<std::string_view> f = Fields(line);
    if (ended) return ProtocolError(where + "bytes after the end line");
    if (line_no == 1) {
      uint64_t version = 0;
      if (f.size() != 2 || f[0] != kMagic || !ParseU64(f[1], &version)) {
        return ProtocolError("not a Ferry export manifest: the first line is not \"" +
                             std::string(kMagic) + " <version>\"");
      }
      if (version != kExportFormatVersion) {
        return ProtocolError("export manifest version " + std::to_string(version) +
                             " is not supported; this build reads version " +
                             std::to_string(kExportFormatVersion));
      }
    } else if (!f.empty() && f[0] == "v") {
      ExportEntry e;
      if (f.size() != 6 || !ParseU64(f[1], &e.version) || (f[2] != "base" && f[2] != "delta") ||
          !PlainName(f[3]) || !ParseU64(f[4], &e.samples) || !ParseU64(f[5], &e.unix_ms)) {
        return ProtocolError(where + "expected \"v <version> <base|delta> <file> <samples> " +
                             "<unix_ms>\", got \"" + std::string(line.substr(0, 200)) + "\"");
      }
      e.base = f[2] == "base";
      e.file = std::string(f[3]);
      if (!m.entries.empty() && e.version <= m.entries.back().version) {
        return ProtocolError(where + "version " + std::to_string(e.version) +
                             " does not follow version " +
                             std::to_string(m.entries.back().version));
      }
      if (m.entries.empty() && !e.base) {
        return ProtocolError(where + "the first version is a delta; it needs a base before it");
      }
      m.entries.push_back(std::move(e));
    } else if (!f.empty() && f[0] == "end") {
      uint64_t count = 0, sum = 0;
      if (f.size() != 3 || !ParseU64(f[1], &count) || f[2].size() != 16 ||
          !ParseU64(f[2], &sum, 16)) {
        return ProtocolError(where + "expected \"end <count> <xxh3>\"");
      }
      if (count != m.entries.size()) {
        return ProtocolError(where + "the end line counts " + std::to_string(count) +
                             " versions, the manifest lists " + std::to_string(m.entries.size()));
      }
      if (XXH3_64bits(text.data(), at) != sum) {
        return ProtocolError("export manifest is corrupt: checksum mismatch at line " +
                             std::to_string(line_no));
      }
      ended = true;
    } else {
      return ProtocolError(where + "unexpected \"" + std::string(line.substr(0, 200)) + "\"");
    }
    at = nl + 1;
  }
  if (line_no == 0) return ProtocolError("export manifest is empty");
  if (!ended) return ProtocolError("export manifest is truncated: no end line");
  return m;
}

Result<ExportManifest> ReadExportManifest(const std::string& dir) {
  const std::string path = dir + "/" + std::string(kExportManifestName);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) return NotFound(path + " does not exist: not an export directory");
    return IoError("open " + path, errno);
  }
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxManifestBytes) {
    text.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return IoError("read " + path, EIO);
  if (text.size() > kMaxManifestBytes) return ProtocolError(path + ": larger than 64 MiB");
  auto m = ParseExportManifest(text);
  if (!m.ok()) return m.status().Annotate(path);
  return m;
}

Status WriteExportManifest(const std::string& dir, const ExportManifest& m) {
  const std::string text = EncodeExportManifest(m);
  FERRY_ASSIGN_OR_RETURN(auto sink,
                         io_internal::OpenFileSink(dir + "/" + std::string(kExportManifestName)));
  FERRY_RETURN_IF_ERROR(sink->Write(text.data(), text.size()));
  return sink->Commit();
}

}  // namespace ferry::models
