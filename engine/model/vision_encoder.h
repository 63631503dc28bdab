// The Qwen3.5 / Qwen3-VL vision tower on the CPU: image patches in, one
// language-model embedding per merge x merge block of patches out.
#ifndef PDSERVE_ENGINE_MODEL_VISION_ENCODER_H_
#define PDSERVE_ENGINE_MODEL_VISION_ENCODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/image/image_preprocess.h"
#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// Computes, as transformers' Qwen3_5VisionModel (pooler_output) for one
// image (t frames of an h x w patch grid, patches in merge-block order):
//   x = patch_embed(patches) + bias                  (Conv3d as a matmul)
//     + bilinear(pos_embed, align_corners) resampled from the learned
//       side x side grid to h x w
//   per block: x += proj(attn(LN1 x)); x += fc2(act(fc1(LN2 x)))
//     with 2D rotary q/k (rotate-half over the whole head; pair i < hd/4
//     turns by row * theta^(-4i/hd), the next hd/4 pairs by column) and
//     full (bidirectional) attention within each frame, scale hd^-1/2
//   merger: LN per patch, merge^2 consecutive patches concatenated,
//     fc2(GELU(fc1 .)) to out_hidden_size.
// Matrices run through kernels' MatMul (any weight dtype it supports).
// Scratch is sized per image. Thread-compatible: one Encode at a time (it
// uses every thread of `pool`).
class VisionEncoder {
 public:
  // INVALID_ARGUMENT when `weights` has no vision tower. `weights` and
  // `pool` must outlive the encoder.
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Create(
      const ModelWeights& weights, ThreadPool& pool);

  // Embeddings Encode writes for `grid`: grid.num_tokens(merge) rows.
  int64_t OutputRows(const ImageGrid& grid) const;
  int64_t out_hidden() const { return c_.out_hidden_size; }
  const VisionConfig& config() const { return c_; }

  // Writes OutputRows(image.grid) rows of out_hidden floats into `out`.
  // INVALID_ARGUMENT (nothing written) for a patch width other than
  // config().patch_dim(), a value count that is not num_patches x
  // patch_dim, a grid whose t, h or w is < 1 or whose h, w are not
  // multiples of the merge size, or an output buffer too small.
  absl::Status Encode(const ImagePatches& image, absl::Span<float> out);

 private:
  VisionEncoder(const ModelWeights& weights, ThreadPool& pool);
  absl::Status Validate(const ImagePatches& image, size_t out_size) const;
  void Embed(const ImagePatches& image);
  void PrepareRotary(const ImageGrid& grid);
  void Block(const VisionBlockWeights& b, const ImageGrid& grid);
  void Attention(const ImageGrid& grid);
  void AttendHead(int64_t row0, int64_t len, int64_t head);
  void Merge(int64_t rows, float* out);
  // y = W x + bias over `rows` rows.
  void Linear(const WeightView& w, const float* bias, const float* x,
              int64_t rows, float* y);
  void LayerNormRows(const float* x, const float* w, const float* b,
                     int64_t rows, float* out);

  const VisionConfig c_;
  const VisionWeights& w_;
  ThreadPool& pool_;
  int64_t n_ = 0;  // patches of the image being encoded
  // Scratch, resized per image.
  std::vector<float> x_, xn_, qkv_, attn_, mid_, tmp_;
  std::vector<float> cos_, sin_;  // [patch][head_dim / 2]
  std::vector<float> q_, k_, vt_, scores_, o_;  // one head's operands
  // A tower of 16-bit weights attends in bf16 too (keys and transposed
  // values rounded to bf16 and packed per head, so both products run on the
  // packed bf16 kernels); an f32 tower in f32.
  bool attend_in_bf16_ = false;
  std::vector<uint16_t> k16_, vt16_;
  std::vector<uint8_t> k_packed_, vt_packed_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_VISION_ENCODER_H_
