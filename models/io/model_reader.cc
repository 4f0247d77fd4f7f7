// Format detection and file loading in front of the binary and text parsers.
#include "models/io/model_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "models/io/codec.h"

namespace ferry::models {
namespace {

// Closes the descriptor and unmaps the file on every return path.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
  }

  Status Open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      if (errno == ENOENT) return NotFound("model file " + path + " does not exist");
      return IoError("open model file " + path, errno);
    }
    struct stat st;
    if (::fstat(fd_, &st) != 0) return IoError("stat model file " + path, errno);
    if (!S_ISREG(st.st_mode)) return InvalidArgument("model file " + path + " is not a file");
    size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) return Status::Ok();
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) return IoError("map model file " + path, errno);
    data_ = p;
    size_ = size;
    return Status::Ok();
  }

  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(data_), data_ == nullptr ? 0 : size_};
  }

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
};

bool StartsWith(std::span<const uint8_t> bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() &&
         std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

}  // namespace

Result<ModelFormat> DetectModelFormat(std::span<const uint8_t> bytes) {
  const std::string_view magic(io_internal::kBinaryMagic, sizeof(io_internal::kBinaryMagic));
  // A prefix of the binary magic is a truncated binary model: let its parser say so.
  const size_t n = std::min(bytes.size(), magic.size());
  if (n > 0 && StartsWith(bytes, magic.substr(0, n))) return ModelFormat::kBinary;
  if (StartsWith(bytes, io_internal::kTextMagic)) return ModelFormat::kText;
  if (bytes.empty()) return ProtocolError("model file is empty");
  return ProtocolError(
      "not a Ferry model: the file starts with neither \"FERRYMDL\" (binary) nor "
      "\"ferry-model\" (text)");
}

Result<Model> ParseModel(std::span<const uint8_t> bytes) {
  FERRY_ASSIGN_OR_RETURN(const ModelFormat format, DetectModelFormat(bytes));
  return format == ModelFormat::kBinary ? io_internal::ParseBinaryModel(bytes)
                                        : io_internal::ParseTextModel(bytes);
}

Result<Model> ParseModel(std::string_view bytes) {
  return ParseModel(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

Result<Model> ReadModelFile(const std::string& path) {
  MappedFile file;
  FERRY_RETURN_IF_ERROR(file.Open(path));
  Result<Model> model = ParseModel(file.bytes());
  if (!model.ok()) return model.status().Annotate(path);
  return model;
}

}  // namespace ferry::models
