// `pdserve engine`: one engine process (model, KV pools, step executor).
#include "common/process/process.h"
#include "config/process_options.h"
#include "engine/service/engine_process.h"
#include "server/cli/command.h"
#include "server/cli/process_command.h"
#include "server/tokenizer/grammar_vocabulary.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::cli {
namespace {

int RunEngine(int argc, char** argv) {
  process::BlockTerminationSignals();
  // Constrained decoding matches the model's own tokenizer.
  service::SetGrammarVocabularyLoader(
      [](const std::string& path,
         int32_t vocab_size) -> absl::StatusOr<grammar::GrammarVocabulary> {
        auto tok = Tokenizer::Load(path);
        if (!tok.ok()) return tok.status();
        return grammar::VocabularyOf(**tok, vocab_size);
      });
  return RunProcessCommand("engine", "pdserve engine --model PATH [options]",
                           config::EngineFlagTable(), argc, argv,
                           &service::RunEngineProcess);
}

}  // namespace

PDSERVE_COMMAND(engine, "run the engine process (model, KV pools, steps) over gRPC",
                RunEngine);

}  // namespace pdserve::cli
