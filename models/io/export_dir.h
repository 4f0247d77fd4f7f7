// Loading an export directory: the newest full base and the deltas after it, applied in order,
// into the Model a full export taken at the same moment would load as (same kind, parameters,
// tables, keys in increasing order, float bits). The format: docs/model-format.md, "Export
// directories: base + deltas"; the manifest: export_manifest.h; the writer: export_writer.h.
//
// Usage (ferry-predict DIR, a server that reloads the newest version):
//   uint64_t version = 0;
//   FERRY_ASSIGN_OR_RETURN(Model m, LoadExportDir(dir, &version));
//
// Every file is hostile until checked: a manifest or a model file that is truncated or corrupt,
// a delta that does not follow the version before it (its export.previous), names a table the
// base lacks or with another dim, removes a key that is absent or both changes and removes one,
// is refused with kProtocol naming the file; nothing crashes.
// The writer prunes old versions while a reader may be reading: a listed file that has vanished
// makes LoadExportDir read the manifest again, once.
//
// Thread-safety: pure functions. Blocking: reads the files.
#pragma once

#include <cstdint>
#include <string>

#include "models/io/export_manifest.h"
#include "models/io/model.h"
#include "transport/status.h"

namespace ferry::models {

// The model of the newest version <= up_to listed in DIR/MANIFEST (its newest base at or before
// it, then every delta up to it); *version (when not null) gets the version loaded. kNotFound
// when DIR has no manifest or no version <= up_to.
Result<Model> LoadExportDir(const std::string& dir, uint64_t* version = nullptr,
                            uint64_t up_to = UINT64_MAX);

// Applies `delta` (a delta file's model) to `model`, which holds version `previous`: its rows
// replace or join the model's, its removed keys go, its parameters (without the export.* ones)
// become the model's. Tables end up in increasing key order. On error `model` is unchanged.
Status ApplyExportDelta(Model* model, const Model& delta, uint64_t previous);

// The model's parameters without the export.* ones (what a full export carries).
ModelParams WithoutExportParams(const ModelParams& params);

}  // namespace ferry::models
