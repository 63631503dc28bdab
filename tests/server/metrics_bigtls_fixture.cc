// Test fixture: a shared library with ~120 KiB of thread-local storage, like
// libcublasLt (~92 KiB). Linked into a process it lands in glibc's static TLS
// block, which every thread's stack must also hold.
extern "C" {
thread_local char pdserve_bigtls_block[120 * 1024];
int pdserve_bigtls_touch(int i) {
  pdserve_bigtls_block[i] = static_cast<char>(i);
  return pdserve_bigtls_block[i];
}
}
