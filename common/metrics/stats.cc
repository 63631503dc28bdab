#include "common/metrics/stats.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve::metrics {
namespace {

absl::Status CheckNonNegative(absl::string_view what, int64_t value) {
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", value, ", must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckUsed(absl::string_view used_name, int64_t used,
                       absl::string_view total_name, int64_t total) {
  if (used > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        used_name, " ", used, " exceeds ", total_name, " ", total));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kPrefill:
      return "prefill";
    case StepKind::kDecode:
      return "decode";
    case StepKind::kMixed:
      return "mixed";
  }
  return "mixed";
}

StepKind ClassifyStep(int64_t prefill_tokens, int64_t decode_tokens) {
  if (prefill_tokens > 0 && decode_tokens > 0) return StepKind::kMixed;
  if (prefill_tokens > 0) return StepKind::kPrefill;
  return StepKind::kDecode;
}

int64_t StepBytesMoved(const StepStats& step) {
  return step.weight_bytes_read + step.kv_bytes_read + step.kv_bytes_written +
         step.state_bytes;
}

double AchievedBandwidth(const StepStats& step) {
  if (!(step.duration_seconds > 0.0)) return 0.0;
  return static_cast<double>(StepBytesMoved(step)) / step.duration_seconds;
}

double AchievedFlopsPerSecond(const StepStats& step) {
  if (!(step.duration_seconds > 0.0)) return 0.0;
  return step.flops / step.duration_seconds;
}

absl::Status ValidateStepStats(const StepStats& step) {
  if (!std::isfinite(step.duration_seconds) || step.duration_seconds <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step duration_seconds is %g, must be finite and > 0",
                        step.duration_seconds));
  }
  for (const auto& [name, value] :
       {std::pair<absl::string_view, int64_t>{"prefill_tokens",
                                              step.prefill_tokens},
        {"decode_tokens", step.decode_tokens},
        {"batch_size", step.batch_size},
        {"weight_bytes_read", step.weight_bytes_read},
        {"kv_bytes_read", step.kv_bytes_read},
        {"kv_bytes_written", step.kv_bytes_written},
        {"state_bytes", step.state_bytes}}) {
    if (absl::Status s = CheckNonNegative(name, value); !s.ok()) return s;
  }
  if (!std::isfinite(step.flops) || step.flops < 0.0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step flops is %g, must be finite and >= 0", step.flops));
  }
  if (step.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step batch_size is ", step.batch_size, ", must be >= 1"));
  }
  if (step.prefill_tokens + step.decode_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step processed ", step.prefill_tokens, " prefill + ",
                     step.decode_tokens, " decode tokens, must be >= 1"));
  }
  const StepKind implied =
      ClassifyStep(step.prefill_tokens, step.decode_tokens);
  if (implied != step.kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("step kind is ", StepKindName(step.kind), " but ",
                     step.prefill_tokens, " prefill and ", step.decode_tokens,
                     " decode tokens make it ", StepKindName(implied)));
  }
  return absl::OkStatus();
}

double PoolUsageFraction(const PoolStats& pool) {
  if (pool.total_pages > 0) {
    return static_cast<double>(pool.used_pages) /
           static_cast<double>(pool.total_pages);
  }
  if (pool.capacity_tokens > 0) {
    return static_cast<double>(pool.used_tokens) /
           static_cast<double>(pool.capacity_tokens);
  }
  return 0.0;
}

absl::Status ValidatePoolStats(const PoolStats& pool) {
  for (const auto& [name, value] :
       {std::pair<absl::string_view, int64_t>{"capacity_tokens",
                                              pool.capacity_tokens},
        {"used_tokens", pool.used_tokens},
        {"page_size_tokens", pool.page_size_tokens},
        {"total_pages", pool.total_pages},
        {"used_pages", pool.used_pages},
        {"capacity_bytes", pool.capacity_bytes},
        {"active_sequences", pool.active_sequences},
        {"max_sequences", pool.max_sequences},
        {"preemptions_total", pool.preemptions_total},
        {"linear_state_slots_total", pool.linear_state_slots_total},
        {"linear_state_slots_used", pool.linear_state_slots_used},
        {"prefix_query_tokens_total", pool.prefix_query_tokens_total},
        {"prefix_hit_tokens_total", pool.prefix_hit_tokens_total},
        {"cached_pages", pool.cached_pages}}) {
    if (absl::Status s = CheckNonNegative(name, value); !s.ok()) return s;
  }
  if (absl::Status s = CheckUsed("used_tokens", pool.used_tokens,
                                 "capacity_tokens", pool.capacity_tokens);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckUsed("used_pages", pool.used_pages, "total_pages",
                                 pool.total_pages);
      !s.ok()) {
    return s;
  }
  if (pool.max_sequences > 0) {
    if (absl::Status s = CheckUsed("active_sequences", pool.active_sequences,
                                   "max_sequences", pool.max_sequences);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckUsed(
          "prefix_hit_tokens_total", pool.prefix_hit_tokens_total,
          "prefix_query_tokens_total", pool.prefix_query_tokens_total);
      !s.ok()) {
    return s;
  }
  return CheckUsed("linear_state_slots_used", pool.linear_state_slots_used,
                   "linear_state_slots_total", pool.linear_state_slots_total);
}

absl::Status ValidateSchedulerStats(const SchedulerStats& stats) {
  for (const auto& [name, value] :
       {std::pair<absl::string_view, int64_t>{"waiting_requests",
                                              stats.waiting_requests},
        {"running_requests", stats.running_requests},
        {"admitted", stats.admitted},
        {"preempted", stats.preempted},
        {"cancelled", stats.cancelled},
        {"finished", stats.finished},
        {"planned_prefill_tokens", stats.planned_prefill_tokens},
        {"planned_decode_tokens", stats.planned_decode_tokens},
        {"token_budget", stats.token_budget},
        {"kv_total_pages", stats.kv_total_pages},
        {"kv_free_pages", stats.kv_free_pages}}) {
    if (absl::Status s = CheckNonNegative(name, value); !s.ok()) return s;
  }
  const int64_t planned =
      stats.planned_prefill_tokens + stats.planned_decode_tokens;
  if (stats.token_budget > 0 && planned > stats.token_budget) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan holds ", planned, " tokens (", stats.planned_prefill_tokens,
        " prefill + ", stats.planned_decode_tokens,
        " decode), over the token budget ", stats.token_budget));
  }
  if (stats.kv_free_pages > stats.kv_total_pages) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_free_pages ", stats.kv_free_pages,
                     " exceeds kv_total_pages ", stats.kv_total_pages));
  }
  return absl::OkStatus();
}

absl::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kQueueFull:
      return "queue_full";
    case RejectReason::kPromptTooLong:
      return "prompt_too_long";
    case RejectReason::kPoolTooSmall:
      return "pool_too_small";
    case RejectReason::kInvalidArgument:
      return "invalid_argument";
    case RejectReason::kDraining:
      return "draining";
  }
  return "invalid_argument";
}

absl::string_view GrpcCodeName(int code) {
  static constexpr absl::string_view kNames[] = {"OK",
                                                 "CANCELLED",
                                                 "UNKNOWN",
                                                 "INVALID_ARGUMENT",
                                                 "DEADLINE_EXCEEDED",
                                                 "NOT_FOUND",
                                                 "ALREADY_EXISTS",
                                                 "PERMISSION_DENIED",
                                                 "RESOURCE_EXHAUSTED",
                                                 "FAILED_PRECONDITION",
                                                 "ABORTED",
                                                 "OUT_OF_RANGE",
                                                 "UNIMPLEMENTED",
                                                 "INTERNAL",
                                                 "UNAVAILABLE",
                                                 "DATA_LOSS",
                                                 "UNAUTHENTICATED"};
  if (code < 0 || code > 16) return "UNKNOWN";
  return kNames[code];
}

}  // namespace pdserve::metrics
