// Snapshots: the table's contiguous buffers go to a file as they are.
//
//   file layout (little-endian; sections start on 4 KiB boundaries):
//   struct SnapshotHeader {            // offset 0, 160 bytes
//     char     magic[8];               // "FERRYAHM"
//     uint32_t version;                // 2 (1: the sorted 8-byte-bucket index, not read)
//     uint32_t header_bytes;           // sizeof(SnapshotHeader)
//     uint32_t dim, state_floats, metadata, stride;   // must match the restoring table
//     uint64_t high_water, size;       // slots handed out, live rows
//     uint64_t index_capacity, index_buckets;   // both the bucket count (HashIndex)
//     uint64_t epoch;                  // restored tables register at epoch + 1
//     uint64_t tick;
//     uint64_t rows_offset, rows_bytes, live_offset, live_bytes, index_offset, index_bytes;
//     uint64_t rows_xxh3, live_xxh3, index_xxh3;
//     uint64_t header_xxh3;            // XXH3-64 of every byte above
//   };
//   rows  [high_water * stride]   live bitmap [ceil(high_water/64) * 8]
//   index [buckets * 5]: HashIndex's buffer as it is (tags, then 32-bit slots)
//
// Save: write everything to "<path>.tmp", fsync, rename over <path>, fsync the directory: a
// crash leaves either the old snapshot or the new one, never a torn file under <path>.
// Load: pread each section straight into a fresh mapping (no staging copy), verify its
// checksum, then check the structure (index order and slots, bitmap population) so that even a
// file with valid checksums but inconsistent content is refused instead of crashing a lookup.
// The free list is not saved; it is rebuilt from the live bitmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "ps/store/array_hash_map.h"

namespace ferry::ps {
namespace {

constexpr char kMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'A', 'H', 'M'};
constexpr uint32_t kVersion = 2;
constexpr uint64_t kAlign = 4096;

struct SnapshotHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t dim, state_floats, metadata, stride;
  uint64_t high_water, size;
  uint64_t index_capacity, index_buckets;
  uint64_t epoch;
  uint64_t tick;
  uint64_t rows_offset, rows_bytes, live_offset, live_bytes, index_offset, index_bytes;
  uint64_t rows_xxh3, live_xxh3, index_xxh3;
  uint64_t header_xxh3;
};
static_assert(sizeof(SnapshotHeader) == 160);

uint64_t AlignUp(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

uint64_t HeaderChecksum(const SnapshotHeader& h) {
  return XXH3_64bits(&h, offsetof(SnapshotHeader, header_xxh3));
}

class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status WriteAll(int fd, const void* data, size_t length, uint64_t offset, const std::string& path) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (length > 0) {
    const ssize_t n = pwrite(fd, p, std::min<size_t>(length, 1u << 30), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("write snapshot " + path, errno);
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    length -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, size_t length, uint64_t offset, const std::string& path,
               const char* section) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (length > 0) {
    const ssize_t n = pread(fd, p, std::min<size_t>(length, 1u << 30), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("read snapshot " + path, errno);
    }
    if (n == 0) {
      return ProtocolError("snapshot " + path + " is truncated inside the " + section + " section");
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    length -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status Corrupt(const std::string& path, const std::string& what) {
  return ProtocolError("snapshot " + path + " is corrupt: " + what + "; refusing to restore it");
}

}  // namespace

// Befriended by ArrayHashMap: reads and writes its private buffers.
class SnapshotIo {
 public:
  static Status Save(const ArrayHashMap& m, const std::string& path);
  static Status Capture(const ArrayHashMap& m, SnapshotImage* img);
  static Status WriteImage(const SnapshotImage& img, const std::string& path);
  static Result<std::unique_ptr<ArrayHashMap>> Load(const std::string& path,
                                                    const TableOptions& options);

 private:
  // The steps of Load: the header (its checksum, version, layout against `options`, section
  // geometry against the file's size), the padding between sections, the checksummed sections
  // into `m` and `index`, then the structure the checksums cannot vouch for.
  static Result<SnapshotHeader> ReadHeader(int fd, const std::string& path,
                                           const TableOptions& options);
  static Status CheckPadding(int fd, const SnapshotHeader& h, const std::string& path);
  static Status ReadSections(int fd, const SnapshotHeader& h, const std::string& path,
                             ArrayHashMap& m, MappedBuffer& index);
  static Status CheckStructure(const SnapshotHeader& h, const std::string& path, ArrayHashMap& m,
                               MappedBuffer index);
  static SnapshotHeader MakeHeader(const ArrayHashMap& m);
  // Checksums the sections and writes the file (tmp, fsync, rename, fsync the directory).
  static Status Write(SnapshotHeader h, const uint8_t* rows, const uint8_t* live,
                      const uint8_t* index, const std::string& path);
};

SnapshotHeader SnapshotIo::MakeHeader(const ArrayHashMap& m) {
  SnapshotHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = sizeof h;
  h.dim = m.layout_.dim;
  h.state_floats = m.layout_.state_floats;
  h.metadata = m.layout_.metadata ? 1 : 0;
  h.stride = m.layout_.stride;
  h.high_water = m.high_water_;
  h.size = m.size_;
  h.index_capacity = m.index_.num_buckets();
  h.index_buckets = m.index_.num_buckets();
  h.epoch = m.epoch_;
  h.tick = m.tick_;
  h.rows_offset = kAlign;
  h.rows_bytes = static_cast<uint64_t>(m.high_water_) * m.layout_.stride;
  h.live_offset = AlignUp(h.rows_offset + h.rows_bytes);
  h.live_bytes = (h.high_water + 63) / 64 * 8;
  h.index_offset = AlignUp(h.live_offset + h.live_bytes);
  h.index_bytes = m.index_.bytes();
  return h;
}

Status SnapshotIo::Write(SnapshotHeader h, const uint8_t* rows, const uint8_t* live,
                         const uint8_t* index, const std::string& path) {
  h.rows_xxh3 = XXH3_64bits(rows, h.rows_bytes);
  h.live_xxh3 = XXH3_64bits(live, h.live_bytes);
  h.index_xxh3 = XXH3_64bits(index, h.index_bytes);
  h.header_xxh3 = HeaderChecksum(h);

  const std::string tmp = path + ".tmp";
  ScopedFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return IoError("create snapshot " + tmp, errno);
  Status s = WriteAll(fd.get(), &h, sizeof h, 0, tmp);
  if (s.ok()) s = WriteAll(fd.get(), rows, h.rows_bytes, h.rows_offset, tmp);
  if (s.ok()) s = WriteAll(fd.get(), live, h.live_bytes, h.live_offset, tmp);
  if (s.ok()) s = WriteAll(fd.get(), index, h.index_bytes, h.index_offset, tmp);
  if (s.ok() && ftruncate(fd.get(), static_cast<off_t>(h.index_offset + h.index_bytes)) != 0) {
    s = IoError("truncate snapshot " + tmp, errno);
  }
  if (s.ok() && fsync(fd.get()) != 0) s = IoError("fsync snapshot " + tmp, errno);
  if (s.ok() && close(fd.release()) != 0) s = IoError("close snapshot " + tmp, errno);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = IoError("rename " + tmp + " to " + path, errno);
  }
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  ScopedFd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) return IoError("open directory " + dir, errno);
  if (fsync(dfd.get()) != 0) return IoError("fsync directory " + dir, errno);
  return Status::Ok();
}

Status SnapshotIo::Save(const ArrayHashMap& m, const std::string& path) {
  return Write(MakeHeader(m), m.rows_.data(), reinterpret_cast<const uint8_t*>(m.live_.data()),
               m.index_.data(), path);
}

Status SnapshotIo::Capture(const ArrayHashMap& m, SnapshotImage* img) {
  const SnapshotHeader h = MakeHeader(m);
  const size_t total = h.rows_bytes + h.live_bytes + h.index_bytes;
  if (img->buffer_.data() == nullptr || total > img->buffer_.size()) {
    // Room to grow (the table will be larger next time), pages populated in one system call:
    // faulting them in one by one during the copy took longer than the copy itself. (A kernel
    // without MADV_POPULATE_WRITE, before 5.14, faults them during the copy instead.)
    auto buffer = MappedBuffer::Create(GrowthMode::kRemap, total + total / 4);
    if (!buffer.ok())
      return buffer.status().Annotate("snapshot copy of " + std::to_string(total) + " bytes");
    img->buffer_ = std::move(buffer).value();
#ifdef MADV_POPULATE_WRITE
    (void)madvise(img->buffer_.data(), img->buffer_.size(), MADV_POPULATE_WRITE);
#endif
  }
  img->rows_ = h.rows_bytes;
  img->live_ = h.live_bytes;
  img->index_ = h.index_bytes;
  uint8_t* d = img->buffer_.data();
  if (img->rows_ > 0) std::memcpy(d, m.rows_.data(), img->rows_);
  if (img->live_ > 0) std::memcpy(d + img->rows_, m.live_.data(), img->live_);
  if (img->index_ > 0) std::memcpy(d + img->rows_ + img->live_, m.index_.data(), img->index_);
  static_assert(sizeof h == std::tuple_size_v<decltype(img->header_)>);
  std::memcpy(img->header_.data(), &h, sizeof h);
  return Status::Ok();
}

Status SnapshotIo::WriteImage(const SnapshotImage& img, const std::string& path) {
  if (img.buffer_.data() == nullptr) return InvalidArgument("empty snapshot image");
  SnapshotHeader h;
  std::memcpy(&h, img.header_.data(), sizeof h);
  const uint8_t* d = img.buffer_.data();
  return Write(h, d, d + img.rows_, d + img.rows_ + img.live_, path);
}

Result<SnapshotHeader> SnapshotIo::ReadHeader(int fd, const std::string& path,
                                              const TableOptions& options) {
  struct stat file {};
  if (fstat(fd, &file) != 0) return IoError("stat snapshot " + path, errno);
  const uint64_t file_size = static_cast<uint64_t>(file.st_size);
  if (file_size < sizeof(SnapshotHeader)) {
    return ProtocolError("snapshot " + path + " is truncated: " + std::to_string(file_size) +
                         " bytes, shorter than its header");
  }
  SnapshotHeader h{};
  FERRY_RETURN_IF_ERROR(ReadAll(fd, &h, sizeof h, 0, path, "header"));
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    return ProtocolError(path + " is not an ArrayHashMap snapshot (bad magic)");
  }
  if (HeaderChecksum(h) != h.header_xxh3) return Corrupt(path, "header checksum mismatch");
  if (h.version != kVersion || h.header_bytes != sizeof h) {
    return ProtocolError("snapshot " + path + " has unsupported version " +
                         std::to_string(h.version));
  }
  const RowLayout want = RowLayout::For(options.dim, options.state_floats, options.metadata);
  if (h.dim != want.dim || h.state_floats != want.state_floats ||
      h.metadata != (want.metadata ? 1u : 0u) || h.stride != want.stride) {
    return InvalidArgument("snapshot " + path + " has row layout dim=" + std::to_string(h.dim) +
                           " state_floats=" + std::to_string(h.state_floats) + " metadata=" +
                           std::to_string(h.metadata) + ", which differs from the table options");
  }
  // Geometry: every size follows from a few counts; anything else is corruption.
  if (h.high_water > 0xfffffffeull || h.size > h.high_water || h.rows_offset != kAlign ||
      h.rows_bytes != h.high_water * h.stride || h.live_bytes != (h.high_water + 63) / 64 * 8 ||
      h.live_offset != AlignUp(h.rows_offset + h.rows_bytes) ||
      h.index_offset != AlignUp(h.live_offset + h.live_bytes) ||
      h.index_capacity != h.index_buckets ||
      h.index_bytes != h.index_buckets * HashIndex::kBytesPerBucket ||
      h.index_buckets > (1ull << 32)) {
    return Corrupt(path, "inconsistent section geometry");
  }
  if (file_size < h.index_offset + h.index_bytes) {
    return ProtocolError("snapshot " + path + " is truncated: " + std::to_string(file_size) +
                         " bytes, its header describes " +
                         std::to_string(h.index_offset + h.index_bytes));
  }
  if (file_size > h.index_offset + h.index_bytes) return Corrupt(path, "trailing bytes");
  return h;
}

Status SnapshotIo::CheckPadding(int fd, const SnapshotHeader& h, const std::string& path) {
  // Padding between sections is not covered by a section checksum: it must read as zero, so
  // that every byte of the file is checked.
  std::string pad;
  const uint64_t gaps[3][2] = {{sizeof h, h.rows_offset},
                               {h.rows_offset + h.rows_bytes, h.live_offset},
                               {h.live_offset + h.live_bytes, h.index_offset}};
  for (const auto& gap : gaps) {
    pad.assign(gap[1] - gap[0], '\0');
    FERRY_RETURN_IF_ERROR(ReadAll(fd, pad.data(), pad.size(), gap[0], path, "padding"));
    if (pad.find_first_not_of('\0') != std::string::npos) {
      return Corrupt(path, "non-zero padding between sections");
    }
  }
  return Status::Ok();
}

Status SnapshotIo::ReadSections(int fd, const SnapshotHeader& h, const std::string& path,
                                ArrayHashMap& m, MappedBuffer& index) {
  FERRY_RETURN_IF_ERROR(ReadAll(fd, m.rows_.data(), h.rows_bytes, h.rows_offset, path, "rows"));
  if (XXH3_64bits(m.rows_.data(), h.rows_bytes) != h.rows_xxh3) {
    return Corrupt(path, "rows checksum mismatch");
  }
  FERRY_RETURN_IF_ERROR(ReadAll(fd, m.live_.data(), h.live_bytes, h.live_offset, path, "live"));
  if (XXH3_64bits(m.live_.data(), h.live_bytes) != h.live_xxh3) {
    return Corrupt(path, "live-bitmap checksum mismatch");
  }
  FERRY_RETURN_IF_ERROR(ReadAll(fd, index.data(), h.index_bytes, h.index_offset, path, "index"));
  if (XXH3_64bits(index.data(), h.index_bytes) != h.index_xxh3) {
    return Corrupt(path, "index checksum mismatch");
  }
  return Status::Ok();
}

Status SnapshotIo::CheckStructure(const SnapshotHeader& h, const std::string& path, ArrayHashMap& m,
                                  MappedBuffer index) {
  // Live bitmap: exactly `size` bits, none at or past high_water.
  const uint64_t* live = reinterpret_cast<const uint64_t*>(m.live_.data());
  size_t population = 0;
  for (size_t w = 0; w < h.live_bytes / 8; ++w)
    population += static_cast<size_t>(__builtin_popcountll(live[w]));
  if (h.high_water % 64 != 0 && h.live_bytes > 0 &&
      (live[h.live_bytes / 8 - 1] >> (h.high_water % 64)) != 0) {
    return Corrupt(path, "live bits past the high-water slot");
  }
  if (population != h.size) return Corrupt(path, "live bitmap disagrees with the row count");
  Status adopt =
      m.index_.Adopt(h.index_buckets, std::move(index), static_cast<uint32_t>(h.high_water));
  if (!adopt.ok()) return Corrupt(path, adopt.message());
  if (m.index_.size() != h.size) return Corrupt(path, "index entry count disagrees with rows");
  const int8_t* tags = m.index_.ctrl();
  const uint32_t* slots = m.index_.slots();
  for (size_t i = 0; i < h.index_buckets; ++i) {
    if (tags[i] >= 0 && !m.IsLive(slots[i])) return Corrupt(path, "index names a dead row");
  }
  // Every live row must be found by its key at its own slot. The checks above leave room for an
  // entry filed under a tag or home group that is not its row key's, two entries naming one slot,
  // or two live rows with one key: lookups would then miss rows and Erase/Insert would corrupt the
  // table.
  for (uint32_t slot = 0; slot < h.high_water; ++slot) {
    if (m.IsLive(slot) && m.FindSlot(ArrayHashMap::RowKey(m.Row(slot))) != slot) {
      return Corrupt(path, "row " + std::to_string(slot) + " is not reachable through the index");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<ArrayHashMap>> SnapshotIo::Load(const std::string& path,
                                                       const TableOptions& options) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IoError("open snapshot " + path, errno);
  FERRY_ASSIGN_OR_RETURN(const SnapshotHeader h, ReadHeader(fd.get(), path, options));
  FERRY_RETURN_IF_ERROR(CheckPadding(fd.get(), h, path));

  TableOptions opts = options;
  opts.initial_rows = std::max<size_t>(opts.initial_rows, h.high_water);
  if (opts.growth == GrowthMode::kReserve)
    opts.reserve_rows = std::max(opts.reserve_rows, opts.initial_rows);
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ArrayHashMap> m, ArrayHashMap::Create(opts));
  MappedBuffer index;
  FERRY_ASSIGN_OR_RETURN(
      index, MappedBuffer::Create(GrowthMode::kRemap, h.index_bytes, 0, options.huge_pages));
  FERRY_RETURN_IF_ERROR(ReadSections(fd.get(), h, path, *m, index));
  FERRY_RETURN_IF_ERROR(CheckStructure(h, path, *m, std::move(index)));

  m->high_water_ = static_cast<uint32_t>(h.high_water);
  m->size_ = h.size;
  m->epoch_ = h.epoch;
  m->tick_ = static_cast<uint32_t>(h.tick);
  // Rebuild the free list from the holes, lowest slot on top.
  for (uint32_t slot = m->high_water_; slot-- > 0;) {
    if (!m->IsLive(slot)) m->FreeSlot(slot);
  }
  return m;
}

Status ArrayHashMap::SaveSnapshot(const std::string& path) const {
  return SnapshotIo::Save(*this, path);
}

Status ArrayHashMap::CaptureSnapshot(SnapshotImage* image) const {
  return SnapshotIo::Capture(*this, image);
}

Status SnapshotImage::WriteTo(const std::string& path) const {
  return SnapshotIo::WriteImage(*this, path);
}

Result<std::unique_ptr<ArrayHashMap>> ArrayHashMap::LoadSnapshot(const std::string& path,
                                                                 const TableOptions& options) {
  return SnapshotIo::Load(path, options);
}

}  // namespace ferry::ps
