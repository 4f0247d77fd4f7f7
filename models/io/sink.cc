// Byte sinks for the model writer: a string, or a file written as "<path>.tmp" and renamed.
//
// Why a temporary file: the trainer exports while ferry-predict may be loading the previous
// model from the same path. write tmp -> fsync -> rename -> fsync(dir) means a reader sees the
// old model or the new one, and a crash mid-export leaves the old model intact.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "models/io/codec.h"

namespace ferry::models::io_internal {
namespace {

constexpr size_t kFileBufferBytes = 1 << 20;

class StringSink final : public ByteSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  Status Write(const void* data, size_t size) override {
    out_->append(static_cast<const char*>(data), size);
    return Status::Ok();
  }
  Status Commit() override { return Status::Ok(); }

 private:
  std::string* out_;
};

class FileSink final : public ByteSink {
 public:
  FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)), tmp_(path_ + ".tmp") {
    buffer_.reserve(kFileBufferBytes);
  }
  ~FileSink() override {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  Status Write(const void* data, size_t size) override {
    const char* p = static_cast<const char*>(data);
    if (buffer_.size() + size > kFileBufferBytes) {
      FERRY_RETURN_IF_ERROR(Flush());
      if (size >= kFileBufferBytes) return WriteAll(p, size);  // a huge row: no staging copy
    }
    buffer_.insert(buffer_.end(), p, p + size);
    return Status::Ok();
  }

  Status Commit() override {
    FERRY_RETURN_IF_ERROR(Flush());
    if (::fsync(fd_) != 0) return IoError("fsync model file " + tmp_, errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return IoError("close model file " + tmp_, errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return IoError("rename " + tmp_ + " to " + path_, errno);
    }
    committed_ = true;
    // Make the rename itself durable; failing to open the directory is not fatal.
    const size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return Status::Ok();
  }

 private:
  Status Flush() {
    FERRY_RETURN_IF_ERROR(WriteAll(buffer_.data(), buffer_.size()));
    buffer_.clear();
    return Status::Ok();
  }

  Status WriteAll(const char* p, size_t size) {
    if (fd_ < 0) return Internal("model file " + tmp_ + " written after commit");
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return IoError("write model file " + tmp_, errno);
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  int fd_;
  std::string path_;
  std::string tmp_;
  std::vector<char> buffer_;
  bool committed_ = false;
};

}  // namespace

Result<std::unique_ptr<ByteSink>> OpenFileSink(const std::string& path) {
  if (path.empty()) return InvalidArgument("model file path is empty");
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("create model file " + tmp, errno);
  return std::unique_ptr<ByteSink>(std::make_unique<FileSink>(fd, path));
}

std::unique_ptr<ByteSink> MakeStringSink(std::string* out) {
  return std::make_unique<StringSink>(out);
}

}  // namespace ferry::models::io_internal
