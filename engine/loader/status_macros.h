// Status propagation for the loader's .cc files (not for headers of other
// libraries): PDSERVE_ASSIGN(lhs, expr) evaluates an absl::StatusOr, returns
// its status from the enclosing function when it is an error, and otherwise
// assigns the value to lhs.
#ifndef PDSERVE_ENGINE_LOADER_STATUS_MACROS_H_
#define PDSERVE_ENGINE_LOADER_STATUS_MACROS_H_

#define PDSERVE_ASSIGN(lhs, expr)     \
  do {                                \
    auto _v = (expr);                 \
    if (!_v.ok()) return _v.status(); \
    lhs = *_v;                        \
  } while (0)

#endif  // PDSERVE_ENGINE_LOADER_STATUS_MACROS_H_
