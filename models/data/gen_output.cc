// OutputFile: the generator's buffered plain/gzip writer.
#include <zlib.h>

#include <cerrno>

#include "models/data/gen_internal.h"

namespace ferry::models::internal {

Result<std::unique_ptr<OutputFile>> OutputFile::Open(const std::string& path, bool gzip) {
  std::unique_ptr<OutputFile> f(new OutputFile(path));
  if (gzip) {
    gzFile gz = gzopen(path.c_str(), "wb1");
    if (!gz) return IoError("create " + path, errno ? errno : ENOMEM);
    gzbuffer(gz, 256 << 10);
    f->gz_ = gz;
  } else {
    f->file_ = std::fopen(path.c_str(), "wb");
    if (!f->file_) return IoError("create " + path, errno);
  }
  f->buffer_.reserve(kFlushBytes + (64 << 10));
  return f;
}

OutputFile::~OutputFile() {
  if (file_) std::fclose(file_);
  if (gz_) gzclose(static_cast<gzFile>(gz_));
}

Status OutputFile::Flush() {
  if (buffer_.empty()) return Status::Ok();
  if (gz_) {
    const int n =
        gzwrite(static_cast<gzFile>(gz_), buffer_.data(), static_cast<unsigned>(buffer_.size()));
    if (n <= 0 || static_cast<size_t>(n) != buffer_.size()) {
      int err = 0;
      const char* msg = gzerror(static_cast<gzFile>(gz_), &err);
      return err == Z_ERRNO ? IoError("write " + path_, errno)
                            : Internal("write " + path_ + ": " + (msg ? msg : "gzwrite failed"));
    }
  } else if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
    return IoError("write " + path_, errno);
  }
  buffer_.clear();
  return Status::Ok();
}

Status OutputFile::Close() {
  FERRY_RETURN_IF_ERROR(Flush());
  if (gz_) {
    const int rc = gzclose(static_cast<gzFile>(gz_));
    gz_ = nullptr;
    if (rc != Z_OK) return IoError("close " + path_, rc == Z_ERRNO ? errno : EIO);
  }
  if (file_) {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return IoError("close " + path_, errno);
  }
  return Status::Ok();
}

}  // namespace ferry::models::internal
