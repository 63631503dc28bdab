// Status propagation for the whole tree (absl::Status / absl::StatusOr):
//   PDSERVE_RETURN_IF_ERROR(expr)       returns the absl::Status `expr`
//                                       from the enclosing function unless
//                                       it is OK.
//   PDSERVE_ASSIGN_OR_RETURN(lhs, expr) evaluates the absl::StatusOr `expr`;
//                                       returns its status when it is an
//                                       error, else moves the value into
//                                       `lhs` (a declaration such as
//                                       `auto x` or an existing variable).
// ASSIGN_OR_RETURN expands to several statements: use it inside braces.
#ifndef PDSERVE_COMMON_STATUS_MACROS_H_
#define PDSERVE_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PDSERVE_STATUS_CONCAT_INNER_(a, b) a##b
#define PDSERVE_STATUS_CONCAT_(a, b) PDSERVE_STATUS_CONCAT_INNER_(a, b)

#define PDSERVE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    const ::absl::Status pdserve_status_ = (expr);     \
    if (!pdserve_status_.ok()) return pdserve_status_; \
  } while (0)

#define PDSERVE_ASSIGN_OR_RETURN(lhs, expr)                                 \
  PDSERVE_ASSIGN_OR_RETURN_IMPL_(                                           \
      PDSERVE_STATUS_CONCAT_(pdserve_statusor_, __LINE__), lhs, expr)

#define PDSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return statusor.status();             \
  lhs = *std::move(statusor)

#endif  // PDSERVE_COMMON_STATUS_MACROS_H_
