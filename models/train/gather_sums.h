// GatherSums: the one way the workers of a training job exchange fixed records of 8-byte numbers
// (sample counts, loss sums, calibration sums), over ps::Worker's all-gather.
//
//   struct Sums { uint64_t samples; double loss; };          // 8-byte fields, no padding
//   FERRY_ASSIGN_OR_RETURN(std::vector<Sums> all,
//                          GatherSums(worker, mine, /*to_all=*/true, "bad sums from a worker"));
//
// The record travels as its bytes (host byte order: the ranks of a job share an architecture,
// as ps/wire/protocol.h assumes). Result: every worker's record in worker order, on every worker
// with to_all, else on worker 0 (the others get an empty vector); `from`, when set, gets their
// worker indices. A worker that sent nothing (an elastic job's worker join slot not joined, a
// worker that left) has no record. A part of another length is kProtocol `bad_length`.
//
// Blocking: a collective, as ps::Worker's gather: every worker must make the same sequence of
// calls, each from the thread that drives its ps::Worker.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ps/worker/worker.h"
#include "transport/status.h"

namespace ferry::models {

template <typename T>
Result<std::vector<T>> GatherSums(ps::Worker& w, const T& mine, bool to_all, const char* bad_length,
                                  std::vector<uint32_t>* from = nullptr) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % 8 == 0,
                "GatherSums sends records of 8-byte fields");
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &mine, sizeof(T));
  FERRY_ASSIGN_OR_RETURN(auto parts, w.GatherFromWorkers(bytes, to_all));
  std::vector<T> out;
  out.reserve(parts.size());
  if (from != nullptr) from->clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& part = parts[i];
    if (part.empty()) continue;
    if (part.size() != sizeof(T)) return ProtocolError(bad_length);
    T t;
    std::memcpy(&t, part.data(), sizeof(T));
    out.push_back(t);
    if (from != nullptr) from->push_back(static_cast<uint32_t>(i));
  }
  return out;
}

}  // namespace ferry::models
