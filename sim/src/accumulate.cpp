#include "halfway/sim/accumulate.hpp"

#include <cmath>
#include <algorithm>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/thread_pool.hpp"
#include "gemm_f32.hpp"
#include "gemm_model.hpp"

namespace halfway::sim {

namespace {

void gemm_rows_f32(int64_t i0, int64_t i1, void* p) {
  detail::gemm_f32_rows(*static_cast<const detail::GemmF32*>(p), i0, i1,
                        detail::gemm_f32_best_path());
}

thread_local bool t_model_scalar = false;

struct ModelArgs {
  detail::GemmModel g;
  detail::GemmModelPath path;
};

void gemm_rows_model(int64_t i0, int64_t i1, void* p) {
  const auto& a = *static_cast<const ModelArgs*>(p);
  detail::gemm_model_rows(a.g, i0, i1, a.path);
}

std::vector<uint32_t> encode(const Format& f, const float* x, size_t count) {
  // The bulk kernel: from_f32 with the default environment, element by element.
  std::vector<uint32_t> e(count);
  round_f32(f, x, e.data(), count);
  return e;
}

bool is_fast_fp32(const AccumulationModel& m) {
  // Index order, no flushing, SoftFloat's NaN rule: what the native fp32 kernel computes.
  return m.kind == AccumulationModel::Kind::sequential_fma && m.acc == accumulation::kF32 &&
         m.rounding == Rounding::near_even && m.period <= 1 && !m.daz && !m.ftz &&
         !m.nan_accumulator_first;
}

AccumulationModel sequential(AccumulationModel::Kind kind, const Format& acc, Rounding r) {
  AccumulationModel m;
  m.kind = kind;
  m.acc = acc;
  m.rounding = r;
  return m;
}

Accumulation named(std::string name, Accumulation::Kind kind, AccumulationModel block = {}) {
  Accumulation a;
  a.name = std::move(name);
  a.kind = kind;
  a.block = block;
  return a;
}

const std::vector<Accumulation>& all_accumulations() {
  using K = Accumulation::Kind;
  static const std::vector<Accumulation> all = {
      named("fp32", K::fp32),
      named("in-format", K::in_format),
      named("in-format-unfused", K::in_format_unfused),
      named("torch-cpu", K::torch_cpu),
      named("v100", K::block, accumulation::v100_fp32),
      named("a100", K::block, accumulation::a100_fp32),
      named("h100", K::block, accumulation::h100_fp32),
      named("h100-fp16", K::block, accumulation::h100_fp16),
      named("h100-fp8", K::block, accumulation::h100_fp8_fp32),
      named("mmasim-volta", K::block, accumulation::mmasim_volta),
      named("mmasim-ampere", K::block, accumulation::mmasim_ampere),
      named("mmasim-hopper", K::block, accumulation::mmasim_hopper),
      named("mmasim-hopper-fp16", K::block, accumulation::mmasim_hopper_fp16),
      named("mmasim-hopper-fp8", K::block, accumulation::mmasim_hopper_fp8),
      named("amx-bf16", K::block, accumulation::amx_bf16),
      named("avx512-dpbf16", K::block, accumulation::avx512_dpbf16),
  };
  return all;
}

}  // namespace

AccumulationModel Accumulation::resolve(const DType& out, int64_t m, int64_t n, int64_t k,
                                        Layout layout, const BulkOptions& o) const {
  using K = AccumulationModel::Kind;
  if (!out.is_low() || kind == Kind::fp32) return accumulation::fp32_sequential;
  switch (kind) {
    case Kind::in_format: return sequential(K::sequential_fma, out.fmt, o.rounding);
    case Kind::in_format_unfused: return sequential(K::sequential, out.fmt, o.rounding);
    case Kind::torch_cpu:
      // at::native::use_mkldnn_bf16_matmul: m·k·n > 16·16·16 goes to oneDNN.
      if (m * n * k > 16 * 16 * 16 || layout == Layout::nt) return accumulation::fp32_sequential;
      return sequential(K::sequential, out.fmt, o.rounding);
    default: return block;
  }
}

AccumulationModel fp8_gemm_model(const Accumulation& acc, Fp8Gemm gemm) {
  const std::string_view n = acc.name;
  AccumulationModel m;
  if (n == "h100" || n == "h100-fp16" || n == "h100-fp8") m = accumulation::h100_fp8_fp32;
  else if (n.substr(0, 13) == "mmasim-hopper") m = accumulation::mmasim_hopper_fp8;
  else return accumulation::fp32_sequential;
  if (gemm != Fp8Gemm::fprop) m.promote = kFp8SplitPromotion;
  return m;
}

Format fp8_gemm_format(const Format& a, const Format& b) {
  if (a == b) return a;
  const uint8_t eb = a.exp_bits > b.exp_bits ? a.exp_bits : b.exp_bits;
  const uint8_t fb = a.frac_bits > b.frac_bits ? a.frac_bits : b.frac_bits;
  return Format{eb, fb, static_cast<int16_t>((1 << (eb - 1)) - 1), Specials::ieee,
                Overflow::infinity};
}

const Accumulation& accumulator_by_name(std::string_view name) {
  if (name == "fp32-sequential") name = "fp32";
  for (const Accumulation& a : all_accumulations())
    if (a.name == name) return a;
  std::string list;
  for (const std::string& s : accumulation_names()) list += (list.empty() ? "" : " ") + s;
  throw InputError("unknown accumulation '" + std::string(name) + "' (" + list + ")");
}

const Accumulation& default_accumulation() {
  static const Accumulation& fp32 = accumulator_by_name("fp32");
  return fp32;
}

const std::vector<std::string>& accumulation_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Accumulation& a : all_accumulations()) v.push_back(a.name);
    return v;
  }();
  return names;
}

void gemm(const AccumulationModel& model, const Format& in, int64_t m, int64_t n, int64_t k,
          const float* A, const float* B, const float* bias, float* C, const BulkOptions& o,
          int threads) {
  if (is_fast_fp32(model)) {
    detail::GemmF32 args{n, k, A, B, bias, C};
    parallel_rows(m, threads, m * n * k, gemm_rows_f32, &args);
    return;
  }
  // Encodings of A, B and Bᵀ (the scalar path's operands) and their binary32 values (the
  // vector paths' operands: exactly the encoded values).
  const auto ea = encode(in, A, size_t(m * k));
  const auto eb = encode(in, B, size_t(k * n));
  std::vector<uint32_t> ebt(size_t(n * k));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) ebt[size_t(j * k + kk)] = eb[size_t(kk * n + j)];
  std::vector<float> va(ea.size()), vb(eb.size());
  decode_f32(in, ea.data(), va.data(), va.size());
  decode_f32(in, eb.data(), vb.data(), vb.size());
  std::vector<uint32_t> ebias;
  if (bias) ebias = encode(model.acc, bias, size_t(n));
  const detail::GemmModel g{model,     in,        n,         k, ea.data(), ebt.data(),
                            bias ? ebias.data() : nullptr, va.data(), vb.data(), C, o};
  ModelArgs args{g, t_model_scalar ? detail::GemmModelPath::scalar
                                   : detail::gemm_model_best_vector_path()};
  parallel_rows(m, threads, m * n * k * 16, gemm_rows_model, &args);
}

const char* model_gemm_path(const AccumulationModel& model, const Format& in,
                            const BulkOptions& o) {
  if (t_model_scalar || !detail::gemm_model_vectorizable(model, in, o)) return "scalar";
  return detail::gemm_model_path_name(detail::gemm_model_best_vector_path());
}

bool set_model_gemm_scalar(bool scalar) {
  const bool old = t_model_scalar;
  t_model_scalar = scalar;
  return old;
}

const char* fp32_gemm_path() { return detail::gemm_f32_path_name(detail::gemm_f32_best_path()); }

void gemm_f64(int64_t m, int64_t n, int64_t k, const double* A, const double* B,
              const double* bias, double* C) {
  for (int64_t i = 0; i < m; ++i) {
    double* c = C + i * n;
    for (int64_t j = 0; j < n; ++j) c[j] = 0.0;
    for (int64_t kk = 0; kk < k; ++kk) {
      const double x = A[i * k + kk];
      const double* b = B + kk * n;
      for (int64_t j = 0; j < n; ++j) c[j] = std::fma(x, b[j], c[j]);
    }
    if (bias)
      for (int64_t j = 0; j < n; ++j) c[j] += bias[j];
  }
}

void parallel_rows(int64_t m, int threads, int64_t work, void (*f)(int64_t, int64_t, void*),
                   void* arg) {
  // Threads only change which rows run where, never the order of any accumulation; part p
  // always covers the same rows.
  constexpr int64_t kMinWorkPerThread = int64_t(1) << 18;
  int t = threads < 1 ? 1 : threads;
  if (int64_t(t) > m) t = static_cast<int>(m);
  while (t > 1 && work / t < kMinWorkPerThread) --t;
  if (t <= 1) {
    f(0, m, arg);
    return;
  }
  const int64_t per = (m + t - 1) / t;
  ThreadPool::global().run(t, [&](int p) {
    const int64_t i0 = p * per, i1 = std::min(m, i0 + per);
    if (i0 < i1) f(i0, i1, arg);
  });
}

}  // namespace halfway::sim
