// Python arithmetic, concatenation and repetition for the Jinja subset.
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/builtins.h"

namespace pdserve::jinja {
namespace {

absl::Status OperandError(absl::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return absl::InvalidArgumentError(absl::StrCat(
      "TypeError: unsupported operand type(s) for ", op, ": '", a.TypeName(),
      "' and '", b.TypeName(), "'"));
}

bool IsIntLike(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}
int64_t AsInt(const Value& v) {
  return v.kind() == Value::Kind::kBool ? v.as_bool() : v.as_int();
}

absl::Status Overflow(absl::string_view op) {
  return absl::InvalidArgumentError(
      absl::StrCat("integer overflow in '", op, "' (64-bit ints only)"));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n, size_t max_bytes) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > max_bytes / s.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "string repetition would exceed ", max_bytes, " bytes"));
    }
    std::string out;
    out.reserve(s.size() * n);
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::String(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > max_bytes / items.size() / 16) {
    return absl::InvalidArgumentError("list repetition too large");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::List(std::move(out), seq.as_list().tuple);
}

absl::StatusOr<Value> IntOp(absl::string_view op, int64_t x, int64_t y) {
  int64_t r;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) return Overflow(op);
  } else if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) return Overflow(op);
  } else if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) return Overflow(op);
  } else if (op == "/") {
    if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
    return Value::Float(static_cast<double>(x) / static_cast<double>(y));
  } else if (op == "//" || op == "%") {
    if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return Overflow(op);
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    r = op == "//" ? q : m;
  } else {  // **
    if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (int64_t i = 0; i < y; ++i) {
      if (__builtin_mul_overflow(r, x, &r)) return Overflow(op);
      if (r == 0 || r == 1) break;
    }
    if (r == 1 && x == -1 && y % 2 == 1) r = -1;
  }
  return Value::Int(r);
}

absl::StatusOr<Value> FloatOp(absl::string_view op, double x, double y) {
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") return Value::Float(std::pow(x, y));
  if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: float division by zero");
  if (op == "/") return Value::Float(x / y);
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  if (op == "%") return Value::Float(m);
  return Value::Float(std::floor((x - m) / y + 0.5));  // //
}

}  // namespace

absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a,
                               const Value& b, size_t max_bytes) {
  if (op == "~") return Value::String(a.Str() + b.Str());
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) return IntOp(op, AsInt(a), AsInt(b));
    return FloatOp(op, a.ToDouble(), b.ToDouble());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.as_string() + b.as_string());
    if (a.kind() == Value::Kind::kList && b.kind() == Value::Kind::kList &&
        a.as_list().tuple == b.as_list().tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::List(std::move(items), a.as_list().tuple);
    }
  }
  if (op == "*") {
    bool a_seq = a.is_string() || a.kind() == Value::Kind::kList;
    bool b_seq = b.is_string() || b.kind() == Value::Kind::kList;
    if (a_seq && IsIntLike(b)) return Repeat(a, AsInt(b), max_bytes);
    if (b_seq && IsIntLike(a)) return Repeat(b, AsInt(a), max_bytes);
  }
  if (op == "%" && a.is_string()) {
    return absl::InvalidArgumentError(
        "unsupported construct: printf-style string formatting with '%'");
  }
  return OperandError(op, a, b);
}

}  // namespace pdserve::jinja
