#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pdserve {
namespace {

struct WorkerInits {
  std::atomic<int> count{0};
  void (*fns[8])() = {};
};

WorkerInits& Inits() {
  static WorkerInits inits;
  return inits;
}

void RunWorkerThreadInits() {
  WorkerInits& w = Inits();
  const int n = w.count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) w.fns[i]();
}

}  // namespace

void RegisterWorkerThreadInit(void (*fn)()) {
  WorkerInits& w = Inits();
  const int i = w.count.load(std::memory_order_relaxed);
  if (i >= 8) std::abort();
  w.fns[i] = fn;
  w.count.store(i + 1, std::memory_order_release);
}

namespace {

// Pause iterations a thread spins before it blocks. A decode step issues a
// few hundred ParallelFor calls back to back, so workers usually find the
// next job while spinning; an idle pool sleeps after roughly 50-100 us.
constexpr int kSpinIterations = 1 << 11;

// ParallelFor splits a range into up to this many chunks per thread.
constexpr int64_t kChunksPerThread = 4;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// The job word: sequence number (32 bits) | chunk count (16) | next unclaimed
// chunk (16). Chunks are claimed with a CAS on the whole word, so a worker that
// wakes up late can never claim a chunk of a newer job by mistake.
constexpr uint64_t Word(uint32_t seq, uint32_t n, uint32_t next) {
  return static_cast<uint64_t>(seq) << 32 | static_cast<uint64_t>(n) << 16 |
         next;
}
constexpr uint32_t Seq(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
constexpr uint32_t Count(uint64_t w) { return (w >> 16) & 0xffff; }
constexpr uint32_t Next(uint64_t w) { return w & 0xffff; }

}  // namespace

// Shared between the caller and the workers. A job is published by storing
// `call`/`ctx` and then a new job word; every thread (the caller included)
// claims chunks until none is left, so a worker that is slow to wake (or
// descheduled on a busy machine) delays nothing: its chunk is run by whoever
// gets there first. The caller then waits for the claimed chunks to finish.
// Blocking uses mutex + condition variable guarded by sleeper counts, so the
// fast path makes no system call.
struct ThreadPool::State {
  std::vector<std::thread> workers;
  std::atomic<int> started{0};  // workers past their per-thread set-up

  alignas(64) std::atomic<uint64_t> work{0};
  std::atomic<int> worker_sleepers{0};
  std::mutex wake_mu;
  std::condition_variable wake_cv;

  alignas(64) std::atomic<uint32_t> done{0};
  std::atomic<bool> caller_sleeping{false};
  std::mutex done_mu;
  std::condition_variable done_cv;

  // The current job; rewritten only after all its chunks are done.
  void (*call)(const void* ctx, int chunk) = nullptr;
  const void* ctx = nullptr;
  std::atomic<bool> stop{false};

  // Claims the next chunk of job `seq`, or returns -1 when none is left.
  int Claim(uint32_t seq) {
    uint64_t w = work.load(std::memory_order_acquire);
    for (;;) {
      if (Seq(w) != seq || Next(w) >= Count(w)) return -1;
      if (work.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        return static_cast<int>(Next(w));
      }
    }
  }

  void Finish(uint32_t n) {
    if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n &&
        caller_sleeping.load()) {
      std::lock_guard<std::mutex> lock(done_mu);
      done_cv.notify_one();
    }
  }

  void WorkerLoop();
  void Run(void (*fn)(const void*, int), const void* context, int n_chunks);
};

void ThreadPool::State::WorkerLoop() {
  uint32_t seen = 0;
  for (;;) {
    uint64_t w = work.load(std::memory_order_acquire);
    for (int spin = 0; Seq(w) == seen && spin < kSpinIterations; ++spin) {
      CpuRelax();
      w = work.load(std::memory_order_acquire);
    }
    if (Seq(w) == seen) {
      std::unique_lock<std::mutex> lock(wake_mu);
      worker_sleepers.fetch_add(1);
      while (Seq(w = work.load()) == seen) wake_cv.wait(lock);
      worker_sleepers.fetch_sub(1);
    }
    seen = Seq(w);
    if (stop.load(std::memory_order_acquire)) return;
    for (int c; (c = Claim(seen)) >= 0;) {
      call(ctx, c);
      Finish(Count(w));
    }
  }
}

void ThreadPool::State::Run(void (*fn)(const void*, int), const void* context,
                            int n_chunks) {
  call = fn;
  ctx = context;
  done.store(0, std::memory_order_relaxed);
  const uint32_t seq = Seq(work.load(std::memory_order_relaxed)) + 1;
  const auto n = static_cast<uint32_t>(n_chunks);
  work.store(Word(seq, n, 0));  // seq_cst: pairs with the sleeper check
  if (worker_sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(wake_mu);
    wake_cv.notify_all();
  }
  for (int c; (c = Claim(seq)) >= 0;) {
    fn(context, c);
    done.fetch_add(1, std::memory_order_acq_rel);
  }
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (done.load(std::memory_order_acquire) == n) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(done_mu);
  caller_sleeping.store(true);
  while (done.load() != n) done_cv.wait(lock);
  caller_sleeping.store(false);
}

ThreadPool::ThreadPool(int n_threads)
    : num_threads_(std::clamp(n_threads, 1, 0xffff)),
      state_(std::make_unique<State>()) {
  state_->workers.reserve(num_threads_ - 1);
  // Every worker has run the registered per-thread set-up before the
  // constructor returns (a thread may otherwise start running much later).
  for (int i = 1; i < num_threads_; ++i) {
    state_->workers.emplace_back([this] {
      RunWorkerThreadInits();
      state_->started.fetch_add(1, std::memory_order_acq_rel);
      state_->started.notify_all();
      state_->WorkerLoop();
    });
  }
  for (int n = state_->started.load(); n < num_threads_ - 1;
       n = state_->started.load()) {
    state_->started.wait(n);
  }
}

ThreadPool::~ThreadPool() {
  if (num_threads_ > 1) {
    state_->stop.store(true);
    const uint32_t seq = Seq(state_->work.load()) + 1;
    state_->work.store(Word(seq, 0, 0));
    std::lock_guard<std::mutex> lock(state_->wake_mu);
    state_->wake_cv.notify_all();
  }
  for (std::thread& t : state_->workers) t.join();
}

namespace {

struct ForJob {
  int64_t n;
  int64_t chunks;
  absl::FunctionRef<void(int64_t, int64_t)>* fn;
};

void RunForChunk(const void* ctx, int chunk) {
  const auto* job = static_cast<const ForJob*>(ctx);
  const int64_t begin = job->n * chunk / job->chunks;
  const int64_t end = job->n * (chunk + 1) / job->chunks;
  if (begin < end) (*job->fn)(begin, end);
}

void RunAllChunk(const void* ctx, int chunk) {
  (*static_cast<absl::FunctionRef<void(int)>*>(const_cast<void*>(ctx)))(chunk);
}

}  // namespace

void ThreadPool::ParallelFor(
    int64_t n, int64_t min_grain,
    absl::FunctionRef<void(int64_t begin, int64_t end)> fn) {
  if (n <= 0) return;
  const int64_t grain = std::max<int64_t>(1, min_grain);
  // A few chunks per thread, so that a thread that starts late (or is
  // descheduled) leaves only a small piece for the others to pick up.
  const int64_t chunks = std::min<int64_t>(
      std::min<int64_t>(0xffff, kChunksPerThread * int64_t{num_threads_}),
      std::max<int64_t>(1, n / grain));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  ForJob job{n, chunks, &fn};
  state_->Run(&RunForChunk, &job, static_cast<int>(chunks));
}

void ThreadPool::RunOnAll(absl::FunctionRef<void(int thread_index)> fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  state_->Run(&RunAllChunk, &fn, num_threads_);
}

}  // namespace pdserve
