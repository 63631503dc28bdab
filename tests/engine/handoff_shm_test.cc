// Same-host KV hand-offs through shared memory: what the exporter writes
// the importer reads exactly once, a wrong size or a foreign name is
// refused, and nothing is left in /dev/shm (taken, expired or at exit).
#include "engine/service/handoff_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace pdserve::service {
namespace {

bool Exists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

TEST(HandoffShmTest, HostIdIsStableAndNamesTheShmMount) {
  const std::string id = SharedMemoryHostId();
  ASSERT_FALSE(id.empty()) << "no /dev/shm or boot id on this machine";
  EXPECT_EQ(id, SharedMemoryHostId());
  EXPECT_NE(id.find(':'), std::string::npos);
}

TEST(HandoffShmTest, WrittenPartsAreReadOnceInOrder) {
  SharedMemoryLeases leases(int64_t{60} * 1000 * 1000 * 1000);
  const std::string name = leases.NextName();
  EXPECT_TRUE(IsHandoffShmName(name)) << name;
  EXPECT_NE(name, leases.NextName());
  std::string kv(3 << 20, '\0');
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<char>(i * 7);
  const std::string state = "linear-attention state";
  ASSERT_TRUE(WriteSharedMemory(name, {kv, state}).ok());
  leases.Add(name, 0);
  // A second object of the same name is refused (O_EXCL).
  EXPECT_FALSE(WriteSharedMemory(name, {state}).ok());
  absl::StatusOr<std::string> got = TakeSharedMemory(
      name, static_cast<int64_t>(kv.size() + state.size()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, kv + state);
  EXPECT_FALSE(Exists(name));
  EXPECT_EQ(TakeSharedMemory(name, 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(HandoffShmTest, AWrongSizeIsDataLossAndStillUnlinked) {
  SharedMemoryLeases leases(1);
  const std::string name = leases.NextName();
  ASSERT_TRUE(WriteSharedMemory(name, {"twelve bytes"}).ok());
  absl::StatusOr<std::string> got = TakeSharedMemory(name, 13);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("12 bytes"), std::string::npos)
      << got.status();
  EXPECT_FALSE(Exists(name));
}

TEST(HandoffShmTest, ForeignNamesAreNotOpened) {
  for (const char* name : {"", "/", "/pdserve-kv-", "/etc", "/other-1",
                           "/pdserve-kv-1/../x", "pdserve-kv-1"}) {
    EXPECT_FALSE(IsHandoffShmName(name)) << name;
    EXPECT_EQ(TakeSharedMemory(name, 0).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

TEST(HandoffShmTest, UntakenObjectsExpireAndGoAtExit) {
  std::string expired, kept;
  {
    SharedMemoryLeases leases(/*ttl_ns=*/100);
    expired = leases.NextName();
    kept = leases.NextName();
    ASSERT_TRUE(WriteSharedMemory(expired, {"a"}).ok());
    leases.Add(expired, 0);
    ASSERT_TRUE(WriteSharedMemory(kept, {"b"}).ok());
    leases.Add(kept, 150);  // sweeps at 150: `expired` is 150 ns old
    EXPECT_FALSE(Exists(expired));
    EXPECT_TRUE(Exists(kept));
    EXPECT_EQ(leases.size(), 1);
  }
  EXPECT_FALSE(Exists(kept));  // the destructor unlinked it
}

}  // namespace
}  // namespace pdserve::service
