#include "halfway/sim/accumulate.hpp"

#include <cmath>
#include <thread>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "gemm_f32.hpp"

namespace halfway::sim {

namespace {

void gemm_rows_f32(int64_t i0, int64_t i1, void* p) {
  detail::gemm_f32_rows(*static_cast<const detail::GemmF32*>(p), i0, i1,
                        detail::gemm_f32_best_path());
}

class Fp32Sequential final : public Accumulator {
 public:
  std::string name() const override { return "fp32"; }
  void gemm(int64_t m, int64_t n, int64_t k, const float* A, const float* B, const float* bias,
            float* C, const DType&, const BulkOptions&, int threads, Layout) const override {
    detail::GemmF32 args{n, k, A, B, bias, C};
    parallel_rows(m, threads, m * n * k, gemm_rows_f32, &args);
  }
};

struct FmtArgs {
  int64_t n, k;
  Format f;
  const uint32_t *A, *B, *bias;
  float* C;
  BulkOptions o;
  bool fused;
};

void gemm_rows_fmt(int64_t i0, int64_t i1, void* p) {
  const FmtArgs& a = *static_cast<const FmtArgs*>(p);
  const int64_t n = a.n, k = a.k;
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Env env{a.o.rounding, a.o.seed};
      env.tininess = a.o.tininess;
      // Stochastic rounding: one stream index per rounding, fixed by (i, j, kk).
      env.sr_counter = a.o.offset + uint64_t(i * n + j) * uint64_t(k + 1);
      uint32_t acc = 0;  // +0
      if (a.fused) {
        for (int64_t kk = 0; kk < k; ++kk)
          acc = halfway::fma(a.f, a.A[i * k + kk], a.B[kk * n + j], acc, env);
      } else {
        for (int64_t kk = 0; kk < k; ++kk)
          acc = halfway::add(a.f, acc, halfway::mul(a.f, a.A[i * k + kk], a.B[kk * n + j], env),
                             env);
      }
      if (a.bias) acc = halfway::add(a.f, acc, a.bias[j], env);
      Env d;
      a.C[i * n + j] = to_f32(a.f, acc, d);
    }
}

class InFormat final : public Accumulator {
 public:
  explicit InFormat(bool fused) : fused_(fused) {}
  std::string name() const override { return fused_ ? "in-format" : "in-format-unfused"; }
  void gemm(int64_t m, int64_t n, int64_t k, const float* A, const float* B, const float* bias,
            float* C, const DType& out, const BulkOptions& o, int threads,
            Layout layout) const override {
    if (!out.is_low()) {
      fp32_sequential().gemm(m, n, k, A, B, bias, C, out, o, threads, layout);
      return;
    }
    const Format f = out.fmt;
    // The inputs are converted to the accumulation format (exact when they already are
    // values of it, the usual case), as an HFMA chain takes fp16 operands.
    auto encode = [&](const float* x, size_t cnt) {
      std::vector<uint32_t> e(cnt);
      for (size_t i = 0; i < cnt; ++i) {
        Env env;
        e[i] = from_f32(f, x[i], env);
      }
      return e;
    };
    const auto ea = encode(A, size_t(m * k));
    const auto eb = encode(B, size_t(k * n));
    std::vector<uint32_t> ebias;
    if (bias) ebias = encode(bias, size_t(n));
    FmtArgs args{n, k, f, ea.data(), eb.data(), bias ? ebias.data() : nullptr, C, o, fused_};
    parallel_rows(m, threads, m * n * k * 16, gemm_rows_fmt, &args);
  }

 private:
  bool fused_;
};

class TorchCpu final : public Accumulator {
 public:
  std::string name() const override { return "torch-cpu"; }
  void gemm(int64_t m, int64_t n, int64_t k, const float* A, const float* B, const float* bias,
            float* C, const DType& out, const BulkOptions& o, int threads,
            Layout layout) const override {
    // at::native::use_mkldnn_bf16_matmul: m·k·n > 16·16·16 goes to oneDNN.
    const bool onednn = m * n * k > 16 * 16 * 16;
    if (!out.is_low() || onednn || layout == Layout::nt)
      fp32_sequential().gemm(m, n, k, A, B, bias, C, out, o, threads, layout);
    else
      in_format_unfused().gemm(m, n, k, A, B, bias, C, out, o, threads, layout);
  }
};

}  // namespace

const Accumulator& fp32_sequential() {
  static const Fp32Sequential a;
  return a;
}

const char* fp32_gemm_path() { return detail::gemm_f32_path_name(detail::gemm_f32_best_path()); }

const Accumulator& in_format() {
  static const InFormat a(true);
  return a;
}

const Accumulator& in_format_unfused() {
  static const InFormat a(false);
  return a;
}

const Accumulator& torch_cpu() {
  static const TorchCpu a;
  return a;
}

const Accumulator& accumulator_by_name(std::string_view name) {
  if (name == "fp32" || name == "fp32-sequential") return fp32_sequential();
  if (name == "in-format") return in_format();
  if (name == "in-format-unfused") return in_format_unfused();
  if (name == "torch-cpu") return torch_cpu();
  throw InputError("unknown accumulation '" + std::string(name) +
                   "' (fp32 in-format in-format-unfused torch-cpu)");
}

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
  // Threads only change which rows run where, never the order of any accumulation.
  constexpr int64_t kMinWorkPerThread = int64_t(1) << 18;
  int t = threads < 1 ? 1 : threads;
  if (int64_t(t) > m) t = static_cast<int>(m);
  while (t > 1 && work / t < kMinWorkPerThread) --t;
  if (t <= 1) {
    f(0, m, arg);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (m + t - 1) / t;
  for (int w = 1; w < t; ++w) {
    const int64_t i0 = w * per, i1 = std::min(m, i0 + per);
    if (i0 < i1) pool.emplace_back(f, i0, i1, arg);
  }
  f(0, std::min(m, per), arg);
  for (auto& th : pool) th.join();
}

}  // namespace halfway::sim
