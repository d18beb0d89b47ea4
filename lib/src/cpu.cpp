#include "halfway/cpu.hpp"

#include <atomic>
#include <cstdlib>

#include "halfway/names.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define HALFWAY_CPU_X86 1
#endif

namespace halfway::cpu {

namespace {

constexpr const char* kNames[kFeatureCount] = {
    "f16c",     "fma",      "avx2",       "bmi2",       "avx512f",  "avx512bw", "avx512vl",
    "avx512dq", "avx512bf16", "avx512fp16", "amx_tile", "amx_bf16", "amx_fp16"};

constexpr uint32_t kAvx512All = avx512f | avx512bw | avx512vl | avx512dq | avx512bf16 | avx512fp16;
constexpr uint32_t kAmxAll = amx_tile | amx_bf16 | amx_fp16;

std::atomic<uint32_t> g_test_mask{0};

#if HALFWAY_CPU_X86
// AMX: CPUID leaf 7 (EDX bit 24 AMX-TILE, bit 22 AMX-BF16; subleaf 1 EAX bit 21 AMX-FP16), the
// OS enabling the tile state in XCR0 (bits 17, 18) and, on Linux, permission to use it.
uint32_t amx_features() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24))) return 0;
  unsigned l1a = 0, l1b, l1c, l1d;
  __get_cpuid_count(7, 1, &l1a, &l1b, &l1c, &l1d);
  unsigned ecx1, ebx1, edx1, eax1;
  if (!__get_cpuid(1, &eax1, &ebx1, &ecx1, &edx1) || !(ecx1 & (1u << 27))) return 0;  // OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return 0;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return 0;
#endif
  uint32_t m = amx_tile;
  if (d & (1u << 22)) m |= amx_bf16;
  if (l1a & (1u << 21)) m |= amx_fp16;
  return m;
}

uint32_t detect() {
  __builtin_cpu_init();
  uint32_t m = 0;
  // F16C's instructions are VEX-encoded: they need AVX (and its register state) too.
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) m |= f16c;
  if (__builtin_cpu_supports("fma")) m |= fma;
  if (__builtin_cpu_supports("avx2")) m |= avx2;
  if (__builtin_cpu_supports("bmi2")) m |= bmi2;
  if (__builtin_cpu_supports("avx512f")) m |= avx512f;
  if (__builtin_cpu_supports("avx512bw")) m |= avx512bw;
  if (__builtin_cpu_supports("avx512vl")) m |= avx512vl;
  if (__builtin_cpu_supports("avx512dq")) m |= avx512dq;
  if ((m & avx512f) && __builtin_cpu_supports("avx512bf16")) m |= avx512bf16;
  if ((m & avx512f) && __builtin_cpu_supports("avx512fp16")) m |= avx512fp16;
  return m | amx_features();
}
#else
uint32_t detect() { return 0; }
#endif

/// HALFWAY_DISABLE_ISA, parsed once: the mask of the names it knows, and the error for those it
/// does not (check_environment() reports it; kernels never throw, least of all on pool threads).
struct UserMask {
  uint32_t mask = 0;
  std::string error;
};
/// The mask of the names in a comma-separated list that are known; the first unknown one is
/// described in `error` (left empty when every name is known).
uint32_t parse_names(std::string_view list, std::string& error) {
  uint32_t mask = 0;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (name.empty()) continue;
    if (name == "avx2") mask |= kAvx2 | kAvx512All;  // the AVX2 target and all above it
    else if (name == "avx512") mask |= kAvx512All;
    else if (name == "amx") mask |= kAmxAll;
    else {
      bool found = false;
      for (int i = 0; i < kFeatureCount; ++i)
        if (name == kNames[i]) mask |= 1u << i, found = true;
      if (!found && error.empty())
        error = "unknown feature '" + std::string(name) + "' (" +
                feature_names(~0u >> (32 - kFeatureCount)) + ", avx2, avx512, amx)";
    }
  }
  return mask;
}

const UserMask& user() {
  static const UserMask u = [] {
    UserMask r;
    const char* env = std::getenv("HALFWAY_DISABLE_ISA");
    if (!env) return r;
    std::string error;
    r.mask = parse_names(env, error);
    if (!error.empty()) r.error = "HALFWAY_DISABLE_ISA: " + error;
    return r;
  }();
  return u;
}
uint32_t user_mask() { return user().mask; }

}  // namespace

uint32_t detected() {
  static const uint32_t m = detect();
  return m;
}

uint32_t supported() { return detected() & ~user_mask() & ~g_test_mask.load(std::memory_order_relaxed); }

Target target() {
  const uint32_t s = supported();
  if ((s & kAvx512) == kAvx512) return Target::avx512;
  if ((s & kAvx2) == kAvx2) return Target::avx2;
  return Target::scalar;
}

const char* target_name(Target t) {
  switch (t) {
    case Target::avx512: return "avx512";
    case Target::avx2: return "avx2";
    default: return "scalar";
  }
}

std::string model_name() {
  std::string name;
#if HALFWAY_CPU_X86
  unsigned top = __get_cpuid_max(0x80000000u, nullptr);
  if (top >= 0x80000004u) {
    for (unsigned leaf = 0x80000002u; leaf <= 0x80000004u; ++leaf) {
      unsigned r[4];
      __get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3]);
      name.append(reinterpret_cast<const char*>(r), sizeof r);
    }
    name.resize(name.find('\0') == std::string::npos ? name.size() : name.find('\0'));
  }
#endif
  const size_t b = name.find_first_not_of(' '), e = name.find_last_not_of(' ');
  return b == std::string::npos ? "unknown" : name.substr(b, e - b + 1);
}

const char* feature_name(Feature f) {
  for (int i = 0; i < kFeatureCount; ++i)
    if (uint32_t(f) == (1u << i)) return kNames[i];
  return "unknown";
}

std::string feature_names(uint32_t mask) {
  std::string s;
  for (int i = 0; i < kFeatureCount; ++i)
    if (mask & (1u << i)) s += (s.empty() ? "" : ",") + std::string(kNames[i]);
  return s;
}

std::string missing(uint32_t features) {
  const uint32_t absent = features & ~detected();
  if (absent) return "this CPU has no " + feature_names(absent);
  if (const uint32_t off = features & user_mask())
    return feature_names(off) + " disabled by HALFWAY_DISABLE_ISA";
  if (const uint32_t off = features & g_test_mask.load(std::memory_order_relaxed))
    return feature_names(off) + " disabled for this test";
  return {};
}

uint32_t parse_disable_list(std::string_view list) {
  std::string error;
  const uint32_t mask = parse_names(list, error);
  if (!error.empty()) throw InputError(error);
  return mask;
}

void check_environment() {
  if (!user().error.empty()) throw InputError(user().error);
}

uint32_t set_disabled_for_test(uint32_t mask) { return g_test_mask.exchange(mask); }

}  // namespace halfway::cpu
