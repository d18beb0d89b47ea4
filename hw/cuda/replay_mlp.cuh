// Training-step replay of the default MLP (16-64-64-1, GELU (erf), bias, mse, Adam) under the
// torch-cuda-fp16 / torch-cuda-bf16 policies with the fp32 sequential accumulation model: the
// arithmetic of one step as `halfway train` defines it (sim/src/trainer.cpp, ops.cpp,
// accumulate.cpp, optim.cpp, scaler.cpp), written once with NVIDIA's intrinsics and compiled
// twice: by nvcc for the GPU (hw/cuda/replay.cu, one thread per output element) and by the host
// compiler with the host implementations in cuda_fp16.h / cuda_bf16.h
// (tests/hw/test_hw_replay_mlp.cpp), where it must reproduce the simulator bit for bit.
//
// Arithmetic, element by element, as the simulator does it:
//  - every rounding into fp16/bf16 is `Fmt::from_float` (__float2half_rn / __float2bfloat16_rn)
//    of a binary32 value; values computed in binary64 are first rounded to binary32
//    (round_into: binary64 -> binary32 -> low);
//  - a matmul element is an fp32 chain acc = fmaf(a_k, b_k, acc) from acc = +0 over k in
//    order, then acc + bias in fp32 (linear forward), rounded once into the low format;
//  - the bias gradient, mse, gelu (erf/exp) and the loss scaling's product are binary64;
//  - Adam is fp32 with the simulator's operation order; its bias corrections are the
//    simulator's binary64 scalars (std::pow, rounded to fp32), taken from the input file.
// Every floating-point operation goes through the helpers below, which are the IEEE
// round-to-nearest intrinsics on the device (__fadd_rn, __dmul_rn, ...: never contracted into
// an fma) and plain operators on the host (the project compiles with -std=c++20, where GCC does
// not contract).
//
// The input file (hw/replay/default_mlp.bin, written by `test_hw_replay_mlp --write-input`
// from the simulator and checked against it by that test), little-endian:
//   char[8] "HWRPLMLP", u32 version (1)
//   u32 L, u32 widths[L]           layer widths, input first
//   u32 activation (1: gelu, erf form), u32 bias (1: with biases)
//   u32 batch, u32 steps
//   f32 beta1, beta2, 1-beta1, 1-beta2, eps     Adam's fp32 scalars (weight decay 0)
//   f32 step_size_neg[steps], f32 bc2_sqrt[steps]   -(lr / (1 - beta1^t)) and
//                                  sqrt(1 - beta2^t) as fp32, for Adam step t = 1..steps
//   u32 P, then P times: u32 name length, name, u32 count, f32 values[count]
//                                  initial parameters (0.weight, 0.bias, 2.weight, ...)
//   f32 x[steps][batch][widths[0]], f32 y[steps][batch][widths[L-1]]   the batches, in order
//   u32 C, then C times: u32 name length, name, u32 low (0: fp16, 1: bf16),
//                        u32 scaler (0: none, 1: dynamic), f32 init_scale,
//                        f64 growth_factor, f64 backoff_factor, i64 growth_interval
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "halfway/hw/json_out.hpp"

#if defined(__CUDACC__)
#define HALFWAY_HD __host__ __device__
#else
#define HALFWAY_HD
#endif

namespace halfway::replay {

// ---- arithmetic: IEEE round-to-nearest, one rounding per operation ---------------------------

// Returns `device` when compiled for the GPU, `host` otherwise. For the operations below: the
// CUDA round-to-nearest intrinsic on the device, the C++ operator or function (IEEE round to
// nearest under the default mode) on the host.
#ifdef __CUDA_ARCH__
#define HALFWAY_DEV_OR_HOST(device, host) return device
#else
#define HALFWAY_DEV_OR_HOST(device, host) return host
#endif
HALFWAY_HD inline float f_add(float a, float b) { HALFWAY_DEV_OR_HOST(__fadd_rn(a, b), a + b); }
HALFWAY_HD inline float f_mul(float a, float b) { HALFWAY_DEV_OR_HOST(__fmul_rn(a, b), a * b); }
HALFWAY_HD inline float f_div(float a, float b) { HALFWAY_DEV_OR_HOST(__fdiv_rn(a, b), a / b); }
HALFWAY_HD inline float f_sqrt(float a) { HALFWAY_DEV_OR_HOST(__fsqrt_rn(a), std::sqrt(a)); }
HALFWAY_HD inline float f_fma(float a, float b, float c) {
  HALFWAY_DEV_OR_HOST(__fmaf_rn(a, b, c), std::fma(a, b, c));
}
HALFWAY_HD inline double d_add(double a, double b) { HALFWAY_DEV_OR_HOST(__dadd_rn(a, b), a + b); }
HALFWAY_HD inline double d_sub(double a, double b) { HALFWAY_DEV_OR_HOST(__dsub_rn(a, b), a - b); }
HALFWAY_HD inline double d_mul(double a, double b) { HALFWAY_DEV_OR_HOST(__dmul_rn(a, b), a * b); }
HALFWAY_HD inline double d_div(double a, double b) { HALFWAY_DEV_OR_HOST(__ddiv_rn(a, b), a / b); }
/// binary64 -> binary32, round to nearest even.
HALFWAY_HD inline float d2f(double a) {
  HALFWAY_DEV_OR_HOST(__double2float_rn(a), static_cast<float>(a));
}
// The two binary64 library functions of GELU. Not correctly rounded on either side (CUDA's
// erf: 2 ulp, exp: 1 ulp; glibc: about 1 ulp), so the GPU can differ from the host in the last
// bits of the binary64 value; a differing fp16/bf16 result needs that value within a few
// binary64 ulps of a rounding boundary of binary32 (about one element in 2^28).
HALFWAY_HD inline double d_erf(double a) { HALFWAY_DEV_OR_HOST(::erf(a), std::erf(a)); }
HALFWAY_HD inline double d_exp(double a) { HALFWAY_DEV_OR_HOST(::exp(a), std::exp(a)); }
HALFWAY_HD inline uint32_t f_bits(float a) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(a);
#else
  uint32_t u;
  std::memcpy(&u, &a, 4);
  return u;
#endif
}
HALFWAY_HD inline bool f_finite(float a) { return (f_bits(a) & 0x7F800000u) != 0x7F800000u; }

// ---- the low formats -------------------------------------------------------------------------

struct Fp16 {
  using T = __half;
  static constexpr const char* name = "fp16";
  HALFWAY_HD static T from_float(float x) { return __float2half_rn(x); }
  HALFWAY_HD static float to_float(T x) { return __half2float(x); }
  static uint32_t bits(const T& x) {
    uint16_t u;
    std::memcpy(&u, &x, 2);
    return u;
  }
};

struct Bf16 {
  using T = __nv_bfloat16;
  static constexpr const char* name = "bf16";
  HALFWAY_HD static T from_float(float x) { return __float2bfloat16_rn(x); }
  HALFWAY_HD static float to_float(T x) { return __bfloat162float(x); }
  static uint32_t bits(const T& x) {
    uint16_t u;
    std::memcpy(&u, &x, 2);
    return u;
  }
};

// ---- the element operations ------------------------------------------------------------------

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

/// 0.5·v·(1 + erf(v/√2)) as ops.cpp writes it.
HALFWAY_HD inline double gelu_f(double v) {
  return d_mul(d_mul(0.5, v), d_add(1.0, d_erf(d_div(v, kSqrt2))));
}
/// g·(0.5·(1 + erf(v/√2)) + v·(1/√(2π))·exp(−0.5·v·v)) as ops.cpp writes it.
HALFWAY_HD inline double gelu_grad(double g, double v) {
  const double cdf = d_mul(0.5, d_add(1.0, d_erf(d_div(v, kSqrt2))));
  const double pdf = d_mul(d_mul(v, kInvSqrt2Pi), d_exp(d_mul(d_mul(-0.5, v), v)));
  return d_mul(g, d_add(cdf, pdf));
}

/// f32 -> low (a cast node).
template <class Fmt, class Exec>
void cast_to_low(Exec& ex, const float* a, typename Fmt::T* out, int64_t n) {
  ex.for_each(n, [=] HALFWAY_HD(int64_t i) { out[i] = Fmt::from_float(a[i]); });
}

/// y[M×N] = x[M×K]·w[N×K]ᵀ + b: fp32 fma chain over k, bias added in fp32, one rounding.
template <class Fmt, class Exec>
void linear_forward(Exec& ex, const typename Fmt::T* x, const typename Fmt::T* w,
                    const typename Fmt::T* b, typename Fmt::T* y, int64_t M, int64_t N, int64_t K) {
  ex.for_each(M * N, [=] HALFWAY_HD(int64_t e) {
    const int64_t i = e / N, j = e % N;
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k)
      acc = f_fma(Fmt::to_float(x[i * K + k]), Fmt::to_float(w[j * K + k]), acc);
    if (b) acc = f_add(acc, Fmt::to_float(b[j]));
    y[e] = Fmt::from_float(acc);
  });
}

template <class Fmt, class Exec>
void gelu_forward(Exec& ex, const typename Fmt::T* x, typename Fmt::T* y, int64_t n) {
  ex.for_each(n, [=] HALFWAY_HD(int64_t i) {
    y[i] = Fmt::from_float(d2f(gelu_f(double(Fmt::to_float(x[i])))));
  });
}

template <class Fmt, class Exec>
void gelu_backward(Exec& ex, const typename Fmt::T* g, const typename Fmt::T* x,
                   typename Fmt::T* gx, int64_t n) {
  ex.for_each(n, [=] HALFWAY_HD(int64_t i) {
    gx[i] = Fmt::from_float(
        d2f(gelu_grad(double(Fmt::to_float(g[i])), double(Fmt::to_float(x[i])))));
  });
}

/// gx[M×K] = G[M×N]·w[N×K]: fp32 fma chain over the N outputs.
template <class Fmt, class Exec>
void linear_backward_input(Exec& ex, const typename Fmt::T* G, const typename Fmt::T* w,
                           typename Fmt::T* gx, int64_t M, int64_t N, int64_t K) {
  ex.for_each(M * K, [=] HALFWAY_HD(int64_t e) {
    const int64_t i = e / K, j = e % K;
    float acc = 0.0f;
    for (int64_t o = 0; o < N; ++o)
      acc = f_fma(Fmt::to_float(G[i * N + o]), Fmt::to_float(w[o * K + j]), acc);
    gx[e] = Fmt::from_float(acc);
  });
}

/// gw[N×K] = Gᵀ·x: fp32 fma chain over the M rows of the batch, rounded into the low format,
/// then (the weight cast's backward) back into fp32, exactly.
template <class Fmt, class Exec>
void linear_backward_weight(Exec& ex, const typename Fmt::T* G, const typename Fmt::T* x,
                            typename Fmt::T* gw, float* gw32, int64_t M, int64_t N, int64_t K) {
  ex.for_each(N * K, [=] HALFWAY_HD(int64_t e) {
    const int64_t o = e / K, j = e % K;
    float acc = 0.0f;
    for (int64_t i = 0; i < M; ++i)
      acc = f_fma(Fmt::to_float(G[i * N + o]), Fmt::to_float(x[i * K + j]), acc);
    gw[e] = Fmt::from_float(acc);
    gw32[e] = Fmt::to_float(gw[e]);
  });
}

/// gb[N] = Σ_i G[i, o] summed in binary64 in row order, then binary32, then low; and back.
template <class Fmt, class Exec>
void linear_backward_bias(Exec& ex, const typename Fmt::T* G, typename Fmt::T* gb, float* gb32,
                          int64_t M, int64_t N) {
  ex.for_each(N, [=] HALFWAY_HD(int64_t o) {
    double s = 0.0;
    for (int64_t i = 0; i < M; ++i) s = d_add(s, double(Fmt::to_float(G[i * N + o])));
    gb[o] = Fmt::from_float(d2f(s));
    gb32[o] = Fmt::to_float(gb[o]);
  });
}

/// Scalars of one step that live on the device (PyTorch keeps the scale as a device tensor).
struct ScalerState {
  float scale;            ///< the scale this step's backward uses
  int64_t tracker;        ///< growth tracker
  int found_inf;          ///< inf/NaN in the scaled fp32 gradients
  float inv_scale;        ///< float(1 / double(scale))
  float scaled_loss;      ///< loss · scale (f32), "scaler.output"
  float loss_grad;        ///< the gradient reaching the loss, "scaler.grad_input" (or 1)
};

/// The fp32 gradients, passed by value to the found_inf kernel.
struct GradPtrs {
  static constexpr int kMax = 126;  ///< 2·(layers − 1) parameters at most (63 layers)
  float* p[kMax];
  int64_t n[kMax];
};

// ---- input file ------------------------------------------------------------------------------

struct ReplayCase {
  std::string name;
  uint32_t low = 0;     ///< 0: fp16 (torch-cuda-fp16), 1: bf16 (torch-cuda-bf16)
  uint32_t scaler = 0;  ///< 0: none, 1: dynamic GradScaler
  float init_scale = 1.0f;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct ReplayInput {
  std::vector<uint32_t> layers;
  uint32_t activation = 1;  ///< 1: gelu (erf)
  uint32_t bias = 1;
  uint32_t batch = 0, steps = 0;
  float beta1 = 0, beta2 = 0, c1 = 0, c2 = 0, eps = 0;
  std::vector<float> step_size_neg, bc2_sqrt;  ///< index t-1 for Adam step t
  std::vector<std::string> param_names;
  std::vector<std::vector<float>> params;
  std::vector<float> x, y;
  std::vector<ReplayCase> cases;
  uint32_t in_features() const { return layers.front(); }
  uint32_t out_features() const { return layers.back(); }
};

namespace detail {
struct Writer {
  std::vector<uint8_t> b;
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  void u32(uint32_t v) { raw(&v, 4); }
  void f32(float v) { raw(&v, 4); }
  void f64(double v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u32(uint32_t(s.size()));
    raw(s.data(), s.size());
  }
  void floats(const std::vector<float>& v) { raw(v.data(), v.size() * 4); }
};
struct Reader {
  const std::vector<uint8_t>& b;
  size_t pos = 0;
  bool ok = true;
  void raw(void* p, size_t n) {
    if (pos + n > b.size()) {
      ok = false;
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, b.data() + pos, n);
    pos += n;
  }
  uint32_t u32() { uint32_t v; raw(&v, 4); return v; }
  float f32() { float v; raw(&v, 4); return v; }
  double f64() { double v; raw(&v, 8); return v; }
  int64_t i64() { int64_t v; raw(&v, 8); return v; }
  std::string str() {
    const uint32_t n = u32();
    if (!ok || n > 4096 || pos + n > b.size()) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(b.data() + pos), n);
    pos += n;
    return s;
  }
  std::vector<float> floats(size_t n) {
    if (!ok || n > (b.size() - pos) / 4) {
      ok = false;
      return {};
    }
    std::vector<float> v(n);
    raw(v.data(), n * 4);
    return v;
  }
};
constexpr char kMagic[8] = {'H', 'W', 'R', 'P', 'L', 'M', 'L', 'P'};
}  // namespace detail

inline std::vector<uint8_t> serialize(const ReplayInput& in) {
  detail::Writer w;
  w.raw(detail::kMagic, 8);
  w.u32(1);
  w.u32(uint32_t(in.layers.size()));
  for (uint32_t l : in.layers) w.u32(l);
  w.u32(in.activation);
  w.u32(in.bias);
  w.u32(in.batch);
  w.u32(in.steps);
  for (float f : {in.beta1, in.beta2, in.c1, in.c2, in.eps}) w.f32(f);
  w.floats(in.step_size_neg);
  w.floats(in.bc2_sqrt);
  w.u32(uint32_t(in.params.size()));
  for (size_t i = 0; i < in.params.size(); ++i) {
    w.str(in.param_names[i]);
    w.u32(uint32_t(in.params[i].size()));
    w.floats(in.params[i]);
  }
  w.floats(in.x);
  w.floats(in.y);
  w.u32(uint32_t(in.cases.size()));
  for (const ReplayCase& c : in.cases) {
    w.str(c.name);
    w.u32(c.low);
    w.u32(c.scaler);
    w.f32(c.init_scale);
    w.f64(c.growth_factor);
    w.f64(c.backoff_factor);
    w.i64(c.growth_interval);
  }
  return w.b;
}

/// Parses and validates (the shapes the replay supports); "" on success, else the reason.
inline std::string parse(const std::vector<uint8_t>& bytes, ReplayInput& in) {
  detail::Reader r{bytes};
  char magic[8];
  r.raw(magic, 8);
  if (!r.ok || std::memcmp(magic, detail::kMagic, 8) != 0) return "not a replay input file";
  if (r.u32() != 1) return "unsupported version";
  const uint32_t L = r.u32();
  if (!r.ok || L < 2 || L > 64) return "bad layer count";  // GradPtrs::kMax
  in.layers.resize(L);
  for (uint32_t& l : in.layers) {
    l = r.u32();
    if (l < 1 || l > 65536) return "bad layer width";
  }
  in.activation = r.u32();
  in.bias = r.u32();
  if (in.activation != 1) return "only gelu (erf) is supported";
  if (in.bias != 1) return "only layers with bias are supported";
  in.batch = r.u32();
  in.steps = r.u32();
  if (!r.ok || in.batch < 1 || in.steps < 1 || in.batch > 65536 || in.steps > 100000)
    return "bad batch or step count";
  in.beta1 = r.f32();
  in.beta2 = r.f32();
  in.c1 = r.f32();
  in.c2 = r.f32();
  in.eps = r.f32();
  in.step_size_neg = r.floats(in.steps);
  in.bc2_sqrt = r.floats(in.steps);
  const uint32_t P = r.u32();
  if (!r.ok || P != 2 * (L - 1)) return "parameter count does not match the layers";
  in.params.resize(P);
  in.param_names.resize(P);
  for (uint32_t p = 0; p < P; ++p) {
    in.param_names[p] = r.str();
    const uint32_t n = r.u32();
    const uint32_t l = p / 2;
    const uint64_t want = p % 2 == 0 ? uint64_t(in.layers[l]) * in.layers[l + 1] : in.layers[l + 1];
    if (!r.ok || n != want) return "parameter " + std::to_string(p) + " has the wrong size";
    in.params[p] = r.floats(n);
  }
  in.x = r.floats(size_t(in.steps) * in.batch * in.in_features());
  in.y = r.floats(size_t(in.steps) * in.batch * in.out_features());
  const uint32_t C = r.u32();
  if (!r.ok || C > 64) return "bad case count";
  in.cases.resize(C);
  for (ReplayCase& c : in.cases) {
    c.name = r.str();
    c.low = r.u32();
    c.scaler = r.u32();
    c.init_scale = r.f32();
    c.growth_factor = r.f64();
    c.backoff_factor = r.f64();
    c.growth_interval = r.i64();
    if (c.low > 1 || c.scaler > 1) return "bad case " + c.name;
  }
  if (!r.ok) return "truncated file";
  if (r.pos != bytes.size()) return "trailing bytes";
  return "";
}

// ---- what a step produces --------------------------------------------------------------------

struct TensorRecord {
  std::string name;              ///< the simulator's trace name, e.g. "0.output"
  std::string dtype;             ///< fp16 | bf16 | fp32
  std::vector<uint32_t> bits;    ///< encodings, element by element
};

struct StepRecord {
  int64_t step = 0;
  float loss_scale = 1;   ///< the scale this step's backward used
  bool found_inf = false, skipped = false;
  int64_t growth_tracker = 0;
  float next_scale = 1;
  std::vector<TensorRecord> tensors;
};

/// The canonical NaN used for hashing and comparing: NVIDIA's hardware and host code return
/// 0x7FFF (fp16/bf16) / 0x7FFFFFFF for every NaN, the simulator keeps payloads; NaN encodings
/// are not what the replay compares.
inline uint32_t canonical_bits(const std::string& dtype, uint32_t b) {
  if (dtype == "fp32") return ((b & 0x7F800000u) == 0x7F800000u && (b & 0x7FFFFFu)) ? 0x7FFFFFFFu : b;
  if (dtype == "fp16") return ((b & 0x7C00u) == 0x7C00u && (b & 0x3FFu)) ? 0x7FFFu : b;
  return ((b & 0x7F80u) == 0x7F80u && (b & 0x7Fu)) ? 0x7FFFu : b;  // bf16
}

/// FNV-1a (64 bit) over the canonical encodings, little-endian, 2 bytes per fp16/bf16 element
/// and 4 per fp32 element.
inline uint64_t fnv1a(const std::string& dtype, const std::vector<uint32_t>& bits) {
  uint64_t h = 0xcbf29ce484222325ull;
  const int bytes = dtype == "fp32" ? 4 : 2;
  for (uint32_t b : bits) {
    const uint32_t c = canonical_bits(dtype, b);
    for (int k = 0; k < bytes; ++k) {
      h ^= (c >> (8 * k)) & 0xFFu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

/// The columns of one tensor in the report: name, dtype, element count, FNV-1a hash, the
/// encodings of the first (up to) three elements.
inline std::string tensor_json(const TensorRecord& t) {
  using hw::strf;
  std::string s = strf("[\"%s\", \"%s\", %zu, %s", t.name.c_str(), t.dtype.c_str(), t.bits.size(),
                       hw::hex64(fnv1a(t.dtype, t.bits)).c_str());
  for (size_t i = 0; i < t.bits.size() && i < 3; ++i)
    s += strf(t.dtype == "fp32" ? ", \"%08X\"" : ", \"%04X\"", t.bits[i]);
  return s + "]";
}

inline std::string step_json(const StepRecord& r) {
  using hw::strf;
  std::string s = strf("{\"step\": %lld, \"loss_scale\": %.9g, \"found_inf\": %s, \"skipped\": %s, "
                       "\"growth_tracker\": %lld, \"next_scale\": %.9g, \"tensors\": [",
                       (long long)r.step, double(r.loss_scale), r.found_inf ? "true" : "false",
                       r.skipped ? "true" : "false", (long long)r.growth_tracker,
                       double(r.next_scale));
  for (size_t i = 0; i < r.tensors.size(); ++i) s += (i ? ",\n      " : "\n      ") + tensor_json(r.tensors[i]);
  return s + "]}";
}

/// FNV-1a (64 bit) of a byte string (the input file, as the report identifies it).
inline uint64_t fnv1a_bytes(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The report's "input" entry: the file's size and hash, the model and the steps run.
inline std::string input_json(const std::vector<uint8_t>& bytes, const ReplayInput& in,
                              int64_t steps) {
  std::string layers;
  for (uint32_t l : in.layers) layers += (layers.empty() ? "" : ", ") + std::to_string(l);
  return hw::strf("{\"bytes\": %zu, \"fnv1a64\": %s, \"layers\": [%s], \"batch\": %u, "
                  "\"steps\": %lld}",
                  bytes.size(), hw::hex64(fnv1a_bytes(bytes)).c_str(), layers.c_str(), in.batch,
                  (long long)steps);
}

/// The report's "tensor_columns" entry.
constexpr const char* kTensorColumns =
    "[\"name\", \"dtype\", \"n\", \"fnv1a64\", \"first0\", \"first1\", \"first2\"]";

/// One case of the report: its settings and every step (the device program's "cases" entry).
inline std::string case_json(const ReplayCase& cs, const std::vector<StepRecord>& recs,
                             int64_t launches, double seconds) {
  using hw::strf;
  std::string s = strf("{\"case\": %s, \"low\": \"%s\", \"scaler\": \"%s\", \"steps\": %zu, "
                       "\"launches\": %lld, \"seconds\": %.3f, \"step_records\": [",
                       hw::Report::quote(cs.name).c_str(), cs.low ? "bf16" : "fp16",
                       cs.scaler ? "dynamic" : "none", recs.size(), (long long)launches, seconds);
  for (size_t i = 0; i < recs.size(); ++i) s += (i ? ",\n    " : "\n    ") + step_json(recs[i]);
  return s + "]}";
}

// ---- one case, N steps -----------------------------------------------------------------------

namespace detail {

template <class T>
std::vector<uint32_t> low_bits(const T* p, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t u;
    std::memcpy(&u, p + i, 2);
    v[i] = u;
  }
  return v;
}
inline std::vector<uint32_t> f32_bits(const float* p, size_t n) {
  std::vector<uint32_t> v(n);
  std::memcpy(v.data(), p, n * 4);
  return v;
}

}  // namespace detail

/// Every buffer of one case: the fp32 master parameters, Adam's state and the fp32 gradients
/// (one per parameter), the batch, each layer's low-precision tensors, the loss's and the
/// scaler's. Allocated once by `alloc_buffers`, reused by every step.
template <class Fmt>
struct Buffers {
  using T = typename Fmt::T;
  int64_t M = 0, fin = 0, fout = 0, nout = 0;  ///< batch, in/out features, M·fout
  size_t NL = 0, P = 0;                        ///< linear layers, parameters
  std::vector<float*> p32, m32, v32, g32;
  float* x32 = nullptr;
  float* y32 = nullptr;
  T* xlow = nullptr;
  std::vector<T*> wl, bl, lin, act, gact, gx, gw, gb;
  float* loss_in = nullptr;
  float* loss = nullptr;
  float* gl32 = nullptr;
  T* gl16 = nullptr;
  ScalerState* st = nullptr;
};

/// Linear layer l's input (K) and output (N) features.
inline void layer_dims(const ReplayInput& in, size_t l, int64_t& K, int64_t& N) {
  K = in.layers[l];
  N = in.layers[l + 1];
}

/// Allocates the buffers of case `cs` with `ex`, copies the initial parameters, zeroes Adam's
/// state and starts the scaler.
template <class Fmt, class Exec>
Buffers<Fmt> alloc_buffers(const ReplayInput& in, const ReplayCase& cs, Exec& ex) {
  using T = typename Fmt::T;
  Buffers<Fmt> b;
  b.M = in.batch;
  b.NL = in.layers.size() - 1;
  b.P = in.params.size();
  b.p32.resize(b.P), b.m32.resize(b.P), b.v32.resize(b.P), b.g32.resize(b.P);
  for (size_t p = 0; p < b.P; ++p) {
    const size_t n = in.params[p].size();
    b.p32[p] = ex.template alloc<float>(n);
    b.m32[p] = ex.template alloc<float>(n);
    b.v32[p] = ex.template alloc<float>(n);
    b.g32[p] = ex.template alloc<float>(n);
    std::memcpy(b.p32[p], in.params[p].data(), n * 4);
    std::memset(b.m32[p], 0, n * 4);
    std::memset(b.v32[p], 0, n * 4);
  }
  const int64_t M = b.M;
  b.fin = in.in_features();
  b.fout = in.out_features();
  b.x32 = ex.template alloc<float>(size_t(M * b.fin));
  b.y32 = ex.template alloc<float>(size_t(M * b.fout));
  b.xlow = ex.template alloc<T>(size_t(M * b.fin));
  for (auto* v : {&b.wl, &b.bl, &b.lin, &b.act, &b.gact, &b.gx, &b.gw, &b.gb}) v->resize(b.NL);
  for (size_t l = 0; l < b.NL; ++l) {
    int64_t K, N;
    layer_dims(in, l, K, N);
    b.wl[l] = ex.template alloc<T>(size_t(N * K));
    b.bl[l] = ex.template alloc<T>(size_t(N));
    b.lin[l] = ex.template alloc<T>(size_t(M * N));
    b.act[l] = ex.template alloc<T>(size_t(M * N));
    b.gact[l] = ex.template alloc<T>(size_t(M * N));  // gradient of the activation's input
    b.gx[l] = ex.template alloc<T>(size_t(M * K));    // gradient of the linear's input
    b.gw[l] = ex.template alloc<T>(size_t(N * K));
    b.gb[l] = ex.template alloc<T>(size_t(N));
  }
  b.nout = M * b.fout;
  b.loss_in = ex.template alloc<float>(size_t(b.nout));
  b.loss = ex.template alloc<float>(1);
  b.gl32 = ex.template alloc<float>(size_t(b.nout));
  b.gl16 = ex.template alloc<T>(size_t(b.nout));
  b.st = ex.template alloc<ScalerState>(1);
  b.st->scale = cs.scaler ? cs.init_scale : 1.0f;
  b.st->tracker = 0;
  return b;
}

/// Appends the tensors a step produces to its record, under the simulator's trace names.
template <class Fmt>
struct Recorder {
  StepRecord& rec;
  void low(const std::string& name, const typename Fmt::T* p, size_t n) {
    rec.tensors.push_back({name, Fmt::name, detail::low_bits(p, n)});
  }
  void f32(const std::string& name, const float* p, size_t n) {
    rec.tensors.push_back({name, "fp32", detail::f32_bits(p, n)});
  }
  /// One fp32 tensor per parameter, named `prefix` + the parameter's name.
  void each_param(const std::string& prefix, const ReplayInput& in, const std::vector<float*>& v) {
    for (size_t p = 0; p < v.size(); ++p)
      f32(prefix + in.param_names[p], v[p], in.params[p].size());
  }
};

/// The forward pass: scopes "0", "1", "2", ... (linear, gelu, linear, ...). Returns the
/// prediction (the last linear's output).
template <class Fmt, class Exec>
const typename Fmt::T* forward(const ReplayInput& in, Buffers<Fmt>& b, Exec& ex,
                               Recorder<Fmt>& r) {
  const int64_t M = b.M;
  cast_to_low<Fmt>(ex, b.x32, b.xlow, M * b.fin);
  r.low("0.input", b.xlow, size_t(M * b.fin));
  const typename Fmt::T* h = b.xlow;
  for (size_t l = 0; l < b.NL; ++l) {
    int64_t K, N;
    layer_dims(in, l, K, N);
    const std::string s = std::to_string(2 * l);
    cast_to_low<Fmt>(ex, b.p32[2 * l], b.wl[l], N * K);
    r.low(s + ".weight", b.wl[l], size_t(N * K));
    cast_to_low<Fmt>(ex, b.p32[2 * l + 1], b.bl[l], N);
    r.low(s + ".bias", b.bl[l], size_t(N));
    linear_forward<Fmt>(ex, h, b.wl[l], b.bl[l], b.lin[l], M, N, K);
    r.low(s + ".output", b.lin[l], size_t(M * N));
    h = b.lin[l];
    if (l + 1 < b.NL) {
      gelu_forward<Fmt>(ex, b.lin[l], b.act[l], M * N);
      r.low(std::to_string(2 * l + 1) + ".output", b.act[l], size_t(M * N));
      h = b.act[l];
    }
  }
  return h;
}

/// The loss: mse in fp32 (autocast's fp32 list): cast up, binary64 sum, one rounding.
template <class Fmt, class Exec>
void loss(const typename Fmt::T* pred, Buffers<Fmt>& b, Exec& ex, Recorder<Fmt>& r) {
  float* loss_in = b.loss_in;
  ex.for_each(b.nout, [=] HALFWAY_HD(int64_t i) { loss_in[i] = Fmt::to_float(pred[i]); });
  r.f32("loss.input", loss_in, size_t(b.nout));
  const float* t = b.y32;
  float* lp = b.loss;
  const int64_t n = b.nout;
  ex.for_each(1, [=] HALFWAY_HD(int64_t) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = d_sub(double(loss_in[i]), double(t[i]));
      s = d_add(s, d_mul(d, d));
    }
    lp[0] = d2f(d_div(s, double(n)));
  });
  r.f32("loss.output", b.loss, 1);
}

/// scaler.scale(loss).backward(): outside autocast, fp32.
template <class Fmt, class Exec>
void scale_loss(Buffers<Fmt>& b, Exec& ex, bool scaling, Recorder<Fmt>& r) {
  ScalerState* sp = b.st;
  const float* lp = b.loss;
  const bool sc = scaling;
  ex.for_each(1, [=] HALFWAY_HD(int64_t) {
    if (sc) {
      sp->scaled_loss = d2f(d_mul(double(lp[0]), double(sp->scale)));
      sp->loss_grad = d2f(d_mul(1.0, double(sp->scale)));
    } else {
      sp->loss_grad = 1.0f;
    }
  });
  if (sc) {
    r.f32("scaler.output", &b.st->scaled_loss, 1);
    r.f32("scaler.grad_input", &b.st->loss_grad, 1);
  }
}

/// mse backward: c = 2·g/n, g_i = c·(p_i − t_i) in binary64 -> fp32 -> (cast backward) low.
template <class Fmt, class Exec>
void loss_backward(Buffers<Fmt>& b, Exec& ex, Recorder<Fmt>& r) {
  const float* t = b.y32;
  const float* loss_in = b.loss_in;
  const ScalerState* sp = b.st;
  const int64_t n = b.nout;
  float* g = b.gl32;
  typename Fmt::T* g16 = b.gl16;
  ex.for_each(n, [=] HALFWAY_HD(int64_t i) {
    const double c = d_div(d_mul(2.0, double(sp->loss_grad)), double(n));
    g[i] = d2f(d_mul(c, d_sub(double(loss_in[i]), double(t[i]))));
    g16[i] = Fmt::from_float(g[i]);
  });
  r.f32("loss.grad_input", b.gl32, size_t(n));
  r.low("loss.grad_input", b.gl16, size_t(n));
}

/// The backward pass through the layers, last first, from the loss's low gradient.
template <class Fmt, class Exec>
void backward(const ReplayInput& in, Buffers<Fmt>& b, Exec& ex, Recorder<Fmt>& r) {
  const int64_t M = b.M;
  const typename Fmt::T* G = b.gl16;
  for (size_t l = b.NL; l-- > 0;) {
    int64_t K, N;
    layer_dims(in, l, K, N);
    const std::string s = std::to_string(2 * l);
    const typename Fmt::T* xin = l == 0 ? b.xlow : b.act[l - 1];
    if (l > 0) {
      linear_backward_input<Fmt>(ex, G, b.wl[l], b.gx[l], M, N, K);
      r.low(s + ".grad_input", b.gx[l], size_t(M * K));
    }
    linear_backward_weight<Fmt>(ex, G, xin, b.gw[l], b.g32[2 * l], M, N, K);
    r.low(s + ".weight.grad", b.gw[l], size_t(N * K));
    linear_backward_bias<Fmt>(ex, G, b.gb[l], b.g32[2 * l + 1], M, N);
    r.low(s + ".bias.grad", b.gb[l], size_t(N));
    r.f32(s + ".weight.grad.cast", b.g32[2 * l], size_t(N * K));
    r.f32(s + ".bias.grad.cast", b.g32[2 * l + 1], size_t(N));
    if (l > 0) {
      // the activation "2l-1" between layer l-1 and l
      gelu_backward<Fmt>(ex, b.gx[l], b.lin[l - 1], b.gact[l - 1], M * K);
      r.low(std::to_string(2 * l - 1) + ".grad_input", b.gact[l - 1], size_t(M * K));
      G = b.gact[l - 1];
    }
  }
}

/// unscale_ (dynamic scaler): found_inf on the scaled fp32 grads, then g·inv_scale. Sets the
/// record's found_inf and skipped.
template <class Fmt, class Exec>
void unscale(const ReplayInput& in, Buffers<Fmt>& b, Exec& ex, bool scaling, StepRecord& rec) {
  ScalerState* sp = b.st;
  GradPtrs ptrs{};
  const int64_t np = int64_t(b.P);
  for (size_t p = 0; p < b.P; ++p) {
    ptrs.p[p] = b.g32[p];
    ptrs.n[p] = int64_t(in.params[p].size());
  }
  ex.for_each(1, [=] HALFWAY_HD(int64_t) {
    int found = 0;
    for (int64_t p = 0; p < np; ++p)
      for (int64_t i = 0; i < ptrs.n[p]; ++i)
        if (!f_finite(ptrs.p[p][i])) found = 1;
    sp->found_inf = found;
    sp->inv_scale = d2f(d_div(1.0, double(sp->scale)));
  });
  rec.found_inf = b.st->found_inf != 0;
  rec.skipped = scaling && rec.found_inf;
  if (scaling && b.st->inv_scale != 1.0f)
    for (size_t p = 0; p < b.P; ++p) {
      float* g = b.g32[p];
      ex.for_each(int64_t(in.params[p].size()),
                  [=] HALFWAY_HD(int64_t i) { g[i] = f_mul(g[i], sp->inv_scale); });
    }
}

/// Adam's step `step` (1-based; torch.optim single-tensor, fp32) on every parameter.
template <class Fmt, class Exec>
void adam_step(const ReplayInput& in, Buffers<Fmt>& b, Exec& ex, int64_t step) {
  const size_t t = size_t(step - 1);
  const float b1 = in.beta1, b2 = in.beta2, c1 = in.c1, c2 = in.c2, eps = in.eps;
  const float step_size_neg = in.step_size_neg[t], bc2_sqrt = in.bc2_sqrt[t];
  for (size_t p = 0; p < b.P; ++p) {
    float *w = b.p32[p], *m = b.m32[p], *v = b.v32[p];
    const float* g = b.g32[p];
    ex.for_each(int64_t(in.params[p].size()), [=] HALFWAY_HD(int64_t i) {
      const float gi = g[i];
      m[i] = f_fma(gi, c1, f_mul(m[i], b1));                    // mul_(β1).add_(g, 1-β1)
      v[i] = f_add(f_mul(v[i], b2), f_mul(f_mul(c2, gi), gi));  // mul_(β2).addcmul_(g, g, 1-β2)
      const float denom = f_add(f_div(f_sqrt(v[i]), bc2_sqrt), eps);
      w[i] = f_add(w[i], f_div(f_mul(step_size_neg, m[i]), denom));  // addcdiv_
    });
  }
}

/// scaler.update() (dynamic scaler): back off after inf/NaN, grow after `growth_interval`
/// successful steps.
template <class Exec>
void scaler_update(const ReplayCase& cs, ScalerState* st, Exec& ex) {
  ScalerState* sp = st;
  const double backoff = cs.backoff_factor, growth = cs.growth_factor;
  const int64_t interval = cs.growth_interval;
  ex.for_each(1, [=] HALFWAY_HD(int64_t) {
    if (sp->found_inf) {
      sp->scale = d2f(d_mul(double(sp->scale), backoff));
      sp->tracker = 0;
    } else {
      const int64_t successful = sp->tracker + 1;
      if (successful == interval) {
        const float grown = d2f(d_mul(double(sp->scale), growth));
        if (f_finite(grown)) sp->scale = grown;
        sp->tracker = 0;
      } else {
        sp->tracker = successful;
      }
    }
  });
}

/// Runs `steps` steps of case `cs` with the executor `ex`, which provides
///   T* alloc<T>(size_t n)             memory both the executor's threads and the host can read
///   void for_each(int64_t n, F f)     f(0..n-1), finished (synchronised) when it returns
/// and returns what every step produced (at most `in.steps` steps: the file holds that many
/// batches). The host only orchestrates and reads the results.
template <class Fmt, class Exec>
std::vector<StepRecord> run_case_fmt(const ReplayInput& in, const ReplayCase& cs, Exec& ex,
                                     int64_t steps) {
  if (steps > int64_t(in.steps)) steps = int64_t(in.steps);
  Buffers<Fmt> b = alloc_buffers<Fmt>(in, cs, ex);
  const bool scaling = cs.scaler != 0;
  const size_t nx = size_t(b.M * b.fin), ny = size_t(b.M * b.fout);
  int64_t adam_steps = 0;
  std::vector<StepRecord> out;
  for (int64_t step = 0; step < steps; ++step) {
    StepRecord rec;
    rec.step = step;
    rec.loss_scale = b.st->scale;
    Recorder<Fmt> r{rec};
    std::memcpy(b.x32, in.x.data() + size_t(step) * nx, nx * 4);
    std::memcpy(b.y32, in.y.data() + size_t(step) * ny, ny * 4);
    loss<Fmt>(forward<Fmt>(in, b, ex, r), b, ex, r);
    scale_loss<Fmt>(b, ex, scaling, r);
    loss_backward<Fmt>(b, ex, r);
    backward<Fmt>(in, b, ex, r);
    unscale<Fmt>(in, b, ex, scaling, rec);
    r.each_param("grads.", in, b.g32);
    if (!rec.skipped) adam_step<Fmt>(in, b, ex, ++adam_steps);  // unless skipped
    r.each_param("params.", in, b.p32);
    if (scaling) scaler_update(cs, b.st, ex);
    rec.growth_tracker = b.st->tracker;
    rec.next_scale = b.st->scale;
    out.push_back(std::move(rec));
  }
  return out;
}

template <class Exec>
std::vector<StepRecord> run_case(const ReplayInput& in, const ReplayCase& cs, Exec& ex,
                                 int64_t steps) {
  return cs.low == 1 ? run_case_fmt<Bf16>(in, cs, ex, steps) : run_case_fmt<Fp16>(in, cs, ex, steps);
}

/// The executor of the host build: plain loops.
struct HostExec {
  std::vector<std::shared_ptr<void>> keep;
  template <class T>
  T* alloc(size_t n) {
    std::shared_ptr<T> p(new T[n + 1], std::default_delete<T[]>());
    keep.push_back(p);
    return p.get();
  }
  template <class F>
  void for_each(int64_t n, F f) {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
};

}  // namespace halfway::replay
