// Status propagation macros. Our abseil (20220623) has no ABSL_RETURN_IF_ERROR, so the project defines
// its own, prefixed SCORED_ so they never collide with GoogleTest's FAIL/CHECK.
//
//   SCORED_RETURN_IF_ERROR(expr);             // expr is an absl::Status; returns it from the caller if !ok()
//   SCORED_ASSIGN_OR_RETURN(lhs, expr);       // expr is an absl::StatusOr<T>; lhs = *expr or return status
//
// Both evaluate `expr` exactly once.
#ifndef SCORED_ENGINE_BASE_STATUS_MACROS_H_
#define SCORED_ENGINE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SCORED_STATUS_CONCAT_INNER_(a, b) a##b
#define SCORED_STATUS_CONCAT_(a, b) SCORED_STATUS_CONCAT_INNER_(a, b)

#define SCORED_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status scored_status_ = (expr);          \
    if (!scored_status_.ok()) return scored_status_; \
  } while (0)

#define SCORED_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#define SCORED_ASSIGN_OR_RETURN(lhs, expr) \
  SCORED_ASSIGN_OR_RETURN_IMPL_(SCORED_STATUS_CONCAT_(scored_statusor_, __LINE__), lhs, expr)

#endif  // SCORED_ENGINE_BASE_STATUS_MACROS_H_
