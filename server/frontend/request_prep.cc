#include "server/frontend/request_prep.h"

#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/unknown_field_set.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "engine/grammar/grammar_proto.h"
#include "server/tokenizer/grammar_vocabulary.h"
#include "server/frontend/tool_prep.h"
#include "server/tokenizer/unicode.h"

namespace pdserve::frontend {
namespace {

absl::Status CheckUtf8(const std::string& field, const std::string& text) {
  absl::Status s = unicode::ValidateUtf8(text);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
}

absl::Status CheckSampling(const v1::SamplingParams& p, int32_t vocab_size) {
  if (!std::isfinite(p.temperature()) || p.temperature() < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling.temperature %g must be a finite number >= 0", p.temperature()));
  }
  if (!(p.top_p() >= 0 && p.top_p() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.top_p %g must be in [0, 1]", p.top_p()));
  }
  if (!(p.min_p() >= 0 && p.min_p() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.min_p %g must be in [0, 1]", p.min_p()));
  }
  if (p.top_k() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.top_k %d must be >= 0", p.top_k()));
  }
  if (!(p.repetition_penalty() >= 0) || !std::isfinite(p.repetition_penalty())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling.repetition_penalty %g must be >= 0 (0 = off)",
        p.repetition_penalty()));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty", p.presence_penalty()},
        {"frequency_penalty", p.frequency_penalty()}}) {
    if (!(value >= -2 && value <= 2)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sampling.%s %g must be in [-2, 2] (0 = off)", name, value));
    }
  }
  if (p.logit_bias_size() > kMaxLogitBias) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.logit_bias has %d entries; at most %d",
                        p.logit_bias_size(), kMaxLogitBias));
  }
  for (const auto& [id, bias] : p.logit_bias()) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sampling.logit_bias token %d is outside the vocabulary [0, %d)", id,
          vocab_size));
    }
    if (!(bias >= -100 && bias <= 100)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sampling.logit_bias[%d] %g must be in [-100, 100]", id, bias));
    }
  }
  return absl::OkStatus();
}

// chat_template_kwargs as template variables (JSON values).
absl::Status ApplyTemplateKwargs(const google::protobuf::Struct& kwargs,
                                 ChatRenderOptions* options) {
  if (kwargs.fields_size() == 0) return absl::OkStatus();
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(kwargs, &json).ok()) {
    return absl::InvalidArgumentError("chat_template_kwargs is not valid JSON");
  }
  const nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError("chat_template_kwargs must be an object");
  }
  for (const auto& [key, value] : parsed.items()) {
    if (key == "enable_thinking" && value.is_boolean()) {
      options->enable_thinking = value.get<bool>();
    }
    options->extra_variables[key] = value;
  }
  return absl::OkStatus();
}

// messages[i].parts as the template's content list.
absl::Status ContentParts(const v1::ChatMessage& m, int i, ChatMessage* msg) {
  if (m.parts_size() > 0 && !m.content().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "messages[%d] has both content and %d parts; send one of them", i,
        m.parts_size()));
  }
  for (int j = 0; j < m.parts_size(); ++j) {
    const v1::ContentPart& p = m.parts(j);
    ChatContentPart part;
    part.image = p.has_image();
    if (!part.image) {
      if (auto s = CheckUtf8(absl::StrFormat("messages[%d].parts[%d].text", i, j),
                             p.text());
          !s.ok()) {
        return s;
      }
      part.text = p.text();
    }
    msg->parts.push_back(std::move(part));
  }
  bool image = false;
  for (const ChatContentPart& p : msg->parts) image |= p.image;
  if (!image) {  // text alone: the string a text-only template expects
    for (const ChatContentPart& p : msg->parts) {
      if (!msg->content.empty()) msg->content.push_back('\n');
      msg->content += p.text;
    }
    msg->parts.clear();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PromptSegment>> RenderMessages(
    const v1::GenerateRequest& req, const ModelContext& model,
    const nlohmann::ordered_json& tools, bool add_generation_prompt = true) {
  static const char* kRoles[] = {"system", "user", "assistant", "tool"};
  std::vector<ChatMessage> messages;
  bool any_content = false;
  for (int i = 0; i < req.messages_size(); ++i) {
    const v1::ChatMessage& m = req.messages(i);
    bool known = false;
    for (const char* r : kRoles) known |= m.role() == r;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "messages[%d].role '%s' is not one of system, user, assistant, tool",
          i, m.role()));
    }
    if (auto s = CheckUtf8(absl::StrFormat("messages[%d].content", i), m.content());
        !s.ok()) {
      return s;
    }
    any_content |= !m.content().empty() || m.tool_calls_size() > 0 ||
                   m.parts_size() > 0;
    ChatMessage msg;
    msg.role = m.role();
    msg.content = m.content();
    if (auto s = ContentParts(m, i, &msg); !s.ok()) return s;
    if (!m.name().empty()) msg.name = m.name();
    if (!m.reasoning_content().empty()) msg.reasoning_content = m.reasoning_content();
    if (!m.tool_call_id().empty()) msg.tool_call_id = m.tool_call_id();
    for (int j = 0; j < m.tool_calls_size(); ++j) {
      const v1::ToolCall& c = m.tool_calls(j);
      ChatToolCall call;
      call.id = c.id();
      call.name = c.name();
      auto args = ParseArguments(
          c.arguments(), absl::StrFormat("messages[%d].tool_calls[%d].arguments", i, j));
      if (!args.ok()) return args.status();
      call.arguments = std::move(*args);
      msg.tool_calls.push_back(std::move(call));
    }
    messages.push_back(std::move(msg));
  }
  if (!any_content) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "all %d messages have empty content", req.messages_size()));
  }
  ChatRenderOptions options;
  options.now = absl::Now();  // for templates that call strftime_now()
  options.tools = tools;
  options.add_generation_prompt = add_generation_prompt;
  if (absl::Status s = ApplyTemplateKwargs(req.chat_template_kwargs(), &options);
      !s.ok()) {
    return s;
  }
  return model.chat_template->RenderSegments(messages, options,
                                             model.control_tokens);
}

// Compiles `c` with the model's compiler (the result is cached for the next
// request with it).
absl::Status CompileConstraint(const ModelContext& model,
                               const v1::GrammarConstraint& c) {
  if (model.grammar == nullptr) {
    return absl::FailedPreconditionError(
        "constrained decoding is not available for this model");
  }
  absl::StatusOr<grammar::GrammarSpec> spec = grammar::SpecFromProto(c);
  if (!spec.ok()) return spec.status();
  auto compiled = model.grammar->Compile(*spec);
  if (compiled.ok()) return absl::OkStatus();
  if (compiled.status().code() != absl::StatusCode::kInvalidArgument) {
    return compiled.status();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("sampling.constraint: ", compiled.status().message()));
}

// The constraint (the request's or a forced tool call's), the reasoning
// control and the reply parser of a chat request.
absl::Status PrepareGuidance(const v1::GenerateRequest& req,
                             const ModelContext& model,
                             const nlohmann::ordered_json& tools,
                             const std::vector<PromptSegment>& segments,
                             PreparedRequest* out) {
  if (req.sampling().has_constraint()) out->constraint = req.sampling().constraint();
  if (auto forced = ForcedToolCall(req.tool_choice(), tools, model.tool_format)) {
    if (out->constraint.has_value()) {
      return absl::InvalidArgumentError(
          "a response format or constraint cannot be combined with a "
          "tool_choice that forces a call");
    }
    out->constraint = std::move(*forced);
  }
  if (out->constraint.has_value()) {
    if (absl::Status s = CompileConstraint(model, *out->constraint); !s.ok()) return s;
  }
  // Whether the generation prompt (what the template adds after the last
  // message) opens the reasoning; request text cannot decide it.
  bool opens = false;
  if (model.reasoning_format == ReasoningFormat::kThink) {
    std::string prompt, history;
    for (const PromptSegment& seg : segments) prompt += seg.text;
    auto without = RenderMessages(req, model, tools, /*add_generation_prompt=*/false);
    if (without.ok()) {
      for (const PromptSegment& seg : *without) history += seg.text;
    }
    opens = PromptOpensReasoning(
        absl::string_view(prompt).substr(absl::StartsWith(prompt, history)
                                             ? history.size()
                                             : 0));
  }
  if (model.reasoning_format == ReasoningFormat::kThink &&
      !model.think_end_ids.empty() &&
      (req.max_reasoning_tokens() > 0 || out->constraint.has_value())) {
    v1::ReasoningControl r;
    r.set_max_tokens(req.max_reasoning_tokens());
    r.mutable_start_ids()->Add(model.think_start_ids.begin(),
                               model.think_start_ids.end());
    r.mutable_end_ids()->Add(model.think_end_ids.begin(), model.think_end_ids.end());
    r.set_starts_inside(opens);
    out->reasoning = std::move(r);
  }
  OutputParserOptions& p = out->parser;
  p.reasoning = req.raw_reasoning() ? ReasoningFormat::kNone : model.reasoning_format;
  p.starts_in_reasoning = opens;
  if (!tools.is_null() && req.tool_choice().mode() != v1::ToolChoice::MODE_NONE) {
    p.tool_calls = model.tool_format;
    p.tools = nlohmann::json::parse(tools.dump());
  }
  return absl::OkStatus();
}

// Finds invalid UTF-8 in the string fields of a serialized GenerateRequest
// (field numbers from api.proto), parsed without UTF-8 checks.
absl::Status FindInvalidUtf8(const std::string& wire) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(wire)) return absl::OkStatus();
  int message_index = 0, stop_index = 0;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields.field(i);
    if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    std::string name;
    switch (f.number()) {
      case 1: name = "model"; break;
      case 3: name = "prompt"; break;
      case 6: name = absl::StrFormat("stop[%d]", stop_index++); break;
      case 8: name = "request_id"; break;
      case 2: {
        const int m = message_index++;
        google::protobuf::UnknownFieldSet msg;
        if (!msg.ParseFromString(f.length_delimited())) continue;
        for (int j = 0; j < msg.field_count(); ++j) {
          const google::protobuf::UnknownField& g = msg.field(j);
          static const char* kNames[] = {"", "role", "content", "name"};
          if (g.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED ||
              g.number() < 1 || g.number() > 3) {
            continue;
          }
          if (auto s = CheckUtf8(absl::StrFormat("messages[%d].%s", m,
                                                 kNames[g.number()]),
                                 g.length_delimited());
              !s.ok()) {
            return s;
          }
        }
        continue;
      }
      default: continue;
    }
    if (auto s = CheckUtf8(name, f.length_delimited()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::GenerateRequest> ParseGenerateRequest(const std::string& wire) {
  v1::GenerateRequest req;
  if (req.ParseFromString(wire)) return req;
  if (absl::Status s = FindInvalidUtf8(wire); !s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrFormat(
      "malformed GenerateRequest (%d bytes)", wire.size()));
}

absl::StatusOr<std::unique_ptr<ModelContext>> LoadModelContext(
    const std::string& tokenizer_path, const std::string& name,
    const ModelContextOptions& options) {
  auto model = std::make_unique<ModelContext>();
  model->name = name;
  auto tok = Tokenizer::Load(tokenizer_path);
  if (!tok.ok()) return tok.status();
  model->tokenizer = std::move(*tok);
  const Tokenizer& t = *model->tokenizer;
  std::string bos = t.bos_id() >= 0 ? t.TokenBytes(t.bos_id()) : "";
  std::string eos = t.eos_id() >= 0 ? t.TokenBytes(t.eos_id()) : "";
  auto tmpl = ChatTemplate::Create(t.chat_template(), bos, eos);
  if (!tmpl.ok()) return tmpl.status();
  model->chat_template.emplace(std::move(*tmpl));
  std::vector<ChatTemplate::AddedToken> added;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (t.IsSpecial(id)) added.push_back({t.TokenBytes(id), /*special=*/true});
  }
  model->control_tokens = model->chat_template->ControlTokens(added);
  const std::string& source = model->chat_template->source();
  model->tool_format = options.tool_format.value_or(DetectToolCallFormat(source));
  model->reasoning_format =
      options.reasoning_format.value_or(DetectReasoningFormat(source));
  if (model->reasoning_format == ReasoningFormat::kThink) {
    for (auto [text, ids] : {std::pair{"<think>", &model->think_start_ids},
                             std::pair{"</think>", &model->think_end_ids}}) {
      auto enc = t.Encode(text, /*parse_special=*/true);
      if (enc.ok()) *ids = std::move(*enc);
    }
  }
  grammar::GrammarCompiler::Options go;
  go.compile_timeout = absl::Milliseconds(options.grammar_compile_timeout_ms);
  auto compiler = grammar::GrammarCompiler::Create(grammar::VocabularyOf(t), go);
  if (!compiler.ok()) return compiler.status();
  model->grammar = std::move(*compiler);
  return model;
}

absl::StatusOr<std::string> RenderChatPrompt(const v1::GenerateRequest& req,
                                             const ModelContext& model) {
  auto tools = ToolsJson(req);
  if (!tools.ok()) return tools.status();
  auto segments = RenderMessages(req, model, *tools);
  if (!segments.ok()) return segments.status();
  std::string text;
  for (const PromptSegment& seg : *segments) text += seg.text;
  return text;
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& req,
                                               const ModelContext& model) {
  // One reading of the capacity per request (the process refreshes it from
  // the engine at every reconnection).
  const int64_t capacity = model.max_seq_len.load();
  if (!req.model().empty() && req.model() != model.name) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model '%s' is not served here (serving '%s')", req.model(), model.name));
  }
  const bool chat = req.messages_size() > 0;
  const bool ids = req.prompt_ids_size() > 0;
  if (chat && !req.prompt().empty()) {
    return absl::InvalidArgumentError(
        "give either messages or prompt, not both");
  }
  if (ids && (chat || !req.prompt().empty())) {
    return absl::InvalidArgumentError(
        "prompt_ids cannot be given with messages or prompt");
  }
  if (!chat && !ids && req.prompt().empty()) {
    return absl::InvalidArgumentError(
        "messages is empty and no prompt is given");
  }
  if (auto s = CheckSampling(req.sampling(), model.tokenizer->vocab_size());
      !s.ok()) {
    return s;
  }
  if (req.top_logprobs() < 0 || req.top_logprobs() > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "top_logprobs %d must be in [0, %d]", req.top_logprobs(),
        kMaxTopLogprobs));
  }
  if (req.max_tokens() < 0 || req.max_tokens() > capacity) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_tokens %d must be in [1, %d] (the sequence capacity), or 0 for "
        "the rest of the capacity",
        req.max_tokens(), capacity));
  }
  PreparedRequest out;
  if (req.stop_size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d stop strings; at most %d", req.stop_size(), kMaxStopStrings));
  }
  for (int i = 0; i < req.stop_size(); ++i) {
    const std::string& s = req.stop(i);
    if (s.empty() || s.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stop[%d] has %d bytes; it must have 1 to %d", i, s.size(),
          kMaxStopStringBytes));
    }
    if (auto st = CheckUtf8(absl::StrFormat("stop[%d]", i), s); !st.ok()) return st;
    out.stop_strings.push_back(s);
  }
  const Tokenizer& tok = *model.tokenizer;
  if (!chat && (req.tools_size() > 0 || req.max_reasoning_tokens() != 0)) {
    return absl::InvalidArgumentError(
        "tools and max_reasoning_tokens need messages (a chat request)");
  }
  if (req.max_reasoning_tokens() < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_reasoning_tokens %d must be >= 0 (0 = no limit)",
        req.max_reasoning_tokens()));
  }
  if (chat) {
    auto tools = ToolsJson(req);
    if (!tools.ok()) return tools.status();
    auto segments = RenderMessages(req, model, *tools);
    if (!segments.ok()) return segments.status();
    if (absl::Status s = PrepareGuidance(req, model, *tools, *segments, &out);
        !s.ok()) {
      return s;
    }
    auto images = PrepareRequestImages(req, model.name, model.vision,
                                       model.image_limits);
    if (!images.ok()) return images.status();
    // Template text carries the control tokens; request text never does.
    for (const PromptSegment& segment : *segments) {
      auto ids = tok.Encode(segment.text, /*parse_special=*/!segment.user_text);
      if (!ids.ok()) return ids.status();
      out.prompt_ids.insert(out.prompt_ids.end(), ids->begin(), ids->end());
    }
    if (!images->empty()) {
      if (absl::Status s = ExpandImagePlaceholders(
              &out.prompt_ids, model.vision.image_token_id, *images);
          !s.ok()) {
        return s;
      }
      out.images = ToImageInputs(*images);
    }
  } else if (ids) {
    if (req.sampling().has_constraint()) {
      if (auto s = CompileConstraint(model, req.sampling().constraint()); !s.ok()) {
        return s;
      }
      out.constraint = req.sampling().constraint();
    }
    for (int i = 0; i < req.prompt_ids_size(); ++i) {
      const int32_t id = req.prompt_ids(i);
      if (id < 0 || id >= tok.vocab_size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "prompt_ids[%d] = %d is outside the vocabulary [0, %d)", i, id,
            tok.vocab_size()));
      }
    }
    out.prompt_ids.assign(req.prompt_ids().begin(), req.prompt_ids().end());
  } else {
    if (auto s = CheckUtf8("prompt", req.prompt()); !s.ok()) return s;
    if (req.sampling().has_constraint()) {
      if (auto s = CompileConstraint(model, req.sampling().constraint()); !s.ok()) {
        return s;
      }
      out.constraint = req.sampling().constraint();
    }
    auto ids = tok.Encode(req.prompt(), /*parse_special=*/false);
    if (!ids.ok()) return ids.status();
    if (tok.add_bos() && tok.bos_id() >= 0) out.prompt_ids.push_back(tok.bos_id());
    out.prompt_ids.insert(out.prompt_ids.end(), ids->begin(), ids->end());
  }
  const int64_t n = static_cast<int64_t>(out.prompt_ids.size());
  if (n == 0) return absl::InvalidArgumentError("the prompt encodes to 0 tokens");
  if (n > capacity) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt of %d tokens exceeds the sequence capacity of %d tokens", n,
        capacity));
  }
  // The engine yields at most capacity - prompt + 1 tokens.
  const int64_t room = capacity - n + 1;
  out.max_new_tokens = static_cast<int32_t>(
      req.max_tokens() == 0 ? room : std::min<int64_t>(req.max_tokens(), room));
  if (!req.ignore_eos()) out.stop_ids = tok.stop_ids();
  return out;
}

absl::StatusOr<std::vector<int32_t>> TokenizeText(const ModelContext& model,
                                                  const std::string& text,
                                                  bool add_bos,
                                                  bool parse_special) {
  const Tokenizer& tok = *model.tokenizer;
  auto ids = tok.Encode(text, parse_special);
  if (!ids.ok()) return ids.status();
  if (add_bos && tok.bos_id() >= 0) ids->insert(ids->begin(), tok.bos_id());
  return ids;
}

absl::StatusOr<std::string> DetokenizeIds(const ModelContext& model,
                                          absl::Span<const int32_t> ids) {
  const Tokenizer& tok = *model.tokenizer;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tok.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token_ids[", i, "] = ", ids[i], " is outside the vocabulary [0, ",
          tok.vocab_size(), ")"));
    }
  }
  return unicode::ReplaceInvalidUtf8(tok.Decode(ids));
}

v1::ModelInfo DescribeModel(const ModelContext& model) {
  v1::ModelInfo m;
  m.set_name(model.name);
  m.set_vocab_size(model.tokenizer->vocab_size());
  m.set_max_seq_len(static_cast<int32_t>(model.max_seq_len.load()));
  m.set_has_chat_template(!model.tokenizer->chat_template().empty());
  return m;
}

std::string DefaultServedModelName(const std::string& model_path) {
  std::string path = model_path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  for (const char* ext : {".gguf", ".bin", ".safetensors"}) {
    const size_t n = std::strlen(ext);
    if (base.size() > n && base.compare(base.size() - n, n, ext) == 0) {
      base.resize(base.size() - n);
      break;
    }
  }
  return base;
}

}  // namespace pdserve::frontend
