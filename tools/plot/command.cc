#include "tools/plot/command.h"

#include <cerrno>
#include <cstdio>
#include <utility>

#include "tools/plot/plot.h"

namespace ferry::plot {

Status CheckPlotCommand(const PlotCommand& cmd) {
  if (cmd.out.empty()) return InvalidArgument("-o OUT.svg is required");
  if (cmd.spec_path.empty() == cmd.runs.empty()) {
    return InvalidArgument("give either --spec SPEC.json or ferry-lat/ferry-bw --json files");
  }
  if (!cmd.spec_path.empty() && (!cmd.labels.empty() || cmd.metric != "auto")) {
    return InvalidArgument("--label and --metric apply to result files, not to --spec");
  }
  if (!cmd.labels.empty() && cmd.labels.size() != cmd.runs.size()) {
    return InvalidArgument(std::to_string(cmd.labels.size()) + " --label for " +
                           std::to_string(cmd.runs.size()) + " result files; give one per file");
  }
  return ParseMetric(cmd.metric).status();
}

Status RunPlotCommand(const PlotCommand& cmd) {
  FERRY_RETURN_IF_ERROR(CheckPlotCommand(cmd));
  PlotSpec spec;
  if (!cmd.spec_path.empty()) {
    FERRY_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(cmd.spec_path));
    FERRY_ASSIGN_OR_RETURN(spec, SpecFromJson(text, cmd.spec_path));
  } else {
    std::vector<RunJson> runs;
    for (size_t i = 0; i < cmd.runs.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(cmd.runs[i]));
      runs.push_back({cmd.runs[i], cmd.labels.empty() ? "" : cmd.labels[i], std::move(text)});
    }
    FERRY_ASSIGN_OR_RETURN(const Metric metric, ParseMetric(cmd.metric));
    FERRY_ASSIGN_OR_RETURN(spec, SpecFromRuns(runs, metric));
  }
  if (!cmd.title.empty()) spec.title = cmd.title;
  return WriteSvg(spec, cmd.out);
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return IoError("cannot open " + path, errno);
  constexpr size_t kLimit = size_t{256} << 20;
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kLimit) {
    text.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return IoError("cannot read " + path, err);
  if (text.size() > kLimit) return InvalidArgument(path + " is larger than 256 MiB");
  return text;
}

}  // namespace ferry::plot
