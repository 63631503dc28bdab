// SequenceId: the one id of a sequence across the scheduler's policy, the
// engine API (StepRequest seq_id) and the engine's KV pool. Chosen by the
// scheduler; unique among the sequences an engine holds.
#ifndef PDSERVE_ENGINE_KV_SEQUENCE_ID_H_
#define PDSERVE_ENGINE_KV_SEQUENCE_ID_H_

#include <cstdint>

namespace pdserve {

using SequenceId = uint64_t;

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_SEQUENCE_ID_H_
