// Scans of one tool call's text, complete or still growing, for the
// streaming tool-call parsers (output_parser.h). Each scan of a prefix of a
// call's text yields a name that stays fixed once found and arguments text
// that only grows, so a parser can emit the difference between scans.
// Pure functions.
#ifndef PDSERVE_SERVER_CHAT_TOOL_CALL_SCAN_H_
#define PDSERVE_SERVER_CHAT_TOOL_CALL_SCAN_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// What a call's text shows so far.
struct CallScan {
  std::optional<std::string> name;  // once the whole name is there
  // The arguments' JSON text seen so far (a prefix of the final text).
  std::string arguments;
};

// JSON's whitespace: space, \n, \t, \r.
bool IsJsonSpace(char c);

// ScanJsonValueEnd results besides an end offset.
inline constexpr size_t kScanIncomplete = static_cast<size_t>(-1);
inline constexpr size_t kScanError = static_cast<size_t>(-2);

// The end (one past) of the JSON value starting at s[start], or
// kScanIncomplete when `s` ends inside it (a number at the very end counts as
// incomplete), or kScanError when it is not JSON.
size_t ScanJsonValueEnd(absl::string_view s, size_t start);

// A JSON call object {"name": N, "arguments" | "parameters": A} (Hermes,
// Llama 3). A's text streams as it grows when it is an object or array; a
// string A (arguments sent as encoded JSON text) is decoded once complete.
// `complete`: the call's text is all there.
CallScan ScanJsonCall(absl::string_view body, bool complete);

// <function=N> <parameter=P>value</parameter>... </function> (Qwen3-Coder,
// Qwen3.5). Arguments are the JSON object {"P": value, ...} of the
// parameters complete so far (closed with "}" when `complete`); a value is
// JSON when the tool's schema in `tools` gives P a non-string type and the
// text parses, else a JSON string. One newline around a value is dropped.
CallScan ScanXmlCall(absl::string_view body, bool complete,
                     const nlohmann::json& tools);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_CHAT_TOOL_CALL_SCAN_H_
