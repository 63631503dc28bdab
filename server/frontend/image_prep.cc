#include "server/frontend/image_prep.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/image/image_decode.h"

namespace pdserve::frontend {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

absl::StatusOr<std::string> PercentDecode(absl::string_view s,
                                          const std::string& field) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": bad percent escape at byte ", i, " of the data: URL"));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

absl::Status CheckInlineImageUrl(absl::string_view url,
                                 const std::string& field) {
  url = absl::StripAsciiWhitespace(url);
  if (!absl::StartsWithIgnoreCase(url, "data:")) {
    const size_t colon = url.find("://");
    if (colon != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": remote image URLs are not fetched (scheme '",
          url.substr(0, colon), "'); send the image inline as a data: URL ",
          "(data:image/png;base64,...)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected a data: URL (data:image/png;base64,...), got ",
        url.size(), " characters starting with \"",
        absl::CHexEscape(url.substr(0, 16)), "\""));
  }
  return absl::OkStatus();
}

void SetContentFromParts(std::vector<v1::ContentPart> parts,
                         v1::ChatMessage* m) {
  bool image = false;
  for (const v1::ContentPart& p : parts) image |= p.has_image();
  if (image) {
    for (v1::ContentPart& p : parts) *m->add_parts() = std::move(p);
    return;
  }
  for (const v1::ContentPart& p : parts) {
    if (!m->content().empty()) m->mutable_content()->push_back('\n');
    m->mutable_content()->append(p.text());
  }
}

absl::StatusOr<std::string> DecodeImageDataUrl(absl::string_view url,
                                               const std::string& field) {
  if (absl::Status s = CheckInlineImageUrl(url, field); !s.ok()) return s;
  url = absl::StripAsciiWhitespace(url);
  const size_t comma = url.find(',');
  if (comma == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the data: URL has no ',' before its data"));
  }
  bool base64 = false;
  std::string media;
  int index = 0;
  for (absl::string_view p : absl::StrSplit(url.substr(5, comma - 5), ';')) {
    const std::string param = absl::AsciiStrToLower(absl::StripAsciiWhitespace(p));
    if (index++ == 0) {
      media = param;
    } else if (param == "base64") {
      base64 = true;
    }
  }
  if (!media.empty() && media != "image/png" && media != "image/jpeg" &&
      media != "image/jpg" && media != "image/webp") {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": media type '", media,
        "' is not supported (image/png, image/jpeg, image/webp)"));
  }
  const absl::string_view payload = url.substr(comma + 1);
  if (!base64) return PercentDecode(payload, field);
  std::string out;
  if (!absl::Base64Unescape(payload, &out) &&
      !absl::WebSafeBase64Unescape(payload, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the data: URL's ", payload.size(),
        " characters are not valid base64"));
  }
  return out;
}

absl::StatusOr<PreparedImage> PrepareImage(const v1::Image& image,
                                           const std::string& field,
                                           const VisionConfig& vision,
                                           const ImageLimits& limits) {
  if (image.data().empty() == image.url().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": exactly one of data and url must be set"));
  }
  PreparedImage out;
  if (!image.url().empty()) {
    // A base64 URL is 4/3 of its bytes: refuse far larger ones unread.
    if (static_cast<int64_t>(image.url().size()) > limits.max_bytes / 3 * 4 + 1024) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": a data: URL of ", image.url().size(),
          " characters holds more than the limit of ", limits.max_bytes,
          " bytes (--max-image-bytes)"));
    }
    absl::StatusOr<std::string> bytes = DecodeImageDataUrl(image.url(), field);
    if (!bytes.ok()) return bytes.status();
    out.data = *std::move(bytes);
  } else {
    out.data = image.data();
  }
  if (static_cast<int64_t>(out.data.size()) > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", out.data.size(), " bytes, more than the limit of ",
        limits.max_bytes, " (--max-image-bytes)"));
  }
  absl::StatusOr<RgbImage> rgb = DecodeImage(out.data, limits.max_pixels);
  if (!rgb.ok()) {
    const bool pixels =
        absl::StrContains(rgb.status().message(), "more than the limit");
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", rgb.status().message(),
                     pixels ? " (--max-image-pixels)" : ""));
  }
  absl::StatusOr<ImageGrid> grid =
      GridForImage(rgb->height, rgb->width, vision.preprocess);
  if (!grid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", grid.status().message()));
  }
  out.grid = *grid;
  out.tokens = grid->num_tokens(vision.merge_size());
  return out;
}

absl::StatusOr<std::vector<PreparedImage>> PrepareRequestImages(
    const v1::GenerateRequest& req, const std::string& model_name,
    const VisionConfig& vision, const ImageLimits& limits) {
  int64_t count = 0;
  for (const v1::ChatMessage& m : req.messages()) {
    for (const v1::ContentPart& p : m.parts()) count += p.has_image() ? 1 : 0;
  }
  std::vector<PreparedImage> out;
  if (count == 0) return out;
  if (!vision.present()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model_name, " does not take images (it has no vision ",
        "tower); the request has ", count));
  }
  if (count > limits.max_images) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request has ", count, " images, more than the limit of ",
        limits.max_images, " (--max-images)"));
  }
  for (int i = 0; i < req.messages_size(); ++i) {
    const v1::ChatMessage& m = req.messages(i);
    for (int j = 0; j < m.parts_size(); ++j) {
      if (!m.parts(j).has_image()) continue;
      absl::StatusOr<PreparedImage> img = PrepareImage(
          m.parts(j).image(), absl::StrCat("messages[", i, "].parts[", j,
                                           "].image"),
          vision, limits);
      if (!img.ok()) return img.status();
      out.push_back(*std::move(img));
    }
  }
  return out;
}

absl::Status ExpandImagePlaceholders(std::vector<int32_t>* ids,
                                     int32_t image_token_id,
                                     absl::Span<const PreparedImage> images) {
  int64_t found = 0;
  for (int32_t t : *ids) found += t == image_token_id ? 1 : 0;
  if (found != static_cast<int64_t>(images.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the chat template rendered ", found, " image placeholders for ",
        images.size(), " images"));
  }
  if (images.empty()) return absl::OkStatus();
  std::vector<int32_t> out;
  size_t k = 0;
  for (int32_t t : *ids) {
    if (t != image_token_id) {
      out.push_back(t);
      continue;
    }
    out.insert(out.end(), images[k++].tokens, image_token_id);
  }
  *ids = std::move(out);
  return absl::OkStatus();
}

std::vector<v1::ImageInput> ToImageInputs(
    absl::Span<const PreparedImage> images) {
  std::vector<v1::ImageInput> out;
  for (const PreparedImage& img : images) {
    v1::ImageInput in;
    in.set_data(img.data);
    in.set_grid_t(static_cast<int32_t>(img.grid.t));
    in.set_grid_h(static_cast<int32_t>(img.grid.h));
    in.set_grid_w(static_cast<int32_t>(img.grid.w));
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace pdserve::frontend
