#include "engine/formats/llama2c.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/formats/mapped_file.h"

namespace pdserve {
namespace {

constexpr int64_t kHeaderBytes = 7 * sizeof(int32_t);
// Sanity bounds keeping every size computation far from int64 overflow.
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // dim, hidden_dim
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxSeqLen = int64_t{1} << 22;

absl::Status CheckRange(const std::string& path, const char* name,
                        int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": llama2.c header field ", name, " = ", value,
                     " is out of range 1..", max));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t Llama2cHeader::ExpectedFileSize() const {
  const int64_t L = n_layers;
  const int64_t kv = kv_dim();
  int64_t floats = vocab_size * dim;                   // token_embedding_table
  floats += L * dim;                                   // rms_att
  floats += L * dim * dim * 2 + L * kv * dim * 2;      // wq, wo, wk, wv
  floats += L * dim;                                   // rms_ffn
  floats += L * hidden_dim * dim * 3;                  // w1, w2, w3
  floats += dim;                                       // rms_final
  floats += seq_len * head_size();                     // freq_cis real + imag
  if (!shared_classifier) floats += vocab_size * dim;  // wcls
  return kHeaderBytes + floats * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<Llama2cHeader> ParseLlama2cHeader(const std::string& path,
                                                 const void* data,
                                                 uint64_t size) {
  if (size < static_cast<uint64_t>(kHeaderBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated llama2.c header: need ", kHeaderBytes,
                     " bytes, file size is ", size));
  }
  int32_t f[7];
  std::memcpy(f, data, sizeof(f));
  Llama2cHeader h;
  h.dim = f[0];
  h.hidden_dim = f[1];
  h.n_layers = f[2];
  h.n_heads = f[3];
  h.n_kv_heads = f[4];
  h.shared_classifier = f[5] > 0;
  h.vocab_size = f[5] < 0 ? -static_cast<int64_t>(f[5]) : f[5];
  h.seq_len = f[6];
  for (absl::Status s :
       {CheckRange(path, "dim", h.dim, kMaxWidth),
        CheckRange(path, "hidden_dim", h.hidden_dim, kMaxWidth),
        CheckRange(path, "n_layers", h.n_layers, kMaxLayers),
        CheckRange(path, "n_heads", h.n_heads, h.dim),
        CheckRange(path, "n_kv_heads", h.n_kv_heads, h.n_heads),
        CheckRange(path, "vocab_size", h.vocab_size, kMaxVocab),
        CheckRange(path, "seq_len", h.seq_len, kMaxSeqLen)}) {
    if (!s.ok()) return s;
  }
  if (h.dim % h.n_heads != 0 || h.head_size() % 2 != 0 ||
      h.n_heads % h.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": inconsistent llama2.c header: dim ", h.dim, ", n_heads ",
        h.n_heads, ", n_kv_heads ", h.n_kv_heads,
        " (need dim % n_heads == 0, an even head size and n_heads % "
        "n_kv_heads == 0)"));
  }
  return h;
}

absl::StatusOr<Llama2cCheckpoint> Llama2cCheckpoint::Open(
    const std::string& path) {
  absl::StatusOr<MappedFile> file = MapFile(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<Llama2cHeader> header =
      ParseLlama2cHeader(path, file->data, file->size);
  if (!header.ok()) return header.status();
  const Llama2cHeader& h = *header;
  const int64_t expected = h.ExpectedFileSize();
  if (file->size != static_cast<uint64_t>(expected)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": llama2.c file size is ", file->size, " bytes but its header (",
        "dim ", h.dim, ", hidden ", h.hidden_dim, ", layers ", h.n_layers,
        ", heads ", h.n_heads, "/", h.n_kv_heads, ", vocab ", h.vocab_size,
        h.shared_classifier ? " shared" : " separate", " classifier, seq_len ",
        h.seq_len, ") implies ", expected));
  }
  Llama2cCheckpoint c;
  c.path = path;
  c.header = h;
  c.mapping = file->owner;
  const float* p = reinterpret_cast<const float*>(file->data + kHeaderBytes);
  const int64_t L = h.n_layers, dim = h.dim, kv = h.kv_dim();
  const int64_t hid = h.hidden_dim;
  auto take = [&p](int64_t n) {
    const float* start = p;
    p += n;
    return start;
  };
  c.token_embedding = take(h.vocab_size * dim);
  c.rms_att = take(L * dim);
  c.wq = take(L * dim * dim);
  c.wk = take(L * kv * dim);
  c.wv = take(L * kv * dim);
  c.wo = take(L * dim * dim);
  c.rms_ffn = take(L * dim);
  c.w1 = take(L * hid * dim);
  c.w2 = take(L * dim * hid);
  c.w3 = take(L * hid * dim);
  c.rms_final = take(dim);
  take(h.seq_len * h.head_size());  // freq_cis_real and freq_cis_imag
  c.wcls = h.shared_classifier ? c.token_embedding : take(h.vocab_size * dim);
  return c;
}

}  // namespace pdserve
