#include "server/chat/output_parser.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/chat/tool_call_scan.h"

namespace pdserve {
namespace {

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";
constexpr absl::string_view kCallOpen = "<tool_call>";
constexpr absl::string_view kCallClose = "</tool_call>";
constexpr absl::string_view kPythonTag = "<|python_tag|>";

size_t Find(const std::string& s, absl::string_view marker) {
  return s.find(marker.data(), 0, marker.size());
}

size_t FirstNonSpace(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsJsonSpace(s[i])) return i;
  }
  return absl::string_view::npos;
}

// The length of the longest suffix of `s` that is a proper prefix of
// `marker`: bytes that could still become the marker.
size_t PartialMarkerSuffix(absl::string_view s, absl::string_view marker) {
  const size_t most = std::min(s.size(), marker.size() - 1);
  for (size_t k = most; k > 0; --k) {
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

uint64_t Fnv1a(absl::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::string ToolCallId(absl::string_view seed, int index) {
  const std::string key = absl::StrCat(seed, "#", index);
  const uint64_t a = Fnv1a(key, 0xcbf29ce484222325ULL);
  const uint64_t b = Fnv1a(key, a ^ 0x9e3779b97f4a7c15ULL);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx",
                static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b >> 32));
  return absl::StrCat("call_", buf);
}

absl::StatusOr<ToolCallFormat> ParseToolCallFormat(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "hermes" || n == "qwen3" || n == "smollm3") return ToolCallFormat::kHermes;
  if (n == "qwen3_coder" || n == "qwen3_xml" || n == "qwen35" || n == "qwen3.5") {
    return ToolCallFormat::kQwen3Coder;
  }
  if (n == "llama3_json" || n == "llama3") return ToolCallFormat::kLlama3Json;
  if (n == "none") return ToolCallFormat::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "tool-call parser '", name,
      "' is not one of hermes, qwen3_coder, llama3_json, none"));
}

absl::StatusOr<ReasoningFormat> ParseReasoningFormat(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "think" || n == "qwen3" || n == "deepseek_r1" || n == "qwen35") {
    return ReasoningFormat::kThink;
  }
  if (n == "none") return ReasoningFormat::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "reasoning parser '", name, "' is not one of think, none"));
}

const char* ToolCallFormatName(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kQwen3Coder: return "qwen3_coder";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    default: return "none";
  }
}

const char* ReasoningFormatName(ReasoningFormat f) {
  return f == ReasoningFormat::kThink ? "think" : "none";
}

ToolCallFormat DetectToolCallFormat(absl::string_view t) {
  if (absl::StrContains(t, "<function=")) return ToolCallFormat::kQwen3Coder;
  if (absl::StrContains(t, "<tool_call>")) return ToolCallFormat::kHermes;
  if (absl::StrContains(t, "<|python_tag|>") || absl::StrContains(t, "ipython")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

ReasoningFormat DetectReasoningFormat(absl::string_view t) {
  return absl::StrContains(t, "<think>") ? ReasoningFormat::kThink
                                         : ReasoningFormat::kNone;
}

bool PromptOpensReasoning(absl::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == absl::string_view::npos) return false;
  return prompt.find(kThinkClose, open) == absl::string_view::npos;
}

// ---------------------------------------------------------------------------
// Reasoning: splits the reply into reasoning and content.

class OutputParser::Reasoning {
 public:
  Reasoning(ReasoningFormat format, bool starts_in)
      : phase_(format == ReasoningFormat::kNone ? kContent
               : starts_in                      ? kThinking
                                                : kStart) {}

  void Feed(absl::string_view text, bool final, std::string* content,
            std::string* reasoning) {
    pending_.append(text.data(), text.size());
    for (;;) {
      switch (phase_) {
        case kContent:
          content->append(pending_);
          pending_.clear();
          return;
        case kStart: {
          const size_t i = FirstNonSpace(pending_);
          if (i == std::string::npos) {
            if (final) phase_ = kContent;  // whitespace only
            if (!final) return;
            continue;
          }
          const absl::string_view rest = absl::string_view(pending_).substr(i);
          if (absl::StartsWith(rest, kThinkOpen)) {
            pending_.erase(0, i + kThinkOpen.size());
            phase_ = kThinking;
            continue;
          }
          if (!final && absl::StartsWith(kThinkOpen, rest)) return;  // maybe
          phase_ = kContent;
          continue;
        }
        case kThinking: {
          const size_t pos = Find(pending_, kThinkClose);
          if (pos != std::string::npos) {
            reasoning->append(pending_, 0, pos);
            pending_.erase(0, pos + kThinkClose.size());
            phase_ = kAfter;
            continue;
          }
          const size_t hold = final ? 0 : PartialMarkerSuffix(pending_, kThinkClose);
          reasoning->append(pending_, 0, pending_.size() - hold);
          pending_.erase(0, pending_.size() - hold);
          return;
        }
        case kAfter: {
          // The whitespace between </think> and the answer is dropped.
          const size_t i = FirstNonSpace(pending_);
          if (i == std::string::npos) {
            pending_.clear();
            return;
          }
          pending_.erase(0, i);
          phase_ = kContent;
          continue;
        }
      }
    }
  }

 private:
  enum Phase { kStart, kThinking, kAfter, kContent };
  Phase phase_;
  std::string pending_;
};

// ---------------------------------------------------------------------------
// Tools: finds tool calls in the content.

class OutputParser::Tools {
 public:
  Tools(ToolCallFormat format, nlohmann::json tools, std::string seed)
      : format_(format), tools_(std::move(tools)), seed_(std::move(seed)) {
    phase_ = format_ == ToolCallFormat::kNone ? kPlain
             : format_ == ToolCallFormat::kLlama3Json ? kJsonStart
                                                     : kText;
  }

  void Feed(absl::string_view text, bool final, ParsedDelta* out) {
    pending_.append(text.data(), text.size());
    out_ = out;
    switch (phase_) {
      case kPlain:
        EmitText(pending_, final);
        pending_.clear();
        break;
      case kText:
      case kInCall:
        FeedTagged(final);
        break;
      default:
        FeedJson(final);
        break;
    }
    if (final) held_space_.clear();  // trailing whitespace after a call
    out_ = nullptr;
  }

  int count() const { return count_; }

 private:
  enum Phase { kPlain, kText, kInCall, kJsonStart, kJson };

  // <tool_call> ... </tool_call> formats (Hermes, Qwen3-Coder).
  void FeedTagged(bool final) {
    for (;;) {
      if (phase_ == kText) {
        const size_t pos = Find(pending_, kCallOpen);
        if (pos != std::string::npos) {
          EmitText(absl::string_view(pending_).substr(0, pos), false);
          pending_.erase(0, pos + kCallOpen.size());
          StartCall();
          phase_ = kInCall;
          continue;
        }
        const size_t hold = final ? 0 : PartialMarkerSuffix(pending_, kCallOpen);
        EmitText(absl::string_view(pending_).substr(0, pending_.size() - hold),
                 final);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      const size_t pos = Find(pending_, kCallClose);
      if (pos != std::string::npos) {
        body_.append(pending_, 0, pos);
        pending_.erase(0, pos + kCallClose.size());
        UpdateCall(body_, /*complete=*/true);
        EndCall(absl::StrCat(kCallOpen, body_, kCallClose));
        phase_ = kText;
        continue;
      }
      const size_t hold = final ? 0 : PartialMarkerSuffix(pending_, kCallClose);
      body_.append(pending_, 0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
      UpdateCall(body_, final);
      if (final) {
        EndCall(absl::StrCat(kCallOpen, body_));
        phase_ = kText;
      }
      return;
    }
  }

  // Llama 3: the reply is JSON calls (after an optional <|python_tag|>),
  // separated by ';'; anything else is content.
  void FeedJson(bool final) {
    if (phase_ == kJsonStart) {
      const size_t i = FirstNonSpace(pending_);
      if (i == std::string::npos) {
        if (final) pending_.clear();
        return;
      }
      const absl::string_view rest = absl::string_view(pending_).substr(i);
      if (absl::StartsWith(rest, kPythonTag)) {
        pending_.erase(0, i + kPythonTag.size());
      } else if (!final && absl::StartsWith(kPythonTag, rest)) {
        return;
      } else if (rest[0] != '{') {
        phase_ = kPlain;
        EmitText(pending_, final);
        pending_.clear();
        return;
      }
      phase_ = kJson;
    }
    for (;;) {
      if (!in_object_) {
        size_t i = 0;
        while (i < pending_.size() && (IsJsonSpace(pending_[i]) || pending_[i] == ';')) ++i;
        if (i == pending_.size()) {  // held: text may follow
          if (final) pending_.clear();
          return;
        }
        if (pending_[i] != '{') {  // not a call: the rest is content
          phase_ = kPlain;
          EmitText(pending_, final);
          pending_.clear();
          return;
        }
        pending_.erase(0, i);
        in_object_ = true;
        StartCall();
      }
      const size_t end = ScanJsonValueEnd(pending_, 0);
      if (end != kScanIncomplete && end != kScanError) {
        const std::string object = pending_.substr(0, end);
        pending_.erase(0, end);
        UpdateCall(object, /*complete=*/true);
        EndCall(object);
        in_object_ = false;
        continue;
      }
      UpdateCall(pending_, final);
      if (final || end == kScanError) {
        EndCall(pending_);
        pending_.clear();
        in_object_ = false;
        if (end == kScanError) phase_ = kPlain;
      }
      return;
    }
  }

  void StartCall() {
    name_sent_ = false;
    args_sent_ = 0;
    body_.clear();
  }

  // Emits what the scan of the call's text so far adds: the id and name
  // once known, then the arguments text beyond what was sent.
  void UpdateCall(absl::string_view body, bool complete) {
    const CallScan scan = format_ == ToolCallFormat::kQwen3Coder
                              ? ScanXmlCall(body, complete, tools_)
                              : ScanJsonCall(body, complete);
    if (!scan.name.has_value()) return;
    if (!name_sent_) {
      name_sent_ = true;
      ToolCallDelta d;
      d.index = count_;
      d.id = ToolCallId(seed_, count_);
      d.name = *scan.name;
      out_->tool_calls.push_back(std::move(d));
    }
    std::string args = scan.arguments;
    if (complete && args.empty()) args = "{}";
    if (args.size() > args_sent_ && absl::StartsWith(args, sent_args_)) {
      ToolCallDelta d;
      d.index = count_;
      d.arguments = args.substr(args_sent_);
      sent_args_ = args;
      args_sent_ = args.size();
      if (!out_->tool_calls.empty() && out_->tool_calls.back().index == count_) {
        out_->tool_calls.back().arguments += d.arguments;
      } else {
        out_->tool_calls.push_back(std::move(d));
      }
    }
  }

  // The call's text ended: a call with a name counts; one without is
  // content after all.
  void EndCall(absl::string_view raw) {
    if (name_sent_) {
      ++count_;
      held_space_.clear();
    } else {
      EmitText(raw, false);
    }
    name_sent_ = false;
    args_sent_ = 0;
    sent_args_.clear();
    body_.clear();
  }

  // Content; after a call, whitespace is held until text follows it.
  void EmitText(absl::string_view text, bool final) {
    if (count_ == 0) {
      out_->content.append(text.data(), text.size());
      return;
    }
    held_space_.append(text.data(), text.size());
    const size_t i = FirstNonSpace(held_space_);
    if (i != std::string::npos) {
      out_->content.append(held_space_, i);
      held_space_.clear();
    }
    (void)final;
  }

  ToolCallFormat format_;
  nlohmann::json tools_;
  std::string seed_;
  Phase phase_;
  std::string pending_, body_, held_space_, sent_args_;
  bool name_sent_ = false, in_object_ = false;
  size_t args_sent_ = 0;
  int count_ = 0;
  ParsedDelta* out_ = nullptr;
};

// ---------------------------------------------------------------------------

OutputParser::OutputParser(OutputParserOptions options)
    : reasoning_(std::make_unique<Reasoning>(options.reasoning,
                                             options.starts_in_reasoning)),
      tools_(std::make_unique<Tools>(options.tool_calls, std::move(options.tools),
                                     std::move(options.call_id_seed))) {}

OutputParser::~OutputParser() = default;

ParsedDelta OutputParser::Feed(absl::string_view text) {
  ParsedDelta out;
  std::string content;
  reasoning_->Feed(text, /*final=*/false, &content, &out.reasoning);
  tools_->Feed(content, /*final=*/false, &out);
  return out;
}

ParsedDelta OutputParser::Finish() {
  ParsedDelta out;
  std::string content;
  reasoning_->Feed("", /*final=*/true, &content, &out.reasoning);
  tools_->Feed(content, /*final=*/true, &out);
  return out;
}

int OutputParser::tool_call_count() const { return tools_->count(); }

}  // namespace pdserve
