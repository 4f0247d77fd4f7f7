// The MANIFEST of an export directory: the versions a model was published as, in order, each a
// full base or a delta on the version before it (docs/model-format.md, "Export directories:
// base + deltas"). Read by LoadExportDir (export_dir.h), written by ExportDirWriter
// (export_writer.h).
//
// Text, one line per version, checksummed:
//   ferry-export 1
//   v <version> <base|delta> <file> <samples> <unix_ms>
//   ...
//   end <count> <xxh3 of every byte before this line, 16 hex digits>
//
// Thread-safety: pure functions. Blocking: Read/Write do file I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

inline constexpr std::string_view kExportManifestName = "MANIFEST";
inline constexpr uint32_t kExportFormatVersion = 1;
// Parameters of base and delta files that describe the export, not the model: LoadExportDir
// removes every parameter starting with this prefix.
inline constexpr std::string_view kExportParamPrefix = "export.";
// In a delta, the keys removed from table T since the version before are the keys of the table
// named RemovedTableName(T) (dim 1, values 0 and ignored).
std::string RemovedTableName(std::string_view table);

struct ExportEntry {
  uint64_t version = 0;  // 1, 2, ...: strictly increasing in a manifest
  bool base = false;     // a full model; else a delta on the entry before it
  std::string file;      // a plain name inside the directory
  uint64_t samples = 0;  // training samples behind the model (all workers; an estimate)
  uint64_t unix_ms = 0;  // when it was published
};

struct ExportManifest {
  std::vector<ExportEntry> entries;  // oldest first; the first one is a base
};

// "base-000012.model", "delta-000013.model".
std::string ExportFileName(uint64_t version, bool base);

std::string EncodeExportManifest(const ExportManifest& m);
// kProtocol naming the line for anything but a well-formed, complete, intact manifest: a wrong
// first line, a bad field, versions out of order, a delta first, a missing or wrong end line
// (truncation) or checksum (corruption), bytes after it.
Result<ExportManifest> ParseExportManifest(std::string_view text);
// DIR/MANIFEST; kNotFound when there is none, kProtocol (prefixed with the path) when refused.
Result<ExportManifest> ReadExportManifest(const std::string& dir);
// Replaces DIR/MANIFEST atomically (a temporary file, fsync, rename, fsync of the directory).
Status WriteExportManifest(const std::string& dir, const ExportManifest& m);

}  // namespace ferry::models
