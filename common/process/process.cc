#include "common/process/process.h"

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace pdserve::process {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Binds a new socket to 127.0.0.1:0 and keeps it open (its fd is appended
// to `held_fds`); returns the port, or 0 when no socket could be bound.
int BindEphemeralLoopbackPort(std::vector<int>& held_fds) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  held_fds.push_back(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return 0;
  }
  return ntohs(addr.sin_port);
}

}  // namespace

void BlockTerminationSignals() {
  const sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  const sigset_t set = TerminationSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int FreeLoopbackPort() {
  const std::vector<int> ports = FreeLoopbackPorts(1, {});
  return ports.empty() ? 0 : ports[0];
}

std::vector<int> FreeLoopbackPorts(int count, const std::vector<int>& taken) {
  std::vector<int> held_fds, ports;
  // A port in `taken` stays held too, so the kernel cannot offer it again;
  // the bound on attempts keeps a kernel that repeats itself from looping.
  for (int attempt = 0;
       static_cast<int>(ports.size()) < count && attempt < 4 * count + 64;
       ++attempt) {
    const int port = BindEphemeralLoopbackPort(held_fds);
    if (port <= 0) break;
    if (std::find(taken.begin(), taken.end(), port) == taken.end()) {
      ports.push_back(port);
    }
  }
  for (int fd : held_fds) close(fd);
  return ports;
}

}  // namespace pdserve::process
