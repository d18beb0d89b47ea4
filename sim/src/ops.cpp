// The ops. Each op: (1) the policy picks the compute dtype and casts the inputs (cast nodes),
// (2) the forward values are computed exactly or in binary64 (matmul: the accumulation model)
// and rounded once into the compute dtype, (3) the backward closure, beside it, computes each
// input gradient the same way and rounds it once into that input's dtype.
#include "halfway/sim/ops.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/block_quant.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/fp8.hpp"
#include "halfway/thread_pool.hpp"

#include "gelu_simd.hpp"
#include "gemm_f32.hpp"
#include "tabulated.hpp"

namespace halfway::sim {

namespace {

using Ptr = std::shared_ptr<TensorImpl>;
using Vec = std::vector<double>;

/// A tensor's values as binary64 for code that reads them through a pointer: fp64 storage
/// itself, or a converted copy of binary32 storage (exact).
class Wide {
 public:
  explicit Wide(const Values& v) {
    if (v.wide()) {
      p_ = v.f64();
      return;
    }
    // Widened in parts on the current runtime's threads (each value on its own), into
    // storage that nobody zeroes first.
    own_.reset(new double[v.size()]);
    const float* f = v.f32();
    double* d = own_.get();
    parallel_for(runtime().threads, v.size(), size_t(1) << 15, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) d[i] = double(f[i]);
    });
    p_ = d;
  }
  Wide(const Wide&) = delete;
  Wide& operator=(const Wide&) = delete;
  const double* data() const { return p_; }
  double operator[](size_t i) const { return p_[i]; }

 private:
  std::unique_ptr<double[]> own_;
  const double* p_ = nullptr;
};

TraceKind fwd_kind(const TensorImpl& t) {
  return t.weight ? TraceKind::weight : TraceKind::activation;
}
TraceKind grad_kind(const TensorImpl& t) {
  return t.weight ? TraceKind::weight_grad : TraceKind::activation_grad;
}

std::string grad_suffix(const std::string& role) {
  if (role == "input" || role == "other" || role == "target") return "grad_" + role;
  return role + ".grad";
}

Ptr make_node(const char* op, Shape shape, const DType& dt, Values data,
              std::vector<Ptr> parents) {
  auto p = std::make_shared<TensorImpl>();
  p->op = op;
  p->shape = std::move(shape);
  p->dtype = dt;
  p->data = std::move(data);
  for (const auto& q : parents)
    if (q->requires_grad) p->requires_grad = true;
  p->parents = std::move(parents);
  p->name = scoped("output");
  return p;
}

/// An op's forward result: y rounded into dt (traced as `<scope>.output`) as a new node.
Ptr output_node(Runtime& rt, const char* op, Shape shape, const DType& dt, const Vec& y,
                std::vector<Ptr> parents) {
  const TraceTag tag{scoped("output"), op, TraceKind::activation};
  return make_node(op, std::move(shape), dt, rounded(rt, dt, y, &tag), std::move(parents));
}
Ptr output_node(Runtime& rt, const char* op, Shape shape, const DType& dt, Values&& y,
                std::vector<Ptr> parents) {
  const TraceTag tag{scoped("output"), op, TraceKind::activation};
  return make_node(op, std::move(shape), dt, rounded(rt, dt, std::move(y), &tag),
                   std::move(parents));
}

/// Add a gradient contribution (already rounded into t's dtype) to t.grad; a second
/// contribution is summed and rounded again, as PyTorch accumulates in the tensor's dtype.
void add_grad(Runtime& rt, TensorImpl& t, Values&& g) {
  if (!t.requires_grad) return;
  if (t.grad.empty()) {
    t.grad = std::move(g);
    return;
  }
  const std::unique_ptr<double[]> sum(new double[g.size()]);
  parallel_for(rt.threads, g.size(), size_t(1) << 15, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) sum[i] = t.grad[i] + g[i];
  });
  const TraceTag tag{t.name + ".grad_accum", "accumulate", grad_kind(t)};
  t.grad = rounded(rt, t.dtype, sum.get(), g.size(), &tag);
}

/// Send an input gradient g to t: round it into t's dtype (traced under `tag`), then add it.
void send_grad(Runtime& rt, TensorImpl& t, const double* g, size_t n, const TraceTag* tag) {
  add_grad(rt, t, rounded(rt, t.dtype, g, n, tag));
}
void send_grad(Runtime& rt, TensorImpl& t, const Vec& g, const TraceTag* tag) {
  send_grad(rt, t, g.data(), g.size(), tag);
}
void send_grad(Runtime& rt, TensorImpl& t, Values&& g, const TraceTag* tag) {
  add_grad(rt, t, rounded(rt, t.dtype, std::move(g), tag));
}

/// A cast's node: `y` (x's values in dt) named `name`, a weight when x is one.
Ptr cast_output(const Tensor& x, const std::string& name, const DType& dt, Values y) {
  Ptr out = make_node("cast", x.shape(), dt, std::move(y), {x.ptr()});
  out->name = name;
  out->weight = x.impl()->weight;
  return out;
}

Tensor cast_node(const Tensor& x, const DType& dt, const std::string& name, TraceKind kind,
                 const std::string& grad_name) {
  if (x.dtype() == dt) return x;
  Runtime& rt = runtime();
  const TraceTag tag{name, "cast", kind};
  Ptr out = cast_output(x, name, dt, x.data().visit([&](const auto* p) {
    return rounded(rt, dt, p, x.data().size(), &tag);
  }));
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &rt;
    const TraceTag gtag{grad_name, "cast", grad_kind(*xp)};
    // The backward of a cast rounds the gradient back into the source dtype.
    out->backward_fn = [o, xp, r, gtag]() {
      o->grad.visit([&](const auto* p) {
        add_grad(*r, *xp, rounded(*r, xp->dtype, p, o->grad.size(), &gtag));
      });
    };
  }
  return Tensor(out);
}

Tensor fp8_cast_node(const Tensor& x, const std::string& name, const std::string& grad_name,
                     const char* op);

/// Apply the policy's rule for `op`: returns the compute dtype and replaces the inputs by
/// their casts where needed. Empty tensors (an absent bias) are skipped. Under an fp8 policy a
/// lowered op gets scaled fp8 casts of its inputs and computes in fp32.
DType prepare(OpKind op, std::vector<Tensor>& ts, std::initializer_list<const char*> roles) {
  const Policy* pol = context().policy;
  const CastRule r = pol ? pol->rule_in(op, context().scope) : CastRule::input;
  if (r == CastRule::lower && pol->fp8) {
    size_t i = 0;
    for (const char* role : roles) {
      Tensor& t = ts[i++];
      if (t) t = fp8_cast_node(t, scoped(role), scoped(grad_suffix(role)), op_name(op));
    }
    return DType::f32();
  }
  DType dt;
  bool first = true;
  auto widen = [&](const DType& d) {
    dt = first ? d : widest(dt, d);
    first = false;
  };
  if (r == CastRule::lower) {
    dt = pol->low;
  } else {
    for (const Tensor& t : ts)
      if (t) widen(r == CastRule::fp32 && !t.dtype().is_f64() ? DType::f32() : t.dtype());
  }
  size_t i = 0;
  for (const char* role : roles) {
    Tensor& t = ts[i++];
    if (!t || t.dtype() == dt) continue;
    const std::string rs(role);
    // The op's own backward records its gradient under `grad_suffix`; the cast's backward
    // only gets that name when the op itself computes in a non-traced dtype.
    t = cast_node(t, dt, scoped(rs), fwd_kind(*t.impl()),
                  scoped(grad_suffix(rs)) + (dt.is_low() ? ".cast" : ""));
  }
  return dt;
}

/// A GEMM operand: a tensor's binary32 storage, or binary64 values (fp64 tensors, fp8 and
/// block-scaled copies).
struct Src {
  const float* f = nullptr;
  const double* d = nullptr;
  Src() = default;
  Src(const float* p) : f(p) {}
  Src(const double* p) : d(p) {}
  Src(const Vec& v) : d(v.data()) {}
  Src(const Values& v) {
    if (v.wide())
      d = v.f64();
    else
      f = v.f32();
  }
  explicit operator bool() const { return f || d; }
  Src operator+(int64_t i) const { return f ? Src(f + i) : Src(d + i); }
};

/// Where a GEMM writes its results: binary32, or binary64 for fp64.
struct Dst {
  float* f = nullptr;
  double* d = nullptr;
  Dst(float* p) : f(p) {}
  Dst(double* p) : d(p) {}
  Dst(Values& v) {
    if (v.wide())
      d = v.f64();
    else
      f = v.f32();
  }
  Dst operator+(int64_t i) const { return f ? Dst(f + i) : Dst(d + i); }
};

/// Storage for the m × n results of a GEMM in `dt`.
Values gemm_out(const DType& dt, int64_t m, int64_t n) {
  return Values::uninitialized(size_t(m * n), dt.is_f64());
}

Vec transpose2d(const double* x, int64_t rows, int64_t cols) {
  Vec t(static_cast<size_t>(rows * cols));
  constexpr int64_t kTile = 32;  // tiles keep both sides' cache lines in use
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) t[size_t(j * rows + i)] = x[i * cols + j];
    }
  return t;
}

/// Rows × cols of row-major binary32 from `src` into dst: the same layout, or (`transposed`)
/// src holding the cols × rows transpose. Values of fp32 or narrower dtypes convert exactly.
template <class T>
void load_f32(const T* src, int64_t rows, int64_t cols, bool transposed, float* dst,
              int threads) {
  if (!transposed) {
    std::copy(src, src + rows * cols, dst);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    detail::transpose_f32(src, rows, cols, dst, threads);
    return;
  }
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) dst[i * cols + j] = float(src[j * rows + i]);
    }
}

/// A buffer of at least n floats, kept per thread between calls: a step's GEMMs reuse it.
float* scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// Rows × cols of row-major binary32 from `src` (see load_f32): binary32 storage in its own
/// layout as it is, anything else converted into `buf`.
const float* as_f32(Src src, int64_t rows, int64_t cols, bool transposed,
                    std::vector<float>& buf, int threads = 1) {
  if (src.f && !transposed) return src.f;
  float* dst = scratch(buf, size_t(rows * cols));
  if (src.f)
    load_f32(src.f, rows, cols, transposed, dst, threads);
  else
    load_f32(src.d, rows, cols, transposed, dst, threads);
  return dst;
}

/// src as binary64 (for fp64 GEMMs, whose operands are fp64 storage).
const double* as_f64(Src src, size_t n, Vec& buf) {
  if (src.d) return src.d;
  buf.assign(src.f, src.f + n);
  return buf.data();
}

/// The binary32 part of gemm_dt: C = A·B (+ bias) by `model` on operands of `in`, with the
/// layouts of gemm_dt.
void gemm_model_f32(Runtime& rt, const AccumulationModel& model, const Format& in, int64_t m,
                    int64_t n, int64_t k, Src A, Src B, Src bias, Dst C, Layout layout,
                    const BulkOptions& o) {
  const bool at = layout == Layout::tn, bt = layout == Layout::nt;
  thread_local std::vector<float> fa, fb, fc, fbias;
  const float* a = as_f32(A, m, k, at, fa, rt.threads);
  const float* b = as_f32(B, k, n, bt, fb, rt.threads);
  float* c = C.f ? C.f : scratch(fc, size_t(m * n));
  const float* pbias = bias ? as_f32(bias, 1, n, false, fbias) : nullptr;
  gemm(model, in, m, n, k, a, b, pbias, c, o, rt.threads);
  if (!C.f) std::copy(c, c + m * n, C.d);
}

const Accumulation& run_accumulation(const Runtime& rt) { return *rt.accumulator; }

/// C = A·B (+ bias) with `dt`'s arithmetic (binary64, or the runtime's accumulation model);
/// C is not yet rounded into dt. `layout` also says how the operands are stored: Layout::tn
/// passes A as its transpose (k × m), Layout::nt passes B as its transpose (n × k), as the
/// backward pass and a linear layer's weight hold them; the transposition happens while the
/// values are converted to binary32.
void gemm_dt(Runtime& rt, const DType& dt, int64_t m, int64_t n, int64_t k, Src A, Src B,
             Src bias, Dst C, Layout layout) {
  const BulkOptions o = next_rounding(rt);
  const bool at = layout == Layout::tn, bt = layout == Layout::nt;
  if (dt.is_f64()) {
    Vec wa, wb, wbias;
    const double* a = as_f64(A, size_t(m * k), wa);
    const double* b = as_f64(B, size_t(k * n), wb);
    const Vec ta = at ? transpose2d(a, k, m) : Vec(), tb = bt ? transpose2d(b, n, k) : Vec();
    if (!C.d) throw std::logic_error("fp64 GEMM into binary32");
    gemm_f64(m, n, k, at ? ta.data() : a, bt ? tb.data() : b,
             bias ? as_f64(bias, size_t(n), wbias) : nullptr, C.d);
    return;
  }
  const AccumulationModel model = run_accumulation(rt).resolve(dt, m, n, k, layout, o);
  gemm_model_f32(rt, model, dt.is_low() ? dt.fmt : accumulation::kF32, m, n, k, A, B, bias, C,
                 layout, o);
}

// ---- broadcasting ----------------------------------------------------------------------------

struct Bcast {
  Shape out;
  std::vector<int64_t> sa, sb;  // strides of a and b per output dimension (0: broadcast)
};

Bcast broadcast(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Bcast bc;
  bc.out.assign(r, 1);
  bc.sa.assign(r, 0);
  bc.sb.assign(r, 0);
  int64_t sta = 1, stb = 1;
  for (size_t i = r; i-- > 0;) {
    const size_t off_a = r - a.size(), off_b = r - b.size();
    const int64_t da = i >= off_a ? a[i - off_a] : 1;
    const int64_t db = i >= off_b ? b[i - off_b] : 1;
    if (da != db && da != 1 && db != 1)
      throw InputError("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    bc.out[i] = da == 1 ? db : da;
    bc.sa[i] = da == 1 ? 0 : sta;
    bc.sb[i] = db == 1 ? 0 : stb;
    sta *= da;
    stb *= db;
  }
  return bc;
}

template <class F>
void bcast_loop(const Bcast& bc, F f) {
  const size_t r = bc.out.size();
  const int64_t n = numel(bc.out);
  std::vector<int64_t> idx(r, 0);
  int64_t ia = 0, ib = 0;
  for (int64_t o = 0; o < n; ++o) {
    f(o, ia, ib);
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      ia += bc.sa[d];
      ib += bc.sb[d];
      if (idx[d] < bc.out[d]) break;
      ia -= bc.sa[d] * bc.out[d];
      ib -= bc.sb[d] * bc.out[d];
      idx[d] = 0;
    }
  }
}

// ---- generic elementwise ---------------------------------------------------------------------

/// f(o, ia, ib) over every output element of a broadcast: where neither operand is broadcast
/// (`elementwise`: ia = ib = o) in parts on the pool, each element on its own; otherwise in
/// order, as a reduction into a broadcast operand needs.
template <class F>
void bcast_each(int threads, const Bcast& bc, bool elementwise, F f) {
  if (!elementwise) return bcast_loop(bc, f);
  parallel_for(threads, size_t(numel(bc.out)), size_t(1) << 14, [&](size_t lo, size_t hi) {
    for (size_t o = lo; o < hi; ++o) f(int64_t(o), int64_t(o), int64_t(o));
  });
}

/// The gradient (n values) of a binary op's input a (of_b: b) from d(o, ia, ib), the part of
/// output element o. Elementwise, each element is 0 + d(o, o, o), what adding into a zeroed
/// buffer gives (−0 becomes +0), in parts on the pool and into storage nobody zeroes; with
/// broadcasting, a broadcast input's elements are sums in output order.
template <class D>
std::unique_ptr<double[]> input_grad(int threads, const Bcast& bc, bool elementwise, size_t n,
                                     bool of_b, D d) {
  std::unique_ptr<double[]> g(elementwise ? new double[n] : new double[n]());
  bcast_each(threads, bc, elementwise, [&](int64_t o, int64_t ia, int64_t ib) {
    const size_t at = size_t(of_b ? ib : ia);
    g[at] = (elementwise ? 0.0 : g[at]) + d(o, ia, ib);
  });
  return g;
}

/// The fewest rows of length D worth a part of their own (about 16 Ki values).
size_t rows_per_part(int64_t D) {
  return std::max<size_t>(1, (size_t(1) << 14) / size_t(std::max<int64_t>(D, 1)));
}

/// n values f(i) (computed in binary64) as the storage of a `wide` or binary32 dtype: binary32
/// storage holds fl32(f(i)), the first step of rounding into any dtype but fp64. Large
/// tensors are computed in parts on up to `threads` threads.
template <class F>
Values computed(int threads, bool wide, size_t n, F f) {
  Values v = Values::uninitialized(n, wide);
  v.visit([&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    parallel_for(threads, n, size_t(1) << 14, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) p[i] = static_cast<T>(f(i));
    });
  });
  return v;
}

/// A costly function of one value (a transcendental) that unary() looks up by encoding
/// (tabulated.hpp) where the input's dtype has at most 16 bits. `F` is stateless.
/// `rows`, where given, computes fl32(f(x)) for fp32 inputs bit for bit (gelu_simd.hpp).
template <class F>
struct Tabulated {
  F f;
  size_t (*rows)(const float* x, size_t n, float* out) = nullptr;
  double operator()(double x) const { return f(x); }
};
/// A gradient g·d(x) through a costly derivative of the input alone, d looked up as Tabulated;
/// `rows`, where given, computes fl32(g·d(x)) for fp32 inputs bit for bit.
template <class D>
struct TimesDerivative {
  D d;
  size_t (*rows)(const float* g, const float* x, size_t n, float* out) = nullptr;
  double operator()(double g, double x, double) const { return g * d(x); }
};
template <class F>
Tabulated<F> tabulated(F f, size_t (*rows)(const float*, size_t, float*) = nullptr) {
  return {f, rows};
}
template <class T>
inline constexpr bool kIsTabulated = false;
template <class F>
inline constexpr bool kIsTabulated<Tabulated<F>> = true;
template <class T>
inline constexpr bool kIsTimesDerivative = false;
template <class D>
inline constexpr bool kIsTimesDerivative<TimesDerivative<D>> = true;

/// n fp32 values written by rows(lo, hi, out) for [lo, hi), in chunks over the threads.
template <class Rows>
Values by_rows(int threads, size_t n, Rows rows) {
  Values v = Values::uninitialized(n, false);
  float* out = v.f32();
  parallel_for(threads, n, size_t(1) << 14, [&](size_t lo, size_t hi) { rows(lo, hi, out); });
  return v;
}

/// n values fl32(f(x[i])) as computed() gives them, looked up by x[i]'s encoding in `fmt`
/// where x[i] is one of its values; f is stateless.
template <class F>
Values looked_up(int threads, const Format& fmt, const float* x, size_t n, F f) {
  const std::vector<float>& table = detail::tabulated<float>(fmt, f);
  Values v = Values::uninitialized(n, false);
  float* out = v.f32();
  parallel_for(threads, n, size_t(1) << 14, [&](size_t lo, size_t hi) {
    detail::for_each_encoding(fmt, x + lo, hi - lo, [&](size_t i, int32_t key) {
      out[lo + i] = key >= 0 ? table[size_t(key)] : static_cast<float>(f(double(x[lo + i])));
    });
  });
  return v;
}

/// Gradients fl32(g[i]·d(x[i])) as computed() gives them, d looked up by x[i]'s encoding.
template <class D>
Values looked_up_grad(int threads, const Format& fmt, const float* g, const float* x, size_t n,
                      D d) {
  const std::vector<double>& table = detail::tabulated<double>(fmt, d);
  Values v = Values::uninitialized(n, false);
  float* out = v.f32();
  parallel_for(threads, n, size_t(1) << 14, [&](size_t lo, size_t hi) {
    detail::for_each_encoding(fmt, x + lo, hi - lo, [&](size_t i, int32_t key) {
      const double dx = key >= 0 ? table[size_t(key)] : d(double(x[lo + i]));
      out[lo + i] = static_cast<float>(double(g[lo + i]) * dx);
    });
  });
  return v;
}

/// f(x) forward; bw(g, x, y) the input gradient. On an input of at most 16 bits, a Tabulated f
/// and the derivative of a TimesDerivative bw are looked up by encoding (bit-identical).
template <class F, class BW>
Tensor unary(OpKind kind, const Tensor& x0, bool saves_out, F f, BW bw) {
  std::vector<Tensor> in{x0};
  const DType dt = prepare(kind, in, {"input"});
  const Tensor& x = in[0];
  Runtime& rt = runtime();
  const char* op = op_name(kind);
  Values y = x.data().visit([&](const auto* xv) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(xv)>>;
    if constexpr (std::is_same_v<T, float> && kIsTabulated<F>) {
      if (!dt.is_f64() && detail::tabulable(x.dtype()))
        return looked_up(rt.threads, x.dtype().fmt, xv, x.data().size(), f.f);
      if (!dt.is_f64() && f.rows)
        return by_rows(rt.threads, x.data().size(), [&](size_t lo, size_t hi, float* out) {
          f.rows(xv + lo, hi - lo, out + lo);
        });
    }
    return computed(rt.threads, dt.is_f64(), x.data().size(),
                    [&](size_t i) { return f(double(xv[i])); });
  });
  Ptr out = output_node(rt, op, x.shape(), dt, std::move(y), {x.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &rt;
    const TraceTag gtag{scoped("grad_input"), op, grad_kind(*xp)};
    if (saves_out)
      out->saves_output = true;
    else
      out->saved = {xp};
    out->backward_fn = [o, xp, r, gtag, bw]() {
      Values g = o->grad.visit([&](const auto* gv) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(gv)>>;
        const T *xv = xp->data.as<T>(), *yv = o->data.as<T>();
        if constexpr (std::is_same_v<T, float> && kIsTimesDerivative<BW>) {
          if (!xp->dtype.is_f64() && detail::tabulable(xp->dtype))
            return looked_up_grad(r->threads, xp->dtype.fmt, gv, xv, o->grad.size(), bw.d);
          if (!xp->dtype.is_f64() && bw.rows)
            return by_rows(r->threads, o->grad.size(), [&](size_t lo, size_t hi, float* out) {
              bw.rows(gv + lo, xv + lo, hi - lo, out + lo);
            });
        }
        return computed(r->threads, xp->dtype.is_f64(), o->grad.size(), [&](size_t i) {
          return bw(double(gv[i]), double(xv[i]), double(yv[i]));
        });
      });
      send_grad(*r, *xp, std::move(g), &gtag);
    };
  }
  return Tensor(out);
}

/// f(a, b) forward; ga(g, a, b, y), gb(g, a, b, y) the gradients, summed over broadcasting.
template <class F, class GA, class GB>
Tensor binary(OpKind kind, const Tensor& a0, const Tensor& b0, bool save_inputs, F f, GA ga,
              GB gb) {
  std::vector<Tensor> in{a0, b0};
  const DType dt = prepare(kind, in, {"input", "other"});
  const Tensor &a = in[0], &b = in[1];
  Runtime& rt = runtime();
  const char* op = op_name(kind);
  const Bcast bc = broadcast(a.shape(), b.shape());
  const bool elementwise = a.shape() == bc.out && b.shape() == bc.out;
  Values y = Values::uninitialized(size_t(numel(bc.out)), dt.is_f64());
  y.visit([&](auto* py) {
    using T = std::remove_pointer_t<decltype(py)>;
    const T *pa = a.data().as<T>(), *pb = b.data().as<T>();
    bcast_each(rt.threads, bc, elementwise, [&](int64_t o, int64_t ia, int64_t ib) {
      py[o] = static_cast<T>(f(double(pa[ia]), double(pb[ib])));
    });
  });
  Ptr out = output_node(rt, op, bc.out, dt, std::move(y), {a.ptr(), b.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr ap = a.ptr(), bp = b.ptr();
    Runtime* r = &rt;
    const TraceTag ta{scoped("grad_input"), op, grad_kind(*ap)};
    const TraceTag tb{scoped("grad_other"), op, grad_kind(*bp)};
    if (save_inputs) out->saved = {ap, bp};
    out->backward_fn = [o, ap, bp, r, ta, tb, bc, elementwise, ga, gb]() {
      o->grad.visit([&](const auto* gv) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(gv)>>;
        const T *xa = ap->data.as<T>(), *xb = bp->data.as<T>(), *yv = o->data.as<T>();
        const auto grad_of = [&](TensorImpl& t, bool of_b, auto d, const TraceTag* tag) {
          const size_t n = t.data.size();
          const auto g = input_grad(r->threads, bc, elementwise, n, of_b,
                                    [&](int64_t i, int64_t ia, int64_t ib) {
                                      return d(double(gv[i]), double(xa[ia]), double(xb[ib]),
                                               double(yv[i]));
                                    });
          send_grad(*r, t, g.get(), n, tag);
        };
        if (ap->requires_grad) grad_of(*ap, false, ga, &ta);
        if (bp->requires_grad) grad_of(*bp, true, gb, &tb);
      });
    };
  }
  return Tensor(out);
}

/// Rows of the last dimension: (number of rows, row length).
std::pair<int64_t, int64_t> rows_of(const Tensor& x, const char* op) {
  if (x.rank() < 1) throw InputError(std::string(op) + " needs at least one dimension");
  const int64_t d = x.dim(-1);
  return {d ? x.numel() / d : 0, d};
}

double neg_fill(const DType& dt) {
  if (!dt.is_low() || dt.fmt.has_inf()) return -std::numeric_limits<double>::infinity();
  Env env;
  return -to_f64(dt.fmt, dt.fmt.max_mag(), env);
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;

/// A linear layer's output y (x's shape with the last dimension nout) rounded into dt, as the
/// node whose parents are x, w and, when present, b.
Ptr linear_output(Runtime& rt, const DType& dt, const Tensor& x, const Tensor& w, const Tensor& b,
                  int64_t nout, Values&& y) {
  Shape os = x.shape();
  os.back() = nout;
  std::vector<Ptr> parents{x.ptr(), w.ptr()};
  if (b) parents.push_back(b.ptr());
  return output_node(rt, "linear", std::move(os), dt, std::move(y), std::move(parents));
}

// ---- fp8: Transformer Engine's per-tensor scaling ---------------------------------------------

/// A GEMM operand as an fp8 GEMM reads it: the scaled values rounded into fp8, and 1/scale.
struct Fp8Operand {
  Vec q;
  float inv = 1.0f;
};

Fp8State& fp8_state(Runtime& rt) {
  if (!rt.fp8) throw std::logic_error("fp8 policy without scaling state");
  return *rt.fp8;
}

bool fp8_lowers(OpKind op) {
  const Policy* pol = context().policy;
  return pol && pol->fp8 && pol->rule_in(op, context().scope) == CastRule::lower;
}

/// x quantized into f with the per-tensor scale kept under `key` (also its trace name).
Fp8Operand fp8_quantize(Runtime& rt, const std::string& key, const Format& f, const Values& x,
                        TraceKind kind, const char* op) {
  Fp8Operand o;
  const TraceTag tag{key, op, kind};
  o.inv = 1.0f / fp8_state(rt).quantize(key, f, Wide(x).data(), x.size(), o.q, rt, &tag);
  return o;
}

/// The values a quantized operand stands for, fl32(q·(1/s)), as TE dequantizes.
Vec dequantize(Fp8Operand&& o) {
  for (double& v : o.q) v = static_cast<float>(v) * o.inv;
  return std::move(o.q);
}
/// The same, as fp32 storage.
Values dequantized(Fp8Operand&& o) { return Values(dequantize(std::move(o)), false); }

/// The fp8 copy a GEMM's backward keeps (memory accounting).
std::shared_ptr<const TensorImpl> fp8_copy(Values q, const Shape& s, const Format& f,
                                           bool weight) {
  auto t = std::make_shared<TensorImpl>();
  t->shape = s;
  t->dtype = DType::low(f);
  t->data = std::move(q);
  t->weight = weight;
  return t;
}

/// C = A·B with `dt`'s arithmetic, for the batched loops below.
/// The GEMMs of a matmul and the dtype of their results (the storage they write).
struct GemmFn {
  std::function<void(int64_t m, int64_t n, int64_t k, Src A, Src B, Dst C, Layout layout)> run;
  DType out;
  void operator()(int64_t m, int64_t n, int64_t k, Src A, Src B, Dst C, Layout l) const {
    run(m, n, k, A, B, C, l);
  }
};

GemmFn gemm_in(Runtime* rt, DType dt) {
  return {[rt, dt](int64_t m, int64_t n, int64_t k, Src A, Src B, Dst C, Layout l) {
            gemm_dt(*rt, dt, m, n, k, A, B, Src(), C, l);
          },
          dt};
}

/// An fp8 GEMM (cuBLASLt's scaled fp8 GEMM with an fp32 output): the products of the fp8
/// values (operands of `fa` and `fb`) accumulate as fp8_gemm_model says for this GEMM of a
/// linear layer (exact fp32 unless the run's accumulation models Hopper), then
/// C = fl32(fl32(acc)·alpha) (+ bias in fp32), alpha the product of the operands' inverse scales.
void gemm_fp8(Runtime& rt, Fp8Gemm role, const Format& fa, const Format& fb, int64_t m, int64_t n,
              int64_t k, Src A, Src B, const Values* bias, float* C, Layout layout, float alpha) {
  const BulkOptions o = next_rounding(rt);
  const AccumulationModel model = fp8_gemm_model(run_accumulation(rt), role);
  const bool exact = model.kind == AccumulationModel::Kind::sequential_fma &&
                     model.acc == accumulation::kF32 && model.block <= 1;
  gemm_model_f32(rt, model, exact ? accumulation::kF32 : fp8_gemm_format(fa, fb), m, n, k, A, B,
                 Src(), Dst(C), layout, o);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float v = C[i * n + j] * alpha;
      if (bias) v = v + static_cast<float>((*bias)[size_t(j)]);
      C[i * n + j] = v;
    }
}

GemmFn gemm_fp8_fn(Runtime* rt, Fp8Gemm role, const Format& fa, const Format& fb, float alpha) {
  return {[rt, role, fa, fb, alpha](int64_t m, int64_t n, int64_t k, Src A, Src B, Dst C,
                                    Layout l) {
            gemm_fp8(*rt, role, fa, fb, m, n, k, A, B, nullptr, C.f, l, alpha);
          },
          DType::f32()};
}

/// An op's input under an fp8 policy that opts the op in: quantized with its own per-tensor
/// scale and handed to the op dequantized, fl32(q·(1/s)), as TE dequantizes; the op computes
/// in fp32. The backward quantizes the gradient into the backward format with its own scale
/// (trace name `grad_name`) and dequantizes it the same way.
Tensor fp8_cast_node(const Tensor& x, const std::string& name, const std::string& grad_name,
                     const char* op) {
  Runtime& rt = runtime();
  const Fp8Config& cfg = fp8_state(rt).config();
  Values y = dequantized(fp8_quantize(rt, name, cfg.fwd, x.data(), fwd_kind(*x.impl()), op));
  Ptr out = cast_output(x, name, DType::f32(), std::move(y));
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &rt;
    out->backward_fn = [o, xp, r, grad_name, op]() {
      const Format bwd = fp8_state(*r).config().bwd;
      send_grad(*r, *xp, dequantize(fp8_quantize(*r, grad_name, bwd, o->grad, grad_kind(*xp), op)),
                nullptr);
    };
  }
  return Tensor(out);
}

/// An fp8 GEMM's operand: its quantized copy, and, where `halfway bisect` promoted this copy
/// (Policy::promoted_copies), the operand's own values, which the GEMM then reads instead.
struct Fp8Read {
  const Fp8Operand& q;
  const Values* promoted = nullptr;
};

/// fp32 values of a promoted operand, or the dequantized copy fl32(q·(1/s)) of one that is not.
Vec fp32_read(const Fp8Read& r) {
  if (!r.promoted) return dequantize(Fp8Operand(r.q));
  Vec v(r.promoted->size());
  r.promoted->visit([&](const auto* p) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p[i]);
  });
  return v;
}

/// One GEMM of an fp8 linear layer: (Aq·Bq)·(1/sa·1/sb) [+ bias] under the fp8 GEMM's
/// accumulation; with a promoted operand, an fp32 GEMM of the promoted operand's own values
/// and the other's dequantized copy (the run's fp32 accumulation, as an fp32 linear layer).
void gemm_fp8_read(Runtime& rt, Fp8Gemm role, const Format& fa, const Format& fb, int64_t m,
                   int64_t n, int64_t k, const Fp8Read& a, const Fp8Read& b, const Values* bias,
                   float* C, Layout layout) {
  if (!a.promoted && !b.promoted) {
    gemm_fp8(rt, role, fa, fb, m, n, k, a.q.q, b.q.q, bias, C, layout, a.q.inv * b.q.inv);
    return;
  }
  const Vec A = fp32_read(a), B = fp32_read(b);
  gemm_dt(rt, DType::f32(), m, n, k, A, B, bias ? Src(*bias) : Src(), Dst(C), layout);
}

bool promoted(const std::array<bool, kGemmCopyCount>& p, GemmCopy c) {
  return p[static_cast<size_t>(c)];
}

// ---- matmul's batched GEMMs --------------------------------------------------------------------

/// A (..., m, k) · B (k, n) or (..., k, n) with the same batch dimensions.
struct MatmulDims {
  int64_t batch = 0, m = 0, n = 0, k = 0;
  bool b2 = true;  ///< B is one 2-D matrix shared by the batch
};

MatmulDims matmul_dims(const Tensor& a, const Tensor& b) {
  if (a.rank() < 2 || b.rank() < 2)
    throw InputError("matmul needs operands of rank >= 2, got " + shape_str(a.shape()) +
                     " and " + shape_str(b.shape()));
  MatmulDims d;
  d.m = a.dim(-2);
  d.k = a.dim(-1);
  d.n = b.dim(-1);
  if (b.dim(-2) != d.k)
    throw InputError("matmul shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                     " do not match");
  d.b2 = b.rank() == 2;
  if (!d.b2 && (b.rank() != a.rank() ||
                !std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin())))
    throw InputError("matmul batch dimensions of " + shape_str(a.shape()) + " and " +
                     shape_str(b.shape()) + " differ");
  d.batch = (d.m * d.k != 0) ? a.numel() / (d.m * d.k) : 0;
  return d;
}

/// Y = A·B.
Values mm_forward(const MatmulDims& d, Src A, Src B, const GemmFn& gemm) {
  Values y = gemm_out(gemm.out, d.batch * d.m, d.n);
  if (d.b2) {
    gemm(d.batch * d.m, d.n, d.k, A, B, y, Layout::nn);
  } else {
    for (int64_t i = 0; i < d.batch; ++i)
      gemm(d.m, d.n, d.k, A + i * d.m * d.k, B + i * d.k * d.n, Dst(y) + i * d.m * d.n,
           Layout::nn);
  }
  return y;
}

/// dA = G·Bᵀ.
Values mm_grad_a(const MatmulDims& d, Src G, Src B, const GemmFn& gemm) {
  Values g = gemm_out(gemm.out, d.batch * d.m, d.k);
  if (d.b2) {
    gemm(d.batch * d.m, d.k, d.n, G, B, g, Layout::nt);
  } else {
    for (int64_t i = 0; i < d.batch; ++i) {
      gemm(d.m, d.k, d.n, G + i * d.m * d.n, B + i * d.k * d.n, Dst(g) + i * d.m * d.k,
           Layout::nt);
    }
  }
  return g;
}

/// dB = Aᵀ·G (over the whole batch when B is shared).
Values mm_grad_b(const MatmulDims& d, Src A, Src G, const GemmFn& gemm) {
  Values g = gemm_out(gemm.out, (d.b2 ? 1 : d.batch) * d.k, d.n);
  if (d.b2) {
    gemm(d.k, d.n, d.batch * d.m, A, G, g, Layout::tn);
  } else {
    for (int64_t i = 0; i < d.batch; ++i) {
      gemm(d.k, d.n, d.m, A + i * d.m * d.k, G + i * d.m * d.n, Dst(g) + i * d.k * d.n,
           Layout::tn);
    }
  }
  return g;
}

Shape matmul_shape(const Tensor& a, const MatmulDims& d) {
  Shape os = a.shape();
  os.back() = d.n;
  return os;
}

/// fp32 unless an input is fp64: where an fp8 GEMM's output goes.
DType fp8_out_dtype(const Tensor& a, const Tensor& b) {
  const DType dt = widest(a.dtype(), b.dtype());
  return dt.is_low() ? DType::f32() : dt;
}

Tensor matmul_fp8(const Tensor& a, const Tensor& b, const MatmulDims& d);
Tensor linear_fp8(const Tensor& x, const Tensor& w, const Tensor& b);

bool blocks_lower_linear() {
  const Policy* pol = context().policy;
  return pol && pol->blocks_in(context().scope) &&
         pol->rule_in(OpKind::linear, context().scope) == CastRule::lower;
}
Tensor linear_blocks(const Tensor& x, const Tensor& w, const Tensor& b);

}  // namespace

std::vector<double> bias_grad(const Values& G, int64_t rows, int64_t n, int threads) {
  std::vector<double> g(size_t(n), 0.0);
  G.visit([&](const auto* p) {  // columns in parts, as layer_norm's weight and bias gradients
    parallel_for(threads, size_t(n), rows_per_part(rows), [&](size_t j0, size_t j1) {
      for (int64_t i = 0; i < rows; ++i)
        for (size_t j = j0; j < j1; ++j) g[j] += double(p[size_t(i * n) + j]);
    });
  });
  return g;
}

// ---- casts -----------------------------------------------------------------------------------

Tensor cast(const Tensor& x, const DType& dt, const std::string& name, TraceKind kind) {
  return cast_node(x, dt, name, kind,
                   name + (kind == TraceKind::weight ? ".grad" : ".grad_input"));
}

// ---- matmul and linear -----------------------------------------------------------------------

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  const MatmulDims d = matmul_dims(a0, b0);
  if (fp8_lowers(OpKind::matmul)) return matmul_fp8(a0, b0, d);
  std::vector<Tensor> in{a0, b0};
  const DType dt = prepare(OpKind::matmul, in, {"input", "other"});
  const Tensor &a = in[0], &b = in[1];
  Runtime& rt = runtime();
  Values y = mm_forward(d, a.data(), b.data(), gemm_in(&rt, dt));
  Ptr out = output_node(rt, "matmul", matmul_shape(a, d), dt, std::move(y), {a.ptr(), b.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr ap = a.ptr(), bp = b.ptr();
    Runtime* r = &rt;
    const TraceTag ta{scoped("grad_input"), "matmul", grad_kind(*ap)};
    const TraceTag tb{scoped("grad_other"), "matmul", grad_kind(*bp)};
    out->saved = {ap, bp};
    out->backward_fn = [o, ap, bp, r, ta, tb, dt, d]() {
      const GemmFn gemm = gemm_in(r, dt);
      if (ap->requires_grad) {
        send_grad(*r, *ap, mm_grad_a(d, o->grad, bp->data, gemm), &ta);
      }
      if (bp->requires_grad) {
        send_grad(*r, *bp, mm_grad_b(d, ap->data, o->grad, gemm), &tb);
      }
    };
  }
  return Tensor(out);
}

Tensor linear(const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  if (w0.rank() != 2) throw InputError("linear weight must be 2-D, got " + shape_str(w0.shape()));
  const int64_t nout = w0.dim(0), nin = w0.dim(1);
  if (x0.rank() < 1 || x0.dim(-1) != nin)
    throw InputError("linear input " + shape_str(x0.shape()) + " does not match weight " +
                     shape_str(w0.shape()));
  if (b0 && b0.numel() != nout)
    throw InputError("linear bias " + shape_str(b0.shape()) + " does not match weight " +
                     shape_str(w0.shape()));
  if (fp8_lowers(OpKind::linear)) return linear_fp8(x0, w0, b0);
  if (blocks_lower_linear()) return linear_blocks(x0, w0, b0);
  std::vector<Tensor> in{x0, w0, b0};
  const DType dt = prepare(OpKind::linear, in, {"input", "weight", "bias"});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const int64_t M = nin ? x.numel() / nin : 0;
  Runtime& rt = runtime();
  Values y = gemm_out(dt, M, nout);
  gemm_dt(rt, dt, M, nout, nin, x.data(), w.data(), b ? Src(b.data()) : Src(), y, Layout::nt);
  Ptr out = linear_output(rt, dt, x, w, b, nout, std::move(y));
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr(), wp = w.ptr(), bp = b ? b.ptr() : nullptr;
    Runtime* r = &rt;
    const TraceTag tx{scoped("grad_input"), "linear", grad_kind(*xp)};
    const TraceTag tw{scoped("weight.grad"), "linear", grad_kind(*wp)};
    const TraceTag tb{scoped("bias.grad"), "linear",
                      bp ? grad_kind(*bp) : TraceKind::weight_grad};
    out->saved = {xp, wp};
    out->backward_fn = [o, xp, wp, bp, r, tx, tw, tb, dt, M, nin, nout]() {
      const Values& G = o->grad;
      if (xp->requires_grad) {
        Values g = gemm_out(dt, M, nin);
        gemm_dt(*r, dt, M, nin, nout, G, wp->data, Src(), g, Layout::nn);
        send_grad(*r, *xp, std::move(g), &tx);
      }
      if (wp->requires_grad) {
        Values g = gemm_out(dt, nout, nin);
        gemm_dt(*r, dt, nout, nin, M, G, xp->data, Src(), g, Layout::tn);
        send_grad(*r, *wp, std::move(g), &tw);
      }
      if (bp && bp->requires_grad) {
        send_grad(*r, *bp, bias_grad(G, M, nout, r->threads), &tb);
      }
    };
  }
  return Tensor(out);
}

namespace {

/// The fp8 GEMMs of a matmul both of whose operands the config opts in: A and B in the forward
/// format, the output gradient in the backward format, each with its own scale.
Tensor matmul_fp8(const Tensor& a, const Tensor& b, const MatmulDims& d) {
  Runtime& rt = runtime();
  const Fp8Config& cfg = fp8_state(rt).config();
  const Fp8Operand aq =
      fp8_quantize(rt, scoped("input"), cfg.fwd, a.data(), fwd_kind(*a.impl()), "matmul");
  const Fp8Operand bq =
      fp8_quantize(rt, scoped("other"), cfg.fwd, b.data(), fwd_kind(*b.impl()), "matmul");
  Values y = mm_forward(d, aq.q, bq.q,
                        gemm_fp8_fn(&rt, Fp8Gemm::fprop, cfg.fwd, cfg.fwd, aq.inv * bq.inv));
  const DType dt = fp8_out_dtype(a, b);
  Ptr out = output_node(rt, "matmul", matmul_shape(a, d), dt, std::move(y), {a.ptr(), b.ptr()});
  if (out->requires_grad) {
    out->saved = {fp8_copy(Values(aq.q, false), a.shape(), cfg.fwd, false),
                  fp8_copy(Values(bq.q, false), b.shape(), cfg.fwd, false)};
    TensorImpl* o = out.get();
    Ptr ap = a.ptr(), bp = b.ptr();
    Runtime* r = &rt;
    const std::string kg = scoped("grad_output");
    const TraceTag ta{scoped("grad_input"), "matmul", grad_kind(*ap)};
    const TraceTag tb{scoped("grad_other"), "matmul", grad_kind(*bp)};
    out->backward_fn = [o, ap, bp, r, aq, bq, kg, ta, tb, d]() {
      const Format bwd = fp8_state(*r).config().bwd;
      const Fp8Operand g = fp8_quantize(*r, kg, bwd, o->grad, TraceKind::activation_grad, "matmul");
      if (ap->requires_grad) {
        const Format fwd = fp8_state(*r).config().fwd;
        send_grad(*r, *ap,
                  mm_grad_a(d, g.q, bq.q, gemm_fp8_fn(r, Fp8Gemm::dgrad, bwd, fwd, g.inv * bq.inv)),
                  &ta);
      }
      if (bp->requires_grad) {
        const Format fwd = fp8_state(*r).config().fwd;
        send_grad(*r, *bp,
                  mm_grad_b(d, aq.q, g.q, gemm_fp8_fn(r, Fp8Gemm::wgrad, fwd, bwd, g.inv * aq.inv)),
                  &tb);
      }
    };
  }
  return Tensor(out);
}

/// An fp8 linear layer (TE's Linear): Y = (Xq·Wqᵀ)·(1/sx·1/sw) + b with an fp32 accumulator;
/// dgrad and wgrad from Gq = fl_bwd(G·sg) likewise. Outputs and gradients stay in fp32.
Tensor linear_fp8(const Tensor& x, const Tensor& w, const Tensor& b) {
  Runtime& rt = runtime();
  const Fp8Config& cfg = fp8_state(rt).config();
  const int64_t nout = w.dim(0), nin = w.dim(1);
  const int64_t M = nin ? x.numel() / nin : 0;
  const Fp8Operand xq =
      fp8_quantize(rt, scoped("input"), cfg.fwd, x.data(), fwd_kind(*x.impl()), "linear");
  const Fp8Operand wq =
      fp8_quantize(rt, scoped("weight"), cfg.fwd, w.data(), TraceKind::weight, "linear");
  const std::array<bool, kGemmCopyCount> pc = context().policy->promoted_copies;
  const auto raw = [&](GemmCopy c, const Values& v) { return promoted(pc, c) ? &v : nullptr; };
  Values y = gemm_out(DType::f32(), M, nout);
  gemm_fp8_read(rt, Fp8Gemm::fprop, cfg.fwd, cfg.fwd, M, nout, nin,
                {xq, raw(GemmCopy::x_fprop, x.data())}, {wq, raw(GemmCopy::w_fprop, w.data())},
                b ? &b.data() : nullptr, y.f32(), Layout::nt);
  Ptr out = linear_output(rt, fp8_out_dtype(x, w), x, w, b, nout, std::move(y));
  if (out->requires_grad) {
    out->saved = {fp8_copy(Values(xq.q, false), x.shape(), cfg.fwd, false),
                  fp8_copy(Values(wq.q, false), w.shape(), cfg.fwd, true)};
    TensorImpl* o = out.get();
    Ptr xp = x.ptr(), wp = w.ptr(), bp = b ? b.ptr() : nullptr;
    Runtime* r = &rt;
    const std::string kg = scoped("grad_output");
    const TraceTag tgx{scoped("grad_input"), "linear", grad_kind(*xp)};
    const TraceTag tgw{scoped("weight.grad"), "linear", TraceKind::weight_grad};
    const TraceTag tgb{scoped("bias.grad"), "linear", TraceKind::weight_grad};
    out->backward_fn = [o, xp, wp, bp, r, xq, wq, kg, tgx, tgw, tgb, M, nin, nout, pc]() {
      const Format bwd = fp8_state(*r).config().bwd, fwd = fp8_state(*r).config().fwd;
      const Fp8Operand g = fp8_quantize(*r, kg, bwd, o->grad, TraceKind::activation_grad, "linear");
      const auto raw = [&](GemmCopy c, const Values& v) { return promoted(pc, c) ? &v : nullptr; };
      if (xp->requires_grad) {
        Values gx = gemm_out(DType::f32(), M, nin);
        gemm_fp8_read(*r, Fp8Gemm::dgrad, bwd, fwd, M, nin, nout,
                      {g, raw(GemmCopy::dy_dgrad, o->grad)}, {wq, raw(GemmCopy::w_dgrad, wp->data)},
                      nullptr, gx.f32(), Layout::nn);
        send_grad(*r, *xp, std::move(gx), &tgx);
      }
      if (wp->requires_grad) {
        Values gw = gemm_out(DType::f32(), nout, nin);
        gemm_fp8_read(*r, Fp8Gemm::wgrad, bwd, fwd, nout, nin, M,
                      {g, raw(GemmCopy::dy_wgrad, o->grad)}, {xq, raw(GemmCopy::x_wgrad, xp->data)},
                      nullptr, gw.f32(), Layout::tn);
        send_grad(*r, *wp, std::move(gw), &tgw);
      }
      if (bp && bp->requires_grad) {
        send_grad(*r, *bp, bias_grad(o->grad, M, nout, r->threads), &tgb);
      }
    };
  }
  return Tensor(out);
}

// ---- block-scaled linear layers -----------------------------------------------------------------

/// n rounded up to a multiple of both a and b: the padded size of a dimension two operand
/// copies share, each blocked along it with its own tile.
size_t padded(size_t n, size_t a, size_t b = 1) {
  const size_t m = std::lcm(a, b);
  return (n + m - 1) / m * m;
}

/// C = A·B of two padded block-scaled copies (pm×pk and pk×pn as `layout` reads them): fp32
/// accumulation, then the leading m×n of the result, plus the bias in fp32.
Values gemm_blocks(Runtime& rt, size_t m, size_t n, size_t pm, size_t pn, size_t pk,
                   const Values& A, const Values& B, const Values* bias, Layout layout) {
  Values y = gemm_out(DType::f32(), int64_t(m), int64_t(n));
  float* yv = y.f32();
  // Unpadded, the GEMM writes the result itself; padded, a scratch kept between calls.
  const bool whole = pm == m && pn == n;
  thread_local std::vector<float> padded_c;
  float* c = whole ? yv : scratch(padded_c, pm * pn);
  gemm_dt(rt, DType::f32(), int64_t(pm), int64_t(pn), int64_t(pk), A.f32(), B.f32(), Src(), c,
          layout);
  if (whole && !bias) return y;
  // Each output row on its own (in place when unpadded), rows in parts on the pool.
  const auto rows = [&](const auto* b, size_t r0, size_t r1) {
    for (size_t i = r0; i < r1; ++i) {
      const float* ci = c + i * pn;
      float* yi = yv + i * n;
      if (!b) std::copy(ci, ci + n, yi);
      else
        for (size_t j = 0; j < n; ++j) yi[j] = ci[j] + static_cast<float>(b[j]);
    }
  };
  parallel_for(rt.threads, m, rows_per_part(int64_t(n)), [&](size_t r0, size_t r1) {
    if (!bias) return rows(static_cast<const float*>(nullptr), r0, r1);
    bias->visit([&](const auto* b) { rows(b, r0, r1); });
  });
  return y;
}

/// The six operand copies of a block-scaled linear layer, each blocked along the reduction
/// dimension of the GEMM that reads it.
struct LinearCopies {
  BlockCopy x_fprop, w_fprop, g_dgrad, w_dgrad, g_wgrad, x_wgrad;
  explicit LinearCopies(const BlockRecipe& r)
      : x_fprop{r.input, BlockAxis::last, "fprop", r.input_sr, false, r.pow2_scales},
        w_fprop{r.weight, BlockAxis::last, "fprop", r.weight_sr, false, r.pow2_scales},
        g_dgrad{r.grad, BlockAxis::last, "dgrad", r.grad_sr, false, r.pow2_scales},
        w_dgrad{r.weight, BlockAxis::first, "dgrad", r.weight_sr, false, r.pow2_scales},
        g_wgrad{r.grad, BlockAxis::first, "wgrad", r.grad_sr, r.grad_rht, r.pow2_scales},
        x_wgrad{r.input, BlockAxis::first, "wgrad", r.input_sr, r.input_rht, r.pow2_scales} {}
};

/// The prows×pcols fp32 values a block GEMM reads of operand x (rows×cols): its block-scaled
/// copy `c`, or, where `halfway bisect` promoted this copy (Policy::promoted_copies), x's own
/// values zero-padded the same way. The copy is made and traced either way, so the runtime's
/// rounding calls, and with them every stochastic-rounding stream, stay those of the run.
Values block_read(Runtime& rt, const BlockCopy& c, bool promote, const TraceTag& tag,
                  const Values& x, size_t rows, size_t cols, size_t prows, size_t pcols) {
  Values q = block_copy(rt, c, tag, x, rows, cols, prows, pcols);
  if (!promote) return q;
  float* qv = q.f32();
  std::fill(qv, qv + q.size(), 0.0f);
  x.visit([&](const auto* p) {
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) qv[i * pcols + j] = static_cast<float>(p[i * cols + j]);
  });
  return q;
}

/// A copy saved for the backward (memory accounting: the element format's bits), which the
/// backward's GEMM reads.
std::shared_ptr<const TensorImpl> block_saved(Values q, size_t rows, size_t cols,
                                              const BlockCopy& c, bool weight) {
  return fp8_copy(std::move(q), Shape{int64_t(rows), int64_t(cols)},
                  parse_block_scheme(c.scheme).element, weight);
}

/// A block-scaled linear layer (TE's Linear under a block-scaling recipe): fprop
/// Y = Xq·Wqᵀ + b with X [M,K] and W [N,K] blocked along K; dgrad dX = dYq·Wq' with dY and W
/// blocked along N; wgrad dW = dYq'ᵀ·Xq' with dY and X blocked along M. Each dimension a GEMM
/// reduces over is zero-padded to whole blocks of both its operands; outputs stay in fp32
/// and the bias gradient is summed from the unquantized dY.
Tensor linear_blocks(const Tensor& x, const Tensor& w, const Tensor& b) {
  Runtime& rt = runtime();
  const LinearCopies cp(*context().policy->blocks_in(context().scope));
  const size_t N = size_t(w.dim(0)), K = size_t(w.dim(1));
  const size_t M = K ? size_t(x.numel()) / K : 0;
  const TraceTag tx{scoped("input"), "linear", fwd_kind(*x.impl())};
  const TraceTag tw{scoped("weight"), "linear", TraceKind::weight};
  const TraceTag tg{scoped("grad_output"), "linear", TraceKind::activation_grad};
  const auto [xr, xc] = copy_tile(cp.x_fprop);
  const auto [wr, wc] = copy_tile(cp.w_fprop);
  const size_t Mp = padded(M, xr), Np = padded(N, wr), Kp = padded(K, xc, wc);
  const std::array<bool, kGemmCopyCount> pc = context().policy->promoted_copies;
  const auto xq =
      block_read(rt, cp.x_fprop, promoted(pc, GemmCopy::x_fprop), tx, x.data(), M, K, Mp, Kp);
  const auto wq =
      block_read(rt, cp.w_fprop, promoted(pc, GemmCopy::w_fprop), tw, w.data(), N, K, Np, Kp);
  Values y = gemm_blocks(rt, M, N, Mp, Np, Kp, xq, wq, b ? &b.data() : nullptr, Layout::nt);
  Ptr out = linear_output(rt, fp8_out_dtype(x, w), x, w, b, int64_t(N), std::move(y));
  if (!out->requires_grad) return Tensor(out);
  Ptr xp = x.ptr(), wp = w.ptr(), bp = b ? b.ptr() : nullptr;
  // The backward's copies of X and W are made now, as TE quantizes both usages in the forward.
  const auto [gdr, gdc] = copy_tile(cp.g_dgrad);
  const auto [wdr, wdc] = copy_tile(cp.w_dgrad);
  const size_t Md = padded(M, gdr), Nd = padded(N, gdc, wdr), Kd = padded(K, wdc);
  const auto [gwr, gwc] = copy_tile(cp.g_wgrad);
  const auto [xwr, xwc] = copy_tile(cp.x_wgrad);
  const size_t Mw = padded(M, gwr, xwr), Nw = padded(N, gwc), Kw = padded(K, xwc);
  // Made in this order (each advances the rounding calls), saved (moved, not copied) for the
  // backward, whose GEMMs read them there.
  std::shared_ptr<const TensorImpl> wd, xw;
  if (xp->requires_grad)
    wd = block_saved(
        block_read(rt, cp.w_dgrad, promoted(pc, GemmCopy::w_dgrad), tw, w.data(), N, K, Nd, Kd),
        Nd, Kd, cp.w_dgrad, true);
  if (wp->requires_grad)
    xw = block_saved(
        block_read(rt, cp.x_wgrad, promoted(pc, GemmCopy::x_wgrad), tx, x.data(), M, K, Mw, Kw),
        Mw, Kw, cp.x_wgrad, false);
  if (xw) out->saved.push_back(xw);
  if (wd) out->saved.push_back(wd);
  TensorImpl* o = out.get();
  Runtime* r = &rt;
  const TraceTag tgx{scoped("grad_input"), "linear", grad_kind(*xp)};
  const TraceTag tgw{scoped("weight.grad"), "linear", TraceKind::weight_grad};
  const TraceTag tgb{scoped("bias.grad"), "linear", TraceKind::weight_grad};
  out->backward_fn = [=]() {
    const Values& G = o->grad;
    if (xp->requires_grad) {
      const auto gq =
          block_read(*r, cp.g_dgrad, promoted(pc, GemmCopy::dy_dgrad), tg, G, M, N, Md, Nd);
      send_grad(*r, *xp, gemm_blocks(*r, M, K, Md, Kd, Nd, gq, wd->data, nullptr, Layout::nn),
                &tgx);
    }
    if (wp->requires_grad) {
      const auto gq =
          block_read(*r, cp.g_wgrad, promoted(pc, GemmCopy::dy_wgrad), tg, G, M, N, Mw, Nw);
      send_grad(*r, *wp, gemm_blocks(*r, N, K, Nw, Kw, Mw, gq, xw->data, nullptr, Layout::tn),
                &tgw);
    }
    if (bp && bp->requires_grad)
      send_grad(*r, *bp, bias_grad(o->grad, int64_t(M), int64_t(N), r->threads), &tgb);
  };
  return Tensor(out);
}

}  // namespace

// ---- elementwise -----------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(
      OpKind::add, a, b, false, [](double x, double y) { return x + y; },
      [](double g, double, double, double) { return g; },
      [](double g, double, double, double) { return g; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(
      OpKind::sub, a, b, false, [](double x, double y) { return x - y; },
      [](double g, double, double, double) { return g; },
      [](double g, double, double, double) { return -g; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(
      OpKind::mul, a, b, true, [](double x, double y) { return x * y; },
      [](double g, double, double y, double) { return g * y; },
      [](double g, double x, double, double) { return g * x; });
}

Tensor div(const Tensor& a, const Tensor& b) {
  return binary(
      OpKind::div, a, b, true, [](double x, double y) { return x / y; },
      [](double g, double, double y, double) { return g / y; },
      [](double g, double x, double y, double) { return -g * x / (y * y); });
}

Tensor mul_scalar(const Tensor& x, double c) {
  return unary(
      OpKind::mul, x, false, [c](double v) { return v * c; },
      [c](double g, double, double) { return g * c; });
}

Tensor relu(const Tensor& x) {
  // threshold_backward: the gradient passes where the output is positive (never g·0).
  return unary(
      OpKind::relu, x, true, [](double v) { return v > 0 ? v : 0.0; },
      [](double g, double, double y) { return y > 0 ? g : 0.0; });
}

Tensor gelu(const Tensor& x, GeluApprox approx) {
  if (approx == GeluApprox::tanh) {
    const auto d = [](double v) {
      const double t = std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v));
      const double dt = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * v * v);
      return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dt;
    };
    return unary(
        OpKind::gelu, x, false, tabulated([](double v) {
          return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
        }),
        TimesDerivative<decltype(d)>{d});
  }
  // fp32 inputs: the table kernels of gelu_simd.cpp, the same bits.
  const auto d = [](double v) { return detail::gelu_erf_derivative(v); };
  return unary(
      OpKind::gelu, x, false,
      tabulated([](double v) { return detail::gelu_erf(v); }, detail::gelu_erf_rows),
      TimesDerivative<decltype(d)>{d, detail::gelu_erf_grad_rows});
}

Tensor tanh(const Tensor& x) {
  return unary(
      OpKind::tanh, x, true, tabulated([](double v) { return std::tanh(v); }),
      [](double g, double, double y) { return g * (1.0 - y * y); });
}

Tensor sigmoid(const Tensor& x) {
  return unary(
      OpKind::sigmoid, x, true, tabulated([](double v) { return 1.0 / (1.0 + std::exp(-v)); }),
      [](double g, double, double y) { return g * y * (1.0 - y); });
}

Tensor exp(const Tensor& x) {
  return unary(
      OpKind::exp, x, true, tabulated([](double v) { return std::exp(v); }),
      [](double g, double, double y) { return g * y; });
}

Tensor log(const Tensor& x) {
  return unary(
      OpKind::log, x, false, tabulated([](double v) { return std::log(v); }),
      [](double g, double v, double) { return g / v; });
}

// ---- softmax family and losses ---------------------------------------------------------------

namespace {

/// An op over the rows of the last dimension that saves its output: fwd(xr, yr, D) writes a row
/// of results (binary64), bwd(gr, yr, g, D) a row of input gradients from the output gradient
/// and the (rounded) output.
template <class Fwd, class Bwd>
Tensor row_op(OpKind kind, const Tensor& x0, Fwd fwd, Bwd bwd) {
  std::vector<Tensor> in{x0};
  const DType dt = prepare(kind, in, {"input"});
  const Tensor& x = in[0];
  const char* op = op_name(kind);
  const auto [R, D] = rows_of(x, op);
  Vec y(x.data().size());
  const Wide xv(x.data());
  Runtime& rt = runtime();
  // Rows in parts on the thread pool: each row is computed on its own.
  parallel_for(rt.threads, size_t(R), rows_per_part(D), [&](size_t lo, size_t hi) {
    for (size_t r = lo; r < hi; ++r) fwd(xv.data() + r * D, y.data() + r * D, D);
  });
  Ptr out = output_node(rt, op, x.shape(), dt, y, {x.ptr()});
  if (out->requires_grad) {
    out->saves_output = true;
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &rt;
    const TraceTag gt{scoped("grad_input"), op, grad_kind(*xp)};
    out->backward_fn = [o, xp, r, gt, R = R, D = D, bwd]() {
      Vec g(o->grad.size());
      const Wide gv(o->grad), yv(o->data);
      parallel_for(r->threads, size_t(R), rows_per_part(D), [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i)
          bwd(gv.data() + i * D, yv.data() + i * D, g.data() + i * D, D);
      });
      send_grad(*r, *xp, g, &gt);
    };
  }
  return Tensor(out);
}

double row_max(const double* xr, int64_t D) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < D; ++j) mx = std::max(mx, xr[j]);
  return mx;
}

}  // namespace

Tensor softmax(const Tensor& x0) {
  return row_op(
      OpKind::softmax, x0,
      [](const double* xr, double* yr, int64_t D) {
        const double mx = row_max(xr, D);
        double s = 0;
        for (int64_t j = 0; j < D; ++j) s += (yr[j] = std::exp(xr[j] - mx));
        for (int64_t j = 0; j < D; ++j) yr[j] /= s;
      },
      [](const double* gr, const double* yr, double* g, int64_t D) {
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot += gr[j] * yr[j];
        for (int64_t j = 0; j < D; ++j) g[j] = yr[j] * (gr[j] - dot);
      });
}

Tensor log_softmax(const Tensor& x0) {
  return row_op(
      OpKind::log_softmax, x0,
      [](const double* xr, double* yr, int64_t D) {
        const double mx = row_max(xr, D);
        double s = 0;
        for (int64_t j = 0; j < D; ++j) s += std::exp(xr[j] - mx);
        const double lse = mx + std::log(s);
        for (int64_t j = 0; j < D; ++j) yr[j] = xr[j] - lse;
      },
      [](const double* gr, const double* yr, double* g, int64_t D) {
        double s = 0;
        for (int64_t j = 0; j < D; ++j) s += gr[j];
        for (int64_t j = 0; j < D; ++j) g[j] = gr[j] - std::exp(yr[j]) * s;
      });
}

Tensor cross_entropy(const Tensor& logits0, const std::vector<int32_t>& target) {
  if (logits0.rank() != 2)
    throw InputError("cross_entropy needs logits [N, C], got " + shape_str(logits0.shape()));
  const int64_t N = logits0.dim(0), C = logits0.dim(1);
  if (static_cast<int64_t>(target.size()) != N)
    throw InputError("cross_entropy: " + std::to_string(target.size()) + " targets for " +
                     std::to_string(N) + " rows");
  for (int32_t t : target)
    if (t < 0 || t >= C)
      throw InputError("cross_entropy: class " + std::to_string(t) + " outside [0, " +
                       std::to_string(C) + ")");
  std::vector<Tensor> in{logits0};
  const DType dt = prepare(OpKind::cross_entropy, in, {"input"});
  const Tensor& x = in[0];
  // Softmax probabilities kept for the backward (binary64, as an fp32 kernel keeps them in
  // registers, not rounded into a low dtype).
  Vec p(x.data().size());
  double total = 0;
  const Wide xv(x.data());
  for (int64_t r = 0; r < N; ++r) {
    const double* xr = xv.data() + r * C;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < C; ++j) mx = std::max(mx, xr[j]);
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += (p[size_t(r * C + j)] = std::exp(xr[j] - mx));
    for (int64_t j = 0; j < C; ++j) p[size_t(r * C + j)] /= s;
    total += mx + std::log(s) - xr[target[size_t(r)]];
  }
  Vec y{N ? total / double(N) : 0.0};
  Runtime& rt = runtime();
  Ptr out = output_node(rt, "cross_entropy", {}, dt, y, {x.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    out->saved = {xp};
    Runtime* r = &rt;
    const TraceTag gt{scoped("grad_input"), "cross_entropy", grad_kind(*xp)};
    out->backward_fn = [o, xp, r, gt, p, target, N, C]() {
      const double g0 = o->grad[0] / double(N);
      Vec g(p.size());
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < C; ++j)
          g[size_t(i * C + j)] = g0 * (p[size_t(i * C + j)] - (j == target[size_t(i)] ? 1.0 : 0.0));
      send_grad(*r, *xp, g, &gt);
    };
  }
  return Tensor(out);
}

Tensor mse(const Tensor& p0, const Tensor& t0) {
  if (p0.shape() != t0.shape())
    throw InputError("mse: prediction " + shape_str(p0.shape()) + " and target " +
                     shape_str(t0.shape()) + " differ in shape");
  std::vector<Tensor> in{p0, t0};
  const DType dt = prepare(OpKind::mse, in, {"input", "target"});
  const Tensor &p = in[0], &t = in[1];
  const size_t n = p.data().size();
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = p.data()[i] - t.data()[i];
    s += d * d;
  }
  Vec y{n ? s / double(n) : 0.0};
  Runtime& rt = runtime();
  Ptr out = output_node(rt, "mse", {}, dt, y, {p.ptr(), t.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr pp = p.ptr(), tp = t.ptr();
    out->saved = {pp, tp};
    Runtime* r = &rt;
    const TraceTag gp{scoped("grad_input"), "mse", grad_kind(*pp)};
    const TraceTag gtt{scoped("grad_target"), "mse", grad_kind(*tp)};
    out->backward_fn = [o, pp, tp, r, gp, gtt, n]() {
      const double c = 2.0 * o->grad[0] / double(n);
      Vec g(n);
      for (size_t i = 0; i < n; ++i) g[i] = c * (pp->data[i] - tp->data[i]);
      if (tp->requires_grad) {
        Vec gt(n);
        for (size_t i = 0; i < n; ++i) gt[i] = -g[i];
        send_grad(*r, *tp, gt, &gtt);
      }
      if (pp->requires_grad) {
        send_grad(*r, *pp, g, &gp);
      }
    };
  }
  return Tensor(out);
}

Tensor layer_norm(const Tensor& x0, const Tensor& w0, const Tensor& b0, double eps) {
  const auto [R0, D0] = rows_of(x0, "layer_norm");
  (void)R0;
  if ((w0 && w0.numel() != D0) || (b0 && b0.numel() != D0))
    throw InputError("layer_norm weight/bias do not match the last dimension of " +
                     shape_str(x0.shape()));
  std::vector<Tensor> in{x0, w0, b0};
  const DType dt = prepare(OpKind::layer_norm, in, {"input", "weight", "bias"});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const int64_t R = R0, D = D0;
  Vec y(x.data().size()), mean(static_cast<size_t>(R)), rstd(static_cast<size_t>(R));
  const Wide xv(x.data());
  Runtime& rt = runtime();
  // Rows in parts on the pool: each row's sums run in order, on one thread.
  parallel_for(rt.threads, size_t(R), rows_per_part(D), [&](size_t r0, size_t r1) {
    for (int64_t r = int64_t(r0); r < int64_t(r1); ++r) {
      const double* xr = xv.data() + r * D;
      double s = 0;
      for (int64_t j = 0; j < D; ++j) s += xr[j];
      const double mu = s / double(D);
      double v = 0;
      for (int64_t j = 0; j < D; ++j) v += (xr[j] - mu) * (xr[j] - mu);
      const double rs = 1.0 / std::sqrt(v / double(D) + eps);
      mean[size_t(r)] = mu;
      rstd[size_t(r)] = rs;
      for (int64_t j = 0; j < D; ++j) {
        double h = (xr[j] - mu) * rs;
        if (w) h *= w.data()[size_t(j)];
        if (b) h += b.data()[size_t(j)];
        y[size_t(r * D + j)] = h;
      }
    }
  });
  std::vector<Ptr> parents{x.ptr()};
  if (w) parents.push_back(w.ptr());
  if (b) parents.push_back(b.ptr());
  Ptr out = output_node(rt, "layer_norm", x.shape(), dt, y, std::move(parents));
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr(), wp = w ? w.ptr() : nullptr, bp = b ? b.ptr() : nullptr;
    out->saved = {xp};
    if (wp) out->saved.push_back(wp);
    Runtime* r = &rt;
    const TraceTag tx{scoped("grad_input"), "layer_norm", grad_kind(*xp)};
    const TraceTag tw{scoped("weight.grad"), "layer_norm", TraceKind::weight_grad};
    const TraceTag tb{scoped("bias.grad"), "layer_norm", TraceKind::weight_grad};
    out->backward_fn = [o, xp, wp, bp, r, tx, tw, tb, mean, rstd, R, D]() {
      const Wide gv(o->grad), xv(xp->data);
      const double* G = gv.data();
      const auto x_hat = [&](int64_t i, int64_t j) {
        return (xv.data()[i * D + j] - mean[size_t(i)]) * rstd[size_t(i)];
      };
      Vec gx(size_t(R * D)), gw(size_t(D), 0.0), gb(size_t(D), 0.0);
      // The input gradient row by row (rows in parts on the pool)...
      parallel_for(r->threads, size_t(R), rows_per_part(D), [&](size_t i0, size_t i1) {
        for (int64_t i = int64_t(i0); i < int64_t(i1); ++i) {
          const double rs = rstd[size_t(i)];
          double m1 = 0, m2 = 0;
          for (int64_t j = 0; j < D; ++j) {
            const double g = G[i * D + j];
            const double gh = wp ? g * wp->data[size_t(j)] : g;
            m1 += gh;
            m2 += gh * x_hat(i, j);
          }
          m1 /= double(D);
          m2 /= double(D);
          for (int64_t j = 0; j < D; ++j) {
            const double gh = wp ? G[i * D + j] * wp->data[size_t(j)] : G[i * D + j];
            gx[size_t(i * D + j)] = rs * (gh - m1 - x_hat(i, j) * m2);
          }
        }
      });
      // ...and the weight and bias gradients column by column, each summed over the rows in
      // order (columns in parts on the pool).
      if ((wp && wp->requires_grad) || (bp && bp->requires_grad))
        parallel_for(r->threads, size_t(D), rows_per_part(R), [&](size_t j0, size_t j1) {
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = int64_t(j0); j < int64_t(j1); ++j) {
              const double g = G[i * D + j];
              gw[size_t(j)] += g * x_hat(i, j);
              gb[size_t(j)] += g;
            }
        });
      if (xp->requires_grad) {
        send_grad(*r, *xp, gx, &tx);
      }
      if (wp && wp->requires_grad) {
        send_grad(*r, *wp, gw, &tw);
      }
      if (bp && bp->requires_grad) {
        send_grad(*r, *bp, gb, &tb);
      }
    };
  }
  return Tensor(out);
}

// ---- reductions ------------------------------------------------------------------------------

namespace {

/// Sum (or mean) over dimension `dim`, or over everything when dim is out of range (-99).
Tensor reduce(OpKind kind, const Tensor& x0, int dim, bool all) {
  std::vector<Tensor> in{x0};
  const DType dt = prepare(kind, in, {"input"});
  const Tensor& x = in[0];
  const bool is_mean = kind == OpKind::mean;
  int64_t outer = 1, len = x.numel(), inner = 1;
  Shape os;
  if (!all) {
    const int r = x.rank();
    if (dim < 0) dim += r;
    if (dim < 0 || dim >= r)
      throw InputError(std::string(op_name(kind)) + ": dimension out of range for " +
                       shape_str(x.shape()));
    len = x.shape()[size_t(dim)];
    for (int i = 0; i < dim; ++i) outer *= x.shape()[size_t(i)];
    for (int i = dim + 1; i < r; ++i) inner *= x.shape()[size_t(i)];
    for (int i = 0; i < r; ++i)
      if (i != dim) os.push_back(x.shape()[size_t(i)]);
  }
  Vec y(size_t(outer * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t l = 0; l < len; ++l)
      for (int64_t i = 0; i < inner; ++i)
        y[size_t(o * inner + i)] += x.data()[size_t((o * len + l) * inner + i)];
  if (is_mean)
    for (double& v : y) v /= double(len);
  Runtime& rt = runtime();
  const char* op = op_name(kind);
  Ptr out = output_node(rt, op, os, dt, y, {x.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &rt;
    const TraceTag gt{scoped("grad_input"), op, grad_kind(*xp)};
    out->backward_fn = [o, xp, r, gt, outer, len, inner, is_mean]() {
      Vec g(xp->data.size());
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t l = 0; l < len; ++l)
          for (int64_t i = 0; i < inner; ++i) {
            const double v = o->grad[size_t(a * inner + i)];
            g[size_t((a * len + l) * inner + i)] = is_mean ? v / double(len) : v;
          }
      send_grad(*r, *xp, g, &gt);
    };
  }
  return Tensor(out);
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce(OpKind::sum, x, 0, true); }
Tensor sum(const Tensor& x, int dim) { return reduce(OpKind::sum, x, dim, false); }
Tensor mean(const Tensor& x) { return reduce(OpKind::mean, x, 0, true); }
Tensor mean(const Tensor& x, int dim) { return reduce(OpKind::mean, x, dim, false); }

// ---- data movement (no rounding) -------------------------------------------------------------

Tensor reshape(const Tensor& x, Shape shape) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw InputError("reshape: more than one -1");
      infer = int(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known) shape[size_t(infer)] = x.numel() / known;
  if (numel(shape) != x.numel())
    throw InputError("reshape " + shape_str(x.shape()) + " to " + shape_str(shape) +
                     ": element counts differ");
  Ptr out = make_node("reshape", shape, x.dtype(), x.data(), {x.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &runtime();
    out->backward_fn = [o, xp, r]() { add_grad(*r, *xp, Values(o->grad)); };
  }
  return Tensor(out);
}

namespace {

Values permute_swap(int threads, const Values& v, const Shape& s, int d0, int d1, Shape& os) {
  if (d0 > d1) std::swap(d0, d1);
  os = s;
  std::swap(os[size_t(d0)], os[size_t(d1)]);
  // The shape as [outer, n0, mid, n1, inner]; the result is [outer, n1, mid, n0, inner], so
  // every run of `inner` values moves as one block. The result's blocks in parts on the pool.
  const auto prod = [&](int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; ++i) p *= s[size_t(i)];
    return p;
  };
  const int64_t outer = prod(0, d0), n0 = s[size_t(d0)], mid = prod(d0 + 1, d1),
                n1 = s[size_t(d1)], inner = prod(d1 + 1, int(s.size()));
  const size_t blocks = size_t(outer * n1 * mid * n0);
  Values out = Values::uninitialized(v.size(), v.wide());
  if (blocks == 0 || inner == 0) return out;
  out.visit([&](auto* res) {
    using T = std::remove_pointer_t<decltype(res)>;
    const T* in = v.as<T>();
    const size_t least = std::max<size_t>(1, (size_t(1) << 14) / size_t(inner));
    parallel_for(threads, blocks, least, [&](size_t lo, size_t hi) {
      // Result block j = ((o·n1 + i1)·mid + m)·n0 + i0.
      int64_t t = int64_t(lo);
      int64_t i0 = t % n0, m = (t /= n0) % mid, i1 = (t /= mid) % n1, o = t / n1;
      for (size_t j = lo; j < hi; ++j) {
        const T* src = in + (((o * n0 + i0) * mid + m) * n1 + i1) * inner;
        std::copy(src, src + inner, res + int64_t(j) * inner);
        if (++i0 < n0) continue;  // the next block: i0, then m, i1, o carry
        i0 = 0;
        if (++m < mid) continue;
        m = 0;
        if (++i1 < n1) continue;
        i1 = 0, ++o;
      }
    });
  });
  return out;
}

}  // namespace

Tensor transpose(const Tensor& x, int d0, int d1) {
  const int r = x.rank();
  if (d0 < 0) d0 += r;
  if (d1 < 0) d1 += r;
  if (d0 < 0 || d1 < 0 || d0 >= r || d1 >= r)
    throw InputError("transpose: dimension out of range for " + shape_str(x.shape()));
  Shape os;
  Values moved = permute_swap(runtime().threads, x.data(), x.shape(), d0, d1, os);
  Ptr out = make_node("transpose", os, x.dtype(), std::move(moved), {x.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r2 = &runtime();
    out->backward_fn = [o, xp, r2, d0, d1]() {
      Shape back;
      add_grad(*r2, *xp, permute_swap(r2->threads, o->grad, o->shape, d0, d1, back));
    };
  }
  return Tensor(out);
}

Tensor embedding(const std::vector<int32_t>& ids, const Shape& ids_shape, const Tensor& w0) {
  if (w0.rank() != 2) throw InputError("embedding weight must be 2-D");
  if (numel(ids_shape) != static_cast<int64_t>(ids.size()))
    throw InputError("embedding: ids do not match their shape " + shape_str(ids_shape));
  const int64_t V = w0.dim(0), D = w0.dim(1);
  for (int32_t id : ids)
    if (id < 0 || id >= V)
      throw InputError("embedding: index " + std::to_string(id) + " outside [0, " +
                       std::to_string(V) + ")");
  std::vector<Tensor> in{w0};
  const DType dt = prepare(OpKind::embedding, in, {"weight"});
  const Tensor& w = in[0];
  Values y = Values::uninitialized(ids.size() * size_t(D), w.data().wide());
  y.visit([&](auto* py) {
    using T = std::remove_pointer_t<decltype(py)>;
    for (size_t i = 0; i < ids.size(); ++i)
      std::copy_n(w.data().as<T>() + ids[i] * D, D, py + int64_t(i) * D);
  });
  Shape os = ids_shape;
  os.push_back(D);
  Ptr out = make_node("embedding", os, dt, std::move(y), {w.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr wp = w.ptr();
    Runtime* r = &runtime();
    const TraceTag gt{scoped("weight.grad"), "embedding", TraceKind::weight_grad};
    out->backward_fn = [o, wp, r, gt, ids, D]() {
      Vec g(wp->data.size(), 0.0);
      for (size_t i = 0; i < ids.size(); ++i)
        for (int64_t j = 0; j < D; ++j) g[size_t(ids[i] * D + j)] += o->grad[i * size_t(D) + size_t(j)];
      send_grad(*r, *wp, g, &gt);
    };
  }
  return Tensor(out);
}

namespace {

/// Every element above the diagonal of each T × S matrix set to `fill` (representable).
void fill_causal(Values& v, int64_t T, int64_t S, double fill) {
  v.visit([&](auto* p) {
    using E = std::remove_pointer_t<decltype(p)>;
    const int64_t rows = S ? int64_t(v.size()) / S : 0;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row % T;  // row i of its matrix: columns j > i are masked
      if (i + 1 < S) std::fill(p + row * S + i + 1, p + (row + 1) * S, E(fill));
    }
  });
}

}  // namespace

Tensor masked_fill_causal(const Tensor& x0) {
  if (x0.rank() < 2) throw InputError("causal mask needs at least 2 dimensions");
  std::vector<Tensor> in{x0};
  const DType dt = prepare(OpKind::masked_fill, in, {"input"});
  const Tensor& x = in[0];
  const int64_t T = x.dim(-2), S = x.dim(-1);
  const double fill = neg_fill(dt);
  Values y = x.data();
  fill_causal(y, T, S, fill);
  Ptr out = make_node("masked_fill", x.shape(), dt, std::move(y), {x.ptr()});
  if (out->requires_grad) {
    TensorImpl* o = out.get();
    Ptr xp = x.ptr();
    Runtime* r = &runtime();
    out->backward_fn = [o, xp, r, T, S]() {
      Values g = o->grad;
      fill_causal(g, T, S, 0.0);
      add_grad(*r, *xp, std::move(g));
    };
  }
  return Tensor(out);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal) {
  const std::string base = context().scope;
  auto sub = [&](const char* s) { return base.empty() ? std::string(s) : base + "." + s; };
  const double scale = 1.0 / std::sqrt(double(q.dim(-1)));
  Tensor s;
  {
    Scope sc(sub("scores"));
    s = matmul(q, transpose(k, -2, -1));
  }
  {
    Scope sc(sub("scale"));
    s = mul_scalar(s, scale);
  }
  if (causal) {
    Scope sc(sub("mask"));
    s = masked_fill_causal(s);
  }
  {
    Scope sc(sub("softmax"));
    s = softmax(s);
  }
  Scope sc(sub("context"));
  return matmul(s, v);
}

}  // namespace halfway::sim
