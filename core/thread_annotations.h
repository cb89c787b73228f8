// Clang's thread-safety attributes, as Abseil spells them (absl/base/thread_annotations.h): locks
// say in code what they guard, and clang's -Wthread-safety checks it (the CI's
// --config=thread_safety build). Other compilers see nothing.
//
//   class Queue {
//     void Push(int x) WEFT_EXCLUDES(mu_) { MutexLock lock(&mu_); items_.push_back(x); }
//     void PushLocked(int x) WEFT_REQUIRES(mu_) { items_.push_back(x); }
//     Mutex mu_;
//     std::vector<int> items_ WEFT_GUARDED_BY(mu_);
//   };
//
// std::mutex is not a capability in libstdc++: annotated code locks a weft::Mutex (core/mutex.h)
// or a weft::SpinLock (core/spin_lock.h).
#pragma once

#if defined(__clang__)
#define WEFT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define WEFT_THREAD_ANNOTATION(x)
#endif

// The member is read and written only with `x` held.
#define WEFT_GUARDED_BY(x) WEFT_THREAD_ANNOTATION(guarded_by(x))
// What the pointer points to is read and written only with `x` held.
#define WEFT_PT_GUARDED_BY(x) WEFT_THREAD_ANNOTATION(pt_guarded_by(x))
// The caller holds the locks (exclusively / shared).
#define WEFT_REQUIRES(...) WEFT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define WEFT_REQUIRES_SHARED(...) WEFT_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// The caller does not hold the locks (the function takes them).
#define WEFT_EXCLUDES(...) WEFT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// The function takes / releases the locks (or, on a class method with no argument, `this`).
#define WEFT_ACQUIRE(...) WEFT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define WEFT_RELEASE(...) WEFT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define WEFT_TRY_ACQUIRE(...) WEFT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// The function checks (or the caller's contract says) that the capability is held: what follows
// is analyzed as holding it.
#define WEFT_ASSERT_CAPABILITY(x) WEFT_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to the lock `x`.
#define WEFT_RETURN_CAPABILITY(x) WEFT_THREAD_ANNOTATION(lock_returned(x))
// The class is a lock (`name` appears in messages), or an RAII holder of one.
#define WEFT_CAPABILITY(name) WEFT_THREAD_ANNOTATION(capability(name))
#define WEFT_SCOPED_CAPABILITY WEFT_THREAD_ANNOTATION(scoped_lockable)
// The function is not checked: say why beside it.
#define WEFT_NO_THREAD_SAFETY_ANALYSIS WEFT_THREAD_ANNOTATION(no_thread_safety_analysis)
