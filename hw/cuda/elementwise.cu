// GPU elementwise validation: the CUDA intrinsics against the library's reference, compiled for
// the device and evaluated in the same kernel, so no 2^32-element result crosses the bus. Each
// kernel counts mismatches by class (diff.hpp), keeps the smallest input index of each class as
// its example, and fingerprints the hardware and the reference results (hash.hpp).
//
//   halfway_gpu_elementwise PART --out FILE [--budget SECONDS] [--fma-count N] [--seed S]
//   PART: conversions | arith | fma | math | all
//
// conversions: all 2^32 f32 through __float2half_rn/_rz/_rd/_ru, __float2bfloat16_rn/_rz/_rd/_ru,
//   __nv_cvt_float_to_fp8 (e4m3, e5m2; __NV_SATFINITE, __NV_NOSAT); every fp16/bf16/fp8 encoding
//   widened (__half2float, __bfloat162float, __nv_cvt_fp8_to_halfraw).
// arith: all 2^32 fp16 pairs and all 2^32 bf16 pairs through __hadd_rn, __hsub_rn, __hmul_rn,
//   __hdiv.
// fma: __hfma (fp16 and bf16) on N random triples each (default 10^10) and the hard cases of
//   fma_cases.hpp.
// math: all 65,536 inputs of hsqrt hrcp hrsqrt hexp hexp2 hexp10 hlog hlog2 hlog10 hsin hcos
//   htanh, fp16 and bf16: ulp error against correct rounding (math_ref.hpp).
// Exit status: 0 when every check ran (mismatches are findings, recorded in the report), 1 when
// the time budget cut a check short, 2 on bad arguments, 3 on a CUDA error, 77 without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "gpu_common.cuh"
#include "halfway/hw/describe.hpp"
#include "halfway/hw/diff.hpp"
#include "halfway/hw/fma_cases.hpp"
#include "halfway/hw/hash.hpp"
#include "halfway/hw/math_ref.hpp"
#include "halfway/hw/ops.hpp"
#include "halfway/hw/report_json.hpp"

using namespace halfway;
using namespace halfway::hw;
using namespace halfway::gpu;

namespace {

// ---- the hardware side ----------------------------------------------------------------------

__device__ __forceinline__ __half h16(uint32_t e) { return __ushort_as_half(static_cast<unsigned short>(e)); }
__device__ __forceinline__ __nv_bfloat16 b16(uint32_t e) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(e));
}
__device__ __forceinline__ uint32_t bits(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ uint32_t bits(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }

template <int OPI>
__device__ __forceinline__ uint32_t hw_eval(uint32_t a, uint32_t b, uint32_t c) {
  constexpr Op op = static_cast<Op>(OPI);
  const float x = __uint_as_float(a);
  if constexpr (op == Op::f32_to_f16_rn) return bits(__float2half_rn(x));
  else if constexpr (op == Op::f32_to_f16_rz) return bits(__float2half_rz(x));
  else if constexpr (op == Op::f32_to_f16_rd) return bits(__float2half_rd(x));
  else if constexpr (op == Op::f32_to_f16_ru) return bits(__float2half_ru(x));
  else if constexpr (op == Op::f32_to_bf16_rn) return bits(__float2bfloat16_rn(x));
  else if constexpr (op == Op::f32_to_bf16_rz) return bits(__float2bfloat16_rz(x));
  else if constexpr (op == Op::f32_to_bf16_rd) return bits(__float2bfloat16_rd(x));
  else if constexpr (op == Op::f32_to_bf16_ru) return bits(__float2bfloat16_ru(x));
  else if constexpr (op == Op::f32_to_e4m3_satfinite) return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  else if constexpr (op == Op::f32_to_e4m3_nosat) return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3);
  else if constexpr (op == Op::f32_to_e5m2_satfinite) return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
  else if constexpr (op == Op::f32_to_e5m2_nosat) return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
  else if constexpr (op == Op::f16_to_f32) return __float_as_uint(__half2float(h16(a)));
  else if constexpr (op == Op::bf16_to_f32) return __float_as_uint(__bfloat162float(b16(a)));
  else if constexpr (op == Op::e4m3_to_f16)
    return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(a), __NV_E4M3).x;
  else if constexpr (op == Op::e5m2_to_f16)
    return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(a), __NV_E5M2).x;
  else if constexpr (op == Op::f16_add) return bits(__hadd_rn(h16(a), h16(b)));
  else if constexpr (op == Op::f16_sub) return bits(__hsub_rn(h16(a), h16(b)));
  else if constexpr (op == Op::f16_mul) return bits(__hmul_rn(h16(a), h16(b)));
  else if constexpr (op == Op::f16_div) return bits(__hdiv(h16(a), h16(b)));
  else if constexpr (op == Op::bf16_add) return bits(__hadd_rn(b16(a), b16(b)));
  else if constexpr (op == Op::bf16_sub) return bits(__hsub_rn(b16(a), b16(b)));
  else if constexpr (op == Op::bf16_mul) return bits(__hmul_rn(b16(a), b16(b)));
  else if constexpr (op == Op::bf16_div) return bits(__hdiv(b16(a), b16(b)));
  else if constexpr (op == Op::f16_fma) return bits(__hfma(h16(a), h16(b), h16(c)));
  else if constexpr (op == Op::bf16_fma) return bits(__hfma(b16(a), b16(b), b16(c)));
  else return 0xFFFFFFFFu;
}

/// Accumulated in global memory by every thread at the end of a kernel.
struct DevStats {
  unsigned long long total, mismatches, hw_hash, ref_hash, rp_hw_hash, rp_ref_hash;
  unsigned long long count[kDiffCount], first[kDiffCount];
  unsigned int hw_and[kDiffCount], hw_or[kDiffCount];
};

DevStats fresh_stats() {
  DevStats s;
  std::memset(&s, 0, sizeof s);
  for (int d = 0; d < kDiffCount; ++d) {
    s.first[d] = ~0ull;
    s.hw_and[d] = 0xFFFFFFFFu;
  }
  return s;
}

enum Source : int { kDomain = 0, kRandom = 1, kList = 2 };

template <int OPI, int SRC>
__global__ void __launch_bounds__(256)
    check_kernel(uint64_t begin, uint64_t count, uint64_t seed, const uint32_t* la,
                 const uint32_t* lb, const uint32_t* lc, DevStats* out) {
  constexpr Op op = static_cast<Op>(OPI);
  const OpInfo info = op_info(op);
  const uint32_t mask = info.out.enc_mask();
  CheckStats st;
  uint64_t rp_hw = 0, rp_ref = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint64_t idx = begin + i;
    uint32_t a = 0, b = 0, c = 0;
    if constexpr (SRC == kDomain) {
      domain_operands(op, idx, a, b);
    } else if constexpr (SRC == kRandom) {
      fma_operands(info.in, seed, idx, a, b, c);
    } else {
      a = la[idx];
      b = lb[idx];
      c = lc[idx];
    }
    const uint32_t hw = hw_eval<OPI>(a, b, c) & mask;
    const uint32_t ref = reference(op, a, b, c);
    st.total++;
    const uint64_t th = hash_term(idx, hw), tr = hash_term(idx, ref);
    st.hw_hash += th;
    st.ref_hash += tr;
    if (idx % kReplayStride == 0) {
      rp_hw += th;
      rp_ref += tr;
    }
    if (hw != ref) {
      st.mismatches++;
      const bool sub = any_subnormal_operand(op, a, b, c);
      const uint32_t rd = sub ? reference_daz(op, a, b, c) : ref;
      st.cls[static_cast<int>(classify(info.out, hw, ref, sub, rd))].add(idx, hw);
    }
  }
  // Sums over the warp first (every lane gets here: no early exit, blocks of whole warps), then
  // one atomic per warp; sums modulo 2^64 are what the fingerprints are.
  uint64_t sums[5] = {st.total, st.hw_hash, st.ref_hash, rp_hw, rp_ref};
  for (int k = 0; k < 5; ++k)
    for (int off = 16; off > 0; off >>= 1)
      sums[k] += __shfl_down_sync(0xFFFFFFFFu, (unsigned long long)sums[k], off);
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&out->total, (unsigned long long)sums[0]);
    atomicAdd(&out->hw_hash, (unsigned long long)sums[1]);
    atomicAdd(&out->ref_hash, (unsigned long long)sums[2]);
    atomicAdd(&out->rp_hw_hash, (unsigned long long)sums[3]);
    atomicAdd(&out->rp_ref_hash, (unsigned long long)sums[4]);
  }
  // Per class, the same over the warp: count (sum), smallest index (min), AND and OR.
  const unsigned any = __ballot_sync(0xFFFFFFFFu, st.mismatches != 0);
  if (any == 0) return;
  unsigned long long mism = st.mismatches;
  for (int off = 16; off > 0; off >>= 1) mism += __shfl_down_sync(0xFFFFFFFFu, mism, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(&out->mismatches, mism);
  for (int d = 0; d < kDiffCount; ++d) {
    unsigned long long cnt = st.cls[d].count, first = st.cls[d].first_index;
    unsigned int a = st.cls[d].hw_and, o = st.cls[d].hw_or;
    if (__ballot_sync(0xFFFFFFFFu, cnt != 0) == 0) continue;
    for (int off = 16; off > 0; off >>= 1) {
      cnt += __shfl_down_sync(0xFFFFFFFFu, cnt, off);
      const unsigned long long f2 = __shfl_down_sync(0xFFFFFFFFu, first, off);
      first = f2 < first ? f2 : first;
      a &= __shfl_down_sync(0xFFFFFFFFu, a, off);
      o |= __shfl_down_sync(0xFFFFFFFFu, o, off);
    }
    if ((threadIdx.x & 31) == 0) {
      atomicAdd(&out->count[d], cnt);
      atomicMin(&out->first[d], first);
      atomicAnd(&out->hw_and[d], a);
      atomicOr(&out->hw_or[d], o);
    }
  }
}

template <int OPI>
__global__ void eval_one(uint32_t a, uint32_t b, uint32_t c, uint32_t* out) {
  *out = hw_eval<OPI>(a, b, c) & op_info(static_cast<Op>(OPI)).out.enc_mask();
}

// ---- the host side ----------------------------------------------------------------------------

struct Ctx {
  DeviceInfo dev;
  Clock clock{1e9};
  int blocks = 0;
  bool cut_short = false;  ///< a check stopped at the time budget
};

struct Lists {
  const uint32_t* a = nullptr;
  const uint32_t* b = nullptr;
  const uint32_t* c = nullptr;
  const std::vector<std::array<uint32_t, 3>>* host = nullptr;
};

/// Runs one check in launches of at most 2^28 inputs, stopping early at the deadline.
template <int OPI, int SRC>
void run_check(Ctx& ctx, const char* source, uint64_t n, uint64_t seed, const Lists& lists) {
  constexpr Op op = static_cast<Op>(OPI);
  const OpInfo info = op_info(op);
  const Clock t(1e9);
  if (ctx.clock.expired()) {
    report().append("checks", strf("{\"op\": \"%s\", \"source\": \"%s\", \"domain\": %llu, "
                                   "\"covered\": 0, \"complete\": false, \"skipped\": "
                                   "\"time budget spent before this check\"}",
                                   info.name, source, (unsigned long long)n));
    report().save();
    ctx.cut_short = true;
    return;
  }
  DeviceBuffer<DevStats> d(1);
  const DevStats init = fresh_stats();
  d.upload(&init, 1);
  const uint64_t chunk = uint64_t(1) << 28;
  uint64_t covered = 0;
  while (covered < n) {
    if (ctx.clock.expired()) {
      ctx.cut_short = true;
      break;
    }
    const uint64_t m = std::min(chunk, n - covered);
    check_kernel<OPI, SRC><<<ctx.blocks, 256>>>(covered, m, seed, lists.a, lists.b, lists.c, d.get());
    HW_CUDA_CHECK_LAUNCH(check_kernel);
    covered += m;
  }
  DevStats s;
  d.download(&s, 1);

  CheckRecord rec;
  rec.op = op;
  rec.source = source;
  rec.domain = n;
  rec.seed = seed;
  rec.st.total = s.total;
  rec.st.mismatches = s.mismatches;
  rec.st.hw_hash = s.hw_hash;
  rec.st.ref_hash = s.ref_hash;
  rec.replay_hw_hash = s.rp_hw_hash;
  rec.replay_ref_hash = s.rp_ref_hash;
  for (int k = 0; k < kDiffCount; ++k) {
    if (s.count[k] == 0) continue;
    rec.st.cls[k].count = s.count[k];
    rec.st.cls[k].first_index = s.first[k];
    rec.st.cls[k].hw_and = s.hw_and[k];
    rec.st.cls[k].hw_or = s.hw_or[k];
    // The example: the smallest input index of the class, evaluated once more.
    ClassExample& e = rec.example[k];
    e.index = s.first[k];
    if constexpr (SRC == kDomain) {
      domain_operands(op, e.index, e.a, e.b);
    } else if constexpr (SRC == kRandom) {
      fma_operands(info.in, seed, e.index, e.a, e.b, e.c);
    } else {
      e.a = (*lists.host)[e.index][0];
      e.b = (*lists.host)[e.index][1];
      e.c = (*lists.host)[e.index][2];
    }
    DeviceBuffer<uint32_t> one(1);
    eval_one<OPI><<<1, 1>>>(e.a, e.b, e.c, one.get());
    HW_CUDA_CHECK_LAUNCH(eval_one);
    one.download(&e.hw, 1);
    e.ref = reference(op, e.a, e.b, e.c);
  }
  rec.seconds = t.elapsed();
  report().append("checks", check_json(rec));
  report().save();
  std::printf("  %-22s %-10s %12llu/%llu inputs  %12llu mismatches  %.1f s\n", info.name, source,
              (unsigned long long)s.total, (unsigned long long)n, (unsigned long long)s.mismatches,
              t.elapsed());
  std::fflush(stdout);
}

#define HW_DOMAIN_CHECK(OP) run_check<static_cast<int>(Op::OP), kDomain>(ctx, "exhaustive", domain_size(Op::OP), 0, Lists{})

void part_conversions(Ctx& ctx) {
  HW_DOMAIN_CHECK(f16_to_f32);
  HW_DOMAIN_CHECK(bf16_to_f32);
  HW_DOMAIN_CHECK(e4m3_to_f16);
  HW_DOMAIN_CHECK(e5m2_to_f16);
  HW_DOMAIN_CHECK(f32_to_f16_rn);
  HW_DOMAIN_CHECK(f32_to_bf16_rn);
  HW_DOMAIN_CHECK(f32_to_e4m3_satfinite);
  HW_DOMAIN_CHECK(f32_to_e5m2_satfinite);
  HW_DOMAIN_CHECK(f32_to_e4m3_nosat);
  HW_DOMAIN_CHECK(f32_to_e5m2_nosat);
  HW_DOMAIN_CHECK(f32_to_f16_rz);
  HW_DOMAIN_CHECK(f32_to_f16_rd);
  HW_DOMAIN_CHECK(f32_to_f16_ru);
  HW_DOMAIN_CHECK(f32_to_bf16_rz);
  HW_DOMAIN_CHECK(f32_to_bf16_rd);
  HW_DOMAIN_CHECK(f32_to_bf16_ru);
}

void part_arith(Ctx& ctx) {
  HW_DOMAIN_CHECK(f16_add);
  HW_DOMAIN_CHECK(f16_mul);
  HW_DOMAIN_CHECK(f16_sub);
  HW_DOMAIN_CHECK(f16_div);
  HW_DOMAIN_CHECK(bf16_add);
  HW_DOMAIN_CHECK(bf16_mul);
  HW_DOMAIN_CHECK(bf16_sub);
  HW_DOMAIN_CHECK(bf16_div);
}

template <int OPI>
void fma_checks(Ctx& ctx, uint64_t count, uint64_t seed) {
  const Format f = op_info(static_cast<Op>(OPI)).in;
  const auto hard = fma_hard_cases(f);
  std::vector<uint32_t> a(hard.size()), b(hard.size()), c(hard.size());
  for (size_t i = 0; i < hard.size(); ++i) a[i] = hard[i][0], b[i] = hard[i][1], c[i] = hard[i][2];
  DeviceBuffer<uint32_t> da(hard.size()), db(hard.size()), dc(hard.size());
  da.upload(a.data(), a.size());
  db.upload(b.data(), b.size());
  dc.upload(c.data(), c.size());
  Lists l{da.get(), db.get(), dc.get(), &hard};
  run_check<OPI, kList>(ctx, "hard_cases", hard.size(), 0, l);
  run_check<OPI, kRandom>(ctx, "random", count, seed, Lists{});
}

void part_fma(Ctx& ctx, uint64_t count, uint64_t seed) {
  fma_checks<static_cast<int>(Op::f16_fma)>(ctx, count, seed);
  fma_checks<static_cast<int>(Op::bf16_fma)>(ctx, count, seed);
}

// ---- math functions ---------------------------------------------------------------------------

template <int FN, bool BF16>
__global__ void math_kernel(uint32_t* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536u) return;
  using T = typename std::conditional<BF16, __nv_bfloat16, __half>::type;
  T x;
  if constexpr (BF16) x = __ushort_as_bfloat16(static_cast<unsigned short>(i));
  else x = __ushort_as_half(static_cast<unsigned short>(i));
  constexpr MathFn f = static_cast<MathFn>(FN);
  T y;
  if constexpr (f == MathFn::sqrt) y = hsqrt(x);
  else if constexpr (f == MathFn::rcp) y = hrcp(x);
  else if constexpr (f == MathFn::rsqrt) y = hrsqrt(x);
  else if constexpr (f == MathFn::exp) y = hexp(x);
  else if constexpr (f == MathFn::exp2) y = hexp2(x);
  else if constexpr (f == MathFn::exp10) y = hexp10(x);
  else if constexpr (f == MathFn::log) y = hlog(x);
  else if constexpr (f == MathFn::log2) y = hlog2(x);
  else if constexpr (f == MathFn::log10) y = hlog10(x);
  else if constexpr (f == MathFn::sin) y = hsin(x);
  else if constexpr (f == MathFn::cos) y = hcos(x);
  else y = htanh(x);
  out[i] = bits(y);
}

template <int FN, bool BF16>
void math_check(Ctx& ctx) {
  const MathFn f = static_cast<MathFn>(FN);
  const Format fmt = BF16 ? fmt_bf16() : fmt_fp16();
  const char* fname = BF16 ? "bf16" : "fp16";
  if (ctx.clock.expired()) {
    report().append("math", strf("{\"fn\": \"%s\", \"format\": \"%s\", \"skipped\": \"time budget\"}",
                                 math_fn_name(f), fname));
    ctx.cut_short = true;
    return;
  }
  DeviceBuffer<uint32_t> d(65536);
  math_kernel<FN, BF16><<<256, 256>>>(d.get());
  HW_CUDA_CHECK_LAUNCH(math_kernel);
  std::vector<uint32_t> hw(65536);
  d.download(hw.data(), hw.size());
  const MathStats s = analyze_math(f, fmt, hw.data());
  report().append("math", math_json(f, fmt, fname, s));
  report().save();
  std::printf("  h%-6s %s  correctly rounded %llu/65536, max %.3g ulp, %llu special mismatches\n",
              math_fn_name(f), fname, (unsigned long long)s.correctly_rounded, s.max_ulp,
              (unsigned long long)s.special_mismatch);
}

template <bool BF16, int... F>
void math_each(Ctx& ctx, std::integer_sequence<int, F...>) {
  (math_check<F, BF16>(ctx), ...);
}
/// Every one of the kMathFnCount functions, in order.
template <bool BF16>
void math_all(Ctx& ctx) {
  math_each<BF16>(ctx, std::make_integer_sequence<int, kMathFnCount>{});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: halfway_gpu_elementwise conversions|arith|fma|math|all --out FILE "
                 "[--budget SECONDS] [--fma-count N] [--seed S]\n");
    return 2;
  }
  const std::string part = argv[1];
  if (part != "conversions" && part != "arith" && part != "fma" && part != "math" && part != "all") {
    std::fprintf(stderr, "halfway_gpu_elementwise: unknown part '%s'\n", part.c_str());
    return 2;
  }
  const std::string out = arg(argc, argv, "--out", "");
  const double budget = std::atof(arg(argc, argv, "--budget", "1e9").c_str());
  const uint64_t fma_count = std::strtoull(arg(argc, argv, "--fma-count", "10000000000").c_str(), nullptr, 10);
  const uint64_t seed = std::strtoull(arg(argc, argv, "--seed", "20240601").c_str(), nullptr, 10);
  if (budget <= 0 || fma_count == 0) {
    std::fprintf(stderr, "halfway_gpu_elementwise: --budget and --fma-count must be positive\n");
    return 2;
  }
  require_device_or_skip();
  report().open(out, "elementwise:" + part);
  Ctx ctx;
  ctx.clock = Clock(budget);
  ctx.dev = device_info();
  ctx.blocks = ctx.dev.sms * 16;
  report().set("device", device_json(ctx.dev));
  report().set("budget_s", strf("%.1f", budget));
  report().save();
  std::printf("%s on %s\n", part.c_str(), ctx.dev.prop.name);
  if (part == "conversions" || part == "all") part_conversions(ctx);
  if (part == "arith" || part == "all") part_arith(ctx);
  if (part == "fma" || part == "all") part_fma(ctx, fma_count, seed);
  if (part == "math" || part == "all") {
    math_all<false>(ctx);
    math_all<true>(ctx);
  }
  report().set("status", Report::quote(ctx.cut_short ? "partial" : "complete"));
  report().set("seconds", strf("%.2f", ctx.clock.elapsed()));
  report().save();
  return ctx.cut_short ? 1 : 0;
}
