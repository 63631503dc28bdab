// Image placeholder tokens in a language model's input: where the vision
// encoder's outputs go (the seed's cumulative-sum injection) and the
// multimodal RoPE positions of an interleaved text/image prompt (Qwen3.5 /
// Qwen3-VL get_rope_index). Pure functions; thread-safe.
#ifndef PDSERVE_ENGINE_MODEL_IMAGE_TOKENS_H_
#define PDSERVE_ENGINE_MODEL_IMAGE_TOKENS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/image/image_preprocess.h"

namespace pdserve {

// Writes image embeddings over the placeholder rows of `embeds` by the
// seed's rule, in one pass with a fixed shape:
//   mask[i] = tokens[i] == image_token_id
//   index[i] = max(cumsum(mask)[i] - 1, 0)
//   embeds[i] = mask[i] ? image_embeds[index[i]] : embeds[i]
// embeds: [tokens.size()][hidden] (the token embeddings, overwritten in
// place); image_embeds: [image_rows][hidden], the encoder outputs of the
// images in prompt order. Equivalent to transformers' masked_scatter.
// INVALID_ARGUMENT (nothing written) when the number of placeholders is not
// image_rows ("3 image placeholder tokens but 4 image embeddings").
absl::Status InjectImageEmbeddings(absl::Span<const int32_t> tokens,
                                   int32_t image_token_id,
                                   const float* image_embeds,
                                   int64_t image_rows, int64_t hidden,
                                   float* embeds);

// The 3D (t, h, w) RoPE positions of a prompt and the delta the text after
// it continues from.
struct MropePositions {
  std::vector<int64_t> thw;  // [tokens][3]
  // max(position) + 1 - tokens: a token at sequence position p >= tokens
  // (generated text) has all three positions p + rope_delta.
  int64_t rope_delta = 0;
};

// transformers' get_rope_index for one sequence: a text token continues
// the running position on all three axes; the placeholders of an image of
// grid (t, h, w) patches take, for its token (ti, hi, wi) of the merged
// (t, h / merge, w / merge) grid, (start + ti, start + hi, start + wi), and
// the running position then advances by max(h, w) / merge. Runs of
// placeholders take the `grids` in order, each as many tokens as its
// num_tokens(merge) (so adjacent images split a run; the reference only
// handles runs separated by text). INVALID_ARGUMENT naming the numbers when
// the placeholders do not add up to the grids' tokens.
absl::StatusOr<MropePositions> ComputeMropePositions(
    absl::Span<const int32_t> tokens, int32_t image_token_id,
    absl::Span<const ImageGrid> grids, int64_t merge_size);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_IMAGE_TOKENS_H_
