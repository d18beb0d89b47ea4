// NVIDIA's host (CPU) implementations of the conversion and arithmetic intrinsics, taken from
// cuda_fp16.h, cuda_bf16.h and cuda_fp8.h and compiled by the host compiler. These are the code
// paths a CUDA program runs when it calls the intrinsics from host code; fma and the half math
// functions have no host path. This file is compiled only when the CUDA toolkit's headers are
// found (HALFWAY_HW_NVIDIA_HOST).
#include "backend.hpp"

#if defined(HALFWAY_HW_NVIDIA_HOST)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>

namespace halfway::hw {
namespace {

float as_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t as_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
uint32_t bits(__half h) { return __half_raw(h).x; }
uint32_t bits(__nv_bfloat16 h) { return __nv_bfloat16_raw(h).x; }
__half half_of(uint32_t e) {
  __half_raw r;
  r.x = static_cast<unsigned short>(e);
  return __half(r);
}
__nv_bfloat16 bf16_of(uint32_t e) {
  __nv_bfloat16_raw r;
  r.x = static_cast<unsigned short>(e);
  return __nv_bfloat16(r);
}

uint32_t eval(Op op, uint32_t a, uint32_t b) {
  switch (op) {
    case Op::f32_to_f16_rn: return bits(__float2half_rn(as_float(a)));
    case Op::f32_to_f16_rz: return bits(__float2half_rz(as_float(a)));
    case Op::f32_to_f16_rd: return bits(__float2half_rd(as_float(a)));
    case Op::f32_to_f16_ru: return bits(__float2half_ru(as_float(a)));
    case Op::f32_to_bf16_rn: return bits(__float2bfloat16_rn(as_float(a)));
    case Op::f32_to_bf16_rz: return bits(__float2bfloat16_rz(as_float(a)));
    case Op::f32_to_bf16_rd: return bits(__float2bfloat16_rd(as_float(a)));
    case Op::f32_to_bf16_ru: return bits(__float2bfloat16_ru(as_float(a)));
    case Op::f32_to_e4m3_satfinite: return __nv_cvt_float_to_fp8(as_float(a), __NV_SATFINITE, __NV_E4M3);
    case Op::f32_to_e4m3_nosat: return __nv_cvt_float_to_fp8(as_float(a), __NV_NOSAT, __NV_E4M3);
    case Op::f32_to_e5m2_satfinite: return __nv_cvt_float_to_fp8(as_float(a), __NV_SATFINITE, __NV_E5M2);
    case Op::f32_to_e5m2_nosat: return __nv_cvt_float_to_fp8(as_float(a), __NV_NOSAT, __NV_E5M2);
    case Op::f16_to_f32: return as_bits(__half2float(half_of(a)));
    case Op::bf16_to_f32: return as_bits(__bfloat162float(bf16_of(a)));
    case Op::e4m3_to_f16:
      return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(a), __NV_E4M3).x;
    case Op::e5m2_to_f16:
      return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(a), __NV_E5M2).x;
    case Op::f16_add: return bits(__hadd_rn(half_of(a), half_of(b)));
    case Op::f16_sub: return bits(__hsub_rn(half_of(a), half_of(b)));
    case Op::f16_mul: return bits(__hmul_rn(half_of(a), half_of(b)));
    case Op::f16_div: return bits(__hdiv(half_of(a), half_of(b)));
    case Op::bf16_add: return bits(__hadd_rn(bf16_of(a), bf16_of(b)));
    case Op::bf16_sub: return bits(__hsub_rn(bf16_of(a), bf16_of(b)));
    case Op::bf16_mul: return bits(__hmul_rn(bf16_of(a), bf16_of(b)));
    case Op::bf16_div: return bits(__hdiv(bf16_of(a), bf16_of(b)));
    default: return 0;
  }
}

class NvidiaHost final : public Backend {
 public:
  const char* name() const override { return "nvidia-host"; }
  const char* description() const override {
    return "host code paths of cuda_fp16.h / cuda_bf16.h / cuda_fp8.h, compiled with the host "
           "compiler (CUDA " HALFWAY_HW_CUDA_VERSION " headers)";
  }
  std::vector<Op> ops() const override {
    return {Op::f32_to_f16_rn,        Op::f32_to_f16_rz,     Op::f32_to_f16_rd,
            Op::f32_to_f16_ru,        Op::f32_to_bf16_rn,    Op::f32_to_bf16_rz,
            Op::f32_to_bf16_rd,       Op::f32_to_bf16_ru,    Op::f32_to_e4m3_satfinite,
            Op::f32_to_e4m3_nosat,    Op::f32_to_e5m2_satfinite, Op::f32_to_e5m2_nosat,
            Op::f16_to_f32,           Op::bf16_to_f32,       Op::e4m3_to_f16,
            Op::e5m2_to_f16,          Op::f16_add,           Op::f16_sub,
            Op::f16_mul,              Op::f16_div,           Op::bf16_add,
            Op::bf16_sub,             Op::bf16_mul,          Op::bf16_div};
  }
  void run(Op op, const uint32_t* a, const uint32_t* b, const uint32_t*, uint32_t* out,
           size_t n) const override {
    if (op_info(op).arity == 2) {
      for (size_t i = 0; i < n; ++i) out[i] = eval(op, a[i], b[i]);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = eval(op, a[i], 0);
    }
  }

 protected:
  std::string missing() const override { return {}; }
};

}  // namespace

const Backend* nvidia_host_backend() {
  static const NvidiaHost b;
  return &b;
}

}  // namespace halfway::hw

#else

namespace halfway::hw {
const Backend* nvidia_host_backend() { return nullptr; }
}  // namespace halfway::hw

#endif
