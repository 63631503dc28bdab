// `pdserve engine`: loads a model, builds an EngineCore and serves
// pdserve.v1.Engine (plus health and reflection) until SIGTERM/SIGINT.
#ifndef PDSERVE_ENGINE_SERVICE_ENGINE_PROCESS_H_
#define PDSERVE_ENGINE_SERVICE_ENGINE_PROCESS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "config/process_options.h"
#include "engine/grammar/grammar.h"

namespace pdserve::service {

// Reads the grammar vocabulary (each token's bytes, the stop ids) of the
// tokenizer at `path` for a model of `vocab_size` ids. The tokenizer lives
// above the engine (server/tokenizer), so the binary provides this; without
// one (or when it fails) the engine refuses constrained requests.
using GrammarVocabularyLoader =
    std::function<absl::StatusOr<grammar::GrammarVocabulary>(
        const std::string& path, int32_t vocab_size)>;
// Call before RunEngineProcess.
void SetGrammarVocabularyLoader(GrammarVocabularyLoader loader);

// Runs the process; returns its exit code (0 after a clean shutdown, 1 on a
// start-up failure, printed on stderr). Prints one line on stdout once it
// serves: "pdserve engine: serving MODEL on HOST:PORT".
int RunEngineProcess(const config::EngineProcessOptions& options);

}  // namespace pdserve::service

#endif  // PDSERVE_ENGINE_SERVICE_ENGINE_PROCESS_H_
