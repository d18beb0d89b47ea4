#include <cstdlib>
#include <string>

#include "backend.hpp"

namespace halfway::hw {

bool disabled_by_env(std::string_view name) {
  const char* env = std::getenv("HALFWAY_HW_DISABLE");
  if (!env) return false;
  std::string_view list(env);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (item == name) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

std::string Backend::absent_reason() const {
  if (disabled_by_env(name())) return "disabled by HALFWAY_HW_DISABLE";
  return missing();
}

const std::vector<const Backend*>& all_backends() {
  static const std::vector<const Backend*> list = [] {
    std::vector<const Backend*> v;
    for (const Backend* b : {nvidia_host_backend(), f16c_backend(), avx512bf16_backend(),
                             avx512fp16_backend()})
      if (b) v.push_back(b);
    return v;
  }();
  return list;
}

const Backend* find_backend(std::string_view name) {
  for (const Backend* b : all_backends())
    if (name == b->name()) return b;
  return nullptr;
}

const std::vector<std::string>& known_backend_names() {
  static const std::vector<std::string> names = {"nvidia-host", "f16c", "avx512bf16",
                                                 "avx512fp16", "avx512bf16-dot", "amx-bf16",
                                                 "amx-fp16"};
  return names;
}

}  // namespace halfway::hw
