// EngineCore's images (vision-language models): admission checks, the
// encoder-output cache, lazy encoding and the multimodal parts of a span.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/engine_core_impl.h"
#include "engine/image/content_hash.h"
#include "engine/image/image_decode.h"
#include "engine/model/image_tokens.h"

namespace pdserve {

absl::Status EngineCore::Impl::PrepareImages(
    EngineSequence& seq, absl::Span<const SequenceImage> images) {
  const VisionConfig& v = config().vision;  // present: AddSequence checked
  std::vector<ImageGrid> grids;
  for (size_t i = 0; i < images.size(); ++i) {
    EngineSequence::PromptImage img;
    img.hash = ImageContentHash(images[i].bytes);
    img.grid = images[i].grid;
    img.embedding = image_cache_.Find(img.hash);
    ImageGrid actual;
    if (img.embedding != nullptr) {
      actual = img.embedding->grid;
    } else {
      absl::StatusOr<RgbImage> rgb =
          DecodeImage(images[i].bytes, options_.max_image_pixels);
      if (!rgb.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", seq.id, ": image ", i, ": ", rgb.status().message()));
      }
      absl::StatusOr<ImageGrid> grid =
          GridForImage(rgb->height, rgb->width, v.preprocess);
      if (!grid.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", seq.id, ": image ", i, ": ", grid.status().message()));
      }
      actual = *grid;
      img.pixels = *std::move(rgb);
    }
    if (!(actual == img.grid)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", seq.id, ": image ", i, " has a grid of ", actual.t,
          " x ", actual.h, " x ", actual.w, " patches, but its placeholders ",
          "were sized for ", img.grid.t, " x ", img.grid.h, " x ",
          img.grid.w));
    }
    grids.push_back(img.grid);
    seq.images.push_back(std::move(img));
  }
  absl::StatusOr<MropePositions> pos = ComputeMropePositions(
      absl::MakeConstSpan(seq.tokens).first(seq.prompt_len), v.image_token_id,
      grids, v.merge_size());
  if (!pos.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", seq.id, ": ", pos.status().message()));
  }
  seq.mrope_positions = std::move(pos->thw);
  absl::StatusOr<SequenceState> state =
      SequenceState::Create(seq.state.capacity(), pos->rope_delta);
  if (!state.ok()) return state.status();
  seq.state = *std::move(state);
  return absl::OkStatus();
}

absl::Status EngineCore::Impl::ImageSpan(EngineSequence& seq, int64_t start,
                                         int64_t end, SequenceSpan& span) {
  const VisionConfig& v = config().vision;
  const int64_t hidden = config().hidden_size;
  span.mrope_positions = absl::MakeConstSpan(seq.mrope_positions)
                             .subspan(3 * start, 3 * (end - start));
  const auto first = seq.tokens.begin();
  const int64_t rows = std::count(first + start, first + end, v.image_token_id);
  if (rows == 0) return absl::OkStatus();
  if (seq.image_embeds.empty()) {
    const int64_t t0 = options_.now_ns();
    for (EngineSequence::PromptImage& img : seq.images) {
      if (img.embedding == nullptr) img.embedding = image_cache_.Find(img.hash);
      if (img.embedding != nullptr) continue;
      absl::StatusOr<ImagePatches> patches =
          PreprocessImage(img.pixels, v.preprocess);
      if (!patches.ok()) return patches.status();
      auto e = std::make_shared<ImageEmbedding>();
      e->grid = img.grid;
      e->values.resize(img.grid.num_tokens(v.merge_size()) * hidden);
      if (absl::Status s =
              backend_->EncodeImage(*patches, absl::MakeSpan(e->values));
          !s.ok()) {
        return s;
      }
      img.embedding = e;
      image_cache_.Insert(img.hash, std::move(e));
      img.pixels = RgbImage();
      ++step_images_encoded_;
    }
    for (const EngineSequence::PromptImage& img : seq.images) {
      seq.image_embeds.insert(seq.image_embeds.end(),
                              img.embedding->values.begin(),
                              img.embedding->values.end());
    }
    encode_ns_ += options_.now_ns() - t0;
  }
  const int64_t before = std::count(first, first + start, v.image_token_id);
  span.image_embeds = seq.image_embeds.data() + before * hidden;
  span.image_rows = rows;
  return absl::OkStatus();
}

void EngineCore::Impl::ReleaseImages(EngineSequence& seq) {
  seq.images = {};
  seq.mrope_positions = {};
  seq.image_embeds = {};
}

}  // namespace pdserve
