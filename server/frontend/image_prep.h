// Images of a chat request (vision-language models): reading each image
// (its bytes or a data: URL; remote URLs are refused, nothing is fetched),
// the request's limits, the grid the model's processor gives it, and the
// expansion of the template's one placeholder per image into the grid's
// token count. Pure: no IO, no clock; thread-safe.
#ifndef PDSERVE_SERVER_FRONTEND_IMAGE_PREP_H_
#define PDSERVE_SERVER_FRONTEND_IMAGE_PREP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/image/image_preprocess.h"
#include "engine/model_config.h"
#include "pdserve/v1/api.pb.h"
#include "pdserve/v1/common.pb.h"

namespace pdserve::frontend {

// The front end's limits (--max-image-bytes, --max-image-pixels,
// --max-images).
struct ImageLimits {
  int64_t max_bytes = int64_t{8} << 20;   // one encoded file
  int64_t max_pixels = int64_t{1} << 24;  // one decoded image
  int64_t max_images = 4;                 // one request
};

// One image, read, decoded once to check it, and sized.
struct PreparedImage {
  std::string data;  // the encoded file
  ImageGrid grid;
  int64_t tokens = 0;  // placeholder tokens: grid.num_tokens(merge)
};

// OK for a data: URL; INVALID_ARGUMENT naming `field` for anything else (a
// remote URL: "remote image URLs are not fetched").
absl::Status CheckInlineImageUrl(absl::string_view url,
                                 const std::string& field);

// An API message's content parts: with an image among them they become
// m->parts; text alone is joined with newlines into m->content (what a
// text-only template expects).
void SetContentFromParts(std::vector<v1::ContentPart> parts,
                         v1::ChatMessage* m);

// The payload of a data: URL ("data:image/png;base64,...": base64, or
// percent-encoded without ";base64"). INVALID_ARGUMENT naming `field` for a
// remote URL (http, https, file, ...: "remote image URLs are not fetched"),
// a media type that is not image/png, image/jpeg or image/webp (an empty
// one is accepted and sniffed), or bad base64.
absl::StatusOr<std::string> DecodeImageDataUrl(absl::string_view url,
                                               const std::string& field);

// Reads and checks one image (`field` names it in errors, e.g.
// "messages[0].parts[1].image"): exactly one of data / url, at most
// max_bytes bytes, a PNG / JPEG / WebP file that decodes to at most
// max_pixels pixels and an aspect ratio the processor accepts.
// INVALID_ARGUMENT naming the field and the numbers otherwise.
absl::StatusOr<PreparedImage> PrepareImage(const v1::Image& image,
                                           const std::string& field,
                                           const VisionConfig& vision,
                                           const ImageLimits& limits);

// Every image of the request's messages, in order. INVALID_ARGUMENT for
// more than max_images images, any image PrepareImage refuses, or images
// for a model without a vision tower ("model M does not take images").
absl::StatusOr<std::vector<PreparedImage>> PrepareRequestImages(
    const v1::GenerateRequest& req, const std::string& model_name,
    const VisionConfig& vision, const ImageLimits& limits);

// Replaces the k-th image_token_id of `ids` (the template writes one per
// image) by images[k].tokens copies. INVALID_ARGUMENT when the prompt holds
// another number of placeholders than there are images.
absl::Status ExpandImagePlaceholders(std::vector<int32_t>* ids,
                                     int32_t image_token_id,
                                     absl::Span<const PreparedImage> images);

// The images as the scheduler and engine take them.
std::vector<v1::ImageInput> ToImageInputs(
    absl::Span<const PreparedImage> images);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_IMAGE_PREP_H_
