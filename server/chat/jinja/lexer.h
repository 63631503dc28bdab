// Tokenizer for the Jinja subset, reproducing jinja2's lexer with the
// settings transformers' apply_chat_template uses: trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False, "\n" newlines.
#ifndef PDSERVE_SERVER_CHAT_JINJA_LEXER_H_
#define PDSERVE_SERVER_CHAT_JINJA_LEXER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve::jinja {

struct Token {
  enum class Type {
    kData,        // literal template text (whitespace control applied)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // string literal; `text` holds the decoded value
    kInt,         // integer literal; `text` holds the digits (no '_')
    kFloat,       // float literal; `text` holds the digits (no '_')
    kOp,          // operator or punctuation
    kEof,
  };
  Type type;
  std::string text;
  int offset;  // byte offset in the normalized source
};

// The source after newline normalization ("\r\n" and "\r" become "\n") and
// removal of one trailing newline, as jinja2 does before lexing. Token
// offsets index into this string.
std::string NormalizeTemplateSource(absl::string_view source);

// Tokenizes a normalized source. Errors (unclosed tags, bad characters,
// unbalanced brackets) are InvalidArgument naming line and column.
absl::StatusOr<std::vector<Token>> Tokenize(const std::string& source);

// "line L col C" for a byte offset in `source` (both 1-based).
std::string DescribeOffset(const std::string& source, int offset);

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_LEXER_H_
