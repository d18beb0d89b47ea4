// Bulk kernels: the public entry points and the reference implementation (the scalar routines,
// element by element). The fast paths in bulk_simd.cpp must produce exactly these results and
// counts; each entry point tries the fast path and falls back to the reference.
#include "halfway/bulk.hpp"

#include "bulk_internal.hpp"
#include "halfway/softfloat.hpp"

namespace halfway {

void count_event(const Format& f, uint32_t result, bool exact_nonzero_finite, uint8_t flags,
                 EventCounts& c) {
  const Unpacked u = unpack(Format{f.exp_bits, f.frac_bits, f.bias, f.specials, f.overflow, false,
                                   false, f.is_signed, f.has_zero},
                            result);
  c.total++;
  const bool is_nan = u.cls == Class::qnan || u.cls == Class::snan;
  if ((flags & flag::inexact) && !is_nan) c.inexact++;
  if (u.cls == Class::zero) {
    c.zero++;
    if (exact_nonzero_finite) c.flushed++;
  }
  const uint32_t mag = result & f.mag_mask();
  if (f.has_zero && u.cls == Class::finite && (mag >> f.frac_bits) == 0) c.subnormal++;
  if (flags & flag::overflow) c.overflow++;
  if (is_nan) c.nan++;
  c.flags |= flags;
}

namespace {

bool finite_nonzero_f32(uint32_t b) {
  return (b & 0x7FFFFFFF) != 0 && (b & 0x7F800000) != 0x7F800000;
}

template <class T>
void round_impl(const Format& f, const float* in, T* out, size_t n, const BulkOptions& o,
                EventCounts* counts) {
  EventCounts c;
  for (size_t i = 0; i < n; ++i) {
    Env e = element_env(o, i);
    const uint32_t b = f32_bits(in[i]);
    const uint32_t r = from_f32_bits(f, b, e);
    out[i] = static_cast<T>(r);
    if (counts) count_event(f, r, finite_nonzero_f32(b), e.flags, c);
  }
  if (counts) *counts += c;
}

template <class T>
void decode_impl(const Format& f, const T* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Env e;
    out[i] = to_f32(f, in[i], e);
  }
}

template <class T>
void binary_impl(BinaryOp op, const Format& f, const T* a, const T* b, T* out, size_t n,
                 const BulkOptions& o, EventCounts* counts) {
  EventCounts c;
  for (size_t i = 0; i < n; ++i) {
    Env e = element_env(o, i);
    uint32_t r;
    switch (op) {
      case BinaryOp::add: r = add(f, a[i], b[i], e); break;
      case BinaryOp::sub: r = sub(f, a[i], b[i], e); break;
      case BinaryOp::mul: r = mul(f, a[i], b[i], e); break;
      default: r = div(f, a[i], b[i], e); break;
    }
    out[i] = static_cast<T>(r);
    // The exact result is non-zero finite exactly when the rounding raised inexact and did not
    // overflow to a non-finite, or the result is non-zero: underflow-to-zero needs inexact.
    if (counts) count_event(f, r, (e.flags & flag::inexact) != 0, e.flags, c);
  }
  if (counts) *counts += c;
}

template <class T>
void fma_impl(const Format& f, const T* a, const T* b, const T* cc, T* out, size_t n,
              const BulkOptions& o, EventCounts* counts) {
  EventCounts c;
  for (size_t i = 0; i < n; ++i) {
    Env e = element_env(o, i);
    const uint32_t r = halfway::fma(f, a[i], b[i], cc[i], e);
    out[i] = static_cast<T>(r);
    if (counts) count_event(f, r, (e.flags & flag::inexact) != 0, e.flags, c);
  }
  if (counts) *counts += c;
}

}  // namespace

namespace detail {

void reference_round_f32(const Format& f, const float* in, uint8_t* out, size_t n,
                         const BulkOptions& o, EventCounts* c) {
  round_impl(f, in, out, n, o, c);
}
void reference_round_f32(const Format& f, const float* in, uint16_t* out, size_t n,
                         const BulkOptions& o, EventCounts* c) {
  round_impl(f, in, out, n, o, c);
}
void reference_round_f32(const Format& f, const float* in, uint32_t* out, size_t n,
                         const BulkOptions& o, EventCounts* c) {
  round_impl(f, in, out, n, o, c);
}

void reference_quantize_f32(const Format& f, const float* in, float* out, size_t n,
                            const BulkOptions& o, EventCounts* counts) {
  EventCounts c;
  for (size_t i = 0; i < n; ++i) {
    Env e = element_env(o, i);
    const uint32_t b = f32_bits(in[i]);
    const uint32_t r = from_f32_bits(f, b, e);
    Env d;
    out[i] = to_f32(f, r, d);
    if (counts) count_event(f, r, finite_nonzero_f32(b), e.flags, c);
  }
  if (counts) *counts += c;
}

void reference_decode_f32(const Format& f, const uint8_t* in, float* out, size_t n) {
  decode_impl(f, in, out, n);
}
void reference_decode_f32(const Format& f, const uint16_t* in, float* out, size_t n) {
  decode_impl(f, in, out, n);
}
void reference_decode_f32(const Format& f, const uint32_t* in, float* out, size_t n) {
  decode_impl(f, in, out, n);
}

void reference_binary(BinaryOp op, const Format& f, const uint8_t* a, const uint8_t* b,
                      uint8_t* out, size_t n, const BulkOptions& o, EventCounts* c) {
  binary_impl(op, f, a, b, out, n, o, c);
}
void reference_binary(BinaryOp op, const Format& f, const uint16_t* a, const uint16_t* b,
                      uint16_t* out, size_t n, const BulkOptions& o, EventCounts* c) {
  binary_impl(op, f, a, b, out, n, o, c);
}
void reference_binary(BinaryOp op, const Format& f, const uint32_t* a, const uint32_t* b,
                      uint32_t* out, size_t n, const BulkOptions& o, EventCounts* c) {
  binary_impl(op, f, a, b, out, n, o, c);
}
void reference_fma(const Format& f, const uint8_t* a, const uint8_t* b, const uint8_t* cc,
                   uint8_t* out, size_t n, const BulkOptions& o, EventCounts* c) {
  fma_impl(f, a, b, cc, out, n, o, c);
}
void reference_fma(const Format& f, const uint16_t* a, const uint16_t* b, const uint16_t* cc,
                   uint16_t* out, size_t n, const BulkOptions& o, EventCounts* c) {
  fma_impl(f, a, b, cc, out, n, o, c);
}
void reference_fma(const Format& f, const uint32_t* a, const uint32_t* b, const uint32_t* cc,
                   uint32_t* out, size_t n, const BulkOptions& o, EventCounts* c) {
  fma_impl(f, a, b, cc, out, n, o, c);
}

}  // namespace detail

// Public entry points: the fast path when it covers the call, else the reference.

#define HALFWAY_BULK_ENTRY_POINTS(T)                                                                 \
  void round_f32(const Format& f, const float* in, T* out, size_t n, const BulkOptions& o,    \
                 EventCounts* c) {                                                            \
    if (!detail::fast_round_f32(f, in, out, n, o, c))                                         \
      detail::reference_round_f32(f, in, out, n, o, c);                                       \
  }                                                                                           \
  void decode_f32(const Format& f, const T* in, float* out, size_t n) {                       \
    if (!detail::fast_decode_f32(f, in, out, n)) detail::reference_decode_f32(f, in, out, n); \
  }                                                                                           \
  void binary(BinaryOp op, const Format& f, const T* a, const T* b, T* out, size_t n,         \
              const BulkOptions& o, EventCounts* c) {                                         \
    if (!detail::fast_binary(op, f, a, b, out, n, o, c))                                      \
      detail::reference_binary(op, f, a, b, out, n, o, c);                                    \
  }                                                                                           \
  void fma(const Format& f, const T* a, const T* b, const T* cc, T* out, size_t n,            \
           const BulkOptions& o, EventCounts* c) {                                            \
    if (!detail::fast_fma(f, a, b, cc, out, n, o, c))                                         \
      detail::reference_fma(f, a, b, cc, out, n, o, c);                                       \
  }

HALFWAY_BULK_ENTRY_POINTS(uint8_t)
HALFWAY_BULK_ENTRY_POINTS(uint16_t)
HALFWAY_BULK_ENTRY_POINTS(uint32_t)
#undef HALFWAY_BULK_ENTRY_POINTS

void sr_bits(const BulkOptions& o, uint32_t* out, size_t n) {
  if (detail::fast_sr_bits(o, out, n)) return;
  for (size_t i = 0; i < n; ++i)
    out[i] = sr_random(o.seed, o.subsequence, o.offset + i, o.random_bits, o.pack_random_bits);
}

void quantize_f32(const Format& f, const float* in, float* out, size_t n, const BulkOptions& o,
                  EventCounts* c) {
  if (!detail::fast_quantize_f32(f, in, out, n, o, c))
    detail::reference_quantize_f32(f, in, out, n, o, c);
}

}  // namespace halfway
