// Images in requests (the front end's side): data: URLs and their refusals,
// the byte / pixel / count limits with their numbers, the OpenAI image_url
// and Anthropic image blocks onto content parts, and a whole chat request
// with two images prepared on the tiny Qwen3.5 VL fixture's tokenizer and
// template: its prompt ids equal transformers' (processor expansion).
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/frontend/anthropic_api.h"
#include "server/frontend/image_prep.h"
#include "server/frontend/openai_api.h"
#include "server/frontend/request_prep.h"
#include "engine/loader/model_loader.h"
#include "tests/engine/vision_test_util.h"

namespace pdserve::frontend {
namespace {

using ::testing::HasSubstr;
using vision_test::kTinyVlDir;
using vision_test::kVisionDir;
using vision_test::ReadBytes;
using vision_test::ReadJson;

std::string Png() { return ReadBytes(kVisionDir + "/images/noise_48x64.png"); }
std::string DataUrl(const std::string& bytes, const char* media = "image/png") {
  return absl::StrCat("data:", media, ";base64,", absl::Base64Escape(bytes));
}
std::string Message(const absl::Status& s) { return std::string(s.message()); }

VisionConfig TinyVision() {
  auto c = ReadModelConfig(kTinyVlDir);
  EXPECT_TRUE(c.ok()) << c.status();
  return c->vision;
}

TEST(ImageDataUrlTest, DecodesBase64AndPercentForms) {
  const std::string png = Png();
  auto b = DecodeImageDataUrl(DataUrl(png), "f");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, png);
  auto p = DecodeImageDataUrl("data:,a%20b", "f");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "a b");
  EXPECT_TRUE(DecodeImageDataUrl(DataUrl(png, "IMAGE/JPEG"), "f").ok());
}

TEST(ImageDataUrlTest, RefusesRemoteUrlsAndBadData) {
  const struct {
    const char* url;
    const char* message;
  } cases[] = {
      {"https://example.com/cat.png",
       "f: remote image URLs are not fetched (scheme 'https')"},
      {"file:///etc/passwd", "remote image URLs are not fetched (scheme 'file')"},
      {"cat.png", "f: expected a data: URL"},
      {"data:image/gif;base64,R0lG", "media type 'image/gif' is not supported"},
      {"data:image/png;base64,!!!", "are not valid base64"},
      {"data:image/png;base64", "has no ','"},
  };
  for (const auto& c : cases) {
    auto r = DecodeImageDataUrl(c.url, "f");
    ASSERT_FALSE(r.ok()) << c.url;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(r.status()), HasSubstr(c.message)) << c.url;
  }
}

TEST(PrepareImageTest, SizesTheImageAsTheProcessor) {
  v1::Image img;
  img.set_data(Png());
  auto p = PrepareImage(img, "f", TinyVision(), ImageLimits());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->grid, (ImageGrid{1, 4, 4}));
  EXPECT_EQ(p->tokens, 4);
  img.clear_data();
  img.set_url(DataUrl(Png()));
  p = PrepareImage(img, "f", TinyVision(), ImageLimits());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->data, Png());
}

TEST(PrepareImageTest, LimitsNameTheNumbers) {
  const VisionConfig v = TinyVision();
  v1::Image img;
  img.set_data(Png());
  ImageLimits small;
  small.max_bytes = 1000;
  auto p = PrepareImage(img, "messages[0].parts[0].image", v, small);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(Message(p.status()),
              HasSubstr(absl::StrCat("messages[0].parts[0].image: ",
                                     Png().size(), " bytes, more than the ",
                                     "limit of 1000 (--max-image-bytes)")));
  small = ImageLimits();
  small.max_pixels = 1000;
  p = PrepareImage(img, "f", v, small);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(Message(p.status()),
              HasSubstr("64 x 48 = 3072 pixels, more than the limit of 1000 "
                        "(--max-image-pixels)"));
  img.set_url(DataUrl(Png()));
  p = PrepareImage(img, "f", v, ImageLimits());
  EXPECT_THAT(Message(p.status()), HasSubstr("exactly one of data and url"));
  v1::Image tall;
  tall.set_data(ReadBytes(kVisionDir + "/images/tall_20x300.png"));
  EXPECT_TRUE(PrepareImage(tall, "f", v, ImageLimits()).ok());
  v1::Image junk;
  junk.set_data("GIF89a");
  p = PrepareImage(junk, "f", v, ImageLimits());
  EXPECT_THAT(Message(p.status()), HasSubstr("f: not a PNG, JPEG or WebP"));
}

v1::GenerateRequest TwoImageRequest() {
  v1::GenerateRequest req;
  v1::ChatMessage* m = req.add_messages();
  m->set_role("user");
  const nlohmann::json golden = ReadJson(kTinyVlDir + "/chat_golden.json");
  for (const auto& part : golden["messages"][0]["content"]) {
    if (part.contains("image")) {
      m->add_parts()->mutable_image()->set_data(
          ReadBytes(kVisionDir + "/images/" + part["image"].get<std::string>()));
    } else {
      m->add_parts()->set_text(part["text"].get<std::string>());
    }
  }
  return req;
}

TEST(PrepareRequestImagesTest, CountsAndModelsWithoutVision) {
  const v1::GenerateRequest req = TwoImageRequest();
  ImageLimits one;
  one.max_images = 1;
  auto r = PrepareRequestImages(req, "m", TinyVision(), one);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Message(r.status()),
              HasSubstr("the request has 2 images, more than the limit of 1 "
                        "(--max-images)"));
  r = PrepareRequestImages(req, "text-model", VisionConfig(), ImageLimits());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Message(r.status()),
              HasSubstr("model text-model does not take images"));
  r = PrepareRequestImages(req, "m", TinyVision(), ImageLimits());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].tokens, 6);
  EXPECT_EQ((*r)[1].tokens, 4);
}

TEST(ExpandImagePlaceholdersTest, ExpandsEachImageOrRefuses) {
  std::vector<PreparedImage> images(2);
  images[0].tokens = 3;
  images[1].tokens = 1;
  std::vector<int32_t> ids = {1, 75, 5, 75, 6};
  ASSERT_TRUE(ExpandImagePlaceholders(&ids, 75, images).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 75, 75, 75, 5, 75, 6}));
  std::vector<int32_t> one = {1, 75};
  absl::Status s = ExpandImagePlaceholders(&one, 75, images);
  EXPECT_THAT(Message(s), HasSubstr("rendered 1 image placeholders for 2 "
                                    "images"));
}

TEST(PrepareRequestTest, ChatWithTwoImagesGivesTheReferencePromptIds) {
  auto model = LoadModelContext(kTinyVlDir + "/tokenizer.json", "tiny");
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->max_seq_len = 256;
  (*model)->vision = TinyVision();
  v1::GenerateRequest req = TwoImageRequest();
  auto prepared = PrepareRequest(req, **model);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const nlohmann::json golden = ReadJson(kTinyVlDir + "/chat_golden.json");
  EXPECT_EQ(prepared->prompt_ids,
            golden["prompt_ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(prepared->images.size(), 2u);
  EXPECT_EQ(prepared->images[0].grid_h(), 6);
  EXPECT_EQ(prepared->images[1].grid_w(), 4);
  // Parts and content together are refused.
  req.mutable_messages(0)->set_content("hi");
  EXPECT_THAT(Message(PrepareRequest(req, **model).status()),
              HasSubstr("messages[0] has both content and 4 parts"));
}

TEST(ApiImagesTest, OpenAiImageUrlPartsBecomeImages) {
  const std::string url = DataUrl(Png());
  auto api = ParseChatRequest(Json::parse(absl::StrCat(
      R"({"messages": [{"role": "user", "content": [)",
      R"({"type": "text", "text": "what is it"},)",
      R"({"type": "image_url", "image_url": {"url": ")", url, R"("}}]}]})")));
  ASSERT_TRUE(api.ok()) << api.status();
  const v1::ChatMessage& m = api->prompts[0].messages(0);
  ASSERT_EQ(m.parts_size(), 2);
  EXPECT_EQ(m.parts(0).text(), "what is it");
  EXPECT_EQ(m.parts(1).image().url(), url);
  EXPECT_TRUE(m.content().empty());
  api = ParseChatRequest(Json::parse(
      R"({"messages": [{"role": "user", "content": [{"type": "image_url",
          "image_url": {"url": "https://x.test/a.png"}}]}]})"));
  ASSERT_FALSE(api.status().ok());
  EXPECT_THAT(Message(api.status()),
              HasSubstr("messages[0].content[0].image_url.url: remote image "
                        "URLs are not fetched"));
  const ApiError e = ToApiError(api.status(), /*during_validation=*/true);
  EXPECT_EQ(e.status, 400);
}

TEST(ApiImagesTest, AnthropicImageBlocksBecomeImages) {
  const std::string b64 = absl::Base64Escape(Png());
  auto api = ParseMessagesRequest(
      Json::parse(absl::StrCat(
          R"({"max_tokens": 4, "messages": [{"role": "user", "content": [)",
          R"({"type": "image", "source": {"type": "base64", )",
          R"("media_type": "image/png", "data": ")", b64, R"("}},)",
          R"({"type": "text", "text": "and?"}]}]})")),
      /*for_count=*/false);
  ASSERT_TRUE(api.ok()) << api.status();
  const v1::ChatMessage& m = api->prompts[0].messages(0);
  ASSERT_EQ(m.parts_size(), 2);
  EXPECT_EQ(m.parts(0).image().url(), "data:image/png;base64," + b64);
  EXPECT_EQ(m.parts(1).text(), "and?");
  api = ParseMessagesRequest(
      Json::parse(R"({"max_tokens": 4, "messages": [{"role": "user",
          "content": [{"type": "image", "source": {"type": "url",
          "url": "http://x.test/a.png"}}]}]})"),
      false);
  ASSERT_FALSE(api.ok());
  EXPECT_THAT(Message(api.status()),
              HasSubstr("messages[0].content[0].source.url: remote image "
                        "URLs are not fetched (scheme 'http')"));
}

}  // namespace
}  // namespace pdserve::frontend
