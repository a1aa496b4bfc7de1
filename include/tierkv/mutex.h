// Mutexes whose discipline the compiler checks: clang's thread-safety
// analysis (-Wthread-safety, the `thread-safety` build preset) proves that
// every member marked TIERKV_GUARDED_BY(mu) is touched only with mu held and
// that every function marked TIERKV_REQUIRES(mu) is called with it held.
// Other compilers see plain std::mutex and std::condition_variable.
//
// Usage:
//   Mutex mu_;
//   int count_ TIERKV_GUARDED_BY(mu_);
//   void Bump() { MutexLock l(&mu_); ++count_; }
//   void BumpLocked() TIERKV_REQUIRES(mu_) { ++count_; }
//
// Waiting: write the predicate as a loop in the function that holds the lock
// (`while (!done_) cv_.Wait(&mu_);`), so that the analysis sees the reads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TIERKV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TIERKV_THREAD_ANNOTATION(x)
#endif

#define TIERKV_CAPABILITY(x) TIERKV_THREAD_ANNOTATION(capability(x))
#define TIERKV_SCOPED_CAPABILITY TIERKV_THREAD_ANNOTATION(scoped_lockable)
#define TIERKV_GUARDED_BY(x) TIERKV_THREAD_ANNOTATION(guarded_by(x))
#define TIERKV_PT_GUARDED_BY(x) TIERKV_THREAD_ANNOTATION(pt_guarded_by(x))
#define TIERKV_ACQUIRED_BEFORE(...) TIERKV_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define TIERKV_ACQUIRED_AFTER(...) TIERKV_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define TIERKV_REQUIRES(...) TIERKV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TIERKV_ACQUIRE(...) TIERKV_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TIERKV_RELEASE(...) TIERKV_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TIERKV_EXCLUDES(...) TIERKV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TIERKV_ASSERT_HELD(x) TIERKV_THREAD_ANNOTATION(assert_capability(x))
#define TIERKV_NO_THREAD_SAFETY_ANALYSIS TIERKV_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tierkv {

class TIERKV_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() TIERKV_ACQUIRE() { mu_.lock(); }
  void Unlock() TIERKV_RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds the lock (it is not checked at
  // run time): for callbacks the analysis cannot follow.
  void AssertHeld() const TIERKV_ASSERT_HELD(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class TIERKV_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) TIERKV_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() TIERKV_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable used with a Mutex the caller holds.
class CondVar {
 public:
  // Releases *mu while blocked; holds it again on return (spurious wake-ups
  // included: callers loop on their predicate).
  void Wait(Mutex* mu) TIERKV_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // As Wait, for at most `d`; false when the time ran out.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> d) TIERKV_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(l, d) == std::cv_status::no_timeout;
    l.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace tierkv
