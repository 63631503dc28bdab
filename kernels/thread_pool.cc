#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pdserve {
namespace {

// Pause iterations a thread spins before it blocks. A decode step issues a
// few hundred ParallelFor calls back to back, so workers usually find the
// next job while spinning; an idle pool sleeps after roughly 50-100 us.
constexpr int kSpinIterations = 1 << 11;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

// Shared between the caller and the workers. A job is published by storing
// `call`/`ctx` and then bumping `generation`; workers acknowledge by
// decrementing `pending`. Blocking uses a mutex + condition variable guarded
// by sleeper counts so the fast path never makes a system call.
struct ThreadPool::State {
  std::vector<std::thread> workers;

  // (job sequence number << 16) | number of workers taking part.
  alignas(64) std::atomic<uint64_t> generation{0};
  std::atomic<int> worker_sleepers{0};
  std::mutex wake_mu;
  std::condition_variable wake_cv;

  alignas(64) std::atomic<int> pending{0};
  std::atomic<bool> caller_sleeping{false};
  std::mutex done_mu;
  std::condition_variable done_cv;

  // The current job; written only while no job is in flight.
  void (*call)(const void* ctx, int thread_index) = nullptr;
  const void* ctx = nullptr;
  bool stop = false;

  void WorkerLoop(int index);
  void Run(void (*fn)(const void*, int), const void* context, int n_workers);
};

void ThreadPool::State::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
      CpuRelax();
      g = generation.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(wake_mu);
      worker_sleepers.fetch_add(1);
      while ((g = generation.load()) == seen) wake_cv.wait(lock);
      worker_sleepers.fetch_sub(1);
    }
    seen = g;
    if (stop) return;
    // Workers outside the job do not touch it (it may already be replaced).
    if (index > static_cast<int>(g & 0xffff)) continue;
    call(ctx, index);
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
        caller_sleeping.load()) {
      std::lock_guard<std::mutex> lock(done_mu);
      done_cv.notify_one();
    }
  }
}

void ThreadPool::State::Run(void (*fn)(const void*, int), const void* context,
                            int n_workers) {
  call = fn;
  ctx = context;
  pending.store(n_workers, std::memory_order_relaxed);
  const uint64_t next =
      ((generation.load(std::memory_order_relaxed) >> 16) + 1) << 16;
  generation.store(next | static_cast<uint64_t>(n_workers));  // seq_cst
  if (worker_sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(wake_mu);
    wake_cv.notify_all();
  }
  fn(context, 0);
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (pending.load(std::memory_order_acquire) == 0) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(done_mu);
  caller_sleeping.store(true);
  while (pending.load() != 0) done_cv.wait(lock);
  caller_sleeping.store(false);
}

ThreadPool::ThreadPool(int n_threads)
    : num_threads_(std::max(1, n_threads)), state_(std::make_unique<State>()) {
  state_->workers.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    state_->workers.emplace_back([this, i] { state_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  if (num_threads_ > 1) {
    state_->stop = true;
    state_->generation.fetch_add(uint64_t{1} << 16);
    {
      std::lock_guard<std::mutex> lock(state_->wake_mu);
      state_->wake_cv.notify_all();
    }
  }
  for (std::thread& t : state_->workers) t.join();
}

namespace {

struct ForJob {
  int64_t n;
  int64_t chunks;
  absl::FunctionRef<void(int64_t, int64_t)>* fn;
};

void RunForChunk(const void* ctx, int thread_index) {
  const auto* job = static_cast<const ForJob*>(ctx);
  if (thread_index >= job->chunks) return;
  const int64_t begin = job->n * thread_index / job->chunks;
  const int64_t end = job->n * (thread_index + 1) / job->chunks;
  if (begin < end) (*job->fn)(begin, end);
}

void RunAllChunk(const void* ctx, int thread_index) {
  (*static_cast<absl::FunctionRef<void(int)>*>(const_cast<void*>(ctx)))(
      thread_index);
}

}  // namespace

void ThreadPool::ParallelFor(
    int64_t n, int64_t min_grain,
    absl::FunctionRef<void(int64_t begin, int64_t end)> fn) {
  if (n <= 0) return;
  const int64_t grain = std::max<int64_t>(1, min_grain);
  const int64_t chunks =
      std::min<int64_t>(num_threads_, std::max<int64_t>(1, n / grain));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  ForJob job{n, chunks, &fn};
  state_->Run(&RunForChunk, &job, static_cast<int>(chunks) - 1);
}

void ThreadPool::RunOnAll(absl::FunctionRef<void(int thread_index)> fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  state_->Run(&RunAllChunk, &fn, num_threads_ - 1);
}

}  // namespace pdserve
