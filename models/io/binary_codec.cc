// Binary model format: encoder and parser. Byte-level specification: docs/model-format.md.
//
//   struct Preamble {              // offset 0, 16 bytes
//     char     magic[8];           // "FERRYMDL"
//     uint32_t version;            // 1
//     uint32_t flags;              // 0
//   };
//   struct Record {                // repeated: HEAD (TABL ROWS* TEND)* FEND, then end of file
//     uint32_t tag;                // four ASCII characters, e.g. 'H','E','A','D'
//     uint32_t payload_bytes;
//     uint8_t  payload[payload_bytes];
//     uint64_t xxh3;               // XXH3-64 of tag, payload_bytes and payload
//   };
//   FEND's payload carries XXH3-64 of every byte before it, so a record that is dropped,
//   duplicated or reordered (each still self-consistent) is caught as well.
//
// The parser trusts nothing: every length is checked against the bytes that remain before it is
// used, every record's checksum is verified before its payload is interpreted, and allocations
// are bounded by the input size (rows are appended as their blocks arrive).
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/io/codec.h"

namespace ferry::models::io_internal {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the binary model format is little-endian; this build assumes a little-endian host");

constexpr uint32_t Tag(const char (&s)[5]) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[0])) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[3])) << 24;
}
constexpr uint32_t kTagHead = Tag("HEAD");
constexpr uint32_t kTagTable = Tag("TABL");
constexpr uint32_t kTagRows = Tag("ROWS");
constexpr uint32_t kTagTableEnd = Tag("TEND");
constexpr uint32_t kTagEnd = Tag("FEND");
constexpr size_t kRecordHeaderBytes = 8;
constexpr size_t kChecksumBytes = 8;
// Target payload of one ROWS record; a row larger than this goes alone.
constexpr size_t kBlockBytes = 1 << 20;
constexpr size_t kMaxKindBytes = 64;

// ---------------------------------------------------------------------------------------------
// Encoder

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &v, 4);
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}
void PutBytes(std::vector<uint8_t>& out, const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + size);
}
void PutString(std::vector<uint8_t>& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  PutBytes(out, s.data(), s.size());
}

struct XxhStateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhStateDeleter>;

class BinaryEncoder final : public ModelEncoder {
 public:
  explicit BinaryEncoder(ByteSink* sink) : sink_(sink), file_hash_(XXH3_createState()) {
    XXH3_64bits_reset(file_hash_.get());
  }

  Status Begin(ModelKind kind, const ModelParams& params) override {
    std::vector<uint8_t> preamble;
    PutBytes(preamble, kBinaryMagic, sizeof(kBinaryMagic));
    PutU32(preamble, kBinaryVersion);
    PutU32(preamble, 0);  // flags
    FERRY_RETURN_IF_ERROR(Emit(preamble));
    StartRecord(kTagHead);
    PutString(record_, ModelKindName(kind));
    PutU32(record_, static_cast<uint32_t>(params.size()));
    for (const auto& [key, value] : params) {  // std::map: sorted, unique keys
      PutString(record_, key);
      PutString(record_, value);
    }
    return EndRecord();
  }

  Status BeginTable(std::string_view name, uint32_t dim) override {
    dim_ = dim;
    table_rows_ = 0;
    StartRecord(kTagTable);
    PutString(record_, name);
    PutU32(record_, dim);
    return EndRecord();
  }

  Status AppendRows(std::span<const uint64_t> keys, std::span<const float> values) override {
    const size_t row_bytes = 8 + size_t{4} * dim_;
    for (size_t i = 0; i < keys.size(); ++i) {
      pending_keys_.push_back(keys[i]);
      pending_values_.insert(pending_values_.end(), values.begin() + i * dim_,
                             values.begin() + (i + 1) * dim_);
      if ((pending_keys_.size() + 1) * row_bytes > kBlockBytes) FERRY_RETURN_IF_ERROR(FlushRows());
    }
    return Status::Ok();
  }

  Status EndTable() override {
    FERRY_RETURN_IF_ERROR(FlushRows());
    ++tables_;
    StartRecord(kTagTableEnd);
    PutU64(record_, table_rows_);
    return EndRecord();
  }

  Status Finish() override {
    StartRecord(kTagEnd);
    PutU32(record_, tables_);
    PutU32(record_, 0);  // reserved
    PutU64(record_, XXH3_64bits_digest(file_hash_.get()));
    return EndRecord();
  }

 private:
  void StartRecord(uint32_t tag) {
    record_.clear();
    PutU32(record_, tag);
    PutU32(record_, 0);  // payload_bytes, patched by EndRecord
  }

  Status EndRecord() {
    const uint32_t payload = static_cast<uint32_t>(record_.size() - kRecordHeaderBytes);
    std::memcpy(record_.data() + 4, &payload, 4);
    PutU64(record_, XXH3_64bits(record_.data(), record_.size()));
    return Emit(record_);
  }

  Status Emit(const std::vector<uint8_t>& bytes) {
    XXH3_64bits_update(file_hash_.get(), bytes.data(), bytes.size());
    return sink_->Write(bytes.data(), bytes.size());
  }

  Status FlushRows() {
    if (pending_keys_.empty()) return Status::Ok();
    StartRecord(kTagRows);
    PutBytes(record_, pending_keys_.data(), pending_keys_.size() * sizeof(uint64_t));
    PutBytes(record_, pending_values_.data(), pending_values_.size() * sizeof(float));
    table_rows_ += pending_keys_.size();
    pending_keys_.clear();
    pending_values_.clear();
    return EndRecord();
  }

  ByteSink* sink_;
  XxhState file_hash_;
  std::vector<uint8_t> record_;
  std::vector<uint64_t> pending_keys_;
  std::vector<float> pending_values_;
  uint32_t dim_ = 0;
  uint64_t table_rows_ = 0;
  uint32_t tables_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Parser

std::string TagText(uint32_t tag) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>((tag >> (8 * i)) & 0xff);
    s += (c >= ' ' && c <= '~') ? c : '?';
  }
  return "'" + s + "'";
}

// Reads fields of one (checksum-verified) payload; every read is bounds-checked.
class PayloadReader {
 public:
  PayloadReader(std::span<const uint8_t> payload, std::string what)
      : p_(payload), what_(std::move(what)) {}

  Result<uint32_t> U32(std::string_view field) {
    uint32_t v = 0;
    FERRY_RETURN_IF_ERROR(Copy(&v, 4, field));
    return v;
  }
  Result<uint64_t> U64(std::string_view field) {
    uint64_t v = 0;
    FERRY_RETURN_IF_ERROR(Copy(&v, 8, field));
    return v;
  }
  Result<std::string> String(std::string_view field, size_t max_bytes) {
    FERRY_ASSIGN_OR_RETURN(const uint32_t size, U32(field));
    if (size > max_bytes || size > p_.size() - pos_) {
      return ProtocolError("model file is corrupt: " + std::string(field) + " in " + what_ +
                           " claims " + std::to_string(size) + " bytes (limit " +
                           std::to_string(max_bytes) + ", " + std::to_string(p_.size() - pos_) +
                           " left in the record)");
    }
    std::string s(reinterpret_cast<const char*>(p_.data() + pos_), size);
    pos_ += size;
    return s;
  }
  Status ExpectEnd() const {
    if (pos_ == p_.size()) return Status::Ok();
    return ProtocolError("model file is corrupt: " + std::to_string(p_.size() - pos_) +
                         " unexpected bytes at the end of " + what_);
  }

 private:
  Status Copy(void* dst, size_t n, std::string_view field) {
    if (p_.size() - pos_ < n) {
      return ProtocolError("model file is corrupt: " + what_ + " ends before its " +
                           std::string(field));
    }
    if (n != 0) std::memcpy(dst, p_.data() + pos_, n);  // data() may be null when empty
    pos_ += n;
    return Status::Ok();
  }

  std::span<const uint8_t> p_;
  size_t pos_ = 0;
  std::string what_;
};

class BinaryParser {
 public:
  explicit BinaryParser(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  Result<Model> Run() {
    FERRY_RETURN_IF_ERROR(ParsePreamble());
    Model model;
    FERRY_RETURN_IF_ERROR(ParseHeader(model));
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(const Record r, Next("a table or the file end record"));
      if (r.tag == kTagEnd) return ParseEnd(r, model);
      if (r.tag != kTagTable) return Unexpected(r, "a table or the file end record");
      FERRY_RETURN_IF_ERROR(ParseTable(r, model));
    }
  }

 private:
  struct Record {
    uint32_t tag;
    size_t offset;  // of the record header
    std::span<const uint8_t> payload;
  };

  std::string Describe(uint32_t tag) const {
    if (tag == kTagHead) return "the header record";
    if (tag == kTagTable) return "a table header record";
    if (tag == kTagRows) return "a row block of table '" + table_ + "'";
    if (tag == kTagTableEnd) return "the end record of table '" + table_ + "'";
    if (tag == kTagEnd) return "the file end record";
    return "a record with unknown tag " + TagText(tag);
  }

  Status ParsePreamble() {
    const size_t n = std::min(bytes_.size(), sizeof(kBinaryMagic));
    if (n == 0 || std::memcmp(bytes_.data(), kBinaryMagic, n) != 0) {
      return ProtocolError(
          "not a Ferry binary model: the file does not start with the magic "
          "\"FERRYMDL\"");
    }
    if (bytes_.size() < kPreambleBytes) {
      return ProtocolError(
          "model file is truncated in the preamble: " + std::to_string(bytes_.size()) + " of " +
          std::to_string(kPreambleBytes) + " bytes");
    }
    uint32_t version = 0;
    uint32_t flags = 0;
    std::memcpy(&version, bytes_.data() + 8, 4);
    std::memcpy(&flags, bytes_.data() + 12, 4);
    if (version != kBinaryVersion) {
      return ProtocolError("binary model version " + std::to_string(version) +
                           " is not supported; this build reads version " +
                           std::to_string(kBinaryVersion) + " (re-export the model or upgrade)");
    }
    if (flags != 0) {
      return ProtocolError("model file is corrupt or newer than this build: preamble flags are " +
                           std::to_string(flags) + ", expected 0");
    }
    pos_ = kPreambleBytes;
    last_ = "the preamble";
    return Status::Ok();
  }

  // The next record, bounds- and checksum-verified.
  Result<Record> Next(std::string_view expected) {
    const size_t left = bytes_.size() - pos_;
    if (left == 0) {
      return ProtocolError("model file is truncated after " + last_ + ": expected " +
                           std::string(expected) + " at offset " + std::to_string(pos_));
    }
    if (left < kRecordHeaderBytes) {
      return ProtocolError("model file is truncated after " + last_ + ": " + std::to_string(left) +
                           " bytes at offset " + std::to_string(pos_) +
                           " cannot hold the header of " + std::string(expected));
    }
    Record r;
    r.offset = pos_;
    uint32_t payload_bytes = 0;
    std::memcpy(&r.tag, bytes_.data() + pos_, 4);
    std::memcpy(&payload_bytes, bytes_.data() + pos_ + 4, 4);
    if (left - kRecordHeaderBytes < kChecksumBytes ||
        payload_bytes > left - kRecordHeaderBytes - kChecksumBytes) {
      return ProtocolError("model file is truncated or corrupt in " + Describe(r.tag) +
                           " at offset " + std::to_string(pos_) + ": the record needs " +
                           std::to_string(kRecordHeaderBytes + payload_bytes + kChecksumBytes) +
                           " bytes, " + std::to_string(left) + " remain");
    }
    const size_t body = kRecordHeaderBytes + payload_bytes;
    uint64_t stored = 0;
    std::memcpy(&stored, bytes_.data() + pos_ + body, 8);
    if (XXH3_64bits(bytes_.data() + pos_, body) != stored) {
      return ProtocolError("model file is corrupt: checksum mismatch in " + Describe(r.tag) +
                           " at offset " + std::to_string(pos_));
    }
    r.payload = bytes_.subspan(pos_ + kRecordHeaderBytes, payload_bytes);
    pos_ += body + kChecksumBytes;
    return r;
  }

  Status Unexpected(const Record& r, std::string_view expected) const {
    return ProtocolError("model file is corrupt: found " + Describe(r.tag) + " at offset " +
                         std::to_string(r.offset) + " where " + std::string(expected) +
                         " was expected");
  }

  Status ParseHeader(Model& model) {
    FERRY_ASSIGN_OR_RETURN(const Record r, Next("the header record"));
    if (r.tag != kTagHead) return Unexpected(r, "the header record");
    PayloadReader in(r.payload, "the header record");
    FERRY_ASSIGN_OR_RETURN(const std::string kind, in.String("model kind", kMaxKindBytes));
    Result<ModelKind> parsed = ParseModelKind(kind);
    if (!parsed.ok()) return ProtocolError("model file header: " + parsed.status().message());
    model.kind = *parsed;
    FERRY_ASSIGN_OR_RETURN(const uint32_t count, in.U32("parameter count"));
    if (count > kMaxModelParams) {
      return ProtocolError("model file header claims " + std::to_string(count) +
                           " parameters; at most " + std::to_string(kMaxModelParams));
    }
    for (uint32_t i = 0; i < count; ++i) {
      FERRY_ASSIGN_OR_RETURN(std::string key, in.String("parameter key", kMaxModelNameBytes));
      FERRY_ASSIGN_OR_RETURN(std::string value,
                             in.String("parameter value", kMaxModelParamValueBytes));
      const Status valid = ValidateModelName(key, "parameter key");
      if (!valid.ok()) return ProtocolError("model file header: " + valid.message());
      if (!model.params.emplace(std::move(key), std::move(value)).second) {
        return ProtocolError("model file header repeats a parameter key");
      }
    }
    FERRY_RETURN_IF_ERROR(in.ExpectEnd());
    last_ = "the header record";
    return Status::Ok();
  }

  Status ParseTable(const Record& r, Model& model) {
    PayloadReader in(r.payload, "a table header record");
    FERRY_ASSIGN_OR_RETURN(std::string name, in.String("table name", kMaxModelNameBytes));
    FERRY_ASSIGN_OR_RETURN(const uint32_t dim, in.U32("dim"));
    FERRY_RETURN_IF_ERROR(in.ExpectEnd());
    const Status valid = ValidateModelName(name, "table name");
    if (!valid.ok()) return ProtocolError("model file: " + valid.message());
    if (dim == 0 || dim > kMaxModelDim) {
      return ProtocolError("model file: table '" + name + "' has dim " + std::to_string(dim) +
                           ", outside [1, " + std::to_string(kMaxModelDim) + "]");
    }
    if (model.FindTable(name) != nullptr) {
      return ProtocolError("model file has table '" + name + "' twice");
    }
    if (model.tables.size() >= kMaxModelTables) {
      return ProtocolError("model file has more than " + std::to_string(kMaxModelTables) +
                           " tables");
    }
    table_ = name;
    last_ = "the header of table '" + name + "'";
    model.tables.emplace_back(std::move(name), dim);
    ModelTable& table = model.tables.back();
    const size_t row_bytes = 8 + size_t{4} * dim;
    std::vector<uint64_t> keys;
    std::vector<float> values;
    uint64_t blocks = 0;
    const std::string expected = "rows or the end of table '" + table_ + "'";
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(const Record rec, Next(expected));
      if (rec.tag == kTagTableEnd) {
        PayloadReader end(rec.payload, Describe(rec.tag));
        FERRY_ASSIGN_OR_RETURN(const uint64_t rows, end.U64("row count"));
        FERRY_RETURN_IF_ERROR(end.ExpectEnd());
        if (rows != table.size()) {
          return ProtocolError("model file is corrupt: table '" + table_ + "' ends claiming " +
                               std::to_string(rows) + " rows but " + std::to_string(table.size()) +
                               " were read (a row block is missing or extra)");
        }
        last_ = "table '" + table_ + "'";
        return Status::Ok();
      }
      if (rec.tag != kTagRows) return Unexpected(rec, expected);
      if (rec.payload.empty() || rec.payload.size() % row_bytes != 0) {
        return ProtocolError(
            "model file is corrupt: " + Describe(rec.tag) + " at offset " +
            std::to_string(rec.offset) + " has " + std::to_string(rec.payload.size()) +
            " bytes, not a positive multiple of the " + std::to_string(row_bytes) + "-byte row");
      }
      const size_t n = rec.payload.size() / row_bytes;
      keys.resize(n);
      values.resize(n * dim);
      if (n * 8 != 0)
        std::memcpy(keys.data(), rec.payload.data(), n * 8);  // data() may be null when empty
      if (n * size_t{4} * dim != 0)
        std::memcpy(values.data(), rec.payload.data() + n * 8,
                    n * size_t{4} * dim);  // data() may be null when empty
      const Status appended = table.Append(keys, values);
      if (!appended.ok()) return ProtocolError("model file: " + appended.message());
      last_ = "row block " + std::to_string(++blocks) + " of table '" + table_ + "'";
    }
  }

  Result<Model> ParseEnd(const Record& r, Model& model) {
    PayloadReader in(r.payload, "the file end record");
    FERRY_ASSIGN_OR_RETURN(const uint32_t tables, in.U32("table count"));
    FERRY_ASSIGN_OR_RETURN(const uint32_t reserved, in.U32("reserved word"));
    FERRY_ASSIGN_OR_RETURN(const uint64_t file_hash, in.U64("file checksum"));
    FERRY_RETURN_IF_ERROR(in.ExpectEnd());
    if (reserved != 0 || tables != model.tables.size() ||
        XXH3_64bits(bytes_.data(), r.offset) != file_hash) {
      return ProtocolError("model file is corrupt: the file end record does not match the " +
                           std::to_string(model.tables.size()) +
                           " tables read (whole-file checksum or table count differs: a record "
                           "was removed, repeated or reordered)");
    }
    if (pos_ != bytes_.size()) {
      return ProtocolError("model file is corrupt: " + std::to_string(bytes_.size() - pos_) +
                           " trailing bytes after the file end record");
    }
    return std::move(model);
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  std::string last_;   // what was parsed last, for truncation messages
  std::string table_;  // the table being parsed
};

}  // namespace

std::unique_ptr<ModelEncoder> MakeBinaryEncoder(ByteSink* sink) {
  return std::make_unique<BinaryEncoder>(sink);
}

Result<Model> ParseBinaryModel(std::span<const uint8_t> bytes) {
  return BinaryParser(bytes).Run();
}

}  // namespace ferry::models::io_internal
