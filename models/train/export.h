// Model export: the servers' shards (a checkpoint, ps/job/checkpoint.h) to a model file
// (models/io, docs/model-format.md) or to a Model in memory (for an export directory,
// models/io/export_writer.h). Each table's rows become (key, weights): the optimizer
// state stays behind.
//
// Blocking: reads the checkpoint's shard files (and writes the model file at `path`) before
// returning. Memory: one table's rows at a time for the file; the whole model for CheckpointModel.
// Borrows its arguments for the call; any thread.
#pragma once

#include <string>

#include "models/io/model_writer.h"
#include "models/train/model_def.h"
#include "ps/job/job.h"

namespace ferry::models {

Status ExportCheckpoint(const std::string& dir, const ps::JobSpec& job, const ModelDef& def,
                        const ModelParams& params, const std::string& path, ModelFormat format);
// The same model in memory: tables in the job's order, rows in key order.
Result<Model> CheckpointModel(const std::string& dir, const ps::JobSpec& job, const ModelDef& def,
                              const ModelParams& params);

}  // namespace ferry::models
