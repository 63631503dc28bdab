// The vision encoder's outputs of recent images, keyed by the image file's
// content hash (ImageContentHash), so that an image sent again (the next
// turn of a conversation, many users asking about one picture) is not
// encoded again. Least recently used entries are evicted past a byte
// budget. Pure (no IO, no clock); thread-compatible.
#ifndef PDSERVE_ENGINE_CORE_IMAGE_CACHE_H_
#define PDSERVE_ENGINE_CORE_IMAGE_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/image/image_preprocess.h"

namespace pdserve {

// The encoder's output for one image: grid.num_tokens(merge) rows of the
// language model's hidden size.
struct ImageEmbedding {
  ImageGrid grid;
  std::vector<float> values;
};

class ImageEmbeddingCache {
 public:
  using Embeddings = std::shared_ptr<const ImageEmbedding>;

  // `max_bytes` of embeddings (floats * 4) at most; 0 keeps nothing.
  explicit ImageEmbeddingCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // The entry for `key` (now the most recently used), or null; counts a hit
  // or a miss.
  Embeddings Find(const std::string& key);
  // Adds or replaces `key`, then evicts least recently used entries until
  // the budget holds (an entry larger than the budget is not kept).
  void Insert(const std::string& key, Embeddings value);

  int64_t bytes() const { return bytes_; }
  int64_t size() const { return static_cast<int64_t>(index_.size()); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  using Entry = std::pair<std::string, Embeddings>;
  static int64_t BytesOf(const Embeddings& e) {
    return static_cast<int64_t>(e->values.size() * sizeof(float));
  }
  void Erase(std::list<Entry>::iterator it);

  int64_t max_bytes_;
  int64_t bytes_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  std::list<Entry> lru_;  // most recently used first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_CORE_IMAGE_CACHE_H_
