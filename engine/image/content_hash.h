// Content keys of image files: what caches of image-derived data (vision
// encoder outputs) are keyed by. Pure; thread-safe.
#ifndef PDSERVE_ENGINE_IMAGE_CONTENT_HASH_H_
#define PDSERVE_ENGINE_IMAGE_CONTENT_HASH_H_

#include <string>

#include "absl/strings/string_view.h"

namespace pdserve {

// SHA-256 of `bytes` as 64 lowercase hex digits (OpenSSL's libcrypto):
// equal for equal files, and collision resistant, so one client cannot make
// another client's image hit its cache entry.
std::string ImageContentHash(absl::string_view bytes);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_IMAGE_CONTENT_HASH_H_
