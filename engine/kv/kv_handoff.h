// Prefill/decode hand-off of one sequence's KV: what a prefill engine keeps
// when a prompt is done, the checks a decode engine makes before it takes
// it (the fixed-shape capacity contract of ../shared/DESIGN.md), and the
// table that holds hand-offs until they are fetched. Pure: no IO, no
// clock (callers pass the time).
//
// Documented error messages (the numbers vary):
//   ValidateHandoff  FAILED_PRECONDITION
//     "prefill KV capacity 512 != decode KV capacity 1024" (CheckCapacityMatch)
//     "hand-off of model 'a' cannot be decoded by model 'b'"
//     "hand-off KV layout differs: page_size 16 != 32" (also num_layers,
//      kv_dim, kv_dtype, page_bytes, linear_state_bytes)
//                    INVALID_ARGUMENT
//     "hand-off holds 100 bytes of KV pages; 2 pages of 4096 bytes need 8192"
//     and SequenceState::FromMask's mask messages.
#ifndef PDSERVE_ENGINE_KV_KV_HANDOFF_H_
#define PDSERVE_ENGINE_KV_KV_HANDOFF_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kv/kv_dtype.h"
#include "engine/kv/sequence_state.h"

namespace pdserve {

// The layout a hand-off's bytes are in; two engines can exchange KV only
// when theirs are equal. page_bytes: the data of one page, all layers
// (KvStorage::bytes_per_page); linear_state_bytes: per sequence (0 for
// dense models).
struct KvHandoffShape {
  int64_t num_layers = 0;
  int64_t kv_dim = 0;
  int64_t page_size = 0;
  KvDType dtype = KvDType::kF32;
  int64_t page_bytes = 0;
  int64_t linear_state_bytes = 0;
  bool operator==(const KvHandoffShape&) const = default;
};

// One sequence's KV after its prompt: the KV of `tokens` (positions
// [0, tokens.size())) as whole pages of shape.page_bytes each, the
// linear-attention state after the last of them, and the validity mask of
// the prefill engine's sequence capacity `capacity` (its --max-seq-len).
// Value type; movable.
struct KvHandoff {
  std::string model;
  KvHandoffShape shape;
  int64_t capacity = 0;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // capacity entries, 0/1
  std::string kv;             // pages covering tokens, in position order
  std::string linear_state;   // shape.linear_state_bytes

  // Pages the tokens need.
  int64_t pages() const;
  // Bytes held (what a table counts).
  int64_t bytes() const {
    return static_cast<int64_t>(kv.size() + linear_state.size() +
                                mask.size() + 4 * tokens.size());
  }
};

// The decode side's checks, before any byte is used: the model, the
// layout, the capacity contract (SequenceState::FromMask over the mask with
// prefill capacity `h.capacity` and decode capacity `decode_capacity`: the
// decode engine's --max-seq-len), that the mask marks exactly the tokens,
// and the byte counts. Returns the state FromMask rebuilt (next_pos =
// tokens). Messages in the header comment.
absl::StatusOr<SequenceState> ValidateHandoff(const KvHandoff& h,
                                              const std::string& model,
                                              const KvHandoffShape& shape,
                                              int64_t decode_capacity);

// Hand-offs waiting to be fetched (prefill side) or admitted (decode side),
// by id. Bounded: at most `max_bytes` held (the oldest are dropped to make
// room; one larger than the bound is refused) and each for at most `ttl_ns`
// after it was put. Ids are `id_salt` plus a counter (never 0), so ids of
// an engine that restarted (another salt) do not name new hand-offs.
// Thread-safe.
class HandoffTable {
 public:
  HandoffTable(int64_t max_bytes, int64_t ttl_ns, uint64_t id_salt);

  // Stores `h` at time `now_ns`; its id, or 0 when it is larger than
  // max_bytes on its own. Drops expired entries first.
  uint64_t Put(KvHandoff h, int64_t now_ns);
  // Removes and returns hand-off `id`; nullopt when unknown, dropped or
  // expired at `now_ns`.
  std::optional<KvHandoff> Take(uint64_t id, int64_t now_ns);

  int64_t bytes() const;
  int64_t size() const;
  // Hand-offs dropped unfetched (expired or evicted) since creation.
  int64_t dropped() const;

 private:
  void ExpireLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_, ttl_ns_;
  const uint64_t salt_;
  mutable std::mutex mu_;
  struct Entry {
    KvHandoff handoff;
    int64_t put_ns = 0;
    int64_t bytes = 0;  // handoff.bytes() when put
  };
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_KV_HANDOFF_H_
