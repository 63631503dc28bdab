// CUDA runtime shims for the CPU emulation: device memory (malloc, poisoned
// with 0xFF so uninitialised reads show up as NaN / -1), pinned memory,
// streams, events, stream capture recorded as a list of closures and
// replayed by cudaGraphLaunch. Everything runs synchronously on the calling
// thread; ordering between streams is therefore NOT checked (every
// operation completes before the call returns).
//
// Checked and reported as "EMU VIOLATION" (stderr, counted, abort with
// EMU_STRICT=1): launch configuration (grid/block limits, dynamic shared
// memory above 48 KiB without cudaFuncSetAttribute), pointer arguments of
// kernels that are not device memory, memcpy kinds that do not match the
// pointers, and capture rules: no allocation / free / synchronous copy /
// device or capturing-stream synchronisation during a capture, no work on
// the legacy stream while a capture is active, no pageable memory in a
// captured copy, no wait on an event recorded outside the capture.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace emu {

struct Graph {
  std::vector<std::function<void()>> nodes;
};
struct Stream {
  bool capturing = false;
  bool invalidated = false;
  Graph* graph = nullptr;
  int id = 0;
};
struct Event {
  bool recorded = false;
  Graph* captured_in = nullptr;
  // When it was recorded: work before it has run (launches run at once).
  std::chrono::steady_clock::time_point at;
};

namespace {

std::map<uintptr_t, size_t> g_dev, g_pinned;
std::map<const void*, int> g_smem_attr;
thread_local cudaError_t g_last = cudaSuccess;
int g_capturing = 0;
int g_stream_ids = 0;
long g_violations = 0, g_captures = 0, g_replays = 0, g_launches = 0,
     g_captured_nodes = 0, g_failed_captures = 0;
int g_device = 0;

struct Summary {
  ~Summary() {
    std::fprintf(stderr,
                 "[emu] launches %ld, captures %ld (failed %ld, %ld nodes), "
                 "graph replays %ld, violations %ld\n",
                 g_launches, g_captures, g_failed_captures, g_captured_nodes,
                 g_replays, g_violations);
  }
} g_summary;

bool Find(const std::map<uintptr_t, size_t>& m, const void* p,
          uintptr_t* base = nullptr, size_t* size = nullptr) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(u);
  if (it == m.begin()) return false;
  --it;
  if (u >= it->first + it->second + 256) return false;  // slack: alignment
  if (base) *base = it->first;
  if (size) *size = it->second;
  return true;
}

}  // namespace

void Violation(const std::string& what) {
  ++g_violations;
  std::fprintf(stderr, "EMU VIOLATION: %s\n", what.c_str());
  const char* strict = std::getenv("EMU_STRICT");
  if (strict != nullptr && strict[0] == '1') std::abort();
}

bool IsDevice(const void* p) { return Find(g_dev, p); }
bool IsPinned(const void* p) { return Find(g_pinned, p); }

Stream* AsStream(cudaStream_t s) {
  const auto u = reinterpret_cast<uintptr_t>(s);
  if (u <= 2) return nullptr;  // 0, cudaStreamLegacy, cudaStreamPerThread
  return reinterpret_cast<Stream*>(s);
}

namespace {
std::vector<Stream*> g_streams;

void Invalidate(const char* why) {
  for (Stream* s : g_streams) {
    if (s->capturing && !s->invalidated) {
      s->invalidated = true;
      Violation(std::string("capture invalidated: ") + why);
    }
  }
}
}  // namespace

// Runs `work` now, or records it when `stream` is capturing.
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work,
                    const char* what) {
  Stream* s = AsStream(stream);
  if (s != nullptr && s->capturing) {
    s->graph->nodes.push_back(std::move(work));
    ++g_captured_nodes;
    return cudaSuccess;
  }
  if (g_capturing > 0 && s == nullptr) {
    Invalidate((std::string(what) + " on the legacy stream").c_str());
    return cudaErrorStreamCaptureImplicit;
  }
  if (g_capturing > 0) {
    std::fprintf(stderr,
                 "[emu] note: %s on stream %d runs eagerly while another "
                 "stream captures\n",
                 what, s->id);
  }
  work();
  return cudaSuccess;
}

bool CheckLaunchConfig(const void* kernel, dim3 grid, dim3 block, size_t smem) {
  ++g_launches;
  char buf[256];
  const unsigned long long threads =
      static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || grid.x > 0x7fffffffu || threads == 0 ||
      threads > 1024 || block.z > 64) {
    std::snprintf(buf, sizeof(buf),
                  "launch of %p: grid (%u,%u,%u) block (%u,%u,%u) invalid",
                  kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z);
    Violation(buf);
    g_last = cudaErrorInvalidConfiguration;
    return false;
  }
  if (smem > 48 * 1024) {
    auto it = g_smem_attr.find(kernel);
    const int allowed = it == g_smem_attr.end() ? 48 * 1024 : it->second;
    if (static_cast<long long>(smem) > allowed) {
      std::snprintf(buf, sizeof(buf),
                    "launch of %p: %zu bytes of dynamic shared memory, "
                    "attribute allows %d",
                    kernel, smem, allowed);
      Violation(buf);
      g_last = cudaErrorInvalidValue;
      return false;
    }
  }
  if (smem > 227 * 1024) {
    g_last = cudaErrorInvalidValue;
    return false;
  }
  return true;
}

void CheckKernelPointer(const void* kernel, int index, const void* p) {
  if (p == nullptr || IsDevice(p)) return;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "kernel %p argument %d = %p is %s", kernel,
                index, p,
                IsPinned(p) ? "pinned host memory" : "not device memory");
  Violation(buf);
}

void NoteReplay() { ++g_replays; }

void CaptureUnsafe(const char* call) {
  if (g_capturing > 0) Invalidate(call);
}

}  // namespace emu

using emu::AsStream;
using emu::CaptureUnsafe;
using emu::Violation;

extern "C" {

cudaError_t cudaMalloc(void** p, size_t n) {
  CaptureUnsafe("cudaMalloc during capture");
#ifdef EMU_EXACT_ALLOC  // AddressSanitizer builds: redzones right after n
  const size_t size = n > 0 ? n : 1;
  if (posix_memalign(p, 256, size) != 0) *p = nullptr;
#else
  const size_t size = (n + 255) / 256 * 256 + 256;
  *p = std::aligned_alloc(256, size);
#endif
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, size);  // poison: NaN floats, -1 ints
  emu::g_dev[reinterpret_cast<uintptr_t>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  CaptureUnsafe("cudaFree during capture");
  if (p == nullptr) return cudaSuccess;
  auto it = emu::g_dev.find(reinterpret_cast<uintptr_t>(p));
  if (it == emu::g_dev.end()) {
    Violation("cudaFree of a pointer cudaMalloc did not return");
    return cudaErrorInvalidValue;
  }
  emu::g_dev.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) {
  CaptureUnsafe("cudaMallocHost during capture");
  const size_t size = (n + 255) / 256 * 256 + 256;
  *p = std::aligned_alloc(256, size);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xee, size);
  emu::g_pinned[reinterpret_cast<uintptr_t>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  return cudaMallocHost(p, n);
}
cudaError_t cudaFreeHost(void* p) {
  CaptureUnsafe("cudaFreeHost during capture");
  if (p == nullptr) return cudaSuccess;
  auto it = emu::g_pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == emu::g_pinned.end()) {
    Violation("cudaFreeHost of a pointer cudaMallocHost did not return");
    return cudaErrorInvalidValue;
  }
  emu::g_pinned.erase(it);
  std::free(p);
  return cudaSuccess;
}

static bool CheckKind(void* d, const void* s, size_t n, cudaMemcpyKind kind,
                      const char* what) {
  const bool dd = emu::IsDevice(d), sd = emu::IsDevice(s);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dd && !sd;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dd && sd;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dd && sd;
      break;
    case cudaMemcpyHostToHost:
      ok = !dd && !sd;
      break;
    default:
      break;
  }
  if (!ok) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s kind %d: dst %p (%s) src %p (%s) %zu",
                  what, static_cast<int>(kind), d, dd ? "device" : "host", s,
                  sd ? "device" : "host", n);
    Violation(buf);
  }
  // Bounds of device ranges.
  uintptr_t base;
  size_t size;
  for (const void* p : {static_cast<const void*>(d), s}) {
    if (emu::IsDevice(p)) {
      emu::Find(emu::g_dev, p, &base, &size);
      if (reinterpret_cast<uintptr_t>(p) + n > base + size) {
        char buf[160];
        std::snprintf(buf, sizeof(buf),
                      "%s: %zu bytes at %p overrun a device allocation of %zu",
                      what, n, p, size);
        Violation(buf);
        ok = false;
      }
    }
  }
  return ok;
}

cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  CaptureUnsafe("cudaMemcpy during capture");
  if (!CheckKind(d, s, n, k, "cudaMemcpy")) return cudaErrorInvalidValue;
  std::memcpy(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w,
                         size_t h, cudaMemcpyKind k) {
  CaptureUnsafe("cudaMemcpy2D during capture");
  if (w > dp || w > sp) return cudaErrorInvalidPitchValue;
  if (h > 0 && !CheckKind(d, s, (h - 1) * dp + w, k, "cudaMemcpy2D dst"))
    return cudaErrorInvalidValue;
  for (size_t r = 0; r < h; ++r) {
    std::memcpy(static_cast<char*>(d) + r * dp,
                static_cast<const char*>(s) + r * sp, w);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                            cudaStream_t st) {
  if (!CheckKind(d, s, n, k, "cudaMemcpyAsync")) return cudaErrorInvalidValue;
  emu::Stream* es = AsStream(st);
  if (es != nullptr && es->capturing) {
    const void* host = k == cudaMemcpyHostToDevice   ? s
                       : k == cudaMemcpyDeviceToHost ? d
                                                     : nullptr;
    if (host != nullptr && !emu::IsPinned(host)) {
      Violation("captured cudaMemcpyAsync with pageable host memory");
      es->invalidated = true;
    }
  }
  return emu::Enqueue(
      st, [=]() { std::memcpy(d, s, n); }, "cudaMemcpyAsync");
}
cudaError_t cudaMemset(void* d, int v, size_t n) {
  CaptureUnsafe("cudaMemset during capture");
  std::memset(d, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st) {
  if (!emu::IsDevice(d)) Violation("cudaMemsetAsync of non-device memory");
  return emu::Enqueue(
      st, [=]() { std::memset(d, v, n); }, "cudaMemsetAsync");
}

cudaError_t cudaDeviceSynchronize() {
  CaptureUnsafe("cudaDeviceSynchronize during capture");
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = emu::g_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  emu::g_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  std::memset(p, 0, sizeof(*p));
  std::strcpy(p->name, "EMU H200 (CPU emulation)");
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = size_t{141} << 30;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->multiProcessorCount = 132;
  p->maxThreadsPerBlock = 1024;
  p->warpSize = 32;
  p->regsPerBlock = 65536;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->l2CacheSize = 50 * 1024 * 1024;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  *t = size_t{141} << 30;
  *f = size_t{130} << 30;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::g_last;
  emu::g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return emu::g_last; }
const char* cudaGetErrorString(cudaError_t e) {
  static thread_local char buf[64];
  if (e == cudaSuccess) return "no error";
  std::snprintf(buf, sizeof(buf), "emulated CUDA error %d",
                static_cast<int>(e));
  return buf;
}
const char* cudaGetErrorName(cudaError_t e) {
  static thread_local char buf[64];
  if (e == cudaSuccess) return "cudaSuccess";
  std::snprintf(buf, sizeof(buf), "cudaError_%d", static_cast<int>(e));
  return buf;
}
cudaError_t cudaFuncSetAttribute(const void* f, cudaFuncAttribute a, int v) {
  if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (v > 227 * 1024 || v < 0) return cudaErrorInvalidValue;
    emu::g_smem_attr[f] = v;
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  switch (a) {
    case cudaDevAttrMultiProcessorCount:
      *v = 132;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *v = 227 * 1024;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *v = 48 * 1024;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *v = 1024;
      break;
    case cudaDevAttrWarpSize:
      *v = 32;
      break;
    case cudaDevAttrL2CacheSize:
      *v = 50 * 1024 * 1024;  // H200: 50 MiB
      break;
    default:
      *v = 0;
  }
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*,
                                                          int, size_t) {
  *n = 3;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n,
                                                                   const void*,
                                                                   int, size_t,
                                                                   unsigned) {
  *n = 3;
  return cudaSuccess;
}

// Streams and events.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  auto* st = new emu::Stream();
  st->id = ++emu::g_stream_ids;
  emu::g_streams.push_back(st);
  *s = reinterpret_cast<cudaStream_t>(st);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithFlags(s, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  emu::Stream* st = AsStream(s);
  if (st == nullptr) return cudaErrorInvalidResourceHandle;
  if (st->capturing) Violation("cudaStreamDestroy of a capturing stream");
  std::erase(emu::g_streams, st);
  delete st;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  emu::Stream* st = AsStream(s);
  if (st != nullptr && st->capturing) {
    Violation("cudaStreamSynchronize of the capturing stream");
    st->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (st == nullptr) CaptureUnsafe("cudaStreamSynchronize(legacy)");
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new emu::Event());
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, 0);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<emu::Event*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  auto* ev = reinterpret_cast<emu::Event*>(e);
  if (ev == nullptr) return cudaErrorInvalidResourceHandle;
  emu::Stream* st = AsStream(s);
  if (st != nullptr && st->capturing) {
    ev->captured_in = st->graph;
    return cudaSuccess;
  }
  if (st == nullptr) CaptureUnsafe("cudaEventRecord on the legacy stream");
  ev->recorded = true;
  ev->captured_in = nullptr;
  ev->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  auto* a = reinterpret_cast<emu::Event*>(start);
  auto* b = reinterpret_cast<emu::Event*>(end);
  if (a == nullptr || b == nullptr || ms == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  auto* ev = reinterpret_cast<emu::Event*>(e);
  if (ev == nullptr) return cudaErrorInvalidResourceHandle;
  if (ev->captured_in != nullptr) {
    Violation("cudaEventSynchronize of an event recorded in a capture");
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;  // never recorded: returns at once (as CUDA)
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  auto* ev = reinterpret_cast<emu::Event*>(e);
  if (ev == nullptr) return cudaErrorInvalidResourceHandle;
  emu::Stream* st = AsStream(s);
  if (st != nullptr && st->capturing && ev->captured_in != st->graph) {
    Violation("capturing stream waits on an event recorded outside it");
    st->invalidated = true;
    return cudaErrorStreamCaptureIsolation;
  }
  if (st == nullptr) CaptureUnsafe("cudaStreamWaitEvent on the legacy stream");
  return cudaSuccess;
}

// Graphs.
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  emu::Stream* st = AsStream(s);
  if (st == nullptr) return cudaErrorStreamCaptureUnsupported;
  if (st->capturing) return cudaErrorIllegalState;
  st->capturing = true;
  st->invalidated = false;
  st->graph = new emu::Graph();
  ++emu::g_capturing;
  ++emu::g_captures;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  emu::Stream* st = AsStream(s);
  if (st == nullptr || !st->capturing) return cudaErrorIllegalState;
  st->capturing = false;
  --emu::g_capturing;
  if (st->invalidated) {
    ++emu::g_failed_captures;
    delete st->graph;
    st->graph = nullptr;
    *g = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  *g = reinterpret_cast<cudaGraph_t>(st->graph);
  st->graph = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s,
                                  cudaStreamCaptureStatus* status) {
  emu::Stream* st = AsStream(s);
  *status = st != nullptr && st->capturing ? cudaStreamCaptureStatusActive
                                           : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g,
                                 unsigned long long) {
  if (g == nullptr) return cudaErrorInvalidValue;
  auto* copy = new emu::Graph(*reinterpret_cast<emu::Graph*>(g));
  *exec = reinterpret_cast<cudaGraphExec_t>(copy);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete reinterpret_cast<emu::Graph*>(g);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete reinterpret_cast<emu::Graph*>(e);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  auto* g = reinterpret_cast<emu::Graph*>(e);
  if (g == nullptr) return cudaErrorInvalidValue;
  return emu::Enqueue(
      s,
      [g]() {
        emu::NoteReplay();
        for (auto& n : g->nodes) n();
      },
      "cudaGraphLaunch");
}

}  // extern "C"
