// NoDestructor<T>: a T that is constructed on first use and deliberately never destroyed, for the
// process-wide objects (pools, registries, caches) that work running during exit may still use:
// engine ops drained at shutdown, thread_local destructors, static destructors of other files.
// Destroying them at exit would race with that work, and a CUDA call from a static destructor
// may find the runtime unloaded. Like Abseil's absl::NoDestructor: the object lives inline in the
// static storage (no heap allocation), and saying NoDestructor says "immortal on purpose" once.
//
//   EventPool& EventPool::Get() {
//     static NoDestructor<EventPool> pool;  // constructed once, thread-safely (a function static)
//     return *pool;
//   }
//
// Only for function-local (or otherwise static) objects: one with automatic or member storage
// would leak what T owns.
#pragma once

#include <new>
#include <type_traits>
#include <utility>

namespace weft {

template <typename T>
class NoDestructor {
 public:
  template <typename... Args>
  explicit NoDestructor(Args&&... args) {
    new (storage_) T(std::forward<Args>(args)...);
  }
  NoDestructor(const NoDestructor&) = delete;
  NoDestructor& operator=(const NoDestructor&) = delete;
  ~NoDestructor() = default;  // trivial: T's destructor never runs

  T* get() { return std::launder(reinterpret_cast<T*>(storage_)); }
  const T* get() const { return std::launder(reinterpret_cast<const T*>(storage_)); }
  T& operator*() { return *get(); }
  const T& operator*() const { return *get(); }
  T* operator->() { return get(); }
  const T* operator->() const { return get(); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace weft
