#include "engine/model/image_tokens.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::Status InjectImageEmbeddings(absl::Span<const int32_t> tokens,
                                   int32_t image_token_id,
                                   const float* image_embeds,
                                   int64_t image_rows, int64_t hidden,
                                   float* embeds) {
  int64_t placeholders = 0;
  for (int32_t t : tokens) placeholders += t == image_token_id ? 1 : 0;
  if (placeholders != image_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        placeholders, " image placeholder tokens (id ", image_token_id,
        ") but ", image_rows, " image embeddings"));
  }
  int64_t cumsum = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool mask = tokens[i] == image_token_id;
    cumsum += mask ? 1 : 0;
    if (!mask) continue;  // where(mask, gathered, embeds): keep the text
    const int64_t index = std::max<int64_t>(cumsum - 1, 0);
    std::memcpy(embeds + static_cast<int64_t>(i) * hidden,
                image_embeds + index * hidden,
                static_cast<size_t>(hidden) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::StatusOr<MropePositions> ComputeMropePositions(
    absl::Span<const int32_t> tokens, int32_t image_token_id,
    absl::Span<const ImageGrid> grids, int64_t merge_size) {
  MropePositions out;
  const int64_t n = static_cast<int64_t>(tokens.size());
  out.thw.resize(static_cast<size_t>(3 * n));
  int64_t cur = 0;
  size_t next_grid = 0;
  int64_t in_image = 0, image_tokens = 0, start = 0;  // the open image
  ImageGrid g;
  int64_t max_pos = -1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t* p = out.thw.data() + 3 * i;
    if (tokens[i] != image_token_id) {
      if (in_image < image_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            "image ", next_grid, " has ", image_tokens,
            " placeholder tokens but text interrupts it after ", in_image,
            " (at token ", i, ")"));
      }
      p[0] = p[1] = p[2] = cur++;
      max_pos = std::max(max_pos, p[0]);
      continue;
    }
    if (in_image == image_tokens) {  // the next image starts here
      if (next_grid == grids.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "placeholder token at ", i, " but only ", grids.size(),
            " images"));
      }
      g = grids[next_grid++];
      image_tokens = g.num_tokens(merge_size);
      in_image = 0;
      start = cur;
    }
    const int64_t lh = g.h / merge_size, lw = g.w / merge_size;
    p[0] = start + in_image / (lh * lw);
    p[1] = start + (in_image / lw) % lh;
    p[2] = start + in_image % lw;
    max_pos = std::max({max_pos, p[0], p[1], p[2]});
    if (++in_image == image_tokens) {
      cur = start + std::max(g.h, g.w) / merge_size;
    }
  }
  if (next_grid != grids.size() || in_image < image_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt's placeholder tokens cover ", next_grid, " of ",
        grids.size(), " images",
        in_image < image_tokens
            ? absl::StrCat(" (the last has ", in_image, " of its ",
                           image_tokens, " tokens)")
            : ""));
  }
  out.rope_delta = max_pos + 1 - n;
  return out;
}

}  // namespace pdserve
