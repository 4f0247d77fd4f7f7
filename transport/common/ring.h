// Ring<T>: a growable FIFO that reuses its slots, so that steady-state queueing on the data path
// never allocates (std::deque frees and reallocates blocks as it drains).
//
// Contract: not thread-safe (its owner serialises: the transport's mutex, the worker's thread).
// Capacity only grows. References returned by front()/back()/operator[] stay valid until the next
// push (which may grow the buffer) or pop of that element.
#pragma once

#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace ferry::common {

template <typename T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  T& back() { return slots_[(head_ + size_ - 1) & (slots_.size() - 1)]; }
  T& operator[](size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const T& front() const { return slots_[head_]; }
  const T& back() const { return slots_[(head_ + size_ - 1) & (slots_.size() - 1)]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }

  // Front to back (invalidated by a push or a pop).
  template <typename R, typename V>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iter() = default;
    Iter(R* ring, size_t i) : ring_(ring), i_(i) {}
    V& operator*() const { return (*ring_)[i_]; }
    V* operator->() const { return &(*ring_)[i_]; }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    Iter operator++(int) {
      Iter before = *this;
      ++i_;
      return before;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }

   private:
    R* ring_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iter<Ring, T>;
  using const_iterator = Iter<const Ring, const T>;
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

  // Appends a default-constructed slot value (reused storage) and returns it for filling in.
  T& push() {
    if (size_ == slots_.size()) Grow();
    T& slot = slots_[(head_ + size_) & (slots_.size() - 1)];
    ++size_;
    return slot;
  }
  void push(T value) { push() = std::move(value); }
  // Drops every element (each slot reset), keeping the capacity.
  void clear() {
    while (size_ > 0) pop();
  }
  // Moves the front element out and leaves a reset slot behind.
  T pop() {
    T out = std::move(slots_[head_]);
    slots_[head_] = T();
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
    return out;
  }

 private:
  void Grow() {
    std::vector<T> next(slots_.empty() ? 16 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) next[i] = std::move((*this)[i]);
    slots_ = std::move(next);
    head_ = 0;
  }

  std::vector<T> slots_;  // size is 0 or a power of two
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace ferry::common
