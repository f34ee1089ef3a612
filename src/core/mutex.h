// Mutexes whose use Clang's thread-safety analysis checks. A member that a mutex guards is
// declared ICECACHE_GUARDED_BY(mu_); reading or writing it without holding mu_ is then a finding
// of the clang-tidy stage (scripts/tidy.sh compiles with -Wthread-safety). Under GCC, which builds
// the engine, the annotations are empty and these classes are plain wrappers of the std ones.
#pragma once

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define ICECACHE_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define ICECACHE_THREAD_ANNOTATION_(x)
#endif

#define ICECACHE_CAPABILITY(x) ICECACHE_THREAD_ANNOTATION_(capability(x))
#define ICECACHE_SCOPED_CAPABILITY ICECACHE_THREAD_ANNOTATION_(scoped_lockable)
#define ICECACHE_GUARDED_BY(x) ICECACHE_THREAD_ANNOTATION_(guarded_by(x))
#define ICECACHE_REQUIRES(...) ICECACHE_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define ICECACHE_ACQUIRE(...) ICECACHE_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define ICECACHE_ACQUIRE_SHARED(...) \
  ICECACHE_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define ICECACHE_RELEASE(...) ICECACHE_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define ICECACHE_RELEASE_SHARED(...) \
  ICECACHE_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))

namespace icecache {

class ICECACHE_CAPABILITY("mutex") Mutex {
 public:
  void Lock() ICECACHE_ACQUIRE() { mu_.lock(); }
  void Unlock() ICECACHE_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class ICECACHE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ICECACHE_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ICECACHE_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Many readers or one writer.
class ICECACHE_CAPABILITY("shared mutex") SharedMutex {
 public:
  void Lock() ICECACHE_ACQUIRE() { mu_.lock(); }
  void Unlock() ICECACHE_RELEASE() { mu_.unlock(); }
  void LockShared() ICECACHE_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() ICECACHE_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex shared (reading) for its scope.
class ICECACHE_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ICECACHE_ACQUIRE_SHARED(mu) : mu_(mu) { mu_->LockShared(); }
  ~ReaderLock() ICECACHE_RELEASE() { mu_->UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds a SharedMutex exclusively (writing) for its scope.
class ICECACHE_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ICECACHE_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() ICECACHE_RELEASE() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

}  // namespace icecache
