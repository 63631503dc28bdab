// LiveRequestIds: a live id is refused to another handle with ALREADY_EXISTS
// naming it; closing the first request's sink frees it; empty ids are free.
#include "scheduler/live_request_ids.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::scheduler {
namespace {

using ::testing::HasSubstr;

class RecordingSink : public EventSink {
 public:
  void Send(const v1::TokenEvent&) override { ++sent; }
  void Close(const grpc::Status& s) override { closed.push_back(s); }
  int sent = 0;
  std::vector<grpc::Status> closed;
};

TEST(LiveRequestIdsTest, RefusesALiveIdUntilItsSinkCloses) {
  LiveRequestIds ids;
  ASSERT_TRUE(ids.Claim("fe-a-1", 1).ok());
  const absl::Status dup = ids.Claim("fe-a-1", 2);
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.message(), HasSubstr("\"fe-a-1\""));
  EXPECT_TRUE(ids.Claim("fe-b-1", 3).ok());  // another front end's id
  EXPECT_EQ(ids.size(), 2);

  auto inner = std::make_shared<RecordingSink>();
  std::shared_ptr<EventSink> sink = ids.Releasing(inner, "fe-a-1", 1);
  sink->Send(v1::TokenEvent());
  EXPECT_EQ(inner->sent, 1);
  EXPECT_FALSE(ids.Claim("fe-a-1", 4).ok());
  sink->Close(grpc::Status::OK);
  ASSERT_EQ(inner->closed.size(), 1u);
  EXPECT_TRUE(ids.Claim("fe-a-1", 4).ok());
  EXPECT_EQ(ids.size(), 2);
}

TEST(LiveRequestIdsTest, ReleaseByAnotherHandleKeepsTheId) {
  LiveRequestIds ids;
  ASSERT_TRUE(ids.Claim("x", 1).ok());
  ids.Release("x", 2);  // a refused duplicate's close must not free it
  EXPECT_FALSE(ids.Claim("x", 3).ok());
  ids.Release("x", 1);
  EXPECT_TRUE(ids.Claim("x", 3).ok());
}

TEST(LiveRequestIdsTest, EmptyIdsAreNotTracked) {
  LiveRequestIds ids;
  EXPECT_TRUE(ids.Claim("", 1).ok());
  EXPECT_TRUE(ids.Claim("", 2).ok());
  EXPECT_EQ(ids.size(), 0);
}

}  // namespace
}  // namespace pdserve::scheduler
