#include "server/frontend/openai_tools.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::frontend {
namespace {

absl::Status Invalid(const std::string& key, const std::string& what,
                     const Json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(key, " must be ", what, ", got ", JsonTypeName(got)));
}

const Json* Find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A JSON Schema given as an object or as its JSON text.
absl::Status SchemaText(const Json& v, const std::string& key, std::string* out) {
  if (v.is_object()) {
    *out = DumpJson(v);
  } else if (v.is_string()) {
    Json parsed = Json::parse(v.get<std::string>(), nullptr, false);
    if (!parsed.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " is not a JSON Schema object"));
    }
    *out = v.get<std::string>();
  } else {
    return Invalid(key, "a JSON Schema object", v);
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const Json& tools, v1::GenerateRequest* req) {
  if (!tools.is_array()) return Invalid("tools", "a list of tools", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string key = absl::StrCat("tools[", i, "]");
    const Json& t = tools[i];
    if (!t.is_object()) return Invalid(key, "an object", t);
    std::optional<std::string> type;
    PDSERVE_RETURN_IF_ERROR(GetString(t, "type", &type));
    if (type.value_or("function") != "function") {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ".type '", *type, "' is not supported (only function)"));
    }
    const Json* fn = Find(t, "function");
    if (fn == nullptr || !fn->is_object()) {
      return absl::InvalidArgumentError(key + ".function is required (an object)");
    }
    std::optional<std::string> name, description;
    PDSERVE_RETURN_IF_ERROR(GetString(*fn, "name", &name));
    PDSERVE_RETURN_IF_ERROR(GetString(*fn, "description", &description));
    v1::Tool* out = req->add_tools();
    out->set_name(name.value_or(""));
    out->set_description(description.value_or(""));
    if (const Json* p = Find(*fn, "parameters")) {
      PDSERVE_RETURN_IF_ERROR(SchemaText(*p, key + ".function.parameters",
                                 out->mutable_parameters()));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseToolChoice(const Json& v, v1::ToolChoice* out) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "auto") return absl::OkStatus();
    if (s == "none") {
      out->set_mode(v1::ToolChoice::MODE_NONE);
    } else if (s == "required") {
      out->set_mode(v1::ToolChoice::MODE_REQUIRED);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice '", s, "' is not auto, none, required or "
          "{\"type\": \"function\", \"function\": {\"name\": ...}}"));
    }
    return absl::OkStatus();
  }
  if (!v.is_object()) return Invalid("tool_choice", "a string or an object", v);
  const Json* fn = Find(v, "function");
  std::optional<std::string> name;
  if (fn != nullptr && fn->is_object()) PDSERVE_RETURN_IF_ERROR(GetString(*fn, "name", &name));
  if (!name.has_value()) {
    return absl::InvalidArgumentError("tool_choice.function.name is required");
  }
  out->set_mode(v1::ToolChoice::MODE_FUNCTION);
  out->set_function(*name);
  return absl::OkStatus();
}

// response_format {"type": "text" | "json_object" | "json_schema"}.
absl::Status ParseResponseFormat(const Json& v, v1::GrammarConstraint* c,
                                 bool* set) {
  if (!v.is_object()) return Invalid("response_format", "an object", v);
  std::optional<std::string> type;
  PDSERVE_RETURN_IF_ERROR(GetString(v, "type", &type));
  const std::string t = type.value_or("");
  if (t == "text") return absl::OkStatus();
  *set = true;
  if (t == "json_object") {
    c->set_json_object(true);
    return absl::OkStatus();
  }
  if (t != "json_schema") {
    return absl::InvalidArgumentError(absl::StrCat(
        "response_format.type '", t, "' is not text, json_object or json_schema"));
  }
  const Json* js = Find(v, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return absl::InvalidArgumentError(
        "response_format.json_schema is required (an object with a schema)");
  }
  const Json* schema = Find(*js, "schema");
  if (schema == nullptr) {
    return absl::InvalidArgumentError("response_format.json_schema.schema is required");
  }
  PDSERVE_RETURN_IF_ERROR(SchemaText(*schema, "response_format.json_schema.schema",
                             c->mutable_json_schema()));
  std::optional<bool> strict;
  PDSERVE_RETURN_IF_ERROR(GetBool(*js, "strict", &strict));
  c->set_strict(strict.value_or(false));
  return absl::OkStatus();
}

// vLLM's structured outputs: {"json", "regex", "choice", "grammar",
// "json_object"} (structured_outputs) or guided_json / guided_regex /
// guided_choice / guided_grammar at the top level (`prefix` "guided_").
absl::Status ParseStructured(const Json& obj, const std::string& prefix,
                             const std::string& key_base,
                             v1::GrammarConstraint* c, int* count) {
  auto key = [&](const char* k) { return prefix + k; };
  auto name = [&](const char* k) { return key_base + prefix + k; };
  if (const Json* j = Find(obj, key("json").c_str())) {
    ++*count;
    PDSERVE_RETURN_IF_ERROR(SchemaText(*j, name("json"), c->mutable_json_schema()));
    c->set_strict(false);
  }
  if (const Json* r = Find(obj, key("regex").c_str())) {
    ++*count;
    if (!r->is_string()) return Invalid(name("regex"), "a string", *r);
    c->set_regex(r->get<std::string>());
  }
  if (const Json* ch = Find(obj, key("choice").c_str())) {
    ++*count;
    if (!ch->is_array()) return Invalid(name("choice"), "a list of strings", *ch);
    for (size_t i = 0; i < ch->size(); ++i) {
      if (!(*ch)[i].is_string()) {
        return Invalid(absl::StrCat(name("choice"), "[", i, "]"), "a string", (*ch)[i]);
      }
      c->mutable_choice()->add_choices((*ch)[i].get<std::string>());
    }
    if (ch->empty()) c->mutable_choice();
  }
  if (const Json* g = Find(obj, key("grammar").c_str())) {
    ++*count;
    if (!g->is_string()) return Invalid(name("grammar"), "a string", *g);
    c->set_grammar(g->get<std::string>());
  }
  if (const Json* o = Find(obj, key("json_object").c_str())) {
    if (o->is_boolean() && o->get<bool>()) {
      ++*count;
      c->set_json_object(true);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseMessageTools(const Json& m, const std::string& key,
                               v1::ChatMessage* out) {
  std::optional<std::string> tool_call_id, reasoning, reasoning_alt;
  PDSERVE_RETURN_IF_ERROR(GetString(m, "tool_call_id", &tool_call_id));
  PDSERVE_RETURN_IF_ERROR(GetString(m, "reasoning_content", &reasoning));
  PDSERVE_RETURN_IF_ERROR(GetString(m, "reasoning", &reasoning_alt));
  if (tool_call_id.has_value()) out->set_tool_call_id(*tool_call_id);
  if (reasoning.has_value() || reasoning_alt.has_value()) {
    out->set_reasoning_content(reasoning.value_or(reasoning_alt.value_or("")));
  }
  const Json* calls = Find(m, "tool_calls");
  if (calls == nullptr) return absl::OkStatus();
  if (!calls->is_array()) return Invalid(key + ".tool_calls", "a list", *calls);
  for (size_t j = 0; j < calls->size(); ++j) {
    const std::string ck = absl::StrCat(key, ".tool_calls[", j, "]");
    const Json& c = (*calls)[j];
    if (!c.is_object()) return Invalid(ck, "an object", c);
    const Json* fn = Find(c, "function");
    if (fn == nullptr || !fn->is_object()) {
      return absl::InvalidArgumentError(ck + ".function is required (an object)");
    }
    std::optional<std::string> id, name;
    PDSERVE_RETURN_IF_ERROR(GetString(c, "id", &id));
    PDSERVE_RETURN_IF_ERROR(GetString(*fn, "name", &name));
    v1::ToolCall* out_call = out->add_tool_calls();
    out_call->set_id(id.value_or(""));
    out_call->set_name(name.value_or(""));
    if (const Json* a = Find(*fn, "arguments")) {
      if (a->is_string()) {
        out_call->set_arguments(a->get<std::string>());
      } else if (a->is_object()) {
        out_call->set_arguments(DumpJson(*a));
      } else {
        return Invalid(ck + ".function.arguments", "a JSON object's text", *a);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseChatGuidance(const Json& body, v1::GenerateRequest* req) {
  if (const Json* tools = Find(body, "tools")) PDSERVE_RETURN_IF_ERROR(ParseTools(*tools, req));
  if (const Json* choice = Find(body, "tool_choice")) {
    PDSERVE_RETURN_IF_ERROR(ParseToolChoice(*choice, req->mutable_tool_choice()));
  }
  v1::GrammarConstraint c;
  int count = 0;
  bool response_format = false;
  if (const Json* rf = Find(body, "response_format")) {
    PDSERVE_RETURN_IF_ERROR(ParseResponseFormat(*rf, &c, &response_format));
    count += response_format;
  }
  if (const Json* so = Find(body, "structured_outputs")) {
    if (!so->is_object()) return Invalid("structured_outputs", "an object", *so);
    PDSERVE_RETURN_IF_ERROR(ParseStructured(*so, "", "structured_outputs.", &c, &count));
  }
  PDSERVE_RETURN_IF_ERROR(ParseStructured(body, "guided_", "", &c, &count));
  if (count > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        count, " output constraints are given (response_format, "
        "structured_outputs, guided_*); give at most one"));
  }
  if (count == 1) *req->mutable_sampling()->mutable_constraint() = std::move(c);
  std::optional<int64_t> max_reasoning;
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "max_reasoning_tokens", &max_reasoning));
  if (max_reasoning.has_value()) {
    req->set_max_reasoning_tokens(static_cast<int32_t>(
        std::clamp<int64_t>(*max_reasoning, INT32_MIN, INT32_MAX)));
  }
  std::optional<bool> enable_thinking;
  PDSERVE_RETURN_IF_ERROR(GetBool(body, "enable_thinking", &enable_thinking));
  auto* fields = req->mutable_chat_template_kwargs()->mutable_fields();
  if (enable_thinking.has_value() && !fields->contains("enable_thinking")) {
    (*fields)["enable_thinking"].set_bool_value(*enable_thinking);
  }
  return absl::OkStatus();
}

Json ChatMessageJson(const v1::Delta& d, bool whole) {
  Json m = Json::object();
  const bool calls = d.tool_calls_size() > 0;
  if (whole) {
    m["role"] = "assistant";
    m["content"] = d.text().empty() && calls ? Json(nullptr) : Json(d.text());
  } else if (!d.text().empty() || (d.reasoning_text().empty() && !calls)) {
    m["content"] = d.text();
  }
  if (!d.reasoning_text().empty()) m["reasoning_content"] = d.reasoning_text();
  if (calls) {
    Json list = Json::array();
    for (const v1::ToolCallDelta& c : d.tool_calls()) {
      Json fn = Json::object();
      if (!c.name().empty()) fn["name"] = c.name();
      fn["arguments"] = c.arguments();
      Json call = Json::object();
      if (!whole) call["index"] = c.index();
      if (!c.id().empty()) {
        call["id"] = c.id();
        call["type"] = "function";
      }
      call["function"] = std::move(fn);
      list.push_back(std::move(call));
    }
    m["tool_calls"] = std::move(list);
  }
  return m;
}

}  // namespace pdserve::frontend
