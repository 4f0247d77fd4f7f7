// Publishing a model as versions in an export directory: each Publish writes a full base or a
// delta (the rows whose weights changed or that are new since the previous version, and the keys
// that went), then the MANIFEST; LoadExportDir (export_dir.h) reads them back. Format:
// docs/model-format.md, "Export directories: base + deltas".
//
// Usage (ferry-train's worker 0, models/train/trainer_export.cc):
//   FERRY_ASSIGN_OR_RETURN(ExportDirWriter x, ExportDirWriter::Open(dir, options));
//   ... every so often:
//   FERRY_ASSIGN_OR_RETURN(ExportEntry e, x.Publish(model, samples));
//
// Atomicity: the version's file is written as "<file>.tmp", fsynced and renamed into place,
// then the manifest is replaced the same way: a reader sees the old manifest or the new one,
// and every file a manifest lists is complete. A crash leaves at most a stray ".tmp".
// Pruning: the manifest keeps the newest `keep_bases` bases and the deltas after them; the
// files of older versions are deleted after the new manifest is in place.
// What a delta holds: the writer keeps, per table, each key's XXH3-64 of its weight bytes (16
// bytes a key, in key order); a row whose hash differs is changed. A change whose hash collides
// (2^-64) is missed until the next base.
// A directory that already has a manifest (an earlier job) goes on from its newest version; the
// first version this writer publishes is a base.
//
// Thread-safety: none (one publisher per directory). Blocking: file I/O. Move-only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/io/export_manifest.h"
#include "models/io/model.h"
#include "transport/status.h"

namespace ferry::models {

struct ExportDirOptions {
  uint32_t base_every = 10;  // a base every this many versions (1: every version is a base)
  uint32_t keep_bases = 2;   // bases kept with their deltas (0: keep every version)
};

class ExportDirWriter {
 public:
  // Creates `dir` (and its parents) when missing; reads its manifest when it has one (kProtocol
  // when that is refused: the directory holds something else, or is damaged).
  static Result<ExportDirWriter> Open(const std::string& dir, const ExportDirOptions& o);

  // Publishes `model` (tables in any row order; the files are written in key order) as the next
  // version; `samples` goes into the manifest. A base when it is time for one, when nothing was
  // published yet or when the tables changed (names, dims); otherwise a delta. On error nothing
  // the manifest lists has changed and the next Publish compares with the last published version.
  Result<ExportEntry> Publish(const Model& model, uint64_t samples);

  const ExportManifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

 private:
  struct TableState {
    std::string name;
    uint32_t dim = 0;
    std::vector<std::pair<uint64_t, uint64_t>> rows;  // (key, weights hash), by key
  };
  ExportDirWriter(std::string dir, ExportDirOptions o, ExportManifest m)
      : dir_(std::move(dir)), o_(o), manifest_(std::move(m)) {}
  bool NeedsBase(const Model& model) const;
  Status WriteVersion(const Model& model, const ExportEntry& e, std::vector<TableState>* next);
  Status Prune();

  std::string dir_;
  ExportDirOptions o_;
  ExportManifest manifest_;
  std::vector<TableState> tables_;  // the last published version (empty: none by this writer)
  uint32_t since_base_ = 0;         // versions published since (and including) the last base
};

}  // namespace ferry::models
