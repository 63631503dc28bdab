// Sequence state and the fixed-shape KV capacity contract checks.
#include "engine/kv/sequence_state.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::ElementsAre;

TEST(SequenceStateTest, AdvanceSetsMaskAtNextPos) {
  absl::StatusOr<SequenceState> s = SequenceState::Create(5, /*rope_delta=*/3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->next_pos(), 0);
  EXPECT_EQ(s->rope_position(), 3);
  ASSERT_TRUE(s->Advance(2).ok());
  EXPECT_THAT(s->mask(), ElementsAre(1, 1, 0, 0, 0));
  EXPECT_EQ(s->next_pos(), 2);
  EXPECT_EQ(s->rope_position(), 5);
  ASSERT_TRUE(s->Advance().ok());
  EXPECT_THAT(s->mask(), ElementsAre(1, 1, 1, 0, 0));
  EXPECT_EQ(s->remaining(), 2);
  EXPECT_FALSE(s->full());
}

TEST(SequenceStateTest, NextPosIsCountOfValidPositions) {
  absl::StatusOr<SequenceState> s = SequenceState::Create(64);
  ASSERT_TRUE(s.ok());
  for (int step = 1; step <= 64; ++step) {
    ASSERT_TRUE(s->Advance().ok());
    int64_t sum = 0;
    for (uint8_t v : s->mask()) sum += v;
    EXPECT_EQ(s->next_pos(), sum);
  }
  EXPECT_TRUE(s->full());
}

TEST(SequenceStateTest, DecodeAtFullCapacityIsOutOfRange) {
  absl::StatusOr<SequenceState> s = SequenceState::Create(4);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Advance(4).ok());
  absl::Status st = s->Advance();
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(),
            "decode step at position 4 exceeds the sequence capacity "
            "max_seq_len=4");
  EXPECT_EQ(s->next_pos(), 4);  // unchanged
}

TEST(SequenceStateTest, ChunkPastCapacityLeavesStateUnchanged) {
  absl::StatusOr<SequenceState> s = SequenceState::Create(512);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->Advance(510).ok());
  absl::Status st = s->Advance(7);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(),
            "chunk of 7 tokens at position 510 exceeds the sequence capacity "
            "max_seq_len=512");
  EXPECT_EQ(s->next_pos(), 510);
  EXPECT_EQ(s->mask()[510], 0);
  EXPECT_EQ(s->Advance(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SequenceStateTest, CreateRejectsNonPositiveCapacity) {
  absl::StatusOr<SequenceState> s = SequenceState::Create(0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "sequence capacity must be positive, got 0");
}

TEST(ContractTest, PromptLongerThanCapacity) {
  EXPECT_TRUE(CheckPromptFits(512, 512).ok());
  absl::Status st = CheckPromptFits(600, 512);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "prompt of 600 tokens is longer than the sequence capacity "
            "max_seq_len=512");
}

TEST(ContractTest, PrefillCapacityDiffersFromDecodeCapacity) {
  EXPECT_TRUE(CheckCapacityMatch(512, 512).ok());
  absl::Status st = CheckCapacityMatch(512, 1024);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "prefill KV capacity 512 != decode KV capacity 1024");
}

TEST(ContractTest, MaskValuesOtherThanZeroOne) {
  std::vector<int32_t> mask = {1, 1, 1, 1, 1, 1, 1, 2, 0};
  absl::Status st = CheckMaskValues(mask);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "mask value 2 at position 7 is not 0 or 1");
  mask[7] = -1;
  EXPECT_EQ(CheckMaskValues(mask).message(),
            "mask value -1 at position 7 is not 0 or 1");
  mask[7] = 1;
  EXPECT_TRUE(CheckMaskValues(mask).ok());
}

TEST(ContractTest, MaskNotContiguousPrefix) {
  std::vector<int32_t> mask = {1, 1, 1, 0, 0, 1, 0};
  absl::Status st = CheckMaskPrefix(mask);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "mask is not a contiguous prefix: position 5 is valid after "
            "invalid position 3");
  EXPECT_TRUE(CheckMaskPrefix(std::vector<int32_t>{1, 1, 0, 0}).ok());
  EXPECT_TRUE(CheckMaskPrefix(std::vector<int32_t>{0, 0}).ok());
  EXPECT_TRUE(CheckMaskPrefix(std::vector<int32_t>{1, 1}).ok());
  EXPECT_FALSE(CheckMaskPrefix(std::vector<int32_t>{0, 1}).ok());
}

TEST(ContractTest, DecodeCapacity) {
  EXPECT_TRUE(CheckDecodeCapacity(511, 512).ok());
  absl::Status st = CheckDecodeCapacity(512, 512);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(),
            "decode step at position 512 exceeds the sequence capacity "
            "max_seq_len=512");
}

TEST(ContractTest, MaxSeqLenAgainstModelAndPool) {
  EXPECT_TRUE(CheckMaxSeqLen(2048, 2048, 4096).ok());
  EXPECT_EQ(CheckMaxSeqLen(4096, 2048, 8192).message(),
            "max_seq_len=4096 exceeds the model context length 2048");
  EXPECT_EQ(CheckMaxSeqLen(2048, 8192, 1024).message(),
            "max_seq_len=2048 exceeds the KV pool capacity of 1024 tokens");
  EXPECT_EQ(CheckMaxSeqLen(0, 8192, 1024).message(),
            "max_seq_len must be positive, got 0");
  EXPECT_EQ(CheckMaxSeqLen(-5, 8192, 1024).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ContractTest, ResolveMaxSeqLenIsTheOneCapacityRule) {
  EXPECT_EQ(*ResolveMaxSeqLen(0, 8192, 4096), 4096);    // capped by the pool
  EXPECT_EQ(*ResolveMaxSeqLen(0, 2048, 4096), 2048);    // the context length
  EXPECT_EQ(*ResolveMaxSeqLen(0, 0, 4096), 4096);       // no context known
  EXPECT_EQ(*ResolveMaxSeqLen(1024, 8192, 4096), 1024);  // as written
  EXPECT_EQ(ResolveMaxSeqLen(9000, 8192, 16384).status().message(),
            "max_seq_len=9000 exceeds the model context length 8192");
  EXPECT_EQ(ResolveMaxSeqLen(4096, 8192, 1024).status().message(),
            "max_seq_len=4096 exceeds the KV pool capacity of 1024 tokens");
  EXPECT_EQ(ResolveMaxSeqLen(-1, 8192, 1024).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FromMaskTest, RebuildsHandedOverSequence) {
  std::vector<int32_t> mask = {1, 1, 1, 0, 0, 0};
  absl::StatusOr<SequenceState> s = SequenceState::FromMask(mask, 6, 6, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->next_pos(), 3);
  EXPECT_EQ(s->rope_position(), 5);
  EXPECT_THAT(s->mask(), ElementsAre(1, 1, 1, 0, 0, 0));
}

TEST(FromMaskTest, EachContractErrorSurfaces) {
  std::vector<int32_t> ok = {1, 1, 0, 0};
  EXPECT_EQ(SequenceState::FromMask(ok, 4, 8).status().message(),
            "prefill KV capacity 4 != decode KV capacity 8");
  EXPECT_EQ(SequenceState::FromMask(ok, 5, 5).status().message(),
            "mask width 4 != sequence capacity 5");
  std::vector<int32_t> bad_value = {1, 3, 0, 0};
  EXPECT_EQ(SequenceState::FromMask(bad_value, 4, 4).status().message(),
            "mask value 3 at position 1 is not 0 or 1");
  std::vector<int32_t> gap = {1, 0, 1, 0};
  EXPECT_EQ(SequenceState::FromMask(gap, 4, 4).status().message(),
            "mask is not a contiguous prefix: position 2 is valid after "
            "invalid position 1");
  std::vector<int32_t> full = {1, 1, 1, 1};
  absl::StatusOr<SequenceState> s = SequenceState::FromMask(full, 4, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->full());
  EXPECT_EQ(s->Advance().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace pdserve
