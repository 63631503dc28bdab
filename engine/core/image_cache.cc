#include "engine/core/image_cache.h"

namespace pdserve {

ImageEmbeddingCache::Embeddings ImageEmbeddingCache::Find(
    const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ImageEmbeddingCache::Erase(std::list<Entry>::iterator it) {
  bytes_ -= BytesOf(it->second);
  index_.erase(it->first);
  lru_.erase(it);
}

void ImageEmbeddingCache::Insert(const std::string& key, Embeddings value) {
  if (auto it = index_.find(key); it != index_.end()) Erase(it->second);
  if (value == nullptr || BytesOf(value) > max_bytes_) return;
  lru_.emplace_front(key, std::move(value));
  index_[key] = lru_.begin();
  bytes_ += BytesOf(lru_.front().second);
  while (bytes_ > max_bytes_) Erase(std::prev(lru_.end()));
}

}  // namespace pdserve
