/// \file cpu.hpp
/// What this CPU can run: the one detection of x86 features for every kernel, backend and
/// benchmark (as Highway's SupportedTargets), one mask of features, one way to turn features off
/// for users (the environment variable HALFWAY_DISABLE_ISA) and one for tests
/// (set_disabled_for_test), and one enum of vector targets. Each vector kernel has a scalar twin
/// that gives the same bits, so turning a feature off changes speed, never a result.
///
///     if (cpu::target() == cpu::Target::avx512) ...          // the best vector target here
///     if (cpu::has(cpu::avx512bf16)) ...                     // vcvtneps2bf16, vdpbf16ps
///     HALFWAY_DISABLE_ISA=avx512 halfway bench               // run the AVX2 paths instead
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace halfway::cpu {

/// Single features (CPUID bits; the AVX-512 and AMX ones also need the operating system to
/// enable their register state, and AMX on Linux its permission, which detection checks).
enum Feature : uint32_t {
  f16c = 1u << 0,
  fma = 1u << 1,
  avx2 = 1u << 2,
  bmi2 = 1u << 3,
  avx512f = 1u << 4,
  avx512bw = 1u << 5,
  avx512vl = 1u << 6,
  avx512dq = 1u << 7,
  avx512bf16 = 1u << 8,
  avx512fp16 = 1u << 9,
  amx_tile = 1u << 10,
  amx_bf16 = 1u << 11,
  amx_fp16 = 1u << 12,
};
inline constexpr int kFeatureCount = 13;

/// The vector targets the kernels are compiled for; each one's features include the one's below.
enum class Target : uint8_t { scalar, avx2, avx512 };
/// The features a target needs: AVX2 with FMA, BMI2 and F16C; AVX-512 adds F, BW, VL and DQ.
inline constexpr uint32_t kAvx2 = avx2 | fma | bmi2 | f16c;
inline constexpr uint32_t kAvx512 = kAvx2 | avx512f | avx512bw | avx512vl | avx512dq;

/// What the CPU and the operating system offer (computed once).
uint32_t detected();
/// detected() without what HALFWAY_DISABLE_ISA names and without the test mask. Never throws:
/// an unknown name in HALFWAY_DISABLE_ISA is reported by check_environment().
uint32_t supported();
/// Throws InputError (one line naming the variable and the name) if HALFWAY_DISABLE_ISA names
/// an unknown feature. The CLI and the Python module call it before anything runs.
void check_environment();
/// All of `features` are supported.
inline bool has(uint32_t features) { return (supported() & features) == features; }
/// The best target whose features are all supported.
Target target();
const char* target_name(Target t);
/// Empty when `features` are all supported; otherwise why not ("this CPU has no avx512bf16",
/// "avx512bf16 disabled by HALFWAY_DISABLE_ISA", "... disabled for this test").
std::string missing(uint32_t features);

/// The processor's brand string (CPUID 0x80000002-4, e.g. "AMD EPYC 9R14 96-Core Processor"),
/// trimmed; "unknown" where the CPU has none. Benchmarks name the machine with it.
std::string model_name();

/// "f16c", "avx512bf16", ...: the name of one feature.
const char* feature_name(Feature f);
/// Names of the features in `mask`, comma-separated, in enum order.
std::string feature_names(uint32_t mask);
/// A comma-separated list of feature names and groups ("avx2": the AVX2 target's features and
/// everything above them; "avx512": AVX-512 F and every AVX-512 feature; "amx": the AMX
/// features) as a mask of the features it turns off. Throws InputError naming an unknown name.
uint32_t parse_disable_list(std::string_view list);

/// Tests: turn `mask` off for every thread (in addition to HALFWAY_DISABLE_ISA) until the next
/// call; returns the previous mask. A test that changes it restores it.
uint32_t set_disabled_for_test(uint32_t mask);

}  // namespace halfway::cpu
