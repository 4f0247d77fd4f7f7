// For perf/serving/run.sh: reads DIR/MANIFEST and writes OUT/MANIFEST.<k> for k = 1..n, the
// manifest of the first k versions (checksummed as the writer does), so that a shell loop can
// publish prepared versions one at a time: copy the version's file, then rename MANIFEST.<k> onto
// the served directory's MANIFEST. Prints the number of versions.
//
//   export_prefixes DIR OUT
#include <cstdio>
#include <fstream>
#include <string>

#include "models/io/export_manifest.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: export_prefixes DIR OUT\n");
    return 2;
  }
  auto all = ferry::models::ReadExportManifest(argv[1]);
  if (!all.ok()) {
    std::fprintf(stderr, "export_prefixes: %s\n", all.status().ToString().c_str());
    return 1;
  }
  ferry::models::ExportManifest prefix;
  for (const ferry::models::ExportEntry& e : all->entries) {
    prefix.entries.push_back(e);
    const std::string path =
        std::string(argv[2]) + "/MANIFEST." + std::to_string(prefix.entries.size());
    std::ofstream out(path, std::ios::binary);
    out << ferry::models::EncodeExportManifest(prefix);
    if (!out.good()) {
      std::fprintf(stderr, "export_prefixes: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("%zu\n", prefix.entries.size());
  return 0;
}
