// cuBLAS GEMM under its compute types, compared with the library's accumulation models: for
// each configuration, how many outputs each model reproduces bit for bit and how far apart the
// others are (in units in the last place of the output format). cuBLAS chooses its own kernels
// (tiling, split-K), so a mismatch is a finding about cuBLAS's summation order, not necessarily
// about the tensor cores; halfway_gpu_mma measures those with a defined order.
//
//   halfway_gpu_cublas --out FILE [--budget SECONDS] [--seed S]
// Exit status: 0 done, 1 budget cut it short, 2 bad arguments, 3 CUDA/cuBLAS error, 77 no GPU.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "gpu_common.cuh"
#include "halfway/accumulate.hpp"
#include "halfway/hw/describe.hpp"
#include "halfway/hw/hash.hpp"
#include "halfway/hw/ops.hpp"

using namespace halfway;
using namespace halfway::hw;
using namespace halfway::gpu;

namespace {

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}

/// A cuBLAS call that fails is recorded in the configuration's entry and the run goes on (an
/// unsupported combination is a finding), unlike CUDA runtime errors.
#define HW_CUBLAS_TRY(call, status_out)                                               \
  do {                                                                                \
    const cublasStatus_t hw_st_ = (call);                                             \
    if (hw_st_ != CUBLAS_STATUS_SUCCESS) {                                            \
      status_out = strf("%s returned %s at %s:%d", #call, cublas_status_name(hw_st_), \
                        __FILE__, __LINE__);                                          \
    }                                                                                 \
  } while (0)

struct Config {
  const char* name;
  bool bf16_in;   ///< input values are bf16 (else fp16)
  bool f32_in;    ///< ... but passed to cuBLAS as fp32 matrices (for the FAST compute types)
  int out_bits;   ///< 32: fp32 D; 16: D in the input format
  cublasComputeType_t compute;
  const char* compute_name;
};

const Config kConfigs[] = {
    {"f16 x f16 -> f32", false, false, 32, CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F"},
    {"f16 x f16 -> f32", false, false, 32, CUBLAS_COMPUTE_32F_PEDANTIC, "CUBLAS_COMPUTE_32F_PEDANTIC"},
    {"f16 x f16 -> f16", false, false, 16, CUBLAS_COMPUTE_16F, "CUBLAS_COMPUTE_16F"},
    {"f16 x f16 -> f16", false, false, 16, CUBLAS_COMPUTE_16F_PEDANTIC, "CUBLAS_COMPUTE_16F_PEDANTIC"},
    {"f16 x f16 -> f16", false, false, 16, CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F"},
    {"bf16 x bf16 -> f32", true, false, 32, CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F"},
    {"bf16 x bf16 -> f32", true, false, 32, CUBLAS_COMPUTE_32F_PEDANTIC, "CUBLAS_COMPUTE_32F_PEDANTIC"},
    {"bf16 x bf16 -> bf16", true, false, 16, CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F"},
    // fp32 matrices holding fp16 values: the down-conversion of the FAST modes is exact, so
    // these can be compared with the same models.
    {"f32 (fp16 values) -> f32", false, true, 32, CUBLAS_COMPUTE_32F_FAST_16F, "CUBLAS_COMPUTE_32F_FAST_16F"},
    {"f32 (fp16 values) -> f32", false, true, 32, CUBLAS_COMPUTE_32F_FAST_TF32, "CUBLAS_COMPUTE_32F_FAST_TF32"},
    {"f32 (fp16 values) -> f32", false, true, 32, CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F"},
};

struct Model {
  std::string name;
  AccumulationModel m;
  bool round_out;  ///< accumulate in m.acc (fp32), then round to the 16-bit output (RNE)
};

/// One output per thread: the model's dot product of row i of A and column j of B (Bt row j).
__global__ void model_gemm(AccumulationModel m, Format in, Format out, bool round_out,
                           const uint32_t* A, const uint32_t* Bt, int M, int N, int K, uint32_t* D) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= M * N) return;
  const int i = t / N, j = t % N;
  Env env;
  uint32_t c = 0;
  c = dot(m, in, A + size_t(i) * K, Bt + size_t(j) * K, K, c, env);
  if (round_out) {
    Env e2;
    c = convert(m.acc, c, out, e2);
  }
  D[size_t(i) * N + j] = c;
}

std::vector<Model> models_for(const Config& cfg) {
  std::vector<Model> v;
  const Format f32 = fmt_fp32(), f16 = fmt_fp16();
  using K = AccumulationModel::Kind;
  if (cfg.compute == CUBLAS_COMPUTE_16F || cfg.compute == CUBLAS_COMPUTE_16F_PEDANTIC) {
    v.push_back({"sequential fma in fp16", {K::sequential_fma, f16, Rounding::near_even, 1, 23}, false});
    v.push_back({"h100_fp16 (block 16, 25 bits, RNE into fp16)", accumulation::h100_fp16, false});
    for (int kept = 23; kept <= 28; ++kept)
      for (Rounding r : {Rounding::near_even, Rounding::minMag})
        v.push_back({strf("block 16, %d bits, %s, sum in fp16", kept, r == Rounding::minMag ? "minMag" : "near_even"),
                     {K::block_fma, f16, r, 16, kept}, false});
    return v;
  }
  const bool ro = cfg.out_bits == 16;
  v.push_back({"fp32_sequential (fma chain)", accumulation::fp32_sequential, ro});
  v.push_back({"v100_fp32", accumulation::v100_fp32, ro});
  v.push_back({"a100_fp32", accumulation::a100_fp32, ro});
  v.push_back({"h100_fp32", accumulation::h100_fp32, ro});
  for (int kept = 23; kept <= 28; ++kept)
    for (Rounding r : {Rounding::minMag, Rounding::near_even})
      for (bool floor : {false, true})
        v.push_back({strf("block 16, %d bits, %s, toward %s", kept, r == Rounding::minMag ? "minMag" : "near_even",
                          floor ? "-inf" : "zero"),
                     {K::block_fma, f32, r, 16, kept, floor}, ro});
  return v;
}

/// One GEMM of a configuration: D (M x N) = A (M x K, row-major) times B, given as Bt (N x K,
/// row-major), elements in `in`, D in `out`; A and Bt hold the 16-bit encodings.
struct Gemm {
  const Config& cfg;
  int M, N, K;
  Format in, out;
  std::vector<uint32_t> A, Bt;
  size_t outs() const { return size_t(M) * N; }
};

/// Random inputs: sign, exponent in [-3, 0], fraction random.
void random_inputs(Gemm& g, uint64_t seed) {
  const Format& in = g.in;
  g.A.resize(size_t(g.M) * g.K);
  g.Bt.resize(size_t(g.N) * g.K);
  uint64_t n = 0;
  auto rnd = [&](void) {
    const uint64_t w = random64(seed, n++);
    const int e = int(w % 4) - 3;
    return (uint32_t((w >> 8) & 1) ? in.sign_bit() : 0u) | (uint32_t(e + in.bias) << in.frac_bits) |
           (uint32_t(w >> 16) & in.frac_mask());
  };
  for (auto& x : g.A) x = rnd();
  for (auto& x : g.Bt) x = rnd();
}

/// Uploads the 16-bit encodings, or (f32_in) the same values as fp32 bit patterns.
void upload_inputs(const Gemm& g, DeviceBuffer<uint32_t>& dA, DeviceBuffer<uint32_t>& dB) {
  Env e;
  std::vector<uint32_t> a32(g.A.size()), b32(g.Bt.size());
  std::vector<uint16_t> a16(g.A.begin(), g.A.end()), b16(g.Bt.begin(), g.Bt.end());
  for (size_t x = 0; x < g.A.size(); ++x) a32[x] = to_f32_bits(g.in, g.A[x], e);
  for (size_t x = 0; x < g.Bt.size(); ++x) b32[x] = to_f32_bits(g.in, g.Bt[x], e);
  if (g.cfg.f32_in) {
    dA.upload(a32.data(), a32.size());
    dB.upload(b32.data(), b32.size());
  } else {
    HW_CUDA_CHECK(cudaMemcpy(dA.get(), a16.data(), a16.size() * 2, cudaMemcpyHostToDevice));
    HW_CUDA_CHECK(cudaMemcpy(dB.get(), b16.data(), b16.size() * 2, cudaMemcpyHostToDevice));
  }
}

/// Runs cublasGemmEx twice (is it repeatable?) into hw and hw2, row-major. Returns the cuBLAS
/// error, empty when both ran.
std::string cublas_gemm(const Gemm& g, cublasHandle_t h, std::vector<uint32_t>& hw,
                        std::vector<uint32_t>& hw2) {
  const Config& cfg = g.cfg;
  const int M = g.M, N = g.N, K = g.K;
  const size_t outs = g.outs();
  DeviceBuffer<uint32_t> dA(g.A.size()), dB(g.Bt.size());
  upload_inputs(g, dA, dB);
  DeviceBuffer<uint32_t> dD(outs);
  std::string err;
  hw.assign(outs, 0);
  hw2.assign(outs, 0);
  const cudaDataType_t ab = cfg.f32_in ? CUDA_R_32F : cfg.bf16_in ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t dt = cfg.out_bits == 32 ? CUDA_R_32F : ab;
  for (int rep = 0; rep < 2 && err.empty(); ++rep) {
    HW_CUDA_CHECK(cudaMemset(dD.get(), 0, outs * sizeof(uint32_t)));
    const float alpha = 1.0f, beta = 0.0f;
    const __half alpha16 = __float2half(1.0f), beta16 = __float2half(0.0f);
    const bool c16 = cfg.compute == CUBLAS_COMPUTE_16F || cfg.compute == CUBLAS_COMPUTE_16F_PEDANTIC;
    const void* pa = c16 ? static_cast<const void*>(&alpha16) : static_cast<const void*>(&alpha);
    const void* pb = c16 ? static_cast<const void*>(&beta16) : static_cast<const void*>(&beta);
    // Column-major views: our row-major A (M x K) is a K x M matrix (lda = K), transposed by
    // CUBLAS_OP_T into A; our row-major Bt (N x K) is the K x N matrix B itself (ldb = K); D is
    // M x N column-major (ldc = M).
    HW_CUBLAS_TRY(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, pa, dA.get(), ab, K, dB.get(),
                               ab, K, pb, dD.get(), dt, M, cfg.compute, CUBLAS_GEMM_DEFAULT),
                  err);
    if (!err.empty()) break;
    HW_CUDA_CHECK(cudaDeviceSynchronize());
    // D_cm[i + j*M] is D[i][j]; 16-bit outputs are packed.
    std::vector<uint32_t> raw(outs);
    if (cfg.out_bits == 32) {
      dD.download(raw.data(), outs);
    } else {
      std::vector<uint16_t> r16(outs);
      HW_CUDA_CHECK(cudaMemcpy(r16.data(), dD.get(), outs * 2, cudaMemcpyDeviceToHost));
      raw.assign(r16.begin(), r16.end());
    }
    auto& dst = rep == 0 ? hw : hw2;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) dst[size_t(i) * N + j] = raw[i + size_t(j) * M];
  }
  return err;
}

/// The binary64 reference (products exact, sum rounded in binary64): how accurate cuBLAS is,
/// as the largest relative error of its outputs `hw`.
double max_rel_err_vs_fp64(const Gemm& g, const std::vector<uint32_t>& hw) {
  const int M = g.M, N = g.N, K = g.K;
  double max_rel_f64 = 0;
  Env e;
  std::vector<double> a(g.A.size()), b(g.Bt.size());
  for (size_t x = 0; x < g.A.size(); ++x) a[x] = to_f64(g.in, g.A[x], e);
  for (size_t x = 0; x < g.Bt.size(); ++x) b[x] = to_f64(g.in, g.Bt[x], e);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += a[size_t(i) * K + k] * b[size_t(j) * K + k];
      const double got = to_f64(g.out, hw[size_t(i) * N + j], e);
      if (s != 0) max_rel_f64 = std::max(max_rel_f64, std::fabs(got - s) / std::fabs(s));
    }
  return max_rel_f64;
}

/// How the configuration's models compare with cuBLAS's outputs: one JSON entry each, and the
/// model with the most identical outputs.
struct ModelScores {
  std::string json;
  std::string best;
  uint64_t best_same = 0;
};

ModelScores score_models(const Gemm& g, const std::vector<uint32_t>& hw) {
  const size_t outs = g.outs();
  DeviceBuffer<uint32_t> dA32(g.A.size()), dBt32(g.Bt.size()), dM(outs);
  dA32.upload(g.A.data(), g.A.size());
  dBt32.upload(g.Bt.data(), g.Bt.size());
  ModelScores sc;
  std::vector<uint32_t> mo(outs);
  for (const Model& m : models_for(g.cfg)) {
    model_gemm<<<int((outs + 127) / 128), 128>>>(m.m, g.in, g.out, m.round_out, dA32.get(),
                                                  dBt32.get(), g.M, g.N, g.K, dM.get());
    HW_CUDA_CHECK_LAUNCH(model_gemm);
    dM.download(mo.data(), outs);
    uint64_t same = 0, maxd = 0;
    double sumd = 0;
    for (size_t o = 0; o < outs; ++o) {
      const int64_t d = ordinal(g.out, hw[o]) - ordinal(g.out, mo[o]);
      const uint64_t ad = uint64_t(d < 0 ? -d : d);
      same += ad == 0;
      maxd = std::max(maxd, ad);
      sumd += double(ad);
    }
    if (same > sc.best_same || sc.best.empty()) {
      sc.best_same = same;
      sc.best = m.name;
    }
    sc.json += strf("%s{\"model\": %s, \"identical\": %llu, \"max_ulp\": %llu, \"mean_ulp\": %.4g}",
                    sc.json.empty() ? "" : ", ", Report::quote(m.name).c_str(),
                    (unsigned long long)same, (unsigned long long)maxd, sumd / double(outs));
  }
  return sc;
}

/// Records a configuration that cuBLAS refused or failed.
void report_gemm_error(const Gemm& g, const std::string& err) {
  const Config& cfg = g.cfg;
  report().append("gemms", strf("{\"config\": \"%s\", \"compute\": \"%s\", \"m\": %d, \"n\": %d, "
                                "\"k\": %d, \"error\": %s}",
                                cfg.name, cfg.compute_name, g.M, g.N, g.K, Report::quote(err).c_str()));
  report().save();
  std::printf("  %-26s %-28s k=%-5d %s\n", cfg.name, cfg.compute_name, g.K, err.c_str());
}

bool run_config(const Config& cfg, int M, int N, int K, uint64_t seed, cublasHandle_t h) {
  const Clock t(1e9);
  const Format in = cfg.bf16_in ? fmt_bf16() : fmt_fp16();
  Gemm g{cfg, M, N, K, in, cfg.out_bits == 32 ? fmt_fp32() : in, {}, {}};
  random_inputs(g, seed);
  std::vector<uint32_t> hw, hw2;
  const std::string err = cublas_gemm(g, h, hw, hw2);
  if (!err.empty()) {
    report_gemm_error(g, err);
    return true;
  }
  const size_t outs = g.outs();
  const bool repeatable = hw == hw2;
  uint64_t hw_hash = 0;
  for (size_t o = 0; o < outs; ++o) hw_hash += hash_term(o, hw[o]);
  const double max_rel_f64 = max_rel_err_vs_fp64(g, hw);
  const ModelScores sc = score_models(g, hw);
  report().append(
      "gemms",
      strf("{\"config\": \"%s\", \"compute\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, "
           "\"outputs\": %zu, \"repeatable\": %s, \"hw_hash\": %s, \"seed\": %llu, "
           "\"max_rel_err_vs_fp64\": %.4g, \"best_model\": %s, \"best_identical\": %llu, "
           "\"seconds\": %.2f, \"models\": [",
           cfg.name, cfg.compute_name, M, N, K, outs, repeatable ? "true" : "false",
           hex64(hw_hash).c_str(), (unsigned long long)seed, max_rel_f64,
           Report::quote(sc.best).c_str(), (unsigned long long)sc.best_same, t.elapsed()) +
          sc.json + "]}");
  report().save();
  std::printf("  %-26s %-28s k=%-5d best: %s (%llu/%zu identical)\n", cfg.name, cfg.compute_name, K,
              sc.best.c_str(), (unsigned long long)sc.best_same, outs);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if ((a != "--out" && a != "--budget" && a != "--seed") || i + 1 >= argc) {
      std::fprintf(stderr, "usage: halfway_gpu_cublas --out FILE [--budget SECONDS] [--seed S]\n");
      return 2;
    }
  }
  const std::string out = arg(argc, argv, "--out", "");
  const double budget = std::atof(arg(argc, argv, "--budget", "1e9").c_str());
  const uint64_t seed = std::strtoull(arg(argc, argv, "--seed", "20240601").c_str(), nullptr, 10);
  require_device_or_skip();
  report().open(out, "cublas");
  const DeviceInfo dev = device_info();
  report().set("device", device_json(dev));
  int version = 0;
  cublasHandle_t h = nullptr;
  const cublasStatus_t st = cublasCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    report().set("status", Report::quote("error"));
    report().set("error", Report::quote(strf("cublasCreate returned %s at %s:%d", cublas_status_name(st), __FILE__, __LINE__)));
    report().save();
    std::fprintf(stderr, "cublasCreate returned %s\n", cublas_status_name(st));
    return 3;
  }
  const cublasStatus_t vst = cublasGetVersion(h, &version);
  report().set("cublas_version", vst == CUBLAS_STATUS_SUCCESS ? strf("%d", version)
                                                               : Report::quote(cublas_status_name(vst)));
  report().save();
  std::printf("cuBLAS %d on %s\n", version, dev.prop.name);
  const Clock clock(budget);
  bool complete = true;
  const int ks[] = {16, 256, 4096};
  for (const Config& cfg : kConfigs)
    for (int k : ks) {
      if (clock.expired()) {
        complete = false;
        continue;
      }
      run_config(cfg, 64, 64, k, seed + uint64_t(k), h);
    }
  const cublasStatus_t dst = cublasDestroy(h);
  if (dst != CUBLAS_STATUS_SUCCESS)
    std::fprintf(stderr, "cublasDestroy returned %s\n", cublas_status_name(dst));
  report().set("status", Report::quote(complete ? "complete" : "partial"));
  report().set("seconds", strf("%.2f", clock.elapsed()));
  report().save();
  return complete ? 0 : 1;
}
