#include "server/frontend/api_types.h"

#include <cctype>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pdserve::frontend {
namespace {

// The field path a shared-path message starts with ("sampling.top_p",
// "messages[1].content", "max_tokens"), or "" when it starts with prose.
std::string LeadingFieldPath(const std::string& message) {
  size_t end = 0;
  while (end < message.size() &&
         (std::isalnum(static_cast<unsigned char>(message[end])) ||
          message[end] == '_' || message[end] == '.' || message[end] == '[' ||
          message[end] == ']')) {
    ++end;
  }
  if (end == 0 || end == message.size() ||
      (message[end] != ' ' && message[end] != ':')) {
    return "";
  }
  const std::string path = message.substr(0, end);
  // Messages that start with prose or a count name no field.
  for (const char* word : {"all", "give", "the", "malformed", "a", "an"}) {
    if (path == word) return "";
  }
  if (std::isdigit(static_cast<unsigned char>(path[0]))) return "";
  return path;
}

}  // namespace

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ErrorType(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

ApiError ToApiError(const absl::Status& status, bool during_validation) {
  ApiError e;
  e.message = std::string(status.message());
  std::string path = LeadingFieldPath(e.message);
  if (absl::StartsWith(path, "sampling.")) {
    e.message = e.message.substr(std::string("sampling.").size());
    path = path.substr(std::string("sampling.").size());
  }
  if (during_validation) e.param = path;  // later failures name no field
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.status = 400;
      if (path == "model") {
        e.status = 404;
        e.code = "model_not_found";
      }
      break;
    case absl::StatusCode::kResourceExhausted:
      e.status = during_validation ? 400 : 429;
      if (during_validation) e.code = "context_length_exceeded";
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.status = 401;
      break;
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      break;
    default:
      e.status = 500;
      break;
  }
  return e;
}

std::string JsonTypeName(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

namespace {

absl::Status WrongType(const char* key, const char* want, const Json& v) {
  return absl::InvalidArgumentError(
      absl::StrCat(key, " must be ", want, ", got ", JsonTypeName(v)));
}

const Json* Field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

absl::Status GetNumber(const Json& obj, const char* key,
                       std::optional<double>* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status GetInteger(const Json& obj, const char* key,
                        std::optional<int64_t>* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number_integer() || v->is_number_unsigned()) {
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      *out = static_cast<int64_t>(d);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be an integer, got ", v->dump()));
  }
  return WrongType(key, "an integer", *v);
}

absl::Status GetBool(const Json& obj, const char* key,
                     std::optional<bool>* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status GetString(const Json& obj, const char* key,
                       std::optional<std::string>* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return WrongType(key, "a string", *v);
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetStringList(
    const Json& obj, const char* key,
    google::protobuf::RepeatedPtrField<std::string>* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    *out->Add() = v->get<std::string>();
    return absl::OkStatus();
  }
  if (!v->is_array()) return WrongType(key, "a string or a list of strings", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, "[", i, "] must be a string, got ", JsonTypeName((*v)[i])));
    }
    *out->Add() = (*v)[i].get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseBody(const std::string& body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body is not valid JSON (", body.size(), " bytes)"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body must be a JSON object, got ", JsonTypeName(j)));
  }
  return j;
}

void MergeDelta(const v1::Delta& delta, v1::Delta* merged) {
  merged->mutable_text()->append(delta.text());
  merged->mutable_token_ids()->MergeFrom(delta.token_ids());
  merged->mutable_logprobs()->MergeFrom(delta.logprobs());
  merged->mutable_top_logprobs()->MergeFrom(delta.top_logprobs());
  merged->mutable_reasoning_text()->append(delta.reasoning_text());
  // One entry per call: its id and name, and all its arguments text.
  for (const v1::ToolCallDelta& c : delta.tool_calls()) {
    v1::ToolCallDelta* into = nullptr;
    for (v1::ToolCallDelta& m : *merged->mutable_tool_calls()) {
      if (m.index() == c.index()) into = &m;
    }
    if (into == nullptr) {
      *merged->add_tool_calls() = c;
    } else {
      into->mutable_arguments()->append(c.arguments());
    }
  }
}

Json OpenAiErrorBody(const ApiError& e) {
  Json err = {{"message", e.message},
              {"type", ErrorType(e.status)},
              {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
              {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}};
  return Json{{"error", std::move(err)}};
}

}  // namespace pdserve::frontend
