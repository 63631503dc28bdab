#include "engine/grammar/grammar_proto.h"

namespace pdserve::grammar {

absl::StatusOr<GrammarSpec> SpecFromProto(const v1::GrammarConstraint& c) {
  GrammarSpec s;
  s.strict = c.strict();
  s.prefix = c.prefix();
  s.suffix = c.suffix();
  switch (c.kind_case()) {
    case v1::GrammarConstraint::kJsonObject:
      s.kind = GrammarSpec::Kind::kJsonObject;
      break;
    case v1::GrammarConstraint::kJsonSchema:
      s.kind = GrammarSpec::Kind::kJsonSchema;
      s.text = c.json_schema();
      break;
    case v1::GrammarConstraint::kRegex:
      s.kind = GrammarSpec::Kind::kRegex;
      s.text = c.regex();
      break;
    case v1::GrammarConstraint::kChoice:
      s.kind = GrammarSpec::Kind::kChoice;
      s.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      break;
    case v1::GrammarConstraint::kGrammar:
      s.kind = GrammarSpec::Kind::kEbnf;
      s.text = c.grammar();
      break;
    default:
      return absl::InvalidArgumentError(
          "sampling.constraint has no kind (json_object, json_schema, regex, "
          "choice or grammar)");
  }
  return s;
}

}  // namespace pdserve::grammar
