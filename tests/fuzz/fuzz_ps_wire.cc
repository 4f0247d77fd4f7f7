// Everything the parameter server decodes from a peer or from disk: request headers and key
// arrays in a staging ring (ps/wire/protocol.h ParseRequest), control messages (ps/wire/control.h
// DecodeControl), error reply records and connection hellos, checkpoint manifests
// (ps/job/checkpoint.h ParseManifest), the chains a joining server learns (ps/job/chain.h
// ChainMap::Decode, from a control message's data), and pushes a replica forwards into a forward
// ring (ParseForward). The first input byte picks the decoder; the rest is its input.
// A decoder must either refuse with a clear status or hand out a view whose every byte lies in
// the input: the keys and gradients of an accepted request are read in full (ASan checks).
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "ps/job/chain.h"
#include "ps/job/checkpoint.h"
#include "ps/wire/control.h"
#include "ps/wire/control_journal.h"
#include "ps/wire/protocol.h"

namespace {

volatile uint64_t g_sink;

void Request(std::span<const uint8_t> in) {
  if (in.size() < 2) return;
  // The ring is the input after two bytes that pick the request's offset (in 64-byte units).
  const uint64_t offset = (uint64_t{in[0]} | (uint64_t{in[1]} << 8)) * ferry::ps::kRequestAlign;
  std::vector<uint8_t> ring(in.begin() + 2, in.end());
  const ferry::ps::TableShape tables[] = {{1, false}, {8, true}, {16, false}};
  ferry::ps::RequestLimits limits;
  limits.ring_bytes = ring.size();
  limits.arena_bytes = 1u << 20;
  limits.rows_begin = 4096;
  limits.max_keys = 4096;
  ferry::ps::RequestView v;
  if (!ferry::ps::ParseRequest(ring, offset, tables, limits, &v).ok()) return;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < v.header.num_keys; ++i) sum += v.keys[i];
  if (v.grads != nullptr) {
    const size_t bytes =
        ferry::ps::RequestPayloadBytes(v.type(), v.header.flags, v.header.num_keys, v.header.dim) -
        size_t{v.header.num_keys} * 8;
    for (size_t i = 0; i < bytes; ++i) sum += v.grads[i];
  }
  g_sink = sum;
}

void Forward(std::span<const uint8_t> in) {
  if (in.size() < 2) return;
  const uint64_t offset = (uint64_t{in[0]} | (uint64_t{in[1]} << 8)) * ferry::ps::kRequestAlign;
  std::vector<uint8_t> ring(in.begin() + 2, in.end());
  const ferry::ps::TableShape tables[] = {{1, false}, {8, true}, {16, false}};
  ferry::ps::ForwardLimits limits;
  limits.ring_bytes = ring.size();
  limits.max_keys = 4096;
  limits.workers = 4;
  limits.shards = 4;
  limits.max_copy_rows = 64;
  ferry::ps::ForwardView v;
  if (!ferry::ps::ParseForward(ring, offset, tables, limits, &v).ok()) return;
  if ((v.header.flags & ferry::ps::kForwardCopy) != 0) {
    // A repair's copy hands out its payload (rows or watermark words), which lies in the ring.
    uint64_t sum = 0;
    for (size_t i = 0; i < v.header.payload_bytes; ++i) sum += v.payload[i];
    g_sink = sum;
    return;
  }
  if ((v.header.flags & ferry::ps::kForwardRecord) != 0) {
    // A record hands out its keys and their row ops (no gradients: push.grads is null).
    uint64_t sum = 0;
    for (uint32_t i = 0; i < v.header.num_keys; ++i) sum += v.push.keys[i] + v.ops[i];
    g_sink = sum;
    return;
  }
  // An accepted forward hands out a push whose keys and gradients lie in the ring.
  if (v.push.type() != ferry::ps::RequestType::kPush || v.push.header.shard >= limits.shards) {
    __builtin_trap();
  }
  uint64_t sum = 0;
  for (uint32_t i = 0; i < v.header.num_keys; ++i) sum += v.push.keys[i];
  const size_t bytes = v.header.payload_bytes - size_t{v.header.num_keys} * 8;
  for (size_t i = 0; i < bytes; ++i) sum += v.push.grads[i];
  g_sink = sum;
}

void Control(std::span<const uint8_t> in) {
  auto m = ferry::ps::DecodeControl(in);
  if (!m.ok()) return;
  // What decodes must encode and decode to the same message.
  auto again = ferry::ps::DecodeControl(ferry::ps::EncodeControl(*m));
  if (!again.ok() || again->kind != m->kind || again->text != m->text || again->data != m->data ||
      again->members != m->members) {
    __builtin_trap();
  }
  // A rejoin's journal (ps/wire/control_journal.h): refused or read, and what is read encodes
  // back to the same bytes.
  ferry::ps::ControlMessage rejoin = *m;
  rejoin.kind = ferry::ps::ControlKind::kRejoin;
  auto j = ferry::ps::DecodeRejoin(rejoin, 64, 64);
  if (j.ok() && ferry::ps::EncodeJournal(*j) != rejoin.data) __builtin_trap();
  // A membership's chains (a join slot's): refused or read, every query in bounds, and what is
  // read encodes back to the same bytes.
  ferry::ps::ChainMap chains;
  if (!chains.Decode(m->data)) return;
  if (chains.Encode() != m->data) __builtin_trap();
  uint64_t sum = chains.live_servers();
  for (uint32_t q = 0; q < chains.shards(); ++q) {
    sum += static_cast<uint64_t>(chains.Head(q) + chains.Tail(q)) + chains.Chain(q).size();
    for (uint32_t member : chains.Chain(q))
      sum += static_cast<uint64_t>(chains.Successor(q, member));
  }
  for (uint32_t s = 0; s < chains.members(); ++s) sum += chains.Hosted(s).size();
  g_sink = sum;
}

void Records(std::span<const uint8_t> in) {
  auto hello = ferry::ps::DecodeHello(in.first(std::min<size_t>(in.size(), 8)));
  if (hello.ok()) g_sink = hello->index + (hello->server ? 1 : 0);
  if (in.size() < sizeof(ferry::ps::ReplyRecord) + 4) return;
  ferry::ps::ReplyRecord r;
  std::memcpy(&r, in.data() + 4, sizeof r);
  uint32_t seq;
  std::memcpy(&seq, in.data(), 4);
  ferry::Status s = ferry::ps::DecodeErrorRecord(r, seq);
  g_sink = s.message().size();
}

void Manifest(std::span<const uint8_t> in) {
  const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
  auto m = ferry::ps::ParseManifest(text);
  if (!m.ok()) return;
  auto again = ferry::ps::ParseManifest(ferry::ps::EncodeManifest(*m));
  if (!again.ok() || again->tables != m->tables || again->servers != m->servers ||
      again->clock != m->clock || again->positions != m->positions) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      Request(in);
      break;
    case 1:
      Control(in);
      break;
    case 2:
      Records(in);
      break;
    case 3:
      Manifest(in);
      break;
    case 4:
      Forward(in);
      break;
  }
  return 0;
}
