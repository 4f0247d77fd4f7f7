// ArrayHashMap <-> transport: registration of the rows buffer, epochs, and the gather that
// turns a key list into the Segment list a sparse transfer consumes.
#include <algorithm>
#include <string>

#include "ps/store/array_hash_map.h"

namespace ferry::ps {

Status ArrayHashMap::AttachTransport(Transport* transport, uint32_t access) {
  if (transport == nullptr) return InvalidArgument("AttachTransport: transport is null");
  region_.reset();
  transport_ = transport;
  access_ = access;
  return Register();
}

void ArrayHashMap::DetachTransport() {
  region_.reset();
  transport_ = nullptr;
  descriptor_ = RemoteRegion{};
  ++epoch_;  // descriptors handed out so far are stale from now on
}

Status ArrayHashMap::Register() {
  // Every registration is a new generation, even at the same address (kReserve growth only
  // lengthens the region): a peer's descriptor names exactly one (addr, length, key).
  ++epoch_;
  descriptor_ = RemoteRegion{};
  auto mr = transport_->RegisterMemory(rows_.data(), rows_.size(), access_);
  if (!mr.ok()) return mr.status().Annotate("register embedding rows");
  region_ = std::move(mr).value();
  descriptor_ = region_->descriptor();
  descriptor_.epoch = epoch_;
  return Status::Ok();
}

Status ArrayHashMap::CheckEpoch(uint64_t epoch) const {
  if (region_ == nullptr) {
    return NotFound("embedding rows are not registered with a transport");
  }
  if (epoch != epoch_) {
    return Stale("descriptor epoch " + std::to_string(epoch) +
                 " is stale: the rows buffer was re-registered (growth or compaction) and is at "
                 "epoch " +
                 std::to_string(epoch_) + "; fetch the current descriptor");
  }
  return Status::Ok();
}

Status ArrayHashMap::RowSegments(std::span<const uint64_t> keys, RowField field,
                                 uint64_t remote_base, uint64_t remote_stride,
                                 std::vector<Segment>* segments,
                                 std::vector<size_t>* missing) const {
  if (segments == nullptr) return InvalidArgument("RowSegments: segments is null");
  FERRY_ASSIGN_OR_RETURN(FieldSpan span, layout_.Field(field));
  if (remote_stride < span.length) {
    return InvalidArgument("RowSegments: remote_stride " + std::to_string(remote_stride) +
                           " is shorter than the field (" + std::to_string(span.length) +
                           " bytes); destination rows would overlap");
  }
  segments->reserve(segments->size() + keys.size());
  const size_t first = segments->size();
  // The keys are resolved by the FindBatch pipeline (ResolveBatch), in order.
  ResolveBatch(keys, [&](size_t i, uint32_t slot) {
    if (slot == kNoSlot) {
      if (missing != nullptr) missing->push_back(i);
      return;
    }
    const uint64_t local = static_cast<uint64_t>(slot) * layout_.stride + span.offset;
    const uint64_t remote = remote_base + i * remote_stride;
    Segment seg{local, remote, span.length};
    if (segments->size() == first) {
      segments->push_back(seg);  // never merged into a segment the caller put there
    } else {
      AppendMergedSegment(*segments, seg);
    }
  });
  return Status::Ok();
}

}  // namespace ferry::ps
