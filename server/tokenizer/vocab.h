// The loader-independent description of a vocabulary (what the GGUF,
// tokenizer.json and llama2.c loaders produce) and the shared machinery of
// the concrete tokenizers: special-token splitting, token bytes, stop ids.
#ifndef PDSERVE_SERVER_TOKENIZER_VOCAB_H_
#define PDSERVE_SERVER_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/tokenizer/pretokenizer.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve {

// Token kinds, numbered as GGUF's tokenizer.ggml.token_type.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,  // added tokens
  kUnused = 5,
  kByte = 6,  // SentencePiece <0xNN>
};

enum class VocabModel {
  kByteLevelBpe,   // GGUF "gpt2", tokenizer.json BPE + ByteLevel
  kSentencePiece,  // GGUF "llama", llama2.c tokenizer.bin
};

// Everything a tokenizer is built from. Token texts are as the file stores
// them: byte-level unicode ("Ġthe") for kByteLevelBpe normal tokens,
// "▁"-for-space pieces for kSentencePiece, raw text for special tokens.
struct VocabSpec {
  VocabModel model = VocabModel::kByteLevelBpe;
  std::vector<std::string> tokens;
  std::vector<TokenType> types;  // same size as tokens
  std::vector<float> scores;     // kSentencePiece merge priorities
  // kByteLevelBpe merges in rank order, each (left, right) token texts.
  std::vector<std::pair<std::string, std::string>> merges;
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;
  bool nfc = false;            // NFC-normalise text before splitting
  bool ignore_merges = false;  // a piece that is a token maps straight to it
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
  bool add_bos = false;
  // kSentencePiece: prepend "▁" to the text (GGUF add_space_prefix) ...
  bool add_space_prefix = false;
  // ... and to the text after each parsed special token (llama.cpp, HF
  // Prepend normaliser; false for HF Metaspace prepend_scheme "first") ...
  bool space_prefix_after_special = true;
  // ... unless the segment already starts with a space (HF Metaspace).
  bool space_prefix_unless_space = false;
  std::string chat_template;
};

// Builds the tokenizer the spec describes; InvalidArgument names the
// inconsistency (sizes, ids out of range, unknown merge tokens counts).
absl::StatusOr<std::unique_ptr<Tokenizer>> BuildTokenizer(VocabSpec spec);

// Shared implementation; subclasses encode plain-text segments.
class VocabTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text, bool parse_special = false) const override;
  std::string TokenBytes(int32_t id) const override;
  std::string Decode(absl::Span<const int32_t> ids,
                     bool skip_special = false) const override;
  int32_t vocab_size() const override {
    return static_cast<int32_t>(token_bytes_.size());
  }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  std::vector<int32_t> stop_ids() const override { return stop_ids_; }
  bool add_bos() const override { return add_bos_; }
  bool add_space_prefix() const override { return add_space_prefix_; }
  bool IsSpecial(int32_t id) const override;
  int32_t FindToken(std::string_view text) const override;
  const std::string& chat_template() const override { return chat_template_; }

 protected:
  // Takes the common fields; `token_bytes` are the decoded bytes per id.
  VocabTokenizer(const VocabSpec& spec, std::vector<std::string> token_bytes);

  // Appends the ids of plain-text `text` (valid UTF-8). `at_start`: the
  // segment starts the text; `after_special`: it follows a parsed special
  // token.
  virtual void EncodeSegment(std::string_view text, bool at_start,
                             bool after_special,
                             std::vector<int32_t>* out) const = 0;

  const std::vector<TokenType>& types() const { return types_; }

 private:
  // The special token matching at text[pos] (longest), or -1.
  int32_t MatchSpecial(std::string_view text, size_t pos) const;

  std::vector<std::string> token_bytes_;
  std::vector<TokenType> types_;
  absl::flat_hash_map<std::string, int32_t> bytes_to_id_;
  // Whether some special token text starts with the byte.
  bool special_first_byte_[256] = {};
  // Special token ids by the first two bytes of their text (a one-byte
  // text keys as byte << 8 | 0x100), longest first.
  absl::flat_hash_map<uint32_t, std::vector<int32_t>> specials_by_prefix_;
  std::vector<int32_t> stop_ids_;
  int32_t bos_, eos_;
  bool add_bos_, add_space_prefix_;
  std::string chat_template_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_VOCAB_H_
