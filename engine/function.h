// Function: a move-only std::function with room for small captures inline (kInlineBytes), so
// pushing an op whose closure holds a shared_ptr and a pointer or two allocates nothing.
// Larger closures go to the heap, as with std::function.
//
//   Function<void(RunContext)> f = [state = std::make_shared<State>()](RunContext) { ... };
//   if (f) f(ctx);
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace weft::engine {

template <typename Signature>
class Function;

template <typename R, typename... Args>
class Function<R(Args...)> {
 public:
  static constexpr size_t kInlineBytes = 32;

  Function() = default;
  Function(std::nullptr_t) {}  // NOLINT: as std::function
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Function> &&
                                        std::is_invocable_r_v<R, std::decay_t<F>&, Args...>>>
  Function(F&& f) {  // NOLINT: implicit, as std::function
    using D = std::decay_t<F>;
    if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D>) {
      if (f == nullptr) return;
    }
    if constexpr (sizeof(D) <= kInlineBytes && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      new (storage_) D(std::forward<F>(f));
      invoke_ = [](void* s, Args... args) -> R {
        return (*static_cast<D*>(s))(std::forward<Args>(args)...);
      };
      manage_ = [](void* dst, void* src) {  // move src into dst (dst null: destroy src)
        if (dst != nullptr) new (dst) D(std::move(*static_cast<D*>(src)));
        static_cast<D*>(src)->~D();
      };
    } else {
      *reinterpret_cast<D**>(storage_) = new D(std::forward<F>(f));
      invoke_ = [](void* s, Args... args) -> R {
        return (**static_cast<D**>(s))(std::forward<Args>(args)...);
      };
      manage_ = [](void* dst, void* src) {
        if (dst != nullptr) {
          *static_cast<D**>(dst) = *static_cast<D**>(src);
        } else {
          delete *static_cast<D**>(src);
        }
      };
    }
  }
  Function(Function&& other) noexcept { MoveFrom(other); }
  Function& operator=(Function&& other) noexcept {
    if (this != &other) {
      Reset();
      MoveFrom(other);
    }
    return *this;
  }
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;
  ~Function() { Reset(); }

  R operator()(Args... args) const {
    return invoke_(const_cast<unsigned char*>(storage_), std::forward<Args>(args)...);
  }
  explicit operator bool() const { return invoke_ != nullptr; }
  friend bool operator==(const Function& f, std::nullptr_t) { return !f; }
  friend bool operator!=(const Function& f, std::nullptr_t) { return static_cast<bool>(f); }

 private:
  void Reset() {
    if (manage_ != nullptr) manage_(nullptr, storage_);
    invoke_ = nullptr;
    manage_ = nullptr;
  }
  void MoveFrom(Function& other) {
    if (other.manage_ == nullptr) return;
    other.manage_(storage_, other.storage_);
    invoke_ = other.invoke_;
    manage_ = other.manage_;
    other.invoke_ = nullptr;
    other.manage_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  R (*invoke_)(void*, Args...) = nullptr;
  void (*manage_)(void*, void*) = nullptr;
};

}  // namespace weft::engine
