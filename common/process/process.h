// Process plumbing shared by the pdserve processes: termination-signal
// handling and a free loopback port for child processes. No gRPC, no
// configuration: the bottom of the library graph (proto/ keeps the gRPC
// helpers: status mapping, server start-up with health, channels).
#ifndef PDSERVE_COMMON_PROCESS_PROCESS_H_
#define PDSERVE_COMMON_PROCESS_PROCESS_H_

#include <vector>

namespace pdserve::process {

// Blocks SIGINT and SIGTERM in the calling thread and every thread created
// after it (call first thing in main), so WaitForTerminationSignal can take
// them synchronously.
void BlockTerminationSignals();
// Waits for SIGINT or SIGTERM; returns the signal number.
int WaitForTerminationSignal();

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released), or 0 when none could be bound. Racy by nature: for children
// started right after.
int FreeLoopbackPort();

// `count` distinct TCP ports on 127.0.0.1, none of them in `taken` (ports
// the caller already handed out, e.g. ones given on the command line): all
// are held bound at once while they are picked, so one call never returns a
// port twice, and released together before returning. Fewer than `count`
// (possibly none) when the kernel runs out. Racy against other processes in
// the same way as FreeLoopbackPort.
std::vector<int> FreeLoopbackPorts(int count, const std::vector<int>& taken);

}  // namespace pdserve::process

#endif  // PDSERVE_COMMON_PROCESS_PROCESS_H_
