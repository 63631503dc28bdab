// Control-token sanitizing for rendered chat prompts, the scheme of
// transformers' apply_chat_template(sanitize_control_tokens=True): before
// rendering, every control-token string (e.g. "<|im_end|>") inside a request
// string is wrapped in two private-use markers (U+F0000 ... U+F0001); after
// rendering, the prompt is split on the markers into segments. Marked tokens
// came from the user and must be tokenized as plain text; everything else
// (including the control tokens the template itself writes) is tokenized
// with special-token parsing on. A marker split apart by a template string
// operation is dropped but still breaks the text, so the two sides cannot
// join into a control token. Pure functions; thread-safe.
#ifndef PDSERVE_SERVER_CHAT_CONTROL_TOKENS_H_
#define PDSERVE_SERVER_CHAT_CONTROL_TOKENS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "server/chat/jinja/value.h"

namespace pdserve {

// One piece of a rendered prompt.
struct PromptSegment {
  std::string text;
  // True: control-token text that came from the request; tokenize it with
  // special-token parsing OFF. False: tokenize with parsing ON.
  bool user_text = false;

  bool operator==(const PromptSegment& o) const {
    return text == o.text && user_text == o.user_text;
  }
};

// "\U000F0000" and "\U000F0001" in UTF-8.
inline constexpr char kControlTokenStart[] = "\xF3\xB0\x80\x80";
inline constexpr char kControlTokenEnd[] = "\xF3\xB0\x80\x81";

// A set of control-token strings, matched longest first.
class ControlTokenSet {
 public:
  // Empty strings and duplicates are ignored.
  explicit ControlTokenSet(const std::vector<std::string>& tokens);

  bool empty() const { return by_first_byte_.empty(); }
  // Length of the longest token starting at s[pos], 0 when none does.
  size_t MatchAt(absl::string_view s, size_t pos) const;

  // Drops marker characters already in `s` (so a request cannot forge a
  // marked token), then wraps each control token in markers.
  std::string Mark(absl::string_view s) const;
  // Mark() applied to every string inside `v` (lists, dict values, namespace
  // values are not expected); dict keys are left alone.
  jinja::Value MarkValue(const jinja::Value& v) const;
  // Splits a prompt rendered from marked inputs. Adjacent template-text
  // pieces separated only by a lone marker stay separate segments; empty
  // segments are omitted.
  std::vector<PromptSegment> Split(absl::string_view rendered) const;

 private:
  // First byte -> tokens starting with it, longest first.
  absl::flat_hash_map<char, std::vector<std::string>> by_first_byte_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_CHAT_CONTROL_TOKENS_H_
