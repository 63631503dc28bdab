// Python str semantics over UTF-8 bytes, for the Jinja interpreter: code
// point length/indexing/slicing, str.strip/split/rsplit with Python's
// whitespace set, case mapping (ASCII letters only). Pure functions.
#ifndef PDSERVE_SERVER_CHAT_JINJA_TEXT_H_
#define PDSERVE_SERVER_CHAT_JINJA_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pdserve::jinja {

// Decodes UTF-8 into code points. A byte that does not start a valid
// sequence becomes 0xDC00 + byte (Python's surrogateescape), which
// EncodeUtf8 turns back into that byte, so decode/encode round-trips.
std::vector<char32_t> DecodeUtf8(absl::string_view s);
std::string EncodeUtf8(const std::vector<char32_t>& cps);
void AppendUtf8(char32_t cp, std::string* out);

// Number of code points (Python len(str)).
int64_t CodePointLength(absl::string_view s);

// Python str.isspace() for one code point.
bool IsPythonSpace(char32_t cp);

// str.strip/lstrip/rstrip; `chars` absent strips Python whitespace.
std::string PyStrip(absl::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right);

// str.split(sep, maxsplit) / str.rsplit; `sep` absent splits on runs of
// whitespace and drops empty parts. `sep` must not be empty (caller checks).
std::vector<std::string> PySplit(absl::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRSplit(absl::string_view s,
                                  const std::optional<std::string>& sep,
                                  int64_t maxsplit);

// str.replace(old, new, count); count < 0 replaces all. Empty `old`
// inserts `new` between code points, as Python does.
std::string PyReplace(absl::string_view s, absl::string_view old_s,
                      absl::string_view new_s, int64_t count);

// Case mapping of ASCII letters (other code points unchanged).
std::string AsciiUpper(absl::string_view s);
std::string AsciiLower(absl::string_view s);
// str.title(): upper after a non-letter, lower after a letter.
std::string PyTitle(absl::string_view s);
// str.capitalize(): first upper, rest lower.
std::string PyCapitalize(absl::string_view s);

// Python slice semantics: resolves (start, stop, step) for a sequence of
// `length` items into the list of indices to take. `step` must be != 0.
std::vector<int64_t> SliceIndices(int64_t length, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, int64_t step);

// Python repr() of a str.
std::string PyReprString(absl::string_view s);

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_TEXT_H_
