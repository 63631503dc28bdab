// Images end to end (issue 19): `pdserve serve` on the tiny Qwen3.5 VL
// fixture (its safetensors checkpoint, tokenizer and chat template), a chat
// request with two images of different sizes over gRPC (file bytes, then
// data: URLs) and over the OpenAI API (streamed, image_url data: URLs) and
// the Anthropic API (base64 image blocks): each streams the 16 greedy
// tokens transformers generates for the same request
// (tests/data/vision/tiny_qwen35_vl/chat_golden.json). Remote URLs and too
// many images are refused with the numbers; no process crashes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

const std::string kVision = std::string(PDSERVE_TESTDATA_DIR) + "/vision";
const std::string kModel = kVision + "/tiny_qwen35_vl";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json Golden() {
  return nlohmann::json::parse(ReadFile(kModel + "/chat_golden.json"));
}

std::string DataUrl(const std::string& image) {
  const char* media = absl::EndsWith(image, ".jpg") ? "image/jpeg" : "image/png";
  return absl::StrCat("data:", media, ";base64,",
                      absl::Base64Escape(ReadFile(kVision + "/images/" + image)));
}

// The golden chat as a GenerateRequest; images as bytes or data: URLs.
v1::GenerateRequest GrpcRequest(bool as_urls) {
  v1::GenerateRequest req;
  v1::ChatMessage* m = req.add_messages();
  m->set_role("user");
  const nlohmann::json golden = Golden();  // outlives the loop
  for (const auto& part : golden["messages"][0]["content"]) {
    if (!part.contains("image")) {
      m->add_parts()->set_text(part["text"].get<std::string>());
      continue;
    }
    const std::string name = part["image"];
    v1::Image* img = m->add_parts()->mutable_image();
    if (as_urls) {
      img->set_url(DataUrl(name));
    } else {
      img->set_data(ReadFile(kVision + "/images/" + name));
    }
  }
  req.mutable_sampling()->set_temperature(0);
  req.set_max_tokens(16);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  return req;
}

// OpenAI content parts or Anthropic blocks of the golden chat.
nlohmann::json ApiContent(bool anthropic) {
  nlohmann::json content = nlohmann::json::array();
  const nlohmann::json golden = Golden();  // outlives the loop
  for (const auto& part : golden["messages"][0]["content"]) {
    if (!part.contains("image")) {
      content.push_back({{"type", "text"}, {"text", part["text"]}});
      continue;
    }
    const std::string url = DataUrl(part["image"]);
    if (!anthropic) {
      content.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
      continue;
    }
    const size_t comma = url.find(',');
    content.push_back(
        {{"type", "image"},
         {"source",
          {{"type", "base64"},
           {"media_type", url.substr(5, url.find(';') - 5)},
           {"data", url.substr(comma + 1)}}}});
  }
  return content;
}

struct HttpReply {
  int status = 0;
  std::string body;
};

// POSTs `body` with curl (-N: the SSE events as they come).
HttpReply Post(const std::string& url, const nlohmann::json& body) {
  const std::string base = std::filesystem::temp_directory_path() /
                           absl::StrCat("pdserve-vision-", getpid());
  std::ofstream(base + ".json") << body.dump();
  auto code = RunCommand(absl::StrCat(
      "curl -s -N -o ", base, ".out -w '%{http_code}' -X POST -H "
      "'Content-Type: application/json' -H 'anthropic-version: 2023-06-01' "
      "--data-binary @", base, ".json ", url));
  HttpReply r;
  if (code.ok()) r.status = std::atoi(code->c_str());
  r.body = ReadFile(base + ".out");
  std::filesystem::remove(base + ".json");
  std::filesystem::remove(base + ".out");
  return r;
}

// The text of an OpenAI chat stream (choices[0].delta.content pieces).
std::string StreamText(const std::string& sse) {
  std::string text;
  for (absl::string_view line : absl::StrSplit(sse, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const auto& d = j["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) {
      text += d["content"].get<std::string>();
    }
  }
  return text;
}

class VisionServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = ServeInstance::Start({"--model", kModel, "--threads", "1",
                                   "--max-seq-len", "256"});
    ASSERT_TRUE(s.ok()) << s.status();
    serve_ = s->release();
  }
  static void TearDownTestSuite() {
    delete serve_;
    serve_ = nullptr;
  }
  static ServeInstance* serve_;
};
ServeInstance* VisionServeTest::serve_ = nullptr;

TEST_F(VisionServeTest, GrpcStreamsTheGoldenTokens) {
  ASSERT_NE(serve_, nullptr);
  const auto golden = Golden()["decode_ids"].get<std::vector<int32_t>>();
  auto stub = serve_->Client();
  for (bool urls : {false, true}) {
    GenerateResult r = Generate(stub.get(), GrpcRequest(urls));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << serve_->log();
    EXPECT_EQ(r.token_ids, golden) << (urls ? "data: URLs" : "bytes");
    EXPECT_EQ(r.final.usage().prompt_tokens(),
              static_cast<int>(Golden()["prompt_ids"].size()));
    EXPECT_GT(r.deltas, 1);  // streamed, not one block
  }
}

TEST_F(VisionServeTest, OpenAiAndAnthropicStreamTheSameText) {
  ASSERT_NE(serve_, nullptr);
  if (!RunCommand("curl --version").ok()) GTEST_SKIP() << "no curl";
  auto stub = serve_->Client();
  GenerateResult grpc = Generate(stub.get(), GrpcRequest(false));
  ASSERT_TRUE(grpc.status.ok());
  const nlohmann::json chat = {
      {"messages", {{{"role", "user"}, {"content", ApiContent(false)}}}},
      {"stream", true},     {"temperature", 0},
      {"max_tokens", 16},   {"ignore_eos", true}};
  HttpReply r = Post(serve_->http_url() + "/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(StreamText(r.body), grpc.text);
  const nlohmann::json msgs = {
      {"messages", {{{"role", "user"}, {"content", ApiContent(true)}}}},
      {"temperature", 0}, {"max_tokens", 16}, {"ignore_eos", true}};
  r = Post(serve_->http_url() + "/messages", msgs);
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json body = nlohmann::json::parse(r.body);
  ASSERT_FALSE(body["content"].empty()) << r.body;
  EXPECT_EQ(body["content"][0]["text"].get<std::string>(), grpc.text);
}

TEST_F(VisionServeTest, RefusalsNameTheNumbers) {
  ASSERT_NE(serve_, nullptr);
  auto stub = serve_->Client();
  v1::GenerateRequest many = GrpcRequest(false);
  for (int i = 0; i < 3; ++i) {
    *many.mutable_messages(0)->add_parts() = many.messages(0).parts(0);
  }
  GenerateResult r = Generate(stub.get(), many);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(r.status.error_message(),
                                "the request has 5 images, more than the "
                                "limit of 4 (--max-images)"))
      << r.status.error_message();
  if (RunCommand("curl --version").ok()) {
    nlohmann::json content = ApiContent(false);
    content[0]["image_url"]["url"] = "https://example.com/cat.png";
    HttpReply h = Post(serve_->http_url() + "/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", content}}}},
                        {"max_tokens", 4}});
    EXPECT_EQ(h.status, 400) << h.body;
    EXPECT_TRUE(absl::StrContains(h.body, "remote image URLs are not fetched"))
        << h.body;
  }
  // Still serving.
  EXPECT_TRUE(Generate(stub.get(), GrpcRequest(false)).status.ok());
}

}  // namespace
}  // namespace pdserve::testing
