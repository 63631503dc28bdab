// FreeLoopbackPorts: one pass hands out distinct ports, never a taken one,
// and each is bindable again once the call returns.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "common/process/process.h"
#include "gtest/gtest.h"

namespace pdserve::process {
namespace {

bool CanBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

TEST(FreeLoopbackPortsTest, DistinctAvoidTakenAndAreReleased) {
  const std::vector<int> first = FreeLoopbackPorts(8, {});
  ASSERT_EQ(first.size(), 8u);
  // The first batch is now "taken": a second pass must avoid all of it,
  // even though the kernel may offer those ports again.
  const std::vector<int> second = FreeLoopbackPorts(40, first);
  ASSERT_EQ(second.size(), 40u);
  std::set<int> seen(first.begin(), first.end());
  for (int p : second) {
    EXPECT_GT(p, 0);
    EXPECT_TRUE(seen.insert(p).second) << "port " << p << " handed out twice";
  }
  for (int p : first) EXPECT_TRUE(CanBind(p)) << "port " << p << " still held";
}

TEST(FreeLoopbackPortsTest, ZeroCountAndSingle) {
  EXPECT_TRUE(FreeLoopbackPorts(0, {}).empty());
  EXPECT_GT(FreeLoopbackPort(), 0);
}

}  // namespace
}  // namespace pdserve::process
