// Helpers for the models/data tests: temporary files (plain and gzip) and draining a Reader.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/data/batch.h"
#include "models/data/reader.h"

namespace ferry::models::testing {

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ferry-data-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (p) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& content) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
  ASSERT_EQ(std::fclose(f), 0);
}

// Writes `content` as one gzip member (append = true adds another member to the file).
inline void WriteGzip(const std::string& path, const std::string& content, bool append = false) {
  gzFile gz = gzopen(path.c_str(), append ? "ab" : "wb");
  ASSERT_NE(gz, nullptr) << path;
  if (!content.empty()) {
    ASSERT_EQ(gzwrite(gz, content.data(), static_cast<unsigned>(content.size())),
              static_cast<int>(content.size()));
  }
  ASSERT_EQ(gzclose(gz), Z_OK);
}

inline std::string ReadFile(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// Everything a reader yields, in `step`-sample calls of Next. Fails the test on an error.
inline Batch ReadAll(Reader* reader, size_t step = 7) {
  Batch all;
  Batch batch;
  while (true) {
    batch.Clear();
    Result<size_t> n = reader->Next(step, &batch);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok() || *n == 0) break;
    EXPECT_EQ(*n, batch.size());
    EXPECT_TRUE(batch.Validate().ok());
    EXPECT_TRUE(all.Append(batch, 0, batch.size()).ok());
  }
  return all;
}

inline Result<Batch> OpenAndReadAll(const ReaderOptions& options, size_t step = 7) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Reader> r, Reader::Open(options));
  return ReadAll(r.get(), step);
}

// Equality of two batches, member by member (gtest prints the first difference).
inline void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.fields, b.fields);
}

// Collects on_malformed messages.
struct Messages {
  std::vector<std::string> lines;
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& m) { lines.push_back(m); };
  }
};

}  // namespace ferry::models::testing
