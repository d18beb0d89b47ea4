// `halfway bench [--json] [--quick] [--exhaustive]`: throughput of the bulk kernels, each figure
// measured side by side with a reference in the same run: hardware conversions (F16C
// `vcvtps2ph`, AVX512-BF16 `vcvtneps2bf16`, and their round trips back to f32), the hardware
// sequence of fp16/bf16 arithmetic (widen, fp32 op, narrow), native fp32 arithmetic, or the
// same kernel without event counts; the simulator's GEMMs against an FMA-throughput loop, their
// scalar models and the fp32 GEMM. One thread; ours and the reference alternate on the same
// data for several repetitions and the median of the per-repetition ratios is reported, so
// machine drift during the run cancels out. `--peers` and `--torch` run the Python benchmarks
// instead (halfway.peer_bench, halfway.emulate_bench). Goals are printed next
// to the ratios; a missed goal is reported, never an error (exit status 0).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "halfway/cpu.hpp"
#include "halfway/blocks.hpp"
#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/thread_pool.hpp"
#include "spawn.hpp"
#include "verify_oracle.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALFWAY_BENCH_X86 1
#endif

// SoftFloat 3e (John R. Hauser's, BSD licence), the reference of the scalar rows, when the
// build has it (HALFWAY_SOFTFLOAT_DIR; scripts/common.sh fetches it).
#if defined(HALFWAY_HAVE_SOFTFLOAT)
extern "C" {
#include "softfloat.h"
}
#endif

namespace halfway::cli {

namespace {

const char* kHelp =
    "usage: halfway bench [--json] [--quick] [--exhaustive] [--filter TEXT]\n"
    "       halfway bench --peers [--python PYTHON] [--json] [--n N] [--repeats R] [--threads T]\n"
    "       halfway bench --torch [--python PYTHON] [--json] [--repeats R] [--inner I]\n"
    "\n"
    "--peers: halfway against ml_dtypes, torch, QPyTorch, pychop and torchao, in one Python\n"
    "process on the same data (python3 -m halfway.benchmark --peers; docs/python.md, Speed).\n"
    "--torch: halfway.torch.emulate's training steps against PyTorch's and the fake-quant\n"
    "versions (python3 -m halfway.benchmark --emulate; docs/emulate.md, The benchmark).\n"
    "The other options go to the Python benchmark. PYTHON: default $HALFWAY_PYTHON, else the\n"
    "interpreter the Python module was built for.\n"
    "\n"
    "Throughput of the bulk kernels, single thread, each figure against a reference measured in\n"
    "the same run (alternating, several repetitions, median ratio): F16C vcvtps2ph for f32->fp16,\n"
    "AVX512-BF16 vcvtneps2bf16 for f32->bf16, the round trip f32->format->f32 for quantize_f32,\n"
    "widen + fp32 op + narrow ('vs hardware') and native fp32 add/mul/fma for fp16/bf16\n"
    "arithmetic, the same rounding without counts for rounding with event counts. The\n"
    "simulator's GEMMs: the fp32 one against an FMA-throughput loop (share of one core's peak),\n"
    "the in-format and block-FMA ones ('matmul <accumulation>') against their scalar model\n"
    "(lib's dot per element) and against the fp32 GEMM on the same operands. Each ratio is\n"
    "printed with its goal (or '(no goal)'); missing a goal is reported, not an error.\n"
    "\n"
    "Rounding inputs are normal values scaled into each format's range (sd 2^(emax-3)), as a\n"
    "tensor after amax scaling; the '(full path)' rows use data over 2^-12..2^12 instead, where\n"
    "most vectors hold subnormal, overflowing or special lanes. Arithmetic operands are normal\n"
    "values times 2^-4..2^4.\n"
    "\n"
    "The 'scalar' rows time what a user's scalar call and a kernel's fallback pay: a loop of\n"
    "non-inlined calls of from_f32, add and mul through a runtime Format&, one element each,\n"
    "against SoftFloat 3e's per-call loop (f32_to_f16, f16_add, f16_mul) on fp16 data.\n"
    "SoftFloat has no bf16 or fp8: those rows compare with the fp16 function on the fp16 data\n"
    "(reference '(fp16 proxy)'). The note gives both in ns per call. SoftFloat is linked when\n"
    "the build has it (cmake -DHALFWAY_SOFTFLOAT_DIR, which scripts/common.sh sets); otherwise\n"
    "the rows say 'skipped: SoftFloat 3e not built' and give our ns per call alone.\n"
    "\n"
    "  --json        one JSON record per line: name, format, rounding, n, items_per_second,\n"
    "                reference, ratio_to_reference\n"
    "  --quick       small arrays and few repetitions (seconds; for tests)\n"
    "  --exhaustive  also fp16 add over all 2^32 operand pairs against the verify oracle, on\n"
    "                every core (goal: 60 s)\n"
    "  --filter TEXT only the rows whose \"name format rounding\" contains TEXT\n"
    "                (e.g. --filter counts, --filter 'e4m3 stochastic')\n";

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Buffers and references

template <class T>
struct Buffer {
  T* p = nullptr;
  size_t n = 0;
  explicit Buffer(size_t count) : n(count) {
    const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
    p = static_cast<T*>(std::aligned_alloc(64, bytes ? bytes : 64));
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

#if HALFWAY_BENCH_X86
// The hardware rows run where halfway/cpu.hpp says the instructions may (HALFWAY_DISABLE_ISA
// turns them off like every other path).
bool has_f16c() { return cpu::has(cpu::f16c); }
bool has_avx512() { return cpu::target() == cpu::Target::avx512; }
bool has_avx512bf16() { return has_avx512() && cpu::has(cpu::avx512bf16); }
bool has_avx2() { return cpu::target() >= cpu::Target::avx2; }

__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void f16c_512(const float* in,
                                                                        uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(out + i),
        _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx,f16c"))) void f16c_256(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

void f16c_ref(const float* in, uint16_t* out, size_t n) {
  has_avx512() ? f16c_512(in, out, n) : f16c_256(in, out, n);
}

__attribute__((target("avx512bf16,avx512vl,avx512f"))) void bf16_ref(const float* in, uint16_t* out,
                                                                     size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
  for (; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, in + i, 4);
    out[i] = static_cast<uint16_t>(b >> 16);  // tail only (n is a multiple of 16 here)
  }
}

// The hardware round trips quantize_f32 is measured against: f32 -> fp16 -> f32 (F16C) and
// f32 -> bf16 -> f32 (AVX512-BF16, widened by a shift).
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void f16c_quantize_512(const float* in,
                                                                                 float* out,
                                                                                 size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(in + i),
                                                              _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; ++i) out[i] = _cvtsh_ss(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx,f16c"))) void f16c_quantize_256(const float* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                                              _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; ++i) out[i] = _cvtsh_ss(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

void f16c_quantize_ref(const float* in, float* out, size_t n) {
  has_avx512() ? f16c_quantize_512(in, out, n) : f16c_quantize_256(in, out, n);
}

__attribute__((target("avx512bf16,avx512bw,avx512vl,avx512f"), always_inline)) inline __m512
bf16_widen(__m256bh h) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(h)), 16));
}

__attribute__((target("avx512bf16,avx512bw,avx512vl,avx512f"))) void bf16_quantize_ref(
    const float* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, bf16_widen(_mm512_cvtneps_pbh(_mm512_loadu_ps(in + i))));
  for (; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, in + i, 4);
    b &= 0xFFFF0000u;  // tail only (n is a multiple of 16 here)
    std::memcpy(out + i, &b, 4);
  }
}

// The hardware sequence for fp16 / bf16 arithmetic: widen both operands to f32, one fp32
// operation, narrow (F16C vcvtps2ph; AVX512-BF16 vcvtneps2bf16). Tails: n is a multiple of 16.
#define HALFWAY_HW_ARITH(name, OP, OP256)                                                          \
  __attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void name##_f16c_512(              \
      const uint16_t* a, const uint16_t* b, uint16_t* o, size_t n) {                           \
    for (size_t i = 0; i + 16 <= n; i += 16) {                                                  \
      const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(a + i)));           \
      const __m512 y = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(b + i)));           \
      _mm256_storeu_si256((__m256i*)(o + i),                                                    \
                          _mm512_cvtps_ph(OP(x, y), _MM_FROUND_TO_NEAREST_INT));                \
    }                                                                                           \
  }                                                                                             \
  __attribute__((target("avx,f16c"))) void name##_f16c_256(const uint16_t* a, const uint16_t* b, \
                                                          uint16_t* o, size_t n) {             \
    for (size_t i = 0; i + 8 <= n; i += 8) {                                                    \
      const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + i)));              \
      const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + i)));              \
      _mm_storeu_si128((__m128i*)(o + i),                                                       \
                       _mm256_cvtps_ph(OP256(x, y),    _MM_FROUND_TO_NEAREST_INT));             \
    }                                                                                           \
  }                                                                                             \
  void name##_f16c(const uint16_t* a, const uint16_t* b, uint16_t* o, size_t n) {               \
    has_avx512() ? name##_f16c_512(a, b, o, n) : name##_f16c_256(a, b, o, n);                   \
  }                                                                                             \
  __attribute__((target("avx512bf16,avx512bw,avx512vl,avx512f"))) void name##_bf16(            \
      const uint16_t* a, const uint16_t* b, uint16_t* o, size_t n) {                           \
    for (size_t i = 0; i + 16 <= n; i += 16) {                                                  \
      const __m512 x = bf16_widen((__m256bh)_mm256_loadu_si256((const __m256i*)(a + i)));       \
      const __m512 y = bf16_widen((__m256bh)_mm256_loadu_si256((const __m256i*)(b + i)));       \
      _mm256_storeu_si256((__m256i*)(o + i), (__m256i)_mm512_cvtneps_pbh(OP(x, y)));            \
    }                                                                                           \
  }
HALFWAY_HW_ARITH(hw_add, _mm512_add_ps, _mm256_add_ps)
HALFWAY_HW_ARITH(hw_mul, _mm512_mul_ps, _mm256_mul_ps)
#undef HALFWAY_HW_ARITH

// Native fp32 arithmetic, vectorised for the best instruction set (the compiler's own loops).
#define HALFWAY_NATIVE(name, expr)                                                          \
  __attribute__((target("avx512f,avx512bw,avx512vl,fma,prefer-vector-width=512"))) void     \
      name##_512(const float* a, const float* b, const float* c, float* o, size_t n) {      \
    (void)c;                                                                                \
    for (size_t i = 0; i < n; ++i) o[i] = expr;                                             \
  }                                                                                         \
  __attribute__((target("avx2,fma"))) void name##_256(const float* a, const float* b,       \
                                                      const float* c, float* o, size_t n) { \
    (void)c;                                                                                \
    for (size_t i = 0; i < n; ++i) o[i] = expr;                                             \
  }                                                                                         \
  void name##_base(const float* a, const float* b, const float* c, float* o, size_t n) {     \
    (void)c;                                                                                \
    for (size_t i = 0; i < n; ++i) o[i] = expr;                                             \
  }                                                                                         \
  void name(const float* a, const float* b, const float* c, float* o, size_t n) {           \
    if (has_avx512()) return name##_512(a, b, c, o, n);                                     \
    if (has_avx2()) return name##_256(a, b, c, o, n);                                       \
    name##_base(a, b, c, o, n);                                                             \
  }
HALFWAY_NATIVE(native_add, a[i] + b[i])
HALFWAY_NATIVE(native_mul, a[i] * b[i])
HALFWAY_NATIVE(native_fma, __builtin_fmaf(a[i], b[i], c[i]))
#undef HALFWAY_NATIVE
#else
bool has_f16c() { return false; }
bool has_avx512bf16() { return false; }
void f16c_ref(const float*, uint16_t*, size_t) {}
void bf16_ref(const float*, uint16_t*, size_t) {}
void f16c_quantize_ref(const float*, float*, size_t) {}
void bf16_quantize_ref(const float*, float*, size_t) {}
void hw_add_f16c(const uint16_t*, const uint16_t*, uint16_t*, size_t) {}
void hw_mul_f16c(const uint16_t*, const uint16_t*, uint16_t*, size_t) {}
void hw_add_bf16(const uint16_t*, const uint16_t*, uint16_t*, size_t) {}
void hw_mul_bf16(const uint16_t*, const uint16_t*, uint16_t*, size_t) {}
void native_add(const float* a, const float* b, const float*, float* o, size_t n) {
  for (size_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
void native_mul(const float* a, const float* b, const float*, float* o, size_t n) {
  for (size_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
}
void native_fma(const float* a, const float* b, const float* c, float* o, size_t n) {
  for (size_t i = 0; i < n; ++i) o[i] = std::fma(a[i], b[i], c[i]);
}
#endif

// ---------------------------------------------------------------------------------------------
// One core's fp32 FMA peak: independent FMA chains (more than latency × ports) in registers,
// for the instruction set the fp32 GEMM runs on; `flops` floating-point operations per call.

#if defined(__x86_64__) && defined(__GNUC__)
#define HALFWAY_FMA_PEAK(NAME, TARGET, VEC, W, SET1, FMA, STORE)                             \
  __attribute__((target(TARGET))) void NAME(double flops, float* sink) {                      \
    VEC a[12];                                                                                \
    for (int i = 0; i < 12; ++i) a[i] = SET1(1.0f + float(i) * 1e-7f);                        \
    const VEC x = SET1(0.9999999f), y = SET1(1e-7f);                                          \
    const int64_t iters = int64_t(flops / (12.0 * W * 2)) + 1;                                \
    for (int64_t it = 0; it < iters; ++it)                                                    \
      for (int i = 0; i < 12; ++i) a[i] = FMA(a[i], x, y);                                    \
    for (int i = 1; i < 12; ++i) a[0] = FMA(a[0], x, a[i]);                                   \
    STORE(sink, a[0]);                                                                        \
  }
HALFWAY_FMA_PEAK(fma_peak_avx512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps,
                 _mm512_storeu_ps)
HALFWAY_FMA_PEAK(fma_peak_avx2, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps,
                 _mm256_storeu_ps)
#undef HALFWAY_FMA_PEAK
#endif

/// The peak loop for `path` (sim::fp32_gemm_path()), or null for the scalar path.
void (*fma_peak_for(const std::string& path))(double, float*) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (path == "avx512") return fma_peak_avx512;
  if (path == "avx2") return fma_peak_avx2;
#endif
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Scalar calls as a user or a kernel's fallback makes them: not inlined into the loop, the
// format a runtime reference. (noipa for GCC: no clone specialised to the caller's constants.)

#if defined(__clang__)
#define HALFWAY_BENCH_CALL __attribute__((noinline))
#else
#define HALFWAY_BENCH_CALL __attribute__((noipa))
#endif

HALFWAY_BENCH_CALL uint32_t call_from_f32(const Format& f, uint32_t x, Env& env) {
  return from_f32_bits(f, x, env);
}
HALFWAY_BENCH_CALL uint32_t call_add(const Format& f, uint32_t a, uint32_t b, Env& env) {
  return add(f, a, b, env);
}
HALFWAY_BENCH_CALL uint32_t call_mul(const Format& f, uint32_t a, uint32_t b, Env& env) {
  return mul(f, a, b, env);
}

// ---------------------------------------------------------------------------------------------
// Measurement

struct Settings {
  bool json = false;
  bool quick = false;
  bool exhaustive = false;
  std::string filter;  ///< only rows whose "name format rounding" contains this
  int reps = 31;
  double min_seconds = 3e-4;  // each timed sample runs the call this long at least
};

/// CPU time of the calling thread: time while the thread was descheduled does not count, so a
/// busy machine skews the figures less than wall-clock time would.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Seconds per call, timing `iters` back-to-back calls.
double time_call(const std::function<void()>& fn, int iters) {
  const double t0 = thread_seconds();
  for (int i = 0; i < iters; ++i) fn();
  return (thread_seconds() - t0) / iters;
}

int calibrate(const std::function<void()>& fn, double min_seconds) {
  fn();  // warm caches and pages
  const double t = time_call(fn, 1);
  return std::max(1, static_cast<int>(std::ceil(min_seconds / std::max(t, 1e-9))));
}

struct Measure {
  double ours_seconds;  // median seconds per call of ours
  double ratio;         // median of (reference time / our time): our speed over the reference's
};

Measure measure(const Settings& s, const std::function<void()>& ours,
                const std::function<void()>& ref) {
  const int io = calibrate(ours, s.min_seconds), ir = calibrate(ref, s.min_seconds);
  std::vector<double> to, ratios;
  for (int r = 0; r < s.reps; ++r) {
    // Alternate which runs first, so neither always follows the other's cache state.
    double a, b;
    if (r % 2) {
      b = time_call(ref, ir);
      a = time_call(ours, io);
    } else {
      a = time_call(ours, io);
      b = time_call(ref, ir);
    }
    to.push_back(a);
    ratios.push_back(b / a);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
  };
  return {median(to), median(ratios)};
}

struct Row {
  std::string name, format, rounding;
  size_t n = 0;
  double items_per_second = 0;
  std::string reference;
  std::optional<double> ratio;  // none: the reference is not available here
  double goal = 0;              // ratio goal
  std::string note;
};

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

void print_row(const Settings& s, const Row& r) {
  if (s.json) {
    // "met" is decided on the printed ratio, so a reader of the record reaches the same verdict.
    const std::string ratio = r.ratio ? fmt::format("{:.4g}", *r.ratio) : std::string("null");
    fmt::print(
        "{{\"name\": {}, \"format\": {}, \"rounding\": {}, \"n\": {}, "
        "\"items_per_second\": {:.6g}, \"reference\": {}, \"ratio_to_reference\": {}, "
        "\"goal\": {}, \"met\": {}, \"cpu\": {}, \"path\": {}}}\n",
        json_string(r.name), json_string(r.format), json_string(r.rounding), r.n,
        r.items_per_second, json_string(r.reference),
        ratio, r.goal > 0 ? fmt::format("{:.4g}", r.goal) : std::string("null"),
        r.ratio && r.goal > 0 ? (std::stod(ratio) >= r.goal ? "true" : "false") : "null",
        json_string(cpu::model_name()), json_string(detail::bulk_path_name(detail::bulk_path())));
  } else {
    std::string verdict;
    if (!r.ratio) {
      verdict = r.reference;
    } else {
      verdict = r.goal <= 0 ? fmt::format("{:6.3f}x  (no goal)", *r.ratio)
                            : fmt::format("{:6.2f}x  goal >= {:.2f}x  {}", *r.ratio, r.goal,
                                          *r.ratio >= r.goal ? "met" : "MISSED");
    }
    fmt::print("{:<34} {:<9} {:<12} {:>9} {:>8.3f}  {:<34} {}{}\n", r.name, r.format, r.rounding,
               r.n, r.items_per_second * 1e-9, r.reference, verdict,
               r.note.empty() ? "" : "  (" + r.note + ")");
  }
  std::fflush(stdout);
}

/// Random f32 values: normal significands times 2^lo .. 2^hi.
std::vector<float> sample_values(size_t n, uint32_t seed, int lo = -4, int hi = 4) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(nd(gen), lo + int(gen() % uint32_t(hi - lo + 1)));
  return v;
}

/// Values as a tensor scaled into the format has them (per-tensor amax scaling): normal with
/// standard deviation 2^(emax - 3), so the largest values come near the format's maximum and
/// the small ones reach into its subnormals.
std::vector<float> scaled_values(const Format& f, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  const float sigma = std::ldexp(1.0f, f.emax() - 3);
  for (auto& x : v) x = nd(gen) * sigma;
  return v;
}

// ---------------------------------------------------------------------------------------------
// The figures

class Bench {
 public:
  explicit Bench(const Settings& s) : s_(s) {}

  void run() {
    const size_t small = s_.quick ? 4096 : 65536;
    const size_t large = s_.quick ? (size_t(1) << 20) : (size_t(64) << 20);
    if (!s_.json) {
      fmt::print(
          "halfway bench on {} (features {}): bulk path {}, one thread (thread CPU time), "
          "median ratio of {} alternating runs\n",
          cpu::model_name(), cpu::feature_names(cpu::supported()),
          detail::bulk_path_name(detail::bulk_path()), s_.reps);
      fmt::print("{:<34} {:<9} {:<12} {:>9} {:>8}  {:<34} {}\n", "name", "format", "rounding", "n",
                 "G/s", "reference", "ratio");
    }
    // f32 → fp16 against F16C, in cache and from memory.
    round_vs_f16c("round_f32", "fp16", Rounding::near_even, small, 0.5, true);
    round_vs_f16c("round_f32", "fp16", Rounding::near_even, large, 0.9, true);
    // f32 → bf16 against AVX512-BF16.
    round_vs_bf16(small);
    // Every other format and rounding direction against F16C's fp16 throughput.
    for (const char* f : {"bf16", "tf32", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e2m3", "e3m2",
                          "e2m1", "e5m7", "e3m4:fn"})
      round_vs_f16c("round_f32", f, Rounding::near_even, small, 0.25, true);
    // Stochastic rounding draws Philox4x32-10 bits (cuRAND's generator): its own goal.
    auto goal = [](Rounding r) { return r == Rounding::stochastic ? 0.12 : 0.25; };
    for (Rounding r : {Rounding::near_maxMag, Rounding::minMag, Rounding::min, Rounding::max,
                       Rounding::odd, Rounding::stochastic})
      round_vs_f16c("round_f32", "e4m3", r, small, goal(r), true);
    for (Rounding r : {Rounding::minMag, Rounding::odd, Rounding::stochastic})
      round_vs_f16c("round_f32", "fp16", r, small, goal(r), true);
    // 8 random bits, as the hardware's e2m1 conversion uses: one draw per element, and packed
    // draws (four elements per draw, BulkOptions::pack_random_bits), whose goal this is.
    for (const char* f : {"e2m1", "fp16"}) {
      round_vs_f16c("round_f32 (8 random bits)", f, Rounding::stochastic, small, 0, true, false,
                    false, 8);
      round_vs_f16c("round_f32 (8 random bits, packed)", f, Rounding::stochastic, small, 0.25,
                    true, false, false, 8, true);
    }
    round_vs_f16c("round_f32 (vector path, no F16C)", "fp16", Rounding::near_even, small, 0.25,
                  false);
    round_vs_f16c("round_f32 (full path)", "e4m3", Rounding::near_even, small, 0.25, true, false,
                  true);
    round_vs_f16c("round_f32 (full path)", "bf16", Rounding::near_even, small, 0.25, true, false,
                  true);
    // quantize_f32 against the hardware round trip.
    quantize_vs_hw("fp16", small);
    quantize_vs_hw("bf16", small);
    round_vs_f16c("quantize_f32", "e4m3", Rounding::near_even, small, 0.25, true, true);
    // Block quantization (codes, scales and events) against F16C's fp16 throughput.
    for (const char* scheme : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4",
                               "mxfp4:rceil", "nvfp4", "nvfp4_2d", "fp8_block", "fp8_block_2d"})
      blocks_vs_f16c(scheme, BlockAxis::last, small);
    blocks_vs_f16c("mxfp8_e4m3", BlockAxis::first, small);
    blocks_vs_f16c("nvfp4", BlockAxis::first, small);
    // Dequantize and the round trip against encode_blocks on the same tensor.
    for (const char* scheme : {"mxfp8_e4m3", "mxfp4", "nvfp4", "fp8_block", "fp8_block_2d"}) {
      blocks_vs_encode(true, scheme, BlockAxis::last, small);
      blocks_vs_encode(false, scheme, BlockAxis::last, small);
    }
    blocks_vs_encode(true, "mxfp8_e4m3", BlockAxis::first, small);
    // Arithmetic against the hardware sequence (widen, fp32 op, narrow) and native fp32.
    for (const char* f : {"fp16", "bf16"}) {
      arith_vs_hw("add", f, small);
      arith_vs_hw("mul", f, small);
    }
    for (const char* f : {"fp16", "bf16"}) {
      arith_vs_native("add", f, small);
      arith_vs_native("mul", f, small);
      arith_vs_native("fma", f, small);
    }
    // Scalar calls against SoftFloat 3e's.
    for (const char* f : {"fp16", "bf16", "e4m3"}) scalar_vs_softfloat("from_f32", f, small);
    for (const char* f : {"fp16", "bf16"}) {
      scalar_vs_softfloat("add", f, small);
      scalar_vs_softfloat("mul", f, small);
    }
    // Event counts against the same call without counts.
    counts_vs_plain("e4m3", Rounding::near_even, small);
    counts_vs_plain("bf16", Rounding::near_even, small);
    counts_vs_plain("e5m2", Rounding::stochastic, small);
    counts_vs_plain("fp16", Rounding::near_even, small);
    if (s_.exhaustive) exhaustive_fp16_add();
    // The simulator's fp32 GEMM (sequential FMA per element) against one core's FMA peak.
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{64, 64, 64}, {256, 256, 256},
                                  {2048, 256, 256}, {2048, 1024, 256}})
      if (!s_.quick || m <= 256) matmul_vs_peak(m, n, k);
    // The in-format and block-FMA GEMMs: their vector path against the scalar model (lib's dot
    // per element) and against the fp32 path, on the same operands.
    for (const char* acc : {"in-format", "in-format-unfused", "a100", "h100", "h100-fp16"})
      for (int64_t d : {64, 128})
        if (!s_.quick || d == 64) matmul_model(acc, "fp16", d, d, d);
    const int64_t d = s_.quick ? 64 : 128;
    matmul_model("in-format", "bf16", d, d, d);
    matmul_model("h100-fp8", "e4m3", d, d, d);
  }

 private:
  const Settings& s_;

  void emit(Row r) { print_row(s_, r); }

  bool wanted(const std::string& name, const std::string& fname, Rounding rnd) const {
    if (s_.filter.empty()) return true;
    const std::string key = name + " " + fname + " " + rounding_name(rnd);
    return key.find(s_.filter) != std::string::npos;
  }

  void matmul_vs_peak(int64_t m, int64_t n, int64_t k) {
    const std::string path = sim::fp32_gemm_path();
    const std::string shape = fmt::format("{}x{}x{}", m, n, k);
    if (!wanted("matmul fp32 " + shape, "fp32", Rounding::near_even)) return;
    std::vector<float> A(size_t(m * k)), B(size_t(k * n)), C(size_t(m * n));
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : A) x = u(g);
    for (auto& x : B) x = u(g);
    const double flops = 2.0 * double(m) * double(n) * double(k);
    auto ours = [&] {
      sim::gemm(accumulation::fp32_sequential, accumulation::kF32, m, n, k, A.data(), B.data(),
                nullptr, C.data(), {}, 1);
    };
    Row r{"matmul fp32 " + shape, "fp32", "near_even", size_t(m * n * k), 0,
          "FMA-throughput loop (" + path + ")", std::nullopt, 0.5,
          "items: multiply-adds; ratio: share of one core's fp32 FMA peak"};
    const auto peak = fma_peak_for(path);
    if (!peak) {
      r.items_per_second = double(m * n * k) / time_call(ours, calibrate(ours, s_.min_seconds));
      r.reference = "skipped: no vector FMA path";
      emit(r);
      return;
    }
    float sink[16];
    const Measure ms = measure(s_, ours, [&] { peak(flops, sink); });
    r.items_per_second = double(m * n * k) / ms.ours_seconds;
    r.ratio = ms.ratio;
    emit(r);
  }

  void matmul_model(const std::string& acc, const std::string& fname, int64_t m, int64_t n,
                    int64_t k) {
    const std::string name = fmt::format("matmul {} {}x{}x{}", acc, m, n, k);
    if (!wanted(name, fname, Rounding::near_even)) return;
    const Format f = parse_format(fname);
    const BulkOptions o;
    const AccumulationModel model =
        sim::accumulator_by_name(acc).resolve(sim::DType::low(f), m, n, k, sim::Layout::nn, o);
    std::vector<float> A(size_t(m * k)), B(size_t(k * n)), C(size_t(m * n));
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : A) x = u(g);
    for (auto& x : B) x = u(g);
    quantize_f32(f, A.data(), A.data(), A.size());
    quantize_f32(f, B.data(), B.data(), B.size());
    auto run = [&](const AccumulationModel& mdl, const Format& in) {
      sim::gemm(mdl, in, m, n, k, A.data(), B.data(), nullptr, C.data(), o, 1);
    };
    auto ours = [&] { run(model, f); };
    auto scalar = [&] {
      const bool old = sim::set_model_gemm_scalar(true);
      run(model, f);
      sim::set_model_gemm_scalar(old);
    };
    auto fp32 = [&] { run(accumulation::fp32_sequential, accumulation::kF32); };
    const std::string note =
        fmt::format("path {}; items: multiply-adds", sim::model_gemm_path(model, f, o));
    const size_t items = size_t(m * n * k);
    const Measure vs_scalar = measure(s_, ours, scalar);
    emit(Row{name, fname, "near_even", items, double(items) / vs_scalar.ours_seconds,
             "scalar model (lib dot)", vs_scalar.ratio, 4.0, note});
    const Measure vs_fp32 = measure(s_, ours, fp32);
    emit(Row{name, fname, "near_even", items, double(items) / vs_fp32.ours_seconds,
             fmt::format("fp32 GEMM ({})", sim::fp32_gemm_path()), vs_fp32.ratio, 0.0, note});
  }

  void round_vs_f16c(const std::string& name, const std::string& fname, Rounding rnd, size_t n,
                     double goal, bool hw, bool quantize = false, bool wide_range = false,
                     int random_bits = kSrRandomBits, bool packed = false) {
    if (!wanted(name, fname, rnd)) return;
    const Format f = parse_format(fname);
    const std::vector<float> v = wide_range ? sample_values(n, 1, -12, 12) : scaled_values(f, n, 1);
    Buffer<float> in(n);
    std::memcpy(in.p, v.data(), n * sizeof(float));
    Buffer<uint16_t> ref16(n);
    // Only the output this call writes (the large run is memory-bound: no spare buffers).
    const size_t out_bytes = quantize ? 4 : f.nbits() <= 8 ? 1 : f.nbits() <= 16 ? 2 : 4;
    Buffer<uint8_t> out(n * out_bytes);
    BulkOptions o;
    o.rounding = rnd;
    o.random_bits = random_bits;
    o.pack_random_bits = packed;
    const bool old_hw = detail::set_bulk_hardware_conversions(hw);
    std::function<void()> ours;
    if (quantize) {
      ours = [&] { quantize_f32(f, in.p, reinterpret_cast<float*>(out.p), n, o); };
    } else if (out_bytes == 1) {
      ours = [&] { round_f32(f, in.p, out.p, n, o); };
    } else if (out_bytes == 2) {
      ours = [&] { round_f32(f, in.p, reinterpret_cast<uint16_t*>(out.p), n, o); };
    } else {
      ours = [&] { round_f32(f, in.p, reinterpret_cast<uint32_t*>(out.p), n, o); };
    }
    Row r{name,
          fname,
          rounding_name(rnd),
          n,
          0,
          "F16C vcvtps2ph (f32->fp16)",
          {},
          goal,
          wide_range ? "data over 2^-12..2^12: most vectors hold out-of-range lanes" : ""};
    if (!has_f16c()) {
      r.reference = "skipped: no F16C";
      r.items_per_second = n / time_call(ours, calibrate(ours, s_.min_seconds));
    } else {
      const Measure m = measure(s_, ours, [&] { f16c_ref(in.p, ref16.p, n); });
      r.items_per_second = n / m.ours_seconds;
      r.ratio = m.ratio;
    }
    detail::set_bulk_hardware_conversions(old_hw);
    emit(r);
  }

  /// encode_blocks on a square tensor of n elements (at least 128x128; normal values over
  /// 2^-8..2^8, so blocks have different scales), against F16C converting as many values.
  void blocks_vs_f16c(const std::string& scheme, BlockAxis axis, size_t n) {
    const std::string name =
        std::string("encode_blocks") + (axis == BlockAxis::first ? " (axis 0)" : "");
    if (!wanted(name, scheme, Rounding::near_even)) return;
    const BlockScheme bs = parse_block_scheme(scheme);
    n = std::max<size_t>(n, 128 * 128);
    const size_t rows = size_t(std::lround(std::sqrt(double(n)))), cols = n / rows;
    const std::vector<float> v = sample_values(n, 8, -8, 8);
    Buffer<float> in(n);
    std::memcpy(in.p, v.data(), n * sizeof(float));
    Buffer<uint16_t> ref16(n);
    BlockOptions o;
    o.axis = axis;
    auto ours = [&] { (void)encode_blocks(bs, in.p, rows, cols, o); };
    Row r{name, scheme, "near_even", n, 0, "F16C vcvtps2ph (f32->fp16)", {}, 0.25,
          "codes, scales and event counts of a square tensor"};
    if (!has_f16c()) {
      r.reference = "skipped: no F16C";
      r.items_per_second = n / time_call(ours, calibrate(ours, s_.min_seconds));
    } else {
      const Measure m = measure(s_, ours, [&] { f16c_ref(in.p, ref16.p, n); });
      r.items_per_second = n / m.ours_seconds;
      r.ratio = m.ratio;
    }
    emit(r);
  }

  /// decode_blocks (goal: as fast per element as encode_blocks) or quantize_blocks, encode and
  /// decode in one call (goal: half encode_blocks' speed), against encode_blocks on the same
  /// square tensor as blocks_vs_f16c.
  void blocks_vs_encode(bool decode, const std::string& scheme, BlockAxis axis, size_t n) {
    const std::string name = std::string(decode ? "decode_blocks" : "quantize_blocks") +
                             (axis == BlockAxis::first ? " (axis 0)" : "");
    if (!wanted(name, scheme, Rounding::near_even)) return;
    const BlockScheme bs = parse_block_scheme(scheme);
    n = std::max<size_t>(n, 128 * 128);
    const size_t rows = size_t(std::lround(std::sqrt(double(n)))), cols = n / rows;
    const std::vector<float> v = sample_values(rows * cols, 8, -8, 8);
    Buffer<float> in(rows * cols), out(rows * cols);
    std::memcpy(in.p, v.data(), rows * cols * sizeof(float));
    BlockOptions o;
    o.axis = axis;
    const BlockEncoding e = encode_blocks(bs, in.p, rows, cols, o);
    auto ours = [&] {
      if (decode)
        decode_blocks(bs, e, out.p);
      else
        (void)quantize_blocks(bs, in.p, rows, cols, out.p, o);
    };
    Row r{name, scheme, "near_even", rows * cols, 0, "encode_blocks (same tensor)", {},
          decode ? 1.0 : 0.5, decode ? "fp32 values from codes and scales" : "codes, then values"};
    const Measure m = measure(s_, ours, [&] { (void)encode_blocks(bs, in.p, rows, cols, o); });
    r.items_per_second = rows * cols / m.ours_seconds;
    r.ratio = m.ratio;
    emit(r);
  }

  void round_vs_bf16(size_t n) {
    if (!wanted("round_f32", "bf16", Rounding::near_even)) return;
    const std::vector<float> v = scaled_values(formats::bf16, n, 2);
    Buffer<float> in(n);
    std::memcpy(in.p, v.data(), n * sizeof(float));
    Buffer<uint16_t> out(n), ref(n);
    auto ours = [&] { round_f32(formats::bf16, in.p, out.p, n); };
    Row r{"round_f32", "bf16", "near_even",
          n,           0,      "AVX512-BF16 vcvtneps2bf16",
          {},          0.5,    "the reference flushes f32 subnormal inputs"};
    if (!has_avx512bf16()) {
      r.reference = "skipped: no AVX512-BF16";
      r.note.clear();
      r.items_per_second = n / time_call(ours, calibrate(ours, s_.min_seconds));
    } else {
      const Measure m = measure(s_, ours, [&] { bf16_ref(in.p, ref.p, n); });
      r.items_per_second = n / m.ours_seconds;
      r.ratio = m.ratio;
    }
    emit(r);
  }

  /// quantize_f32 near_even into fp16 / bf16 against the hardware round trip f32 -> format ->
  /// f32 (F16C; AVX512-BF16 and a shift, which flushes f32 subnormal inputs).
  void quantize_vs_hw(const std::string& fname, size_t n) {
    if (!wanted("quantize_f32", fname, Rounding::near_even)) return;
    const Format f = parse_format(fname);
    const bool half = f == formats::fp16;
    const std::vector<float> v = scaled_values(f, n, 7);
    // One output buffer for both: the same addresses, so neither gains from where its output
    // happens to lie against the input (4 KiB aliasing between loads and stores).
    Buffer<float> in(n), out(n);
    std::memcpy(in.p, v.data(), n * sizeof(float));
    float* const ref = out.p;
    auto ours = [&] { quantize_f32(f, in.p, out.p, n); };
    Row r{"quantize_f32", fname, "near_even", n, 0,
          half ? "F16C vcvtps2ph+vcvtph2ps" : "AVX512-BF16 vcvtneps2bf16+widen", {}, 0.9, ""};
    if (!(half ? has_f16c() : has_avx512bf16())) {
      r.reference = half ? "skipped: no F16C" : "skipped: no AVX512-BF16";
      r.items_per_second = n / time_call(ours, calibrate(ours, s_.min_seconds));
    } else {
      const Measure m = measure(s_, ours, [&] {
        half ? f16c_quantize_ref(in.p, ref, n) : bf16_quantize_ref(in.p, ref, n);
      });
      r.items_per_second = n / m.ours_seconds;
      r.ratio = m.ratio;
    }
    emit(r);
  }

  /// fp16 / bf16 add and mul (near_even, no counts) against the hardware sequence: widen both
  /// operands, one fp32 operation, narrow with F16C vcvtps2ph / AVX512-BF16 vcvtneps2bf16.
  void arith_vs_hw(const std::string& op, const std::string& fname, size_t n) {
    if (!wanted(op + " (vs hardware)", fname, Rounding::near_even)) return;
    const Format f = parse_format(fname);
    const bool half = f == formats::fp16;
    const std::vector<float> va = sample_values(n, 3), vb = sample_values(n, 4);
    Buffer<uint16_t> a(n), b(n), out(n);  // one output buffer, as in quantize_vs_hw
    round_f32(f, va.data(), a.p, n);
    round_f32(f, vb.data(), b.p, n);
    const BinaryOp bop = op == "add" ? BinaryOp::add : BinaryOp::mul;
    auto ours = [&] { binary(bop, f, a.p, b.p, out.p, n); };
    using HwFn = void (*)(const uint16_t*, const uint16_t*, uint16_t*, size_t);
    const HwFn hw = half ? (bop == BinaryOp::add ? hw_add_f16c : hw_mul_f16c)
                         : (bop == BinaryOp::add ? hw_add_bf16 : hw_mul_bf16);
    Row r{op + " (vs hardware)", fname, "near_even", n, 0,
          half ? "F16C widen, fp32 " + op + ", vcvtps2ph"
               : "widen, fp32 " + op + ", vcvtneps2bf16",
          {}, 0.8, ""};
    if (!(half ? has_f16c() : has_avx512bf16())) {
      r.reference = half ? "skipped: no F16C" : "skipped: no AVX512-BF16";
      r.items_per_second = n / time_call(ours, calibrate(ours, s_.min_seconds));
    } else {
      const Measure m = measure(s_, ours, [&] { hw(a.p, b.p, out.p, n); });
      r.items_per_second = n / m.ours_seconds;
      r.ratio = m.ratio;
    }
    emit(r);
  }

  void arith_vs_native(const std::string& op, const std::string& fname, size_t n) {
    if (!wanted(op, fname, Rounding::near_even)) return;
    const Format f = parse_format(fname);
    const std::vector<float> va = sample_values(n, 3), vb = sample_values(n, 4),
                             vc = sample_values(n, 5);
    Buffer<uint16_t> a(n), b(n), c(n), out(n);
    Buffer<float> fa(n), fb(n), fc(n), fo(n);
    round_f32(f, va.data(), a.p, n);
    round_f32(f, vb.data(), b.p, n);
    round_f32(f, vc.data(), c.p, n);
    decode_f32(f, a.p, fa.p, n);
    decode_f32(f, b.p, fb.p, n);
    decode_f32(f, c.p, fc.p, n);
    std::function<void()> ours, ref;
    std::string refname;
    if (op == "add") {
      ours = [&] { binary(BinaryOp::add, f, a.p, b.p, out.p, n); };
      ref = [&] { native_add(fa.p, fb.p, fc.p, fo.p, n); };
      refname = "native fp32 add";
    } else if (op == "mul") {
      ours = [&] { binary(BinaryOp::mul, f, a.p, b.p, out.p, n); };
      ref = [&] { native_mul(fa.p, fb.p, fc.p, fo.p, n); };
      refname = "native fp32 mul";
    } else {
      ours = [&] { halfway::fma(f, a.p, b.p, c.p, out.p, n); };
      ref = [&] { native_fma(fa.p, fb.p, fc.p, fo.p, n); };
      refname = "native fp32 fma";
    }
    const Measure m = measure(s_, ours, ref);
    emit(Row{op, fname, "near_even", n, n / m.ours_seconds, refname, m.ratio, 0.25, ""});
  }

  /// Per-call time of from_f32, add or mul in `fname` (one non-inlined call per element)
  /// against SoftFloat 3e's loop over fp16 data from the same seeds: the fp16 row's own
  /// comparison, and the stand-in for the formats SoftFloat lacks.
  void scalar_vs_softfloat(const std::string& op, const std::string& fname, size_t n) {
    const std::string name = "scalar " + op;
    if (!wanted(name, fname, Rounding::near_even)) return;
    const Format f = parse_format(fname);
    const bool convert = op == "from_f32";
    // Conversion inputs as the round_f32 rows have them; arithmetic operands as the add rows.
    auto inputs = [&](const Format& g, uint32_t seed) {
      return convert ? scaled_values(g, n, seed) : sample_values(n, seed);
    };
    auto encode = [&](const Format& g, const std::vector<float>& v, Buffer<uint32_t>& out) {
      Env env;
      for (size_t i = 0; i < n; ++i) out.p[i] = convert ? f32_bits(v[i]) : from_f32(g, v[i], env);
    };
    Buffer<uint32_t> a(n), b(n), ha(n), hb(n), out(n);
    encode(f, inputs(f, 3), a);
    encode(f, inputs(f, 4), b);
    encode(formats::fp16, inputs(formats::fp16, 3), ha);
    encode(formats::fp16, inputs(formats::fp16, 4), hb);
    Env env;
    std::function<void()> ours;
    if (convert) {
      ours = [&] {
        for (size_t i = 0; i < n; ++i) out.p[i] = call_from_f32(f, a.p[i], env);
      };
    } else if (op == "add") {
      ours = [&] {
        for (size_t i = 0; i < n; ++i) out.p[i] = call_add(f, a.p[i], b.p[i], env);
      };
    } else {
      ours = [&] {
        for (size_t i = 0; i < n; ++i) out.p[i] = call_mul(f, a.p[i], b.p[i], env);
      };
    }
    const std::string sf_name = convert ? "f32_to_f16" : "f16_" + op;
    Row r{name, fname, "near_even", n, 0,
          "SoftFloat 3e " + sf_name + (f == formats::fp16 ? "" : " (fp16 proxy)"), std::nullopt,
          1.0, ""};
#if defined(HALFWAY_HAVE_SOFTFLOAT)
    std::function<void()> ref;
    if (convert) {
      ref = [&] {
        for (size_t i = 0; i < n; ++i) out.p[i] = f32_to_f16(float32_t{ha.p[i]}).v;
      };
    } else if (op == "add") {
      ref = [&] {
        for (size_t i = 0; i < n; ++i)
          out.p[i] = f16_add(float16_t{uint16_t(ha.p[i])}, float16_t{uint16_t(hb.p[i])}).v;
      };
    } else {
      ref = [&] {
        for (size_t i = 0; i < n; ++i)
          out.p[i] = f16_mul(float16_t{uint16_t(ha.p[i])}, float16_t{uint16_t(hb.p[i])}).v;
      };
    }
    const Measure m = measure(s_, ours, ref);
    const double ns = 1e9 * m.ours_seconds / double(n);
    r.items_per_second = double(n) / m.ours_seconds;
    r.ratio = m.ratio;
    r.note = fmt::format("{:.2f} ns/call, SoftFloat {:.2f} ns/call", ns, ns * m.ratio);
#else
    const double secs = time_call(ours, calibrate(ours, s_.min_seconds));
    r.items_per_second = double(n) / secs;
    r.reference = "skipped: SoftFloat 3e not built";
    r.note = fmt::format("{:.2f} ns/call", 1e9 * secs / double(n));
#endif
    emit(r);
  }

  void counts_vs_plain(const std::string& fname, Rounding rnd, size_t n) {
    if (!wanted("round_f32+counts", fname, rnd)) return;
    const Format f = parse_format(fname);
    const std::vector<float> v = scaled_values(f, n, 6);
    Buffer<float> in(n);
    std::memcpy(in.p, v.data(), n * sizeof(float));
    Buffer<uint8_t> o8(n);
    Buffer<uint16_t> o16(n);
    BulkOptions o;
    o.rounding = rnd;
    EventCounts ev;
    std::function<void()> with, without;
    if (f.nbits() <= 8) {
      with = [&] { round_f32(f, in.p, o8.p, n, o, &ev); };
      without = [&] { round_f32(f, in.p, o8.p, n, o); };
    } else {
      with = [&] { round_f32(f, in.p, o16.p, n, o, &ev); };
      without = [&] { round_f32(f, in.p, o16.p, n, o); };
    }
    const Measure m = measure(s_, with, without);
    std::string note;
    if (f == formats::fp16 && rnd == Rounding::near_even && has_f16c())
      note = "without counts this is the F16C path";
    emit(Row{"round_f32+counts", fname, rounding_name(rnd), n, n / m.ours_seconds,
             "same call without counts", m.ratio, 0.5, note});
  }

  /// fp16 add over every operand pair: the bulk kernel and the verify oracle, every core.
  void exhaustive_fp16_add() {
    const Format f = formats::fp16;
    const verify::Oracle oracle(f, Rounding::near_even);
    const unsigned threads = unsigned(ThreadPool::hardware_threads());
    std::atomic<uint32_t> next{0};
    std::atomic<uint64_t> bad{0};
    auto worker = [&] {
      std::vector<uint16_t> a(65536), b(65536), got(65536);
      std::vector<uint32_t> b32(65536), want(65536);
      std::vector<uint8_t> fl(65536);
      for (uint32_t i = 0; i < 65536; ++i) {
        b[i] = uint16_t(i);
        b32[i] = i;
      }
      for (;;) {
        const uint32_t x = next++;
        if (x >= 65536) return;
        std::fill(a.begin(), a.end(), uint16_t(x));
        EventCounts gc, wc;
        binary(BinaryOp::add, f, a.data(), b.data(), got.data(), 65536, {}, &gc);
        oracle.binary_row(BinaryOp::add, x, b32.data(), 65536, want.data(), fl.data(), &wc);
        uint64_t rowbad = gc == wc ? 0 : 1;
        for (uint32_t i = 0; i < 65536; ++i) rowbad += got[i] != want[i];
        bad += rowbad;
      }
    };
    const auto t0 = Clock::now();
    const std::clock_t cpu0 = std::clock();
    ThreadPool::global().run(int(threads), [&](int) { worker(); });
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = double(std::clock() - cpu0) / CLOCKS_PER_SEC;
    const double n = 4294967296.0;
    Row r{"exhaustive add (bulk + oracle)",
          "fp16",
          "near_even",
          size_t(n),
          n / secs,
          "time goal 60 s",
          60.0 / secs,
          1.0,
          fmt::format("{:.1f} s wall on {} threads, {:.1f} s CPU, {} mismatches", secs, threads,
                      cpu, bad.load())};
    emit(r);
  }
};

// `halfway bench --peers ...` and `halfway bench --torch ...`: the Python benchmarks
// (python3 -m halfway.benchmark --peers / --emulate), every other argument passed on.
int bench_python(const std::string& mode, int argc, char** argv) {
  return forward_to_python("halfway bench " + mode, HALFWAY_BUILD_PYTHON,
                           {"-m", "halfway.benchmark", mode == "--torch" ? "--emulate" : "--peers"},
                           argc, argv, mode);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--peers" || a == "--torch") return bench_python(a, argc, argv);
  }
  Settings s;
  CLI::App app{"halfway bench", "halfway bench"};
  app.set_help_flag();  // --help prints kHelp, which documents every option
  bool help = false;
  app.add_flag("--help,-h", help);
  app.add_flag("--json", s.json);
  app.add_flag("--quick", s.quick);
  app.add_flag("--exhaustive", s.exhaustive);
  app.add_option("--filter", s.filter);
  parse_or_help(app, argc, argv);
  if (help) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (s.quick) {
    s.reps = 5;
    s.min_seconds = 1e-4;
  }
  Bench(s).run();
  return 0;
}

}  // namespace halfway::cli
