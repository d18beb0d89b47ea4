// The extension module `halfway._halfway`: numpy arrays in, numpy arrays out. Values are
// rounded by the bulk kernels (bulk.hpp) where they offer the call, otherwise element by
// element with the scalar routines (softfloat.hpp), which the bulk kernels equal bit for bit.
// Every loop runs without the GIL. The user-facing documentation is docs/python.md.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "halfway/cpu.hpp"
#include "halfway/blocks.hpp"
#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#if HALFWAY_PY_SIM
#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/analyze.hpp"
#include "halfway/sim/bisect.hpp"
#include "halfway/sim/block_quant.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/fp8.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/sim/optim.hpp"
#include "halfway/sim/policy.hpp"
#include "halfway/sim/precision.hpp"
#include "halfway/sim/tracer.hpp"
#include "halfway/sim/trainer.hpp"
#endif

namespace py = pybind11;
using namespace halfway;

namespace {

// ---------------------------------------------------------------------------------------------
// Arguments

py::module_& np() {
  // Never destroyed: a static py::object would be released after the interpreter is gone.
  static py::module_* m = new py::module_(py::module_::import("numpy"));
  return *m;
}

std::string type_name(py::handle h) { return py::str(py::type::of(h).attr("__name__")); }

Format to_format(py::handle fmt) {
  if (py::isinstance<Format>(fmt)) return fmt.cast<Format>();
  if (py::isinstance<py::str>(fmt)) return parse_format(fmt.cast<std::string>());
  throw py::type_error("format must be a name such as 'fp16' or a halfway.Format, not " +
                       type_name(fmt));
}

/// A non-negative integer below 2^64 (Python int or numpy integer).
uint64_t to_u64(py::handle v, const char* what) {
  PyObject* idx = PyNumber_Index(v.ptr());
  if (!idx) {
    PyErr_Clear();
    throw py::type_error(std::string(what) + " must be an integer, not " + type_name(v));
  }
  const unsigned long long x = PyLong_AsUnsignedLongLong(idx);
  Py_DECREF(idx);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " must be an integer in [0, 2**64), got " +
                          std::string(py::str(v)));
  }
  return x;
}

/// The format with the keyword overrides applied, and the rounding options.
struct Spec {
  Format f;
  BulkOptions o;
};

Spec make_spec(py::handle fmt, const std::string& rounding, bool saturate, bool subnormals,
               py::handle seed, py::handle offset, const std::string& tininess,
               int random_bits = kSrRandomBits, bool pack_random_bits = false) {
  Spec s;
  s.f = to_format(fmt);
  if (saturate) s.f.overflow = Overflow::saturate;
  if (!subnormals) s.f.ftz = s.f.daz = true;
  validate(s.f);
  s.o.rounding = parse_rounding(rounding);
  if (tininess == "after" || tininess == "after_rounding") {
    s.o.tininess = Tininess::after_rounding;
  } else if (tininess == "before" || tininess == "before_rounding") {
    s.o.tininess = Tininess::before_rounding;
  } else {
    throw InputError("unknown tininess '" + tininess + "' (after, before)");
  }
  if (seed.is_none()) {
    if (s.o.rounding == Rounding::stochastic)
      throw InputError("stochastic rounding needs seed=<int>, so that results can be reproduced");
  } else {
    s.o.seed = to_u64(seed, "seed");
  }
  s.o.offset = to_u64(offset, "offset");
  if (random_bits < 1 || random_bits > 32)
    throw InputError("random_bits must be in 1..32, not " + std::to_string(random_bits));
  s.o.random_bits = random_bits;
  s.o.pack_random_bits = pack_random_bits;
  return s;
}

/// The input as an ndarray; `scalar` says it was a Python or numpy scalar (results are then
/// scalars too). Python numbers and sequences become arrays of `default_dtype`.
py::array as_array(py::handle a, const char* default_dtype, bool& scalar) {
  if (py::isinstance<py::array>(a)) {
    scalar = false;
    return py::reinterpret_borrow<py::array>(a);
  }
  py::array arr = py::isinstance(a, np().attr("generic"))
                      ? np().attr("asarray")(a)
                      : np().attr("asarray")(a, py::arg("dtype") = default_dtype);
  scalar = arr.ndim() == 0;
  return arr;
}

std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()); }

/// float32 or float64 values; anything else is a TypeError.
struct FloatInput {
  py::array arr;
  bool f64 = false;
  bool scalar = false;
};

FloatInput float_input(py::handle a, const char* fn) {
  FloatInput in;
  py::array arr = as_array(a, "float64", in.scalar);
  const char kind = arr.dtype().kind();
  const auto size = arr.dtype().itemsize();
  if (kind != 'f' || (size != 4 && size != 8))
    throw py::type_error(std::string("halfway.") + fn +
                         ": expected float32 or float64 values, got " + dtype_name(arr) +
                         " (convert with .astype(np.float32))");
  in.f64 = size == 8;
  if (in.f64)
    in.arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(arr);
  else
    in.arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(arr);
  return in;
}

/// Integer encodings of `f`: values must fit in f.nbits() bits (a ValueError names the first
/// that does not). Returned C-contiguous, as T.
template <class T>
py::array_t<T> enc_input(py::handle a, const Format& f, const char* fn, const char* name,
                         bool& scalar) {
  py::array arr = as_array(a, "int64", scalar);
  const char kind = arr.dtype().kind();
  if (kind != 'u' && kind != 'i')
    throw py::type_error(std::string("halfway.") + fn + ": expected integer encodings for " +
                         name + ", got " + dtype_name(arr) +
                         " (use halfway.encode to turn values into encodings)");
  const bool fits = kind == 'u' && arr.dtype().itemsize() * 8 <= f.nbits();
  if (!fits && arr.size() > 0) {
    py::object bad = arr.attr("__lt__")(0).attr("__or__")(arr.attr("__gt__")(f.enc_mask()));
    if (bad.attr("any")().cast<bool>()) {
      const py::ssize_t i = np().attr("flatnonzero")(bad).attr("__getitem__")(0).cast<py::ssize_t>();
      py::object v = arr.attr("flat").attr("__getitem__")(i);
      const std::string index =
          arr.ndim() == 0 ? std::string(name) : std::string(name) + "[" + std::to_string(i) + "]";
      throw py::value_error(std::string("halfway.") + fn + ": " + index + " = " +
                            std::string(py::str(v)) + " is not an encoding of " +
                            format_name(f) + " (" + std::to_string(f.nbits()) + " bits)");
    }
  }
  return py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(arr);
}

/// Call `body` with a value of the unsigned type that holds f's encodings.
template <class Body>
py::object with_enc_type(const Format& f, Body&& body) {
  if (f.nbits() <= 8) return body(uint8_t{});
  if (f.nbits() <= 16) return body(uint16_t{});
  return body(uint32_t{});
}

py::object scalar_or_array(py::array a, bool scalar) {
  if (scalar) return a.attr("__getitem__")(py::tuple());
  return a;
}

/// result; (result, flags); (result, counts); (result, flags, counts).
py::object finish(py::array result, std::optional<py::array> flags,
                  std::optional<EventCounts> counts, bool scalar) {
  py::object r = scalar_or_array(std::move(result), scalar);
  if (!flags && !counts) return r;
  py::list out;
  out.append(r);
  if (flags) out.append(scalar_or_array(*flags, scalar));
  if (counts) out.append(py::cast(*counts));
  return py::tuple(out);
}

bool finite_nonzero_f32(uint32_t b) {
  return (b & 0x7FFFFFFFu) != 0 && (b & 0x7F800000u) != 0x7F800000u;
}
bool finite_nonzero_f64(uint64_t b) {
  return (b & 0x7FFFFFFFFFFFFFFFull) != 0 &&
         (b & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}

// ---------------------------------------------------------------------------------------------
// round / encode / decode

/// The result array of `fn`: a new one of `shape`, or the caller's `out` (numpy's convention:
/// a C-contiguous, writeable ndarray of exactly T's dtype and that shape, written in place and
/// returned; it may share memory with the input). TypeError or ValueError naming `out`
/// otherwise, and for a scalar input (`scalar`), whose result is a scalar.
template <class T>
py::array_t<T> output_array(py::handle out, const std::vector<py::ssize_t>& shape, const char* fn,
                            bool scalar = false) {
  if (out.is_none()) return py::array_t<T>(shape);
  const std::string what = std::string("halfway.") + fn + ": out";
  if (scalar) throw py::value_error(what + " needs an array input, not a scalar");
  if (!py::isinstance<py::array>(out))
    throw py::type_error(what + " must be a numpy.ndarray, not " +
                         std::string(py::str(py::type::handle_of(out).attr("__name__"))));
  const py::array a = py::reinterpret_borrow<py::array>(out);
  const py::dtype want = py::dtype::of<T>();
  if (!a.dtype().is(want))
    throw py::type_error(what + " must have dtype " + std::string(py::str(want)) + ", not " +
                         std::string(py::str(a.dtype())));
  if (shape_of(a) != shape)
    throw py::value_error(what + " has shape " + std::string(py::str(a.attr("shape"))) +
                          "; the result's is " + std::string(py::str(py::tuple(py::cast(shape)))));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(what + " must be C-contiguous");
  if (!a.writeable()) throw py::value_error(what + " is read-only");
  return py::reinterpret_borrow<py::array_t<T>>(out);
}

/// Whether the memory of two C-contiguous arrays meets.
bool overlaps(const py::array& a, const py::array& b) {
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

/// Runs `kernel(dst)`, which reads `in` and writes the result at dst, without the GIL. dst is
/// `out` itself unless `out` shares memory with `in` other than element for element in place
/// (the same address and dtype): then a new array, copied into `out` after, so that a result
/// never depends on how the caller's arrays overlap (numpy's ufuncs do the same).
template <class T, class Kernel>
void write_result(const py::array& in, py::array_t<T>& out, Kernel&& kernel) {
  const bool in_place = in.data() == out.data() && in.dtype().is(out.dtype());
  std::optional<py::array_t<T>> tmp;
  if (!in_place && overlaps(in, out)) tmp.emplace(shape_of(out));
  T* po = out.mutable_data();
  T* dst = tmp ? tmp->mutable_data() : po;
  const size_t n = static_cast<size_t>(out.size());
  py::gil_scoped_release release;
  kernel(dst);
  if (tmp) std::copy_n(dst, n, po);
}

/// Values → encodings (Out = encoding type) or → float32 values exactly representable
/// (Out = float). float32 input without per-element flags takes the bulk kernels.
template <class Out>
py::object convert(const char* fn, py::handle a, py::handle fmt, const std::string& rounding,
                   bool saturate, bool subnormals, py::handle seed, py::handle offset,
                   const std::string& tininess, bool want_flags, bool want_counts,
                   int random_bits = kSrRandomBits, py::handle out_arg = py::none(),
                   bool pack_random_bits = false) {
  const Spec s = make_spec(fmt, rounding, saturate, subnormals, seed, offset, tininess,
                           random_bits, pack_random_bits);
  const FloatInput in = float_input(a, fn);
  const auto shape = shape_of(in.arr);
  py::array_t<Out> out = output_array<Out>(out_arg, shape, fn, in.scalar);
  std::optional<py::array> flags;
  if (want_flags) flags = py::array_t<uint8_t>(shape);
  EventCounts counts;
  const size_t n = static_cast<size_t>(in.arr.size());
  uint8_t* pf = flags ? static_cast<uint8_t*>(flags->mutable_data()) : nullptr;
  EventCounts* pc = want_counts ? &counts : nullptr;
  const Format& f = s.f;
  const void* pin = in.arr.data();
  write_result(in.arr, out, [&](Out* po) {
    if (!in.f64 && !pf) {
      const float* pi = static_cast<const float*>(pin);
      if constexpr (std::is_same_v<Out, float>)
        quantize_f32(f, pi, po, n, s.o, pc);
      else
        round_f32(f, pi, po, n, s.o, pc);
    } else {
      // float64 input is rounded in one step from binary64 (never through binary32, which
      // would round twice); per-element flags need the scalar routines.
      for (size_t i = 0; i < n; ++i) {
        Env e = element_env(s.o, i);
        uint32_t r;
        bool exact_nonzero;
        if (in.f64) {
          const uint64_t b = f64_bits(static_cast<const double*>(pin)[i]);
          r = from_f64(f, bits_f64(b), e);
          exact_nonzero = finite_nonzero_f64(b);
        } else {
          const uint32_t b = f32_bits(static_cast<const float*>(pin)[i]);
          r = from_f32_bits(f, b, e);
          exact_nonzero = finite_nonzero_f32(b);
        }
        if constexpr (std::is_same_v<Out, float>) {
          Env d;
          po[i] = to_f32(f, r, d);
        } else {
          po[i] = static_cast<Out>(r);
        }
        if (pf) pf[i] = e.flags;
        if (pc) count_event(f, r, exact_nonzero, e.flags, *pc);
      }
    }
  });
  return finish(out, flags, want_counts ? std::optional<EventCounts>(counts) : std::nullopt,
                in.scalar);
}

py::object round_values(py::handle a, py::handle fmt, const std::string& rounding, bool saturate,
                        bool subnormals, py::handle seed, py::handle offset,
                        const std::string& tininess, bool flags, bool counts, int random_bits,
                        bool pack_random_bits, py::handle out) {
  return convert<float>("round", a, fmt, rounding, saturate, subnormals, seed, offset, tininess,
                        flags, counts, random_bits, out, pack_random_bits);
}

py::object encode(py::handle a, py::handle fmt, const std::string& rounding, bool saturate,
                  bool subnormals, py::handle seed, py::handle offset, const std::string& tininess,
                  bool flags, bool counts, py::handle out) {
  const Format f = to_format(fmt);
  return with_enc_type(f, [&](auto t) {
    return convert<decltype(t)>("encode", a, fmt, rounding, saturate, subnormals, seed, offset,
                                tininess, flags, counts, kSrRandomBits, out);
  });
}

py::object decode(py::handle bits, py::handle fmt, bool subnormals, py::handle out_arg) {
  Format f = to_format(fmt);
  if (!subnormals) f.daz = f.ftz = true;
  validate(f);
  return with_enc_type(f, [&](auto t) -> py::object {
    using T = decltype(t);
    bool scalar = false;
    const py::array_t<T> in = enc_input<T>(bits, f, "decode", "bits", scalar);
    py::array_t<float> out = output_array<float>(out_arg, shape_of(in), "decode", scalar);
    const T* pi = in.data();
    const size_t n = static_cast<size_t>(in.size());
    write_result(in, out, [&](float* po) { decode_f32(f, pi, po, n); });
    return scalar_or_array(out, scalar);
  });
}

// ---------------------------------------------------------------------------------------------
// Arithmetic on encodings

enum class Op { add, sub, mul, div, fma, sqrt };

const char* op_name(Op op) {
  switch (op) {
    case Op::add: return "add";
    case Op::sub: return "sub";
    case Op::mul: return "mul";
    case Op::div: return "div";
    case Op::fma: return "fma";
    default: return "sqrt";
  }
}

template <class T>
uint32_t apply(Op op, const Format& f, const T* const* in, size_t i, Env& e) {
  switch (op) {
    case Op::add: return halfway::add(f, in[0][i], in[1][i], e);
    case Op::sub: return halfway::sub(f, in[0][i], in[1][i], e);
    case Op::mul: return halfway::mul(f, in[0][i], in[1][i], e);
    case Op::div: return halfway::div(f, in[0][i], in[1][i], e);
    case Op::fma: return halfway::fma(f, in[0][i], in[1][i], in[2][i], e);
    default: return halfway::sqrt(f, in[0][i], e);
  }
}

py::object arith(Op op, const std::vector<py::handle>& operands, py::handle fmt,
                 const std::string& rounding, bool saturate, bool subnormals, py::handle seed,
                 py::handle offset, const std::string& tininess, bool want_flags,
                 bool want_counts) {
  const Spec s = make_spec(fmt, rounding, saturate, subnormals, seed, offset, tininess);
  const Format& f = s.f;
  return with_enc_type(f, [&](auto t) -> py::object {
    using T = decltype(t);
    static const char* names[] = {"a", "b", "c"};
    bool all_scalar = true;
    py::list arrays;
    for (size_t k = 0; k < operands.size(); ++k) {
      bool scalar = false;
      arrays.append(enc_input<T>(operands[k], f, op_name(op), names[k], scalar));
      all_scalar = all_scalar && scalar;
    }
    if (operands.size() > 1) {
      try {
        arrays = py::list(np().attr("broadcast_arrays")(*arrays));
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_ValueError)) throw;
        std::string shapes;
        for (auto a : arrays) shapes += (shapes.empty() ? "" : ", ") + std::string(py::str(a.attr("shape")));
        throw py::value_error(std::string("halfway.") + op_name(op) +
                              ": operands could not be broadcast together with shapes " + shapes);
      }
    }
    std::vector<py::array_t<T>> in;
    for (auto a : arrays)
      in.push_back(py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a));
    const auto shape = shape_of(in[0]);
    py::array_t<T> out(shape);
    std::optional<py::array> flags;
    if (want_flags) flags = py::array_t<uint8_t>(shape);
    EventCounts counts;
    const T* ptrs[3] = {nullptr, nullptr, nullptr};
    for (size_t k = 0; k < in.size(); ++k) ptrs[k] = in[k].data();
    T* po = out.mutable_data();
    uint8_t* pf = flags ? static_cast<uint8_t*>(flags->mutable_data()) : nullptr;
    EventCounts* pc = want_counts ? &counts : nullptr;
    const size_t n = static_cast<size_t>(in[0].size());
    {
      py::gil_scoped_release release;
      if (!pf && op != Op::sqrt) {
        if (op == Op::fma) {
          halfway::fma(f, ptrs[0], ptrs[1], ptrs[2], po, n, s.o, pc);
        } else {
          const BinaryOp b = op == Op::add   ? BinaryOp::add
                             : op == Op::sub ? BinaryOp::sub
                             : op == Op::mul ? BinaryOp::mul
                                             : BinaryOp::div;
          binary(b, f, ptrs[0], ptrs[1], po, n, s.o, pc);
        }
      } else {
        for (size_t i = 0; i < n; ++i) {
          Env e = element_env(s.o, i);
          const uint32_t r = apply(op, f, ptrs, i, e);
          po[i] = static_cast<T>(r);
          if (pf) pf[i] = e.flags;
          // A zero result of a non-zero exact value is always inexact: the inexact flag tells
          // count_event what it needs (as in the bulk kernels).
          if (pc) count_event(f, r, (e.flags & flag::inexact) != 0, e.flags, *pc);
        }
      }
    }
    return finish(out, flags, want_counts ? std::optional<EventCounts>(counts) : std::nullopt,
                  all_scalar);
  });
}

// ---------------------------------------------------------------------------------------------
// Block quantization (blocks.hpp): 2-D float32 tensors to element codes and block scales

BlockAxis to_axis(int axis, const char* fn) {
  if (axis == -1 || axis == 1) return BlockAxis::last;
  if (axis == 0 || axis == -2) return BlockAxis::first;
  throw py::value_error(std::string("halfway.") + fn + ": axis must be 1 (-1), the last, or 0 " +
                        "(-2), the first, not " + std::to_string(axis));
}

BlockOptions block_options(const BlockScheme& s, int axis, const std::string& rounding,
                           int random_bits, bool pack_random_bits, py::handle seed,
                           py::handle offset, bool rht, bool pow2_scales, const char* fn) {
  BlockOptions o;
  o.axis = to_axis(axis, fn);
  o.rounding = parse_rounding(rounding);
  if (random_bits < 1 || random_bits > 32)
    throw py::value_error(std::string("halfway.") + fn + ": random_bits must be in 1..32, not " +
                          std::to_string(random_bits));
  o.random_bits = random_bits;
  o.pack_random_bits = pack_random_bits;
  if (o.rounding == Rounding::stochastic) {
    if (seed.is_none())
      throw InputError("stochastic rounding needs seed=<int>, so that results can be reproduced");
    o.seed = to_u64(seed, "seed");
  }
  o.offset = to_u64(offset, "offset");
  o.rht = rht;
  o.pow2_scales = pow2_scales;
  o.per_block_events = true;
  (void)s;
  return o;
}

/// A 2-D C-contiguous array of T; `what` names it in errors.
template <class T>
py::array_t<T> matrix_input(py::handle a, const char* fn, const char* what, const char* dtype) {
  if (!py::isinstance<py::array>(a))
    throw py::type_error(std::string("halfway.") + fn + ": " + what + " must be a 2-D numpy " +
                         dtype + " array, not " + type_name(a));
  py::array arr = py::reinterpret_borrow<py::array>(a);
  if (!arr.dtype().is(py::dtype::of<T>()))
    throw py::type_error(std::string("halfway.") + fn + ": " + what + " must be " + dtype +
                         ", got " + dtype_name(arr) + " (convert with .astype(np." + dtype + "))");
  if (arr.ndim() != 2)
    throw py::value_error(std::string("halfway.") + fn + ": " + what + " must be 2-D, got " +
                          std::to_string(arr.ndim()) + "-D");
  return py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(arr);
}

py::dict block_counts(const BlockEncoding& e) {
  py::dict d;
  d["elements"] = e.events.elements;
  d["blocks"] = e.events.blocks;
  d["saturated"] = e.events.saturated;
  d["flushed"] = e.events.flushed;
  d["scales_clamped"] = e.events.scales_clamped;
  d["scales_clamped_harmless"] = e.events.scales_clamped_harmless;
  d["nan_scales"] = e.events.nan_scales;
  const std::vector<py::ssize_t> shape{py::ssize_t(e.scale_rows()), py::ssize_t(e.scale_cols())};
  py::array_t<uint32_t> sat(shape), fl(shape);
  py::array_t<bool> clamped(shape), harmless(shape);
  for (size_t b = 0; b < e.block_events.size(); ++b) {
    sat.mutable_data()[b] = uint32_t(e.block_events[b].saturated);
    fl.mutable_data()[b] = uint32_t(e.block_events[b].flushed);
    clamped.mutable_data()[b] = e.block_events[b].scales_clamped != 0;
    harmless.mutable_data()[b] = e.block_events[b].scales_clamped_harmless != 0;
  }
  d["block_saturated"] = sat;
  d["block_flushed"] = fl;
  d["block_scales_clamped"] = clamped;
  d["block_scales_clamped_harmless"] = harmless;
  return d;
}

/// x's encoding; with `pad`, of x zero-padded to whole blocks (padded_shape, pad_blocks: the
/// simulator's rule), else a shape that does not divide into blocks is refused.
BlockEncoding encode_matrix(const BlockScheme& s, py::handle x, const BlockOptions& o, bool pad,
                            const char* fn) {
  const py::array_t<float> in = matrix_input<float>(x, fn, "x", "float32");
  const size_t rows = size_t(in.shape(0)), cols = size_t(in.shape(1));
  const auto [prows, pcols] = pad ? padded_shape(s, o.axis, rows, cols)
                                  : std::pair<size_t, size_t>{rows, cols};
  check_blocks(s, prows, pcols, o);
  const float* p = in.data();
  py::gil_scoped_release release;
  if (prows == rows && pcols == cols) return encode_blocks(s, p, rows, cols, o);
  std::vector<float> padded(prows * pcols);
  pad_blocks(p, rows, cols, padded.data(), prows, pcols);
  return encode_blocks(s, padded.data(), prows, pcols, o);
}

py::object encode_blocks_py(py::handle x, const std::string& scheme, int axis,
                            const std::string& rounding, int random_bits,
                            bool pack_random_bits, py::handle seed, py::handle offset, bool rht,
                            bool pow2_scales, bool pad, bool counts) {
  const BlockScheme s = parse_block_scheme(scheme);
  const BlockOptions o = block_options(s, axis, rounding, random_bits, pack_random_bits, seed,
                                       offset, rht, pow2_scales, "encode_blocks");
  const BlockEncoding e = encode_matrix(s, x, o, pad, "encode_blocks");
  py::array_t<uint8_t> codes({py::ssize_t(e.rows), py::ssize_t(e.cols)});
  std::copy(e.codes.begin(), e.codes.end(), codes.mutable_data());
  const std::vector<py::ssize_t> sshape{py::ssize_t(e.scale_rows()), py::ssize_t(e.scale_cols())};
  py::object scales;
  if (s.fp32_scales()) {
    py::array_t<float> v(sshape);
    std::copy(e.scales.begin(), e.scales.end(), v.mutable_data());
    scales = v;
  } else {
    py::array_t<uint8_t> v(sshape);
    std::copy(e.scale_codes.begin(), e.scale_codes.end(), v.mutable_data());
    scales = v;
  }
  py::object global = py::none();
  if (e.global_scale) {
    global = np().attr("float32")(*e.global_scale);
  } else if (s.has_line_scales()) {  // row-scaled: one per row (axis -1) or column (axis 0)
    py::array_t<float> g(py::ssize_t(e.global_scales.size()));
    std::copy(e.global_scales.begin(), e.global_scales.end(), g.mutable_data());
    global = g;
  }
  if (counts) return py::make_tuple(codes, scales, global, block_counts(e));
  return py::make_tuple(codes, scales, global);
}

py::object decode_blocks_py(py::handle codes, py::handle scales, py::handle global,
                            const std::string& scheme, py::handle axis_arg, py::handle out_arg) {
  const BlockScheme s = parse_block_scheme(scheme);
  const py::array_t<uint8_t> c = matrix_input<uint8_t>(codes, "decode_blocks", "codes", "uint8");
  BlockEncoding e;
  e.rows = size_t(c.shape(0));
  e.cols = size_t(c.shape(1));
  const bool fp8 = s.fp32_scales();
  py::array sc = fp8 ? py::array(matrix_input<float>(scales, "decode_blocks", "scales", "float32"))
                     : py::array(matrix_input<uint8_t>(scales, "decode_blocks", "scales", "uint8"));
  const size_t srows = size_t(sc.shape(0)), scols = size_t(sc.shape(1));
  if (axis_arg.is_none()) {
    // The scales' shape tells the axis of 1-D blocks: [rows, cols/k] or [rows/k, cols].
    e.axis = BlockAxis::last;
    const auto [fr, fc] = block_tile(s, BlockAxis::first, e.rows, e.cols);
    if (!s.two_d && srows * fr == e.rows && scols * fc == e.cols) e.axis = BlockAxis::first;
  } else {
    e.axis = to_axis(axis_arg.cast<int>(), "decode_blocks");
  }
  const auto [tr, tc] = block_tile(s, e.axis, e.rows, e.cols);
  e.tile_rows = tr;
  e.tile_cols = tc;
  if (e.rows % tr || e.cols % tc || srows != e.rows / tr || scols != e.cols / tc)
    throw py::value_error("halfway.decode_blocks: " + s.name + " codes of shape [" +
                          std::to_string(e.rows) + ", " + std::to_string(e.cols) +
                          "] need scales of shape [" + std::to_string(e.rows / tr) + ", " +
                          std::to_string(e.cols / tc) + "], got [" + std::to_string(srows) +
                          ", " + std::to_string(scols) + "]");
  e.codes.assign(c.data(), c.data() + c.size());
  if (fp8) {
    const float* p = static_cast<const float*>(sc.data());
    e.scales.assign(p, p + sc.size());
  } else {
    const uint8_t* p = static_cast<const uint8_t*>(sc.data());
    e.scale_codes.assign(p, p + sc.size());
  }
  if (!global.is_none()) {
    if (s.has_line_scales()) {  // row-scaled: a 1-D float32 array, one per row or column
      const size_t lines = e.axis == BlockAxis::last ? e.rows : e.cols;
      const py::array g = np().attr("asarray")(global);
      if (!g.dtype().is(py::dtype::of<float>()) || g.ndim() != 1 || size_t(g.shape(0)) != lines)
        throw py::value_error("halfway.decode_blocks: " + s.name + " needs its " +
                              std::to_string(lines) + " global scales, one per " +
                              (e.axis == BlockAxis::last ? "row" : "column") +
                              ", as a 1-D float32 array");
      const auto gf = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(g);
      e.global_scales.assign(gf.data(), gf.data() + lines);
    } else if (!s.has_global_scale()) {
      throw py::value_error("halfway.decode_blocks: " + s.name + " has no global scale (pass None)");
    } else {
      if (np().attr("ndim")(global).cast<int>() != 0)
        throw py::value_error("halfway.decode_blocks: " + s.name + " takes one global scale (a "
                              "scalar), not an array (row-scaled nvfp4 takes one per row)");
      e.global_scale = np().attr("float32")(global).cast<float>();
    }
  } else if (s.has_global_scale() || s.has_line_scales()) {
    throw py::value_error("halfway.decode_blocks: " + s.name + " needs its global scale");
  }
  // e holds copies of the codes and scales: out may share memory with them.
  py::array_t<float> out =
      output_array<float>(out_arg, {py::ssize_t(e.rows), py::ssize_t(e.cols)}, "decode_blocks");
  float* po = out.mutable_data();
  {
    py::gil_scoped_release release;
    decode_blocks(s, e, po);
  }
  return out;
}

py::object quantize_blocks_py(py::handle x, const std::string& scheme, int axis,
                              const std::string& rounding, int random_bits,
                              bool pack_random_bits, py::handle seed, py::handle offset, bool rht,
                              bool pow2_scales, bool pad, bool counts, py::handle out_arg) {
  const BlockScheme s = parse_block_scheme(scheme);
  const BlockOptions o = block_options(s, axis, rounding, random_bits, pack_random_bits, seed,
                                       offset, rht, pow2_scales, "quantize_blocks");
  const BlockEncoding e = encode_matrix(s, x, o, pad, "quantize_blocks");
  // x's shape: with pad, the padding's values are left out.
  const py::array in = py::reinterpret_borrow<py::array>(x);
  const size_t rows = size_t(in.shape(0)), cols = size_t(in.shape(1));
  py::array_t<float> out =
      output_array<float>(out_arg, {py::ssize_t(rows), py::ssize_t(cols)}, "quantize_blocks");
  float* po = out.mutable_data();
  {
    py::gil_scoped_release release;
    if (rows == e.rows && cols == e.cols) {
      decode_blocks(s, e, po);
    } else {
      std::vector<float> all(e.rows * e.cols);
      decode_blocks(s, e, all.data());
      for (size_t r = 0; r < rows; ++r)
        std::copy_n(all.data() + r * e.cols, cols, po + r * cols);
    }
  }
  if (counts) return py::make_tuple(out, block_counts(e));
  return out;
}

// ---------------------------------------------------------------------------------------------
// finfo

py::dict finfo_fields(py::handle fmt) {
  const Format f = to_format(fmt);
  // Values of the encodings, read without the flush/DAZ modes (a DAZ format still has its
  // subnormal encodings; finfo describes the encodings).
  Format plain = f;
  plain.ftz = plain.daz = false;
  auto value = [&](uint32_t enc) -> py::object {
    Env e;
    return np().attr("float32")(to_f32(plain, enc, e));
  };
  auto opt = [](bool has, uint32_t enc) -> py::object {
    return has ? py::object(py::int_(enc)) : py::object(py::none());
  };
  const int m = f.frac_bits;
  const uint32_t smallest_normal = f.has_zero ? (uint32_t(1) << m) : 0;
  const bool has_subnormals = f.has_zero && m > 0;
  const uint32_t min_enc = f.is_signed ? (f.sign_bit() | f.max_mag()) : 0;
  // numpy: precision = int(-log10(eps)), resolution = 10**-precision in the format.
  const int precision = static_cast<int>(std::floor(m * std::log10(2.0)));
  Env re;
  const uint32_t resolution = from_f64(plain, std::pow(10.0, -precision), re);
  Env oe;
  const uint32_t one = from_f64(plain, 1.0, oe);
  const char* enc_dtype = f.nbits() <= 8 ? "uint8" : f.nbits() <= 16 ? "uint16" : "uint32";

  py::dict d;
  d["name"] = format_name(f);
  d["dtype"] = np().attr("dtype")("float32");
  d["encoding_dtype"] = np().attr("dtype")(enc_dtype);
  d["bits"] = f.nbits();
  d["nexp"] = int(f.exp_bits);
  d["iexp"] = int(f.exp_bits);
  d["nmant"] = m;
  d["machep"] = -m;
  d["negep"] = -(m + 1);
  d["eps"] = np().attr("float32")(std::ldexp(1.0, -m));
  d["epsneg"] = np().attr("float32")(std::ldexp(1.0, -(m + 1)));
  d["max"] = value(f.max_mag());
  d["min"] = value(min_enc);
  d["tiny"] = value(smallest_normal);
  d["smallest_normal"] = value(smallest_normal);
  d["smallest_subnormal"] = has_subnormals ? value(1) : py::object(py::none());
  d["maxexp"] = f.emax() + 1;
  d["minexp"] = f.emin();
  d["precision"] = precision;
  d["resolution"] = value(resolution);
  d["bias"] = int(f.bias);
  d["emin"] = f.emin();
  d["emax"] = f.emax();
  d["specials"] = specials_name(f.specials);
  d["overflow"] = overflow_name(f.overflow);
  d["ftz"] = f.ftz;
  d["daz"] = f.daz;
  d["signed"] = f.is_signed;
  d["has_zero"] = f.has_zero;
  d["has_inf"] = f.has_inf();
  d["has_nan"] = f.has_nan();
  d["inf_bits"] = opt(f.has_inf(), f.inf_mag());
  d["neg_inf_bits"] = opt(f.has_inf(), f.sign_bit() | f.inf_mag());
  d["nan_bits"] = opt(f.has_nan(), f.default_nan());
  d["max_bits"] = py::int_(f.max_mag());
  d["min_bits"] = py::int_(min_enc);
  d["smallest_normal_bits"] = py::int_(smallest_normal);
  d["smallest_subnormal_bits"] = opt(has_subnormals, 1);
  d["zero_bits"] = opt(f.has_zero, 0);
  d["neg_zero_bits"] = opt(f.has_zero && f.has_neg_zero(), f.sign_bit());
  d["one_bits"] = opt(oe.flags == 0, one);
  return d;
}

// ---------------------------------------------------------------------------------------------
// The simulator: one configuration to result files (the Python side reads them into pandas).

#if HALFWAY_PY_SIM
void train_to_dir(const std::string& config, bool is_text, const std::string& base_dir,
                  const std::string& out_dir, int threads, const std::string& max_memory) {
  if (threads < 1) throw InputError("threads must be at least 1");
  uint64_t limit = 0;
  try {
    limit = max_memory.empty() ? 0 : sim::parse_memory_size(max_memory);
  } catch (const InputError& e) {
    throw InputError(std::string("halfway.train: max_memory: ") + e.what());
  }
  const sim::TrainConfig c = is_text ? sim::parse_config(config, base_dir, "config")
                                     : sim::parse_config_file(config);
  sim::TrainOptions o;
  o.threads = threads;
  o.max_memory = limit;
  py::gil_scoped_release release;
  sim::write_run(c, out_dir, o);
}

sim::TraceKind kind_from_name(const std::string& k) {
  for (auto v : {sim::TraceKind::activation, sim::TraceKind::weight, sim::TraceKind::activation_grad,
                 sim::TraceKind::weight_grad, sim::TraceKind::update, sim::TraceKind::tensor})
    if (k == sim::kind_name(v)) return v;
  throw InputError("unknown tensor kind '" + k + "'");
}

/// halfway.analyze and halfway.torch: an analysis run folder fed tensor by tensor, chunk by
/// chunk (analyze.hpp). Chunks are float32 arrays; the Python side converts other dtypes.
void bind_analysis_run(py::module_& m) {
  using sim::AnalysisRun;
  py::class_<AnalysisRun>(m, "_AnalysisRun")
      .def(py::init([](const std::string& dir, const std::string& formats, int k_min, int k_max,
                       double tolerance, bool steps_csv, bool tensor_windows, int axis,
                       bool per_block, uint64_t max_rows, size_t block_chunk) {
             sim::AnalyzeOptions o;
             std::tie(o.k_min, o.k_max) =
                 sim::parse_scale_range(std::to_string(k_min) + ".." + std::to_string(k_max));
             o.flush_tolerance = tolerance;
             o.axis = axis;
             o.per_block = per_block;
             o.max_detail_rows = max_rows;
             o.block_chunk = block_chunk;
             return std::make_unique<AnalysisRun>(dir, sim::parse_analysis_formats(formats), o,
                                                  steps_csv, tensor_windows);
           }),
           py::arg("dir"), py::arg("formats"), py::arg("k_min"), py::arg("k_max"),
           py::arg("tolerance"), py::arg("steps_csv"), py::arg("tensor_windows") = true,
           py::arg("axis") = -1, py::arg("per_block") = false,
           py::arg("max_rows") = sim::AnalyzeOptions{}.max_detail_rows,
           py::arg("block_chunk") = sim::AnalyzeOptions{}.block_chunk)
      .def("tensor",
           [](AnalysisRun& r, const std::string& name, const std::string& kind,
              const std::string& op, double loss_scale, const std::vector<uint64_t>& shape) {
             return r.tensor(name, kind_from_name(kind), op, loss_scale, shape);
           },
           py::arg("name"), py::arg("kind"), py::arg("op"), py::arg("loss_scale") = 1.0,
           py::arg("shape") = std::vector<uint64_t>{})
      .def("add",
           [](AnalysisRun& r, size_t id, py::array_t<float, py::array::c_style> a) {
             const float* p = a.data();
             const size_t n = size_t(a.size());
             py::gil_scoped_release release;
             r.add(id, p, n);
           },
           py::arg("id"), py::arg("values").noconvert())
      .def("end_step",
           [](AnalysisRun& r, int step, double loss, double loss_scale, int found_inf,
              int skipped, double next_scale) {
             sim::StepInfo i;
             i.loss = loss;
             i.loss_scale = loss_scale;
             i.found_inf = found_inf;
             i.skipped = skipped;
             i.next_scale = next_scale;
             r.end_step(step, i);
           },
           py::arg("step"), py::arg("loss") = std::nan(""), py::arg("loss_scale") = 1.0,
           py::arg("found_inf") = -1, py::arg("skipped") = -1,
           py::arg("next_scale") = std::nan(""))
      .def("commit", &AnalysisRun::commit, py::arg("fields_json") = "{}",
           py::arg("tensors_json") = "")
      .def("unpublish", &AnalysisRun::unpublish);
  // The suffix of this process's temporary files (".tmp.PID@HOST"), for files written from
  // Python next to the run's own.
  m.def("_tmp_suffix", [] { return sim::tmp_suffix(); });
  m.def("_remove_stale_tmp_files", &sim::remove_stale_tmp_files, py::arg("dir"),
        py::arg("names"));
  // halfway.torch.trace checks its arguments when it is made and opens its folder on entry.
  m.def("_check_analysis_options",
        [](const std::string& formats, int k_min, int k_max) {
          (void)sim::parse_analysis_formats(formats);
          (void)sim::parse_scale_range(std::to_string(k_min) + ".." + std::to_string(k_max));
        },
        py::arg("formats"), py::arg("k_min"), py::arg("k_max"));
}

// ---------------------------------------------------------------------------------------------
// sim's GEMMs, roundings and operand copies one call at a time: halfway.gemm and the state of
// halfway.torch.emulate (docs/emulate.md). Every number comes from the functions `halfway
// train` runs (accumulate.hpp, context.hpp's rounded, block_quant.hpp, fp8.hpp); this layer only
// moves arrays and names.

sim::Layout to_layout(const std::string& s) {
  if (s == "nn") return sim::Layout::nn;
  if (s == "nt") return sim::Layout::nt;
  if (s == "tn") return sim::Layout::tn;
  throw InputError("unknown layout '" + s + "' (nn, nt, tn)");
}

/// A dtype a GEMM or a rounding can produce here: fp32 or a low-precision format.
sim::DType op_dtype(const std::string& name, const char* fn) {
  const sim::DType dt = sim::parse_dtype(name);
  if (dt.is_f64())
    throw py::value_error(std::string("halfway.") + fn + ": fp64 is not emulated (fp32 or a " +
                          "low-precision format)");
  return dt;
}

/// C = A·B (+ bias) as sim's GEMMs compute it for an op of dtype `dt` (A [m×k], B [k×n],
/// float32 values of dt; `layout` is how a framework holds them, which only torch-cpu reads):
/// the accumulator's values, not yet rounded into dt. With `alpha` (the scaled GEMMs of the fp8
/// and block-scaled recipes) the operands accumulate as fp32 and C = fl32(acc·alpha) (+ bias in
/// fp32), cuBLASLt's epilogue, as sim's gemm_fp8 and gemm_blocks do.
/// Which GEMM of an fp8 linear layer a scaled GEMM is, and its operands' formats.
struct Fp8GemmSpec {
  sim::Fp8Gemm role;
  Format a, b;
};

py::array_t<float> gemm_values(sim::Runtime& rt, const sim::Accumulation& acc,
                               const sim::DType& dt, py::handle a, py::handle b, py::handle bias,
                               sim::Layout layout, std::optional<float> alpha, const char* fn,
                               const std::optional<Fp8GemmSpec>& fp8 = std::nullopt) {
  const py::array_t<float> A = matrix_input<float>(a, fn, "a", "float32");
  const py::array_t<float> B = matrix_input<float>(b, fn, "b", "float32");
  const int64_t m = A.shape(0), k = A.shape(1), n = B.shape(1);
  if (B.shape(0) != k)
    throw py::value_error(std::string("halfway.") + fn + ": a is [" + std::to_string(m) + ", " +
                          std::to_string(k) + "] but b is [" + std::to_string(B.shape(0)) +
                          ", " + std::to_string(n) + "]");
  std::optional<py::array_t<float>> bv;
  if (!bias.is_none()) {
    bv = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(bias);
    if (!bv || !py::isinstance<py::array>(bias) ||
        !py::reinterpret_borrow<py::array>(bias).dtype().is(py::dtype::of<float>()) ||
        bv->ndim() != 1 || bv->shape(0) != n)
      throw py::type_error(std::string("halfway.") + fn + ": bias must be a 1-D float32 array of " +
                           std::to_string(n) + " values");
  }
  const sim::DType gdt = alpha ? sim::DType::f32() : dt;
  Format in = gdt.is_low() ? gdt.fmt : accumulation::kF32;
  const BulkOptions o = sim::next_rounding(rt);
  AccumulationModel model = acc.resolve(gdt, m, n, k, layout, o);
  if (fp8) {  // sim's gemm_fp8: TE's accumulation of this GEMM under the run's name
    model = sim::fp8_gemm_model(acc, fp8->role);
    if (!(model.kind == AccumulationModel::Kind::sequential_fma && model.acc == accumulation::kF32))
      in = sim::fp8_gemm_format(fp8->a, fp8->b);
  }
  py::array_t<float> out({py::ssize_t(m), py::ssize_t(n)});
  const float *pa = A.data(), *pb = B.data(), *pbias = bv ? bv->data() : nullptr;
  float* pc = out.mutable_data();
  const int threads = rt.threads;
  {
    py::gil_scoped_release release;
    sim::gemm(model, in, m, n, k, pa, pb, alpha ? nullptr : pbias, pc, o, threads);
    if (alpha)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float v = pc[i * n + j] * *alpha;
          if (pbias) v = v + pbias[j];
          pc[i * n + j] = v;
        }
  }
  return out;
}

/// Values (float32 or float64) rounded into dt by sim's `rounded` (float64 first to binary32,
/// the op's opmath result, as every sim op does), traced under `tag` when one is given.
py::array_t<float> rounded_values(sim::Runtime& rt, const sim::DType& dt, py::handle x,
                                  const sim::TraceTag* tag, const char* fn) {
  const FloatInput in = float_input(x, fn);
  const size_t n = size_t(in.arr.size());
  py::array_t<float> out(shape_of(in.arr));
  float* po = out.mutable_data();
  const void* pin = in.arr.data();
  {
    py::gil_scoped_release release;
    const sim::Values v = in.f64 ? sim::rounded(rt, dt, static_cast<const double*>(pin), n, tag)
                                 : sim::rounded(rt, dt, static_cast<const float*>(pin), n, tag);
    std::copy(v.f32(), v.f32() + n, po);
  }
  return out;
}

/// halfway.gemm: one GEMM of sim, its output rounded into `dtype`.
py::array_t<float> gemm_py(py::handle a, py::handle b, py::handle bias, const std::string& dtype,
                           const std::string& accumulation, const std::string& layout,
                           const std::string& rounding, py::handle seed, int threads) {
  if (threads < 1) throw py::value_error("halfway.gemm: threads must be at least 1");
  sim::Runtime rt;
  const sim::Accumulation& acc = sim::accumulator_by_name(accumulation);
  rt.rounding.rounding = parse_rounding(rounding);
  if (rt.rounding.rounding == Rounding::stochastic && seed.is_none())
    throw InputError("stochastic rounding needs seed=<int>, so that results can be reproduced");
  if (!seed.is_none()) rt.rounding.seed = to_u64(seed, "seed");
  rt.threads = threads;
  const sim::DType dt = op_dtype(dtype, "gemm");
  const py::array_t<float> c = gemm_values(rt, acc, dt, a, b, bias, to_layout(layout), std::nullopt, "gemm");
  return rounded_values(rt, dt, c, nullptr, "gemm");
}

/// A float32 array argument of halfway.dot (any shape, C order).
py::array_t<float> float32_array(py::handle x, const char* name) {
  if (!py::isinstance<py::array>(x) ||
      !py::reinterpret_borrow<py::array>(x).dtype().is(py::dtype::of<float>()))
    throw py::type_error(std::string("halfway.dot: ") + name + " must be a float32 array, not " +
                         (py::isinstance<py::array>(x)
                              ? dtype_name(py::reinterpret_borrow<py::array>(x))
                              : type_name(x)));
  return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(x);
}

/// The encoding of v in f, or a ValueError naming the argument when v is not a value of f.
uint32_t exact_encoding(const Format& f, float v, const char* name, const std::string& fname) {
  Env env;
  const uint32_t e = from_f32(f, v, env);
  Env back;
  const float w = to_f32(f, e, back);
  if (!(std::memcmp(&w, &v, 4) == 0 || (std::isnan(v) && std::isnan(w))))
    throw py::value_error(std::string("halfway.dot: ") + name + " holds " + std::to_string(v) +
                          ", which is not a value of " + fname);
  return e;
}

/// halfway.dot: c + sum_k a[..., k]·b[..., k] per row under an accumulation name, as lib's dot
/// computes it for the model the name resolves to with `fmt` operands (fp32 GEMMs: `fp32`).
py::array_t<float> dot_py(py::handle a, py::handle b, py::handle c, py::handle fmt,
                          const std::string& accumulation) {
  const Format in = to_format(fmt);
  const std::string fname = format_name(in);
  const py::array_t<float> A = float32_array(a, "a"), B = float32_array(b, "b"),
                           C = float32_array(c, "c");
  if (A.ndim() < 1 || A.ndim() != B.ndim() || A.ndim() != C.ndim() + 1)
    throw py::value_error("halfway.dot: a and b must be [..., K] and c [...] (got " +
                          std::to_string(A.ndim()) + ", " + std::to_string(B.ndim()) + " and " +
                          std::to_string(C.ndim()) + " dimensions)");
  for (py::ssize_t d = 0; d < A.ndim(); ++d)
    if (A.shape(d) != B.shape(d) || (d + 1 < A.ndim() && A.shape(d) != C.shape(d)))
      throw py::value_error("halfway.dot: the shapes of a, b and c do not match");
  const int64_t K = A.shape(A.ndim() - 1), rows = K ? A.size() / K : C.size();
  const sim::DType out = in == accumulation::kF32 ? sim::DType::f32() : sim::DType::low(in);
  const AccumulationModel model =
      sim::accumulator_by_name(accumulation).resolve(out, rows, 1, K, sim::Layout::nn, {});
  const std::string accname = format_name(model.acc);
  py::array_t<float> r(shape_of(C));
  const float *pa = A.data(), *pb = B.data(), *pc = C.data();
  float* pr = r.mutable_data();
  std::vector<uint32_t> ea(static_cast<size_t>(K)), eb(static_cast<size_t>(K));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      ea[size_t(k)] = exact_encoding(in, pa[i * K + k], "a", fname);
      eb[size_t(k)] = exact_encoding(in, pb[i * K + k], "b", fname);
    }
    const uint32_t ec = exact_encoding(model.acc, pc[i], "c", accname);
    Env env;
    const uint32_t d = dot(model, in, ea.data(), eb.data(), int(K), ec, env);
    pr[i] = to_f32(model.acc, d, env);
  }
  return r;
}

/// The recipes read from TOML files (halfway.torch.recipe_from_toml), by the name it gave.
std::map<std::string, sim::Precision>& custom_recipes() {
  static std::map<std::string, sim::Precision> r;
  return r;
}

/// A recipe by name: one read from a TOML file, else a preset.
sim::Precision recipe_precision(const std::string& name) {
  const auto it = custom_recipes().find(name);
  return it != custom_recipes().end() ? it->second : sim::preset_precision(name);
}

/// A block recipe as data for Python (the keys of [precision.blocks]).
py::dict block_recipe_dict(const sim::BlockRecipe& r) {
  return py::dict(py::arg("input") = r.input, py::arg("weight") = r.weight,
                  py::arg("grad") = r.grad, py::arg("input_sr") = r.input_sr,
                  py::arg("weight_sr") = r.weight_sr, py::arg("grad_sr") = r.grad_sr,
                  py::arg("input_rht") = r.input_rht, py::arg("grad_rht") = r.grad_rht,
                  py::arg("pow2_scales") = r.pow2_scales);
}

/// A preset policy as data for Python: what each op kind and each GEMM operand becomes.
py::dict recipe_dict(const std::string& name) {
  const sim::Precision pr = recipe_precision(name);
  const sim::Policy& p = pr.policy;
  py::dict d;
  d["name"] = p.name;
  d["low"] = p.low.name();
  d["param_dtype"] = p.param_dtype.name();
  d["input_dtype"] = p.input_dtype.name();
  d["accumulation"] = pr.accumulation->name;
  py::dict rules;
  for (int i = 0; i < sim::kOpCount; ++i) {
    const auto k = static_cast<sim::OpKind>(i);
    rules[sim::op_name(k)] = sim::rule_name(p.rule(k));
  }
  d["rules"] = rules;
  if (p.fp8) {
    const sim::Fp8Config& c = p.fp8_config;
    d["fp8"] = py::dict(py::arg("fwd") = format_name(c.fwd), py::arg("bwd") = format_name(c.bwd),
                        py::arg("scaling") = sim::scaling_name(c.scaling),
                        py::arg("amax_history_len") = c.amax_history_len,
                        py::arg("amax_compute_algo") = sim::amax_algo_name(c.amax_compute_algo),
                        py::arg("margin") = c.margin);
  } else {
    d["fp8"] = py::none();
  }
  if (p.blocks) {
    d["blocks"] = block_recipe_dict(*p.blocks);
    py::list layers;
    for (const sim::BlockLayer& l : p.block_layers)
      layers.append(py::make_tuple(
          l.match, l.recipe ? py::object(block_recipe_dict(*l.recipe)) : py::object(py::none())));
    d["block_layers"] = layers;
  } else {
    d["blocks"] = py::none();
  }
  py::dict roles;
  for (auto r : {sim::Role::forward, sim::Role::backward, sim::Role::update}) {
    const auto& v = p.role_rounding[size_t(r)];
    roles[sim::role_name(r)] = v ? py::object(py::str(rounding_name(*v))) : py::object(py::none());
  }
  d["rounding"] = roles;
  d["run_rounding"] = rounding_name(pr.rounding);
  d["sr_random_bits"] = pr.sr_random_bits;
  d["sr_pack_random_bits"] = pr.sr_pack_random_bits;
  return d;
}

/// The [precision] table of the config file `path`, parsed by sim's config parser and kept as
/// recipe `name`: its table (recipe_dict).
py::dict register_toml_recipe(const std::string& name, const std::string& path) {
  custom_recipes()[name] = sim::parse_precision_file(path);
  return recipe_dict(name);
}

/// What a sim op takes besides its tensors (halfway.torch.emulate's `attrs`).
struct OpAttrs {
  double scalar = 1.0;                ///< mul_scalar's c
  std::optional<int> dim;             ///< sum/mean over one dimension (none: all)
  sim::GeluApprox approx = sim::GeluApprox::none;
  double eps = 1e-5;                  ///< layer_norm
  std::vector<int32_t> target;        ///< cross_entropy's classes
};

OpAttrs op_attrs(const py::dict& a) {
  OpAttrs o;
  if (a.contains("scalar")) o.scalar = a["scalar"].cast<double>();
  if (a.contains("dim") && !a["dim"].is_none()) o.dim = a["dim"].cast<int>();
  if (a.contains("approximate") && a["approximate"].cast<std::string>() == "tanh")
    o.approx = sim::GeluApprox::tanh;
  if (a.contains("eps")) o.eps = a["eps"].cast<double>();
  if (a.contains("target")) {
    const auto t = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(
        a["target"]);
    o.target.assign(t.data(), t.data() + t.size());
  }
  return o;
}

/// sim's op `op` on `in` (its ops.hpp functions, under the context the caller set).
sim::Tensor run_sim_op(const std::string& op, const std::vector<sim::Tensor>& in,
                       const OpAttrs& a) {
  using namespace sim;
  if (op == "add") return add(in[0], in[1]);
  if (op == "sub") return sub(in[0], in[1]);
  if (op == "mul") return mul(in[0], in[1]);
  if (op == "div") return div(in[0], in[1]);
  if (op == "mul_scalar") return mul_scalar(in[0], a.scalar);
  if (op == "relu") return relu(in[0]);
  if (op == "gelu") return gelu(in[0], a.approx);
  if (op == "tanh") return sim::tanh(in[0]);
  if (op == "sigmoid") return sigmoid(in[0]);
  if (op == "exp") return sim::exp(in[0]);
  if (op == "log") return sim::log(in[0]);
  if (op == "softmax") return softmax(in[0]);
  if (op == "log_softmax") return log_softmax(in[0]);
  if (op == "cross_entropy") return cross_entropy(in[0], a.target);
  if (op == "mse") return mse(in[0], in[1]);
  if (op == "layer_norm") return layer_norm(in[0], in[1], in[2], a.eps);
  if (op == "sum") return a.dim ? sum(in[0], *a.dim) : sum(in[0]);
  if (op == "mean") return a.dim ? mean(in[0], *a.dim) : mean(in[0]);
  throw py::value_error("halfway.torch.emulate: sim has no op '" + op + "'");
}

py::array_t<float> values_array(const sim::Values& v, const sim::Shape& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  py::array_t<float> out(s);
  std::copy(v.f32(), v.f32() + v.size(), out.mutable_data());
  return out;
}

/// One op of a PyTorch model run by sim's own op (forward in Emulator::op): its graph (the op's
/// node, the casts its policy made, the input leaves), kept for the backward.
class SimOp {
 public:
  SimOp(sim::Tensor out, std::vector<sim::Tensor> leaves, sim::Runtime* rt, py::object owner)
      : out_(std::move(out)), leaves_(std::move(leaves)), rt_(rt), owner_(std::move(owner)) {}

  /// The output gradient `grad` (float32, the output's shape) through sim's backward closures:
  /// each input's gradient rounded into its dtype, or None for inputs that need none. A
  /// gradient that PyTorch summed from several uses and that is not a value of the output's
  /// dtype is rounded into it first, as sim accumulates (`<output>.grad_accum`).
  py::list backward(py::handle grad, const std::string& rounding) {
    if (!out_.requires_grad()) throw py::value_error("halfway.torch.emulate: no gradient to send");
    const py::array_t<float> g = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(grad);
    if (size_t(g.size()) != out_.data().size())
      throw py::value_error("halfway.torch.emulate: gradient of the wrong size");
    std::vector<float> gv(g.data(), g.data() + g.size());
    {
      py::gil_scoped_release release;
      const Rounding saved = rt_->rounding.rounding;
      rt_->rounding.rounding = parse_rounding(rounding);
      const auto order = sim::topo_order(out_.impl());
      for (sim::TensorImpl* n : order) n->grad.clear();
      sim::TensorImpl& o = *out_.impl();
      sim::Values gvals(gv);
      if (!representable(o.dtype, gvals)) {
        const sim::TraceTag tag{o.name + ".grad_accum", "accumulate",
                                o.weight ? sim::TraceKind::weight_grad
                                         : sim::TraceKind::activation_grad};
        sim::round_into(*rt_, o.dtype, gvals, &tag);
      }
      o.grad = std::move(gvals);
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        sim::TensorImpl* n = *it;
        if (n->backward_fn && !n->grad.empty()) n->backward_fn();
      }
      rt_->rounding.rounding = saved;
    }
    py::list grads;
    for (const sim::Tensor& t : leaves_) {
      if (!t || !t.requires_grad())
        grads.append(py::none());
      else if (t.grad().empty())
        grads.append(values_array(sim::Values(std::vector<float>(t.data().size(), 0.0f)), t.shape()));
      else
        grads.append(values_array(t.grad(), t.shape()));
    }
    return grads;
  }

 private:
  /// Every value of v already a value of dt (a round trip with round-to-nearest-even, on a
  /// runtime of its own so that no stochastic-rounding stream moves).
  static bool representable(const sim::DType& dt, const sim::Values& v) {
    if (!dt.is_low()) return true;
    sim::Runtime scratch;
    const sim::Values r = sim::rounded(scratch, dt, v.f32(), v.size(), nullptr);
    return std::equal(v.f32(), v.f32() + v.size(), r.f32(), [](float a, float b) {
      return std::memcmp(&a, &b, sizeof a) == 0;
    });
  }

  sim::Tensor out_;
  std::vector<sim::Tensor> leaves_;
  sim::Runtime* rt_;
  py::object owner_;  ///< the emulator whose runtime rt_ is: kept alive while the graph is
};

/// The state of one halfway.torch.emulate block: sim's runtime (accumulation, seed, threads,
/// the stochastic-rounding stream of the step), the fp8 scaling state of each recipe, and the
/// tracer whose records of every rounding really done become trace.csv and blocks.csv, written
/// as `halfway train` writes them.
class Emulator {
 public:
  Emulator(uint64_t seed, int threads, const std::string& dir, int random_bits,
           bool pack_random_bits) {
    if (threads < 1) throw py::value_error("halfway.torch.emulate: threads must be at least 1");
    if (random_bits < 1 || random_bits > 32)
      throw py::value_error("halfway.torch.emulate: random_bits must be in 1..32");
    rt_.rounding.seed = seed;
    rt_.rounding.random_bits = random_bits;
    rt_.rounding.pack_random_bits = pack_random_bits;  // the recipe's sr_pack_random_bits
    rt_.threads = threads;
    if (!dir.empty()) {
      trace_ = std::make_unique<sim::AtomicFile>(dir + "/trace.csv");
      blocks_ = std::make_unique<sim::AtomicFile>(dir + "/blocks.csv");
      trace_->out() << sim::kTraceCsvHeader;
      blocks_->out() << sim::kBlocksCsvHeader;
    }
  }

  void begin_step(int step, bool traced, double loss_scale) {
    rt_.sr_step = uint64_t(step);
    rt_.sr_tensor = 0;
    rt_.tracer = nullptr;
    if (traced && trace_) {
      tracer_.begin_step(step, loss_scale);
      rt_.tracer = &tracer_;
    }
  }

  void end_step() {
    if (!rt_.tracer) return;
    rt_.tracer = nullptr;
    const sim::StepTrace& st = tracer_.end_step();
    std::string line;
    for (const sim::TraceRecord& t : st.records) {
      sim::append_trace_columns(line, st.step, t);
      line += '\n';
    }
    trace_->out() << line;
    line.clear();
    for (const sim::BlockRecord& b : st.blocks) {
      sim::append_block_columns(line, st.step, b);
      line += '\n';
    }
    blocks_->out() << line;
  }

  /// The run folder, as `halfway train` publishes its own (io.hpp's publish_folder): trace.csv,
  /// blocks.csv and `steps` (steps.csv) finished under temporary names, the folder's old
  /// manifest removed, the files renamed into place, then `manifest` written last. Nothing
  /// without a folder.
  void commit(const std::string& steps, const std::string& manifest) {
    if (!trace_) return;
    const std::string dir = std::filesystem::path(trace_->path()).parent_path().string();
    sim::AtomicFile steps_file(dir + "/steps.csv");
    steps_file.out() << steps;
    for (sim::AtomicFile* f : {trace_.get(), blocks_.get(), &steps_file}) f->finish();
    sim::publish_folder(dir, {}, {[&] { trace_->publish(); }, [&] { blocks_->publish(); },
                                  [&] { steps_file.publish(); }},
                        manifest);
  }

  py::array_t<float> gemm(py::handle a, py::handle b, py::handle bias, const std::string& dtype,
                          const std::string& layout, const std::string& accumulation,
                          std::optional<float> alpha, py::handle fp8) {
    std::optional<Fp8GemmSpec> spec;
    if (!fp8.is_none()) {  // (role, format of a, format of b)
      const auto t = fp8.cast<std::tuple<std::string, std::string, std::string>>();
      const std::string& r = std::get<0>(t);
      const sim::Fp8Gemm role = r == "fprop" ? sim::Fp8Gemm::fprop
                                : r == "dgrad" ? sim::Fp8Gemm::dgrad
                                : r == "wgrad" ? sim::Fp8Gemm::wgrad
                                               : throw py::value_error("emulate: fp8 GEMM role " + r);
      spec = Fp8GemmSpec{role, parse_format(std::get<1>(t)), parse_format(std::get<2>(t))};
    }
    return gemm_values(rt_, sim::accumulator_by_name(accumulation), op_dtype(dtype, "emulate"),
                       a, b, bias, to_layout(layout), alpha, "emulate", spec);
  }

  /// `draw`: false for values the caller knows to be values of dtype already (traced, but
  /// drawing no stochastic-rounding stream: the simulator never rounds them).
  py::array_t<float> round(py::handle x, const std::string& dtype, const std::string& rounding,
                           const std::string& name, const std::string& op,
                           const std::string& kind, bool draw = true) {
    Direction d(rt_, rounding);
    const sim::TraceTag tag{name, op_literal(op), kind_from_name(kind)};
    const uint64_t stream = rt_.sr_tensor;
    py::array_t<float> r = rounded_values(rt_, op_dtype(dtype, "emulate"), x,
                                          name.empty() ? nullptr : &tag, "emulate");
    if (!draw) rt_.sr_tensor = stream;
    return r;
  }

  py::array_t<float> bias_grad(py::handle g, const std::string& dtype,
                               const std::string& rounding, const std::string& name,
                               const std::string& op) {
    const py::array_t<float> G = matrix_input<float>(g, "emulate", "grad", "float32");
    const int64_t rows = G.shape(0), n = G.shape(1);
    const sim::Values v(std::vector<float>(G.data(), G.data() + G.size()));
    py::array_t<double> sums(n);
    const std::vector<double> s = sim::bias_grad(v, rows, n);
    std::copy(s.begin(), s.end(), sums.mutable_data());
    return round(sums, dtype, rounding, name, op, "weight_grad");
  }

  py::array_t<float> block_copy(py::handle x, const std::string& scheme, int axis,
                                const std::string& gemm, bool sr, bool rht, bool pow2_scales,
                                size_t prows, size_t pcols, const std::string& name,
                                const std::string& op, const std::string& kind) {
    const py::array_t<float> in = matrix_input<float>(x, "emulate", "x", "float32");
    const size_t rows = size_t(in.shape(0)), cols = size_t(in.shape(1));
    if (prows < rows || pcols < cols)
      throw py::value_error("halfway.torch.emulate: padding below the operand's size");
    const char* g = gemm == "dgrad" ? "dgrad" : gemm == "wgrad" ? "wgrad" : "fprop";
    const sim::BlockCopy c{scheme, to_axis(axis, "emulate"), g, sr, rht, pow2_scales};
    const auto [tr, tc] = sim::copy_tile(c);
    if (prows % tr || pcols % tc)
      throw py::value_error("halfway.torch.emulate: padded size not a multiple of the tile");
    const sim::TraceTag tag{name, op_literal(op), kind_from_name(kind)};
    py::array_t<float> out({py::ssize_t(prows), py::ssize_t(pcols)});
    float* po = out.mutable_data();
    {
      py::gil_scoped_release release;
      sim::block_copy(rt_, c, tag, in.data(), rows, cols, prows, pcols, po);
    }
    return out;
  }

  /// x quantized with its per-tensor scale (key: the tensor's trace name) under recipe `recipe`'s
  /// fp8 configuration: (q, 1/scale), q the scaled values in fp8 as float32.
  py::tuple fp8_quantize(const std::string& recipe, const std::string& key, bool backward,
                         py::handle x, const std::string& op, const std::string& kind) {
    sim::Fp8State& st = fp8_state(recipe);
    const Format f = backward ? st.config().bwd : st.config().fwd;
    const FloatInput in = float_input(x, "emulate");
    const size_t n = size_t(in.arr.size());
    const sim::TraceTag tag{key, op_literal(op), kind_from_name(kind)};
    py::array_t<float> out(shape_of(in.arr));
    float scale;
    if (in.f64) {
      const double* p = static_cast<const double*>(in.arr.data());
      std::vector<double> q;
      scale = st.quantize(key, f, p, n, q, rt_, &tag);
      std::copy(q.begin(), q.end(), out.mutable_data());
    } else {
      scale = st.quantize(key, f, static_cast<const float*>(in.arr.data()), n,
                          out.mutable_data(), rt_, &tag);
    }
    return py::make_tuple(out, 1.0f / scale);
  }


  /// sim's op `op` (ops.hpp) under recipe `recipe`'s policy in name scope `scope`, on float32
  /// arrays holding values of `dtypes` (None: an absent input, as layer_norm's weight): the
  /// output, its dtype, and the op for the backward. `self` is this emulator's Python object,
  /// which the op keeps alive.
  py::tuple op(py::object self, const std::string& recipe, const std::string& op,
               py::list inputs, py::list dtypes, py::list needs_grad, py::list weights,
               const std::string& scope, const std::string& rounding, py::dict attrs) {
    const sim::Policy& pol = precision(recipe).policy;
    std::vector<sim::Tensor> leaves;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].is_none()) {
        leaves.emplace_back();
        continue;
      }
      const auto arr =
          py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(inputs[i]);
      if (!arr) throw py::type_error("halfway.torch.emulate: op inputs must be float32 arrays");
      auto t = std::make_shared<sim::TensorImpl>();
      t->shape.assign(arr.shape(), arr.shape() + arr.ndim());
      t->dtype = op_dtype(dtypes[i].cast<std::string>(), "emulate");
      t->data = sim::Values(std::vector<float>(arr.data(), arr.data() + arr.size()));
      t->requires_grad = needs_grad[i].cast<bool>();
      t->is_param = t->weight = weights[i].cast<bool>();
      t->name = scope.empty() ? "input" : scope + ".input";
      leaves.emplace_back(std::move(t));
    }
    const OpAttrs a = op_attrs(attrs);
    sim::Tensor out;
    {
      py::gil_scoped_release release;
      Direction d(rt_, rounding);
      sim::ContextGuard g(&pol, &rt_);
      sim::Scope s(scope);
      out = run_sim_op(op, leaves, a);
    }
    py::array_t<float> y = values_array(out.data(), out.shape());
    const std::string dt = out.dtype().name();
    return py::make_tuple(y, dt, SimOp(std::move(out), std::move(leaves), &rt_, std::move(self)));
  }

 private:
  /// The rounding direction of one call (a role's), restored after it.
  struct Direction {
    sim::Runtime& rt;
    Rounding saved;
    Direction(sim::Runtime& r, const std::string& name) : rt(r), saved(r.rounding.rounding) {
      rt.rounding.rounding = parse_rounding(name);
    }
    ~Direction() { rt.rounding.rounding = saved; }
  };

  /// TraceTag keeps a `const char*` op: the names live as long as the emulator.
  const char* op_literal(const std::string& op) {
    for (const auto& s : ops_)
      if (*s == op) return s->c_str();
    ops_.push_back(std::make_unique<std::string>(op));
    return ops_.back()->c_str();
  }

  /// Recipe `recipe`'s precision (a preset's), resolved once per emulator.
  const sim::Precision& precision(const std::string& recipe) {
    auto it = precisions_.find(recipe);
    if (it == precisions_.end())
      it = precisions_.emplace(recipe, recipe_precision(recipe)).first;
    return it->second;
  }

  sim::Fp8State& fp8_state(const std::string& recipe) {
    auto it = fp8_.find(recipe);
    if (it == fp8_.end()) {
      const sim::Policy& p = precision(recipe).policy;
      if (!p.fp8) throw py::value_error("halfway.torch.emulate: recipe '" + recipe + "' is not fp8");
      it = fp8_.emplace(recipe, std::make_unique<sim::Fp8State>(p.fp8_config)).first;
    }
    return *it->second;
  }

  sim::Runtime rt_;
  sim::Tracer tracer_;
  std::map<std::string, std::unique_ptr<sim::Fp8State>> fp8_;
  std::map<std::string, sim::Precision> precisions_;
  std::vector<std::unique_ptr<std::string>> ops_;
  std::unique_ptr<sim::AtomicFile> trace_, blocks_;
};

/// sim's optimizer (optim.hpp) over a PyTorch optimizer's parameters: halfway.torch.optimizer.
/// The weights live here in their dtype (fp32, or a low dtype without a master copy); each step
/// takes fp32 gradients and writes back the stored weights, with sim's update numerics (plain
/// or Kahan-compensated, in the update rounding) and its per-parameter vanished counts. Its
/// stochastic-rounding streams are (seed, step, n) with n counting this optimizer's rounding
/// calls of the step from 0.
class OptimizerCore {
 public:
  OptimizerCore(py::dict cfg, py::list names, py::list values, const std::string& weights,
                const std::string& update, const std::string& compensation, uint64_t seed,
                int random_bits) {
    sim::OptimizerConfig c;
    c.kind = cfg["kind"].cast<std::string>();
    c.lr = cfg["lr"].cast<double>();
    c.momentum = cfg["momentum"].cast<double>();
    c.dampening = cfg["dampening"].cast<double>();
    c.nesterov = cfg["nesterov"].cast<bool>();
    c.weight_decay = cfg["weight_decay"].cast<double>();
    c.beta1 = cfg["beta1"].cast<double>();
    c.beta2 = cfg["beta2"].cast<double>();
    c.eps = cfg["eps"].cast<double>();
    c.exp_avg_dtype = sim::parse_state_format(cfg["exp_avg_dtype"].cast<std::string>(),
                                              "state_dtype");
    c.exp_avg_sq_dtype = sim::parse_state_format(cfg["exp_avg_sq_dtype"].cast<std::string>(),
                                                 "state_dtype");
    c.momentum_buffer_dtype = sim::parse_state_format(
        cfg["momentum_buffer_dtype"].cast<std::string>(), "state_dtype");
    const sim::DType wdt = op_dtype(weights, "torch.optimizer");
    for (size_t i = 0; i < names.size(); ++i) {
      const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(values[i]);
      sim::Shape shape(a.shape(), a.shape() + a.ndim());
      sim::Tensor t = sim::Tensor::from(shape, std::vector<double>(a.data(), a.data() + a.size()),
                                        wdt, true);
      t.impl()->is_param = t.impl()->weight = true;
      t.impl()->name = names[i].cast<std::string>();
      params_.push_back({names[i].cast<std::string>(), t});
    }
    sim::WeightUpdate u;
    if (update == "kahan") {
      u.method = sim::UpdateMethod::kahan;
      u.compensation = compensation == "low" ? wdt : sim::DType::f32();
    } else if (update != "plain") {
      throw py::value_error("halfway.torch.optimizer: update must be 'plain' or 'kahan', not '" +
                            update + "'");
    }
    rt_.rounding.seed = seed;
    rt_.rounding.random_bits = random_bits;  // checked (1..32) by halfway.torch.optimizer
    opt_ = std::make_unique<sim::Optimizer>(c, params_, u);
  }

  /// One step: grads (float32, one per parameter, in order) at step `step`.
  void step(py::list grads, int64_t step, const std::string& rounding) {
    if (grads.size() != params_.size())
      throw py::value_error("halfway.torch.optimizer: one gradient per parameter");
    std::vector<std::vector<float>> g(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(grads[i]);
      if (size_t(a.size()) != params_[i].t.data().size())
        throw py::value_error("halfway.torch.optimizer: gradient of '" + params_[i].name +
                              "' has the wrong size");
      g[i].assign(a.data(), a.data() + a.size());
    }
    rt_.rounding.rounding = parse_rounding(rounding);
    rt_.sr_step = uint64_t(step);
    rt_.sr_tensor = 0;
    py::gil_scoped_release release;
    opt_->step(g, rt_);
  }

  py::array_t<float> weight(size_t i) const {
    const sim::Tensor& t = params_.at(i).t;
    return values_array(t.data(), t.shape());
  }

  /// Per parameter, the last step's (elements, nonzero, vanished).
  py::list stats() const {
    py::list out;
    for (const sim::UpdateStats& s : opt_->last_stats())
      out.append(py::make_tuple(s.elements, s.nonzero, s.vanished));
    return out;
  }

  std::string dtype(size_t i) const { return params_.at(i).t.dtype().name(); }

 private:
  std::vector<sim::Param> params_;
  std::unique_ptr<sim::Optimizer> opt_;
  sim::Runtime rt_;
};

void bind_emulation(py::module_& m) {
  m.def("gemm", &gemm_py, py::arg("a"), py::arg("b"), py::arg("bias") = py::none(),
        py::kw_only(), py::arg("dtype") = "fp32", py::arg("accumulation") = "fp32",
        py::arg("layout") = "nn", py::arg("rounding") = "near_even", py::arg("seed") = py::none(),
        py::arg("threads") = 1);
  m.def("dot", &dot_py, py::arg("a"), py::arg("b"), py::arg("c"), py::arg("fmt"), py::kw_only(),
        py::arg("accumulation") = "fp32",
        "c + sum over the last axis of a*b, under an accumulation name of halfway train");
  m.def("_recipe", &recipe_dict, py::arg("name"));
  m.def("_dynamic_map", [](bool is_signed) {
          const auto& a = sim::dynamic_map(is_signed);
          py::array_t<float> out(256);
          std::copy(a.begin(), a.end(), out.mutable_data());
          return out;
        }, py::arg("signed"), "sim's dynamic 8-bit map of optimizer state (dynamic8).");
  m.def("_store_dynamic8", [](py::array_t<float, py::array::c_style | py::array::forcecast> x,
                              int block, bool is_signed) {
          py::array_t<float> out(x.size());
          std::copy(x.data(), x.data() + x.size(), out.mutable_data());
          sim::store_dynamic8(out.mutable_data(), size_t(out.size()), block, is_signed);
          return out;
        }, py::arg("x"), py::arg("block"), py::arg("signed"),
        "x stored as a dynamic8 optimizer state (sim's store_dynamic8), flattened.");
  m.def("_scope_matches", &sim::scope_matches, py::arg("pattern"), py::arg("scope"),
        "Whether a name scope is a layer pattern's or lies below it (sim's scope_matches).");
  m.def("_block_tile",
        [](const std::string& scheme, int axis) {
          return sim::copy_tile(sim::BlockCopy{scheme, to_axis(axis, "emulate")});
        },
        py::arg("scheme"), py::arg("axis"),
        "The (rows, cols) tile of a scheme along an axis that a padded GEMM operand must be a "
        "multiple of (sim's copy_tile).");
  m.def("_recipe_names", &sim::policy_names);
  m.def("_register_toml_recipe", &register_toml_recipe, py::arg("name"), py::arg("path"),
        "Read the [precision] table of a config file as recipe `name`; returns its table.");
  m.def("_custom_recipe_names", []() {
    std::vector<std::string> names;
    for (const auto& [k, v] : custom_recipes()) names.push_back(k);
    return names;
  });
  m.def("_accumulation_names", &sim::accumulation_names);
  py::class_<Emulator>(m, "_Emulator")
      .def(py::init<uint64_t, int, const std::string&, int, bool>(), py::arg("seed"),
           py::arg("threads"), py::arg("dir"), py::arg("random_bits") = kSrRandomBits,
           py::arg("pack_random_bits") = false)
      .def("begin_step", &Emulator::begin_step, py::arg("step"), py::arg("traced"),
           py::arg("loss_scale") = 1.0)
      .def("end_step", &Emulator::end_step)
      .def("commit", &Emulator::commit, py::arg("steps"), py::arg("manifest"))
      .def("gemm", &Emulator::gemm, py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("dtype"),
           py::arg("layout"), py::arg("accumulation"), py::arg("alpha") = py::none(),
           py::arg("fp8") = py::none())
      .def("round", &Emulator::round, py::arg("x"), py::arg("dtype"), py::arg("rounding"),
           py::arg("name") = "", py::arg("op") = "", py::arg("kind") = "activation",
           py::arg("draw") = true)
      .def("bias_grad", &Emulator::bias_grad, py::arg("grad"), py::arg("dtype"),
           py::arg("rounding"), py::arg("name"), py::arg("op"))
      .def("block_copy", &Emulator::block_copy, py::arg("x"), py::arg("scheme"), py::arg("axis"),
           py::arg("gemm"), py::arg("sr"), py::arg("rht"), py::arg("pow2_scales"),
           py::arg("prows"), py::arg("pcols"), py::arg("name"), py::arg("op"), py::arg("kind"))
      .def("fp8_quantize", &Emulator::fp8_quantize, py::arg("recipe"), py::arg("key"),
           py::arg("backward"), py::arg("x"), py::arg("op"), py::arg("kind"))
      .def("op",
           [](py::object self, const std::string& recipe, const std::string& op,
              py::list inputs, py::list dtypes, py::list needs_grad, py::list weights,
              const std::string& scope, const std::string& rounding, py::dict attrs) {
             return self.cast<Emulator&>().op(self, recipe, op, inputs, dtypes, needs_grad,
                                              weights, scope, rounding, attrs);
           },
           py::arg("recipe"), py::arg("op"), py::arg("inputs"), py::arg("dtypes"),
           py::arg("needs_grad"), py::arg("weights"), py::arg("scope"), py::arg("rounding"),
           py::arg("attrs"));
  py::class_<OptimizerCore>(m, "_Optimizer")
      .def(py::init<py::dict, py::list, py::list, const std::string&, const std::string&,
                    const std::string&, uint64_t, int>(),
           py::arg("config"), py::arg("names"), py::arg("values"), py::arg("weights"),
           py::arg("update"), py::arg("compensation"), py::arg("seed"),
           py::arg("random_bits") = 32)
      .def("step", &OptimizerCore::step, py::arg("grads"), py::arg("step"), py::arg("rounding"))
      .def("weight", &OptimizerCore::weight, py::arg("i"))
      .def("dtype", &OptimizerCore::dtype, py::arg("i"))
      .def("stats", &OptimizerCore::stats);
  py::class_<SimOp>(m, "_SimOp").def("backward", &SimOp::backward, py::arg("grad"),
                                     py::arg("rounding"));
}

// ---------------------------------------------------------------------------------------------
// halfway.torch.bisect (python/halfway/torch_bisect.py): the search and the folder are the ones
// `halfway bisect` runs (sim/bisect.hpp's ddmin, io.hpp's publish_folder); Python only trains.

/// ddmin over parts 0..n-1: `evaluate(list of sets) -> list of float or None` (None: the
/// budget is spent). Returns (culprit, finished).
std::pair<sim::PartSet, bool> ddmin_py(int n, double threshold, int batch,
                                       py::function evaluate) {
  if (n < 0) throw py::value_error("_ddmin: n must be at least 0");
  const auto eval = [&](const std::vector<sim::PartSet>& sets) {
    const py::object got = evaluate(py::cast(sets));
    auto f = got.cast<std::vector<std::optional<double>>>();
    if (f.size() != sets.size())
      throw py::value_error("_ddmin: evaluate returned " + std::to_string(f.size()) +
                            " values for " + std::to_string(sets.size()) + " sets");
    return f;
  };
  const sim::SearchResult r = sim::ddmin(n, threshold, batch, eval);
  return {r.culprit, r.finished};
}

/// A folder of text files published as `halfway bisect` publishes its own: every file finished
/// under a temporary name, the old manifest removed, the files renamed into place in order,
/// `manifest` written last.
void publish_texts(const std::string& dir,
                   const std::vector<std::pair<std::string, std::string>>& files,
                   const std::string& manifest) {
  std::vector<std::unique_ptr<sim::AtomicFile>> out;
  for (const auto& [name, text] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    out.push_back(std::make_unique<sim::AtomicFile>(path));
    out.back()->out() << text;
  }
  for (auto& f : out) f->finish();
  std::vector<std::function<void()>> renames;
  for (auto& f : out) renames.push_back([p = f.get()] { p->publish(); });
  sim::publish_folder(dir, {}, renames, manifest);
}

void bind_bisect(py::module_& m) {
  m.def("_ddmin", &ddmin_py, py::arg("n"), py::arg("threshold"), py::arg("batch"),
        py::arg("evaluate"));
  m.def("_unpublish_folder", &sim::unpublish_folder, py::arg("dir"), py::arg("stale"));
  m.def("_publish_texts", &publish_texts, py::arg("dir"), py::arg("files"), py::arg("manifest"));
}
#endif

}  // namespace

/// The Format of `self`, a halfway.Format whose __init__ ran: Format.__new__(Format) alone
/// makes an instance with no value, whose fields must not be read.
const Format& checked_format(py::handle self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  if (!inst->get_value_and_holder().holder_constructed())
    throw py::type_error("halfway.Format: this instance was never initialised (made by "
                         "Format.__new__ without __init__); use halfway.Format(name)");
  return self.cast<const Format&>();
}

/// `f` as a method of halfway.Format that checks its instance first (checked_format).
template <class F>
auto on_format(F f) {
  return [f](py::handle self) { return f(checked_format(self)); };
}

/// A format name argument: a str that UTF-8 can encode (TypeError, ValueError otherwise).
std::string format_name_arg(py::handle name) {
  if (!py::isinstance<py::str>(name))
    throw py::type_error(std::string("halfway.Format: name must be a format name (str), not ") +
                         Py_TYPE(name.ptr())->tp_name);
  Py_ssize_t n = 0;
  const char* u = PyUnicode_AsUTF8AndSize(name.ptr(), &n);
  if (!u) {
    PyErr_Clear();
    throw py::value_error("halfway.Format: name is not valid text (a lone surrogate)");
  }
  return std::string(u, size_t(n));
}

namespace {

/// halfway.Format: a format, from its name.
void bind_format(py::module_& m) {
  py::class_<Format>(m, "Format",
                     "A floating-point format: parsed from a name such as 'fp16', 'e4m3:sat' "
                     "or 'e5m10:bias=14:ftz'.")
      .def(py::init([](py::handle name) { return parse_format(format_name_arg(name)); }),
           py::arg("name"))
      .def_property_readonly("name", on_format([](const Format& f) { return format_name(f); }))
      .def_property_readonly("exp_bits", on_format([](const Format& f) { return int(f.exp_bits); }))
      .def_property_readonly("frac_bits",
                             on_format([](const Format& f) { return int(f.frac_bits); }))
      .def_property_readonly("bias", on_format([](const Format& f) { return int(f.bias); }))
      .def_property_readonly("nbits", on_format([](const Format& f) { return f.nbits(); }))
      .def_property_readonly(
          "specials", on_format([](const Format& f) { return specials_name(f.specials); }))
      .def_property_readonly(
          "overflow", on_format([](const Format& f) { return overflow_name(f.overflow); }))
      .def_property_readonly("ftz", on_format([](const Format& f) { return f.ftz; }))
      .def_property_readonly("daz", on_format([](const Format& f) { return f.daz; }))
      .def_property_readonly("signed", on_format([](const Format& f) { return f.is_signed; }))
      .def_property_readonly("has_zero", on_format([](const Format& f) { return f.has_zero; }))
      .def("__eq__", [](const Format& a, const Format& b) { return a == b; })
      .def("__hash__", on_format([](const Format& f) { return py::hash(py::str(format_name(f))); }))
      .def("__str__", on_format([](const Format& f) { return format_name(f); }))
      .def("__repr__", on_format([](const Format& f) {
             return "halfway.Format('" + format_name(f) + "')";
           }))
      .def(py::pickle([](const Format& f) { return format_name(f); },
                      [](const std::string& name) { return parse_format(name); }));
}

/// halfway.Counts: what happened to the results of a call.
void bind_counts(py::module_& m) {
  py::class_<EventCounts>(m, "Counts",
                          "What happened to the results of a call; an element is counted in "
                          "every class it meets. flags is the OR of the IEEE flags.")
      .def(py::init<>())
      .def_readonly("total", &EventCounts::total)
      .def_readonly("inexact", &EventCounts::inexact)
      .def_readonly("zero", &EventCounts::zero)
      .def_readonly("flushed", &EventCounts::flushed)
      .def_readonly("subnormal", &EventCounts::subnormal)
      .def_readonly("overflow", &EventCounts::overflow)
      .def_readonly("nan", &EventCounts::nan)
      .def_readonly("flags", &EventCounts::flags)
      .def_property_readonly("flag_names",
                             [](const EventCounts& c) { return flags_name(c.flags); })
      .def("as_dict",
           [](const EventCounts& c) {
             py::dict d;
             d["total"] = c.total;
             d["inexact"] = c.inexact;
             d["zero"] = c.zero;
             d["flushed"] = c.flushed;
             d["subnormal"] = c.subnormal;
             d["overflow"] = c.overflow;
             d["nan"] = c.nan;
             d["flags"] = c.flags;
             return d;
           })
      .def("__eq__", [](const EventCounts& a, const EventCounts& b) { return a == b; })
      .def("__add__",
           [](const EventCounts& a, const EventCounts& b) {
             EventCounts c = a;
             c += b;
             return c;
           })
      .def("__repr__", [](const EventCounts& c) {
        return "Counts(total=" + std::to_string(c.total) + ", inexact=" +
               std::to_string(c.inexact) + ", zero=" + std::to_string(c.zero) + ", flushed=" +
               std::to_string(c.flushed) + ", subnormal=" + std::to_string(c.subnormal) +
               ", overflow=" + std::to_string(c.overflow) + ", nan=" + std::to_string(c.nan) +
               ", flags='" + flags_name(c.flags) + "')";
      });
}

/// round, encode and decode: values to and from a format.
void bind_rounding(py::module_& m) {
  m.def("round", &round_values, py::arg("a"), py::arg("fmt"), py::arg("rounding") = "near_even",
        py::kw_only(), py::arg("saturate") = false, py::arg("subnormals") = true,
        py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("tininess") = "after",
        py::arg("flags") = false, py::arg("counts") = false,
        py::arg("random_bits") = kSrRandomBits, py::arg("pack_random_bits") = false,
        py::arg("out") = py::none());
  m.def("encode", &encode, py::arg("a"), py::arg("fmt"), py::arg("rounding") = "near_even",
        py::kw_only(), py::arg("saturate") = false, py::arg("subnormals") = true,
        py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("tininess") = "after",
        py::arg("flags") = false, py::arg("counts") = false, py::arg("out") = py::none());
  m.def("decode", &decode, py::arg("bits"), py::arg("fmt"), py::kw_only(),
        py::arg("subnormals") = true, py::arg("out") = py::none());
}

/// add, sub, mul, div, fma and sqrt, rounded once into a format.
void bind_arith(py::module_& m) {
  auto def_binary = [&](const char* name, Op op) {
    m.def(
        name,
        [op](py::handle a, py::handle b, py::handle fmt, const std::string& rounding,
             bool saturate, bool subnormals, py::handle seed, py::handle offset,
             const std::string& tininess, bool flags, bool counts) {
          return arith(op, {a, b}, fmt, rounding, saturate, subnormals, seed, offset, tininess,
                       flags, counts);
        },
        py::arg("a"), py::arg("b"), py::arg("fmt"), py::arg("rounding") = "near_even",
        py::kw_only(), py::arg("saturate") = false, py::arg("subnormals") = true,
        py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("tininess") = "after",
        py::arg("flags") = false, py::arg("counts") = false);
  };
  def_binary("add", Op::add);
  def_binary("sub", Op::sub);
  def_binary("mul", Op::mul);
  def_binary("div", Op::div);
  m.def(
      "fma",
      [](py::handle a, py::handle b, py::handle c, py::handle fmt, const std::string& rounding,
         bool saturate, bool subnormals, py::handle seed, py::handle offset,
         const std::string& tininess, bool flags, bool counts) {
        return arith(Op::fma, {a, b, c}, fmt, rounding, saturate, subnormals, seed, offset,
                     tininess, flags, counts);
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("fmt"), py::arg("rounding") = "near_even",
      py::kw_only(), py::arg("saturate") = false, py::arg("subnormals") = true,
      py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("tininess") = "after",
      py::arg("flags") = false, py::arg("counts") = false);
  m.def(
      "sqrt",
      [](py::handle a, py::handle fmt, const std::string& rounding, bool saturate,
         bool subnormals, py::handle seed, py::handle offset, const std::string& tininess,
         bool flags, bool counts) {
        return arith(Op::sqrt, {a}, fmt, rounding, saturate, subnormals, seed, offset, tininess,
                     flags, counts);
      },
      py::arg("a"), py::arg("fmt"), py::arg("rounding") = "near_even", py::kw_only(),
      py::arg("saturate") = false, py::arg("subnormals") = true, py::arg("seed") = py::none(),
      py::arg("offset") = 0, py::arg("tininess") = "after", py::arg("flags") = false,
      py::arg("counts") = false);
}

/// Block quantization (encode_blocks, decode_blocks, quantize_blocks, block_schemes) and
/// _finfo_fields.
void bind_blocks(py::module_& m) {
  m.def("_finfo_fields", &finfo_fields, py::arg("fmt"));
  m.def("encode_blocks", &encode_blocks_py, py::arg("x"), py::arg("scheme"), py::kw_only(),
        py::arg("axis") = -1, py::arg("rounding") = "near_even", py::arg("random_bits") = 32,
        py::arg("pack_random_bits") = false, py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("rht") = false,
        py::arg("pow2_scales") = false, py::arg("pad") = false, py::arg("counts") = false);
  m.def("decode_blocks", &decode_blocks_py, py::arg("codes"), py::arg("scales"),
        py::arg("global_scale"), py::arg("scheme"), py::kw_only(), py::arg("axis") = py::none(),
        py::arg("out") = py::none());
  m.def("quantize_blocks", &quantize_blocks_py, py::arg("x"), py::arg("scheme"), py::kw_only(),
        py::arg("axis") = -1, py::arg("rounding") = "near_even", py::arg("random_bits") = 32,
        py::arg("pack_random_bits") = false, py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("rht") = false,
        py::arg("pow2_scales") = false, py::arg("pad") = false, py::arg("counts") = false,
        py::arg("out") = py::none());
  m.def("block_schemes", &block_scheme_names, "Names of the block quantization schemes.");
}

/// cpu_info: the machine as halfway sees it.
void bind_cpu_info(py::module_& m) {
  m.def("cpu_info", [] {
    py::dict d;
    d["model"] = cpu::model_name();
    d["features"] = cpu::feature_names(cpu::supported());
    d["target"] = cpu::target_name(cpu::target());
    d["bulk_path"] = detail::bulk_path_name(detail::bulk_path());
    return d;
  }, "The machine as halfway sees it: the processor's name, the instruction-set features it may "
     "use (after HALFWAY_DISABLE_ISA), its vector target and the bulk kernels' path.");
}

#if HALFWAY_PY_SIM
/// The simulator: training, analysis, emulation, bisection and the git revision.
void bind_sim(py::module_& m) {
  m.def("_train_to_dir", &train_to_dir, py::arg("config"), py::arg("is_text"),
        py::arg("base_dir"), py::arg("out_dir"), py::arg("threads"), py::arg("max_memory") = "");
  bind_analysis_run(m);
  bind_emulation(m);
  bind_bisect(m);
  m.def("_git_revision", &sim::git_revision,
        "The git revision the simulator was built from ('-dirty': from uncommitted changes).");
}
#endif

/// format, formats, flag_names, the rounding names and the flag constants.
void bind_names(py::module_& m) {
  m.def("format", [](py::handle fmt) { return to_format(fmt); }, py::arg("fmt"),
        "The Format named by a string (or the Format itself).");
  m.def("formats", &preset_names, "Names of the preset formats.");
  m.def("flag_names", [](int flags) { return flags_name(static_cast<uint8_t>(flags)); },
        py::arg("flags"), "'inexact|underflow' style names of IEEE flag bits, '-' for none.");
  m.attr("roundings") = py::make_tuple("near_even", "near_maxMag", "minMag", "min", "max", "odd",
                                       "stochastic");
  m.attr("INEXACT") = int(flag::inexact);
  m.attr("UNDERFLOW") = int(flag::underflow);
  m.attr("OVERFLOW") = int(flag::overflow);
  m.attr("INFINITE") = int(flag::infinite);
  m.attr("INVALID") = int(flag::invalid);
}

}  // namespace

PYBIND11_MODULE(_halfway, m) {
  m.doc() = "Bit-exact low-precision floating point (the compiled core of the halfway package)";
  halfway::cpu::check_environment();  // an unknown name in HALFWAY_DISABLE_ISA fails the import

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  bind_format(m);
  bind_counts(m);
  bind_rounding(m);
  bind_arith(m);
  bind_blocks(m);
  bind_cpu_info(m);
#if HALFWAY_PY_SIM
  bind_sim(m);
#endif
  bind_names(m);
}
