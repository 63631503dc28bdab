// pdserve.v1 GrammarConstraint / ReasoningControl -> the engine's types.
// Pure.
#ifndef PDSERVE_ENGINE_GRAMMAR_GRAMMAR_PROTO_H_
#define PDSERVE_ENGINE_GRAMMAR_GRAMMAR_PROTO_H_

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "pdserve/v1/common.pb.h"

namespace pdserve::grammar {

// INVALID_ARGUMENT "constraint has no kind" when none of the oneof is set.
absl::StatusOr<GrammarSpec> SpecFromProto(const v1::GrammarConstraint& c);

}  // namespace pdserve::grammar

#endif  // PDSERVE_ENGINE_GRAMMAR_GRAMMAR_PROTO_H_
