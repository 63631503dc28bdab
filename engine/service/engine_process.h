// `pdserve engine`: loads a model, builds an EngineCore and serves
// pdserve.v1.Engine (plus health and reflection) until SIGTERM/SIGINT.
#ifndef PDSERVE_ENGINE_SERVICE_ENGINE_PROCESS_H_
#define PDSERVE_ENGINE_SERVICE_ENGINE_PROCESS_H_

#include "config/process_options.h"

namespace pdserve::service {

// Runs the process; returns its exit code (0 after a clean shutdown, 1 on a
// start-up failure, printed on stderr). Prints one line on stdout once it
// serves: "pdserve engine: serving MODEL on HOST:PORT".
int RunEngineProcess(const config::EngineProcessOptions& options);

}  // namespace pdserve::service

#endif  // PDSERVE_ENGINE_SERVICE_ENGINE_PROCESS_H_
