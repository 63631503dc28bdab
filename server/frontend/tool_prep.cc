#include "server/frontend/tool_prep.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pdserve::frontend {
namespace {

using OJson = nlohmann::ordered_json;

bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// An EBNF literal of `s` (names are [A-Za-z0-9_.-]; values free text).
std::string Literal(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// One call of `tool` as JSON: {"name": N, <args_key>: parameters}.
OJson CallSchema(const OJson& tool, const char* args_key) {
  const OJson& fn = tool["function"];
  OJson params = fn.contains("parameters") ? fn["parameters"]
                                           : OJson{{"type", "object"}};
  return OJson{{"type", "object"},
               {"properties",
                {{"name", {{"const", fn["name"]}}}, {args_key, params}}},
               {"required", {"name", args_key}},
               {"additionalProperties", false}};
}

// Qwen3-Coder's XML call of `tool`: each parameter of its schema in order.
std::string XmlCallRule(const OJson& tool) {
  const OJson& fn = tool["function"];
  std::string rule = Literal("<function=" + fn["name"].get<std::string>() + ">\n");
  if (fn.contains("parameters") && fn["parameters"].contains("properties") &&
      fn["parameters"]["properties"].is_object()) {
    for (const auto& [name, schema] : fn["parameters"]["properties"].items()) {
      absl::StrAppend(&rule, " ", Literal("<parameter=" + name + ">\n"),
                      " value ", Literal("\n</parameter>\n"));
    }
  }
  return rule;
}

}  // namespace

absl::StatusOr<OJson> ParseArguments(const std::string& text,
                                     const std::string& key) {
  if (text.empty()) return OJson::object();
  OJson j = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " is not a JSON object: ",
        j.is_discarded() ? "it does not parse" : "it is " + std::string(j.type_name()),
        " (", text.size(), " bytes)"));
  }
  return j;
}

absl::StatusOr<OJson> ToolsJson(const v1::GenerateRequest& req) {
  const v1::ToolChoice& choice = req.tool_choice();
  if (req.tools_size() > kMaxTools) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tools has ", req.tools_size(), " entries; at most ", kMaxTools));
  }
  std::set<std::string> names;
  OJson tools = OJson::array();
  for (int i = 0; i < req.tools_size(); ++i) {
    const v1::Tool& t = req.tools(i);
    const std::string key = absl::StrCat("tools[", i, "]");
    if (!ValidToolName(t.name())) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ".name '", t.name(), "' must be 1 to 64 of A-Z a-z 0-9 _ . -"));
    }
    if (!names.insert(t.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ".name '", t.name(), "' is given twice"));
    }
    OJson fn = {{"name", t.name()}};
    if (!t.description().empty()) fn["description"] = t.description();
    if (!t.parameters().empty()) {
      OJson p = OJson::parse(t.parameters(), nullptr, /*allow_exceptions=*/false);
      if (!p.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            key, ".parameters must be a JSON Schema object"));
      }
      fn["parameters"] = std::move(p);
    }
    tools.push_back(OJson{{"type", "function"}, {"function", std::move(fn)}});
  }
  if (choice.mode() == v1::ToolChoice::MODE_FUNCTION &&
      !names.contains(choice.function())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tool_choice names '", choice.function(), "', which is not among the ",
        names.size(), " tools given (", absl::StrJoin(names, ", "), ")"));
  }
  if (choice.mode() == v1::ToolChoice::MODE_REQUIRED && names.empty()) {
    return absl::InvalidArgumentError(
        "tool_choice 'required' needs at least one tool in tools");
  }
  if (tools.empty()) return OJson(nullptr);
  return tools;
}

std::optional<v1::GrammarConstraint> ForcedToolCall(
    const v1::ToolChoice& choice, const OJson& tools, ToolCallFormat format) {
  if (choice.mode() != v1::ToolChoice::MODE_FUNCTION &&
      choice.mode() != v1::ToolChoice::MODE_REQUIRED) {
    return std::nullopt;
  }
  std::vector<const OJson*> chosen;
  for (const OJson& t : tools) {
    if (choice.mode() == v1::ToolChoice::MODE_REQUIRED ||
        t["function"]["name"] == choice.function()) {
      chosen.push_back(&t);
    }
  }
  v1::GrammarConstraint c;
  if (format == ToolCallFormat::kQwen3Coder) {
    std::string root = "root ::= " + Literal("<tool_call>\n") + " (";
    for (size_t i = 0; i < chosen.size(); ++i) {
      absl::StrAppend(&root, i > 0 ? " | " : "", "(", XmlCallRule(*chosen[i]), ")");
    }
    absl::StrAppend(&root, ") ", Literal("</function>\n</tool_call>"), "\n",
                    "value ::= [^<]*\n");
    c.set_grammar(root);
    return c;
  }
  const char* args_key =
      format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  OJson schema;
  if (chosen.size() == 1) {
    schema = CallSchema(*chosen[0], args_key);
  } else {
    schema = OJson{{"anyOf", OJson::array()}};
    for (const OJson* t : chosen) schema["anyOf"].push_back(CallSchema(*t, args_key));
  }
  c.set_json_schema(schema.dump());
  c.set_strict(true);
  if (format != ToolCallFormat::kLlama3Json) {
    c.set_prefix("<tool_call>\n");
    c.set_suffix("\n</tool_call>");
  }
  return c;
}

}  // namespace pdserve::frontend
