// SmallVector: a vector that keeps its first N elements inline (no heap allocation, and no
// construction of the unused slots), for the short lists on hot paths (an op's inputs, outputs
// and vars).
//
//   SmallVector<TensorView, 4> views;
//   views.push_back(v);                        // inline up to 4, then on the heap
//   std::span<const TensorView> s = views.span();
#pragma once

#include <cstddef>
#include <new>
#include <span>
#include <utility>
#include <vector>

namespace weft {

template <typename T, size_t N>
class SmallVector {
 public:
  SmallVector() {}  // user-provided: value-initialization must not zero the inline slots
  SmallVector(const SmallVector& other) {
    for (const T& x : other) push_back(x);
  }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) {
      clear();
      for (const T& x : other) push_back(x);
    }
    return *this;
  }
  ~SmallVector() { clear(); }

  void push_back(T value) {
    if (heap_.empty() && size_ < N) [[likely]] {
      new (InlineSlot(size_)) T(std::move(value));
      ++size_;
      return;
    }
    PushToHeap(std::move(value));
  }
  void clear() {
    if (heap_.empty()) {
      for (size_t i = 0; i < size_; ++i) InlineSlot(i)->~T();
    }
    heap_.clear();
    size_ = 0;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return heap_.empty() ? InlineSlot(0) : heap_.data(); }
  const T* data() const { return heap_.empty() ? InlineSlot(0) : heap_.data(); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  std::span<const T> span() const { return {data(), size_}; }

 private:
  // push_back past the inline slots, out of line so that the inline path stays small.
  [[gnu::noinline]] void PushToHeap(T value) {
    if (heap_.empty()) {  // spill the inline elements first
      heap_.reserve(2 * N);
      for (size_t i = 0; i < size_; ++i) {
        heap_.push_back(std::move(*InlineSlot(i)));
        InlineSlot(i)->~T();
      }
    }
    heap_.push_back(std::move(value));
    ++size_;
  }
  T* InlineSlot(size_t i) { return std::launder(reinterpret_cast<T*>(inline_ + i * sizeof(T))); }
  const T* InlineSlot(size_t i) const {
    return std::launder(reinterpret_cast<const T*>(inline_ + i * sizeof(T)));
  }

  alignas(
      T) unsigned char inline_[N * sizeof(T)];  // slots [0, size_) constructed while heap_ is empty
  std::vector<T> heap_;                         // all elements, once there are more than N
  size_t size_ = 0;
};

}  // namespace weft
