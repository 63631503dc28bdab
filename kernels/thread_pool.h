// A persistent pool of worker threads for data-parallel kernels.
#ifndef PDSERVE_KERNELS_THREAD_POOL_H_
#define PDSERVE_KERNELS_THREAD_POOL_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"

namespace pdserve {

// Owns n_threads - 1 worker threads that live as long as the pool; the calling
// thread is the n-th participant of every ParallelFor. ParallelFor is not
// reentrant and must be called from one thread at a time (the engine's step
// thread); it does not allocate on the heap.
class ThreadPool {
 public:
  // n_threads >= 1; 1 means "run everything on the caller".
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into contiguous ranges and calls fn(begin, end) for each,
  // on all threads, returning when every range is done. Ranges are at least
  // `min_grain` long (except the last); fn must be safe to call concurrently.
  void ParallelFor(int64_t n, int64_t min_grain,
                   absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

  // Calls fn(thread_index) once on each of the num_threads() threads.
  void RunOnAll(absl::FunctionRef<void(int thread_index)> fn);

 private:
  struct State;
  int num_threads_;
  std::unique_ptr<State> state_;
};

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_THREAD_POOL_H_
