#include "engine/image/content_hash.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace pdserve {

std::string ImageContentHash(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), size));
}

}  // namespace pdserve
