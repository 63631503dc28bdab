// The engine's pipelined step channel (Engine.StepStream) driven directly,
// as the scheduler drives it, against a real engine process (the one of a
// `pdserve serve` on loopback; its scheduler stays idle, and the sequence
// ids here are the test's own): out-of-band cancellation (cancel_ids)
// overtakes the requests queued behind the running step.
#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

using StepStream = grpc::ClientReaderWriter<v1::StepRequest, v1::StepResponse>;

constexpr uint64_t kLong = 0x7e570001, kShort = 0x7e570002,
                   kQueued = 0x7e570003, kUnknown = 0x7e57ffff;

class EngineStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Stories260K().empty())
      GTEST_SKIP() << "no ../shared/models/stories260K";
    auto s = ServeInstance::Start({"--model", Stories260K(), "--tokenizer",
                                   Stories260KTokenizer(), "--kv-memory", "64M",
                                   "--threads", "1"});
    ASSERT_TRUE(s.ok()) << s.status();
    serve_ = std::move(*s);
    engine_ = serve_->EngineClient();
    idle_ = Info();
    ASSERT_EQ(idle_.active_sequences(), 0);
  }

  v1::EngineInfo Info() {
    grpc::ClientContext ctx;
    v1::EngineInfo info;
    EXPECT_TRUE(engine_->GetInfo(&ctx, {}, &info).ok());
    return info;
  }

  // Admission of `id` with a prompt of `len` tokens (ids inside the
  // 512-token vocabulary), generating at most `max_new` tokens.
  static void Admit(v1::StepRequest* req, uint64_t id, int len, int max_new) {
    v1::AddSequenceRequest* add = req->add_admit();
    add->set_seq_id(id);
    for (int i = 0; i < len; ++i) add->add_prompt_ids(1 + (i * 37) % 500);
    add->set_max_seq_len(len + max_new);
    add->set_max_new_tokens(max_new);
  }
  static void Item(v1::StepRequest* req, uint64_t id, int tokens) {
    v1::StepItem* item = req->add_items();
    item->set_seq_id(id);
    item->set_num_tokens(tokens);
  }
  // Writes step A, which admits and prefills a long prompt (milliseconds of
  // work; `also` is decoded in the same step unless 0), then `b`, then
  // `cancel`: both are on the wire while A runs. Reads A's and B's results.
  void RunBehindLongPrefill(StepStream* stream, uint64_t also,
                            const v1::StepRequest& b,
                            const v1::StepRequest& cancel,
                            v1::StepResponse* resp_a,
                            v1::StepResponse* resp_b) {
    const int long_prompt = std::min<int>(
        480, idle_.max_step_tokens() > 0 ? idle_.max_step_tokens() - 1 : 480);
    v1::StepRequest a;
    Admit(&a, kLong, long_prompt, 4);
    Item(&a, kLong, long_prompt);
    if (also != 0) Item(&a, also, 1);
    ASSERT_TRUE(stream->Write(a));
    ASSERT_TRUE(stream->Write(b));
    ASSERT_TRUE(stream->Write(cancel));
    ASSERT_TRUE(stream->Read(resp_a));
    ASSERT_TRUE(stream->Read(resp_b));
    EXPECT_TRUE(HasOutput(*resp_a, kLong));
  }
  static bool HasOutput(const v1::StepResponse& resp, uint64_t id) {
    for (const v1::SequenceOutput& out : resp.outputs()) {
      if (out.seq_id() == id) return true;
    }
    return false;
  }

  std::unique_ptr<ServeInstance> serve_;
  std::unique_ptr<v1::Engine::Stub> engine_;
  v1::EngineInfo idle_;
};

// Step A prefills a long prompt (milliseconds of work) beside a decode of the
// short sequence; B (a decode of the short sequence) and a cancellation of it
// are written right behind A, so both are read while A runs (or before it
// starts). The cancellation is applied before B: B's item is skipped and the
// pages are back before anything else runs. An unknown id in cancel_ids is ignored, and a
// cancellation only message gets no response.
TEST_F(EngineStreamTest, CancellationOvertakesTheQueuedStep) {
  grpc::ClientContext ctx;
  std::unique_ptr<StepStream> stream = engine_->StepStream(&ctx);
  v1::StepRequest prefill_short;
  Admit(&prefill_short, kShort, 8, 100);
  Item(&prefill_short, kShort, 8);
  ASSERT_TRUE(stream->Write(prefill_short));
  v1::StepResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_TRUE(HasOutput(resp, kShort));
  const int64_t short_pages = idle_.free_pages() - resp.free_pages();
  ASSERT_GT(short_pages, 0);

  v1::StepRequest b, cancel;
  Item(&b, kShort, 1);
  cancel.add_cancel_ids(kShort);
  cancel.add_cancel_ids(kUnknown);
  v1::StepResponse resp_a, resp_b;
  ASSERT_NO_FATAL_FAILURE(
      RunBehindLongPrefill(stream.get(), kShort, b, cancel, &resp_a, &resp_b));
  // A ran the short sequence unless the cancellation was read before A even
  // started (a loaded machine); B, queued behind A, never does.
  EXPECT_FALSE(HasOutput(resp_b, kShort))
      << "the queued step ran the cancelled sequence";
  EXPECT_EQ(resp_b.outputs_size(), 0);
  const v1::EngineInfo after_cancel = Info();
  EXPECT_EQ(after_cancel.active_sequences(), 1);  // the long one
  EXPECT_EQ(after_cancel.free_pages(), resp_b.free_pages());
  if (HasOutput(resp_a, kShort)) {
    EXPECT_GE(resp_b.free_pages(), resp_a.free_pages() + short_pages);
  }

  // The scheduler's own release of the cancelled id, with the long one's.
  v1::StepRequest release;
  release.add_release_ids(kShort);
  release.add_release_ids(kLong);
  ASSERT_TRUE(stream->Write(release));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.free_pages(), idle_.total_pages());
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&resp));  // no response for the cancel message
  EXPECT_TRUE(stream->Finish().ok());
}

// A cancellation that reaches the engine while the admission is still
// queued: the admission and its items are skipped (no rejection reported),
// nothing is held afterwards, and the same stream keeps working.
TEST_F(EngineStreamTest, CancellationOfAQueuedAdmissionSkipsIt) {
  grpc::ClientContext ctx;
  std::unique_ptr<StepStream> stream = engine_->StepStream(&ctx);
  v1::StepRequest b, cancel, release;
  Admit(&b, kQueued, 16, 8);
  Item(&b, kQueued, 16);
  cancel.add_cancel_ids(kQueued);
  v1::StepResponse resp_a, resp_b;
  ASSERT_NO_FATAL_FAILURE(
      RunBehindLongPrefill(stream.get(), 0, b, cancel, &resp_a, &resp_b));
  EXPECT_EQ(resp_b.outputs_size(), 0);
  EXPECT_EQ(resp_b.rejected_size(), 0);
  EXPECT_EQ(resp_b.free_pages(), resp_a.free_pages());
  EXPECT_EQ(Info().active_sequences(), 1);
  // Released as the scheduler would; a later admission of a new id runs.
  release.add_release_ids(kQueued);
  release.add_release_ids(kLong);
  Admit(&release, kShort, 8, 2);
  Item(&release, kShort, 8);
  ASSERT_TRUE(stream->Write(release));
  v1::StepResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_TRUE(HasOutput(resp, kShort));
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_TRUE(stream->Finish().ok());
  // The stream's end released what it still held.
  const v1::EngineInfo end = WaitEngineIdle(engine_.get());
  EXPECT_EQ(end.active_sequences(), 0);
  EXPECT_EQ(end.free_pages(), idle_.total_pages());
}

}  // namespace
}  // namespace pdserve::testing
