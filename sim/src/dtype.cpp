#include "halfway/sim/dtype.hpp"

#include <cctype>

#include "halfway/names.hpp"

namespace halfway::sim {

std::string DType::name() const {
  switch (kind) {
    case Kind::f64: return "fp64";
    case Kind::f32: return "fp32";
    default: return format_name(fmt);
  }
}

DType parse_dtype(std::string_view text) {
  std::string t(text);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "fp64" || t == "float64" || t == "double" || t == "f64") return DType::f64();
  return DType::low(parse_format(text));
}

DType widest(const DType& a, const DType& b) {
  if (a == b) return a;
  if (a.is_f64() || b.is_f64()) return DType::f64();
  return DType::f32();
}

void check_value_dtype(const DType& d, const std::string& key) {
  if (!d.is_low() || (d.fmt.is_signed && d.fmt.has_zero)) return;
  std::string lacks = !d.fmt.has_zero && !d.fmt.is_signed ? "no zero and no sign"
                      : !d.fmt.has_zero                   ? "no zero"
                                                          : "no sign";
  throw InputError("'" + key + "' cannot be " + d.name() + ": it has " + lacks +
                   " (a scale format), so it cannot hold the values");
}

}  // namespace halfway::sim
