// A persistent pool of worker threads for data-parallel kernels.
#ifndef PDSERVE_KERNELS_THREAD_POOL_H_
#define PDSERVE_KERNELS_THREAD_POOL_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"

namespace pdserve {

// Owns n_threads - 1 worker threads that live as long as the pool; the calling
// thread is the n-th participant of every ParallelFor. Work is split into
// chunks which every participant claims until none is left, so a worker that
// is descheduled delays little. ParallelFor is not
// reentrant and must be called from one thread at a time (the engine's step
// thread); it does not allocate on the heap. Workers spin briefly between
// jobs, then block.
// Registers `fn` to run once on every pool worker thread as it starts,
// before it takes any work: kernels size their per-thread scratch there, so
// that a worker meeting a kernel for the first time late (which thread runs
// which range varies from call to call) does not allocate in a steady-state
// step. Call before creating pools (static initialisation); at most 8 hooks.
void RegisterWorkerThreadInit(void (*fn)());

class ThreadPool {
 public:
  // n_threads in [1, 65535]; 1 means "run everything on the caller".
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into contiguous ranges (up to 4 per thread, each at least
  // `min_grain` long, sizes differing by at most one) and calls
  // fn(begin, end) for each on the pool's threads, returning when every range
  // is done. The split depends only on n, min_grain and num_threads(); fn
  // must be safe to call concurrently.
  void ParallelFor(int64_t n, int64_t min_grain,
                   absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

  // Calls fn(i) once for each i in [0, num_threads()), distinct indices
  // concurrently. An index is a slot (e.g. for per-slot scratch), not a fixed
  // thread: a thread that finds another slow to wake runs its index too, so
  // no two calls with the same index ever overlap but one thread may run
  // several indices one after the other.
  void RunOnAll(absl::FunctionRef<void(int thread_index)> fn);

 private:
  struct State;
  int num_threads_;
  std::unique_ptr<State> state_;
};

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_THREAD_POOL_H_
