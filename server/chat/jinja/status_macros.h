// Internal status-propagation helpers for the Jinja interpreter sources.
#ifndef PDSERVE_SERVER_CHAT_JINJA_STATUS_MACROS_H_
#define PDSERVE_SERVER_CHAT_JINJA_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PDJ_CONCAT_INNER(a, b) a##b
#define PDJ_CONCAT(a, b) PDJ_CONCAT_INNER(a, b)

#define PDJ_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::absl::Status pdj_status_ = (expr);     \
    if (!pdj_status_.ok()) return pdj_status_; \
  } while (0)

#define PDJ_ASSIGN_OR_RETURN(lhs, rexpr) \
  PDJ_ASSIGN_OR_RETURN_IMPL(PDJ_CONCAT(pdj_statusor_, __LINE__), lhs, rexpr)

#define PDJ_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return statusor.status();         \
  lhs = *std::move(statusor)

#endif  // PDSERVE_SERVER_CHAT_JINJA_STATUS_MACROS_H_
