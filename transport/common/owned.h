// Owned<H, Release>: the one move-only RAII owner of a C library handle, shared by the backends
// (verbs objects, UCX context/worker/rkeys, ...). Each backend names its handles with aliases in
// its own objects.h; this header knows no library.
//
// Contract: an Owned releases its handle exactly once, with `Release`, when it is destroyed,
// reset or assigned over. Move-only. Thread-safety: none (the owning object guards it).
// Classes holding several owners declare them in construction order, so that C++'s reverse
// destruction order is the order the library requires (see verbs/objects.h, ucx/objects.h).
#pragma once

#include <utility>

namespace ferry::common {

// H is a pointer type (ibv_pd*, ucp_context_h, void*); Release is `void (*)(H)` (a function
// that returns something else is wrapped by the backend, which says why the result is ignored).
template <typename H, auto Release>
class Owned {
 public:
  Owned() = default;
  explicit Owned(H h) : h_(h) {}
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  void reset() {
    if (h_ != nullptr) Release(std::exchange(h_, nullptr));
  }
  // Gives up ownership without releasing (e.g. an rdma_cm id that must outlive its event).
  H release() { return std::exchange(h_, nullptr); }
  H get() const { return h_; }
  H operator->() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  H h_ = nullptr;
};

}  // namespace ferry::common
