#include "halfway/sim/tracer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "halfway/config.hpp"
#include "halfway/softfloat.hpp"
#include "trace_simd.hpp"

namespace halfway::sim {

int TraceRecord::min_exp() const {
  for (int i = 0; i < kBins; ++i)
    if (hist[static_cast<size_t>(i)]) return i + kMinExp;
  return INT_MIN;
}

int TraceRecord::max_exp() const {
  for (int i = kBins - 1; i >= 0; --i)
    if (hist[static_cast<size_t>(i)]) return i + kMinExp;
  return INT_MIN;
}

namespace {

constexpr size_t kSlots = TraceRecord::kBins + 1;  // bin kBins collects zeros and non-finites
constexpr size_t kChunk = 2048;

/// What the values tell besides their histogram: the extremes and the non-finite inputs.
struct ValueFacts {
  uint32_t max_bits = 0, min_bits = 0xFFFFFFFFu;
  uint64_t nonfinite = 0;
};

/// The exponent bin of each of the n ≤ kChunk values (bits without their sign) into `bin`,
/// and the chunk's facts; true when an exact power of two occurs. A loop without stores that
/// depend on the data, which the compiler vectorises. Bin index e − kMinExp is the biased
/// exponent + 22 for normals and floor(log2 b) for subnormals, taken exactly from the exponent
/// of float(b) (b < 2^23 is exact in binary32); zeros and non-finite values go to kBins. A
/// power of two has no fraction bits set (normal) or one bit set (subnormal).
HALFWAY_VECTOR_CLONES bool exponent_bins(const uint32_t* __restrict bits, size_t n,
                                         uint16_t* __restrict bin, ValueFacts& f) {
  uint32_t mx = f.max_bits, mn = f.min_bits, pow2 = 0, nonfinite = 0;  // n ≤ kChunk
  for (size_t i = 0; i < n; ++i) {  // masks instead of branches, so that it vectorises
    const uint32_t b = bits[i] & 0x7FFFFFFFu;
    const uint32_t finite_nonzero = -uint32_t(b - 1u < 0x7F7FFFFFu);  // 0 < b < 0x7F800000
    const uint32_t field = b >> 23;
    const uint32_t normal = -uint32_t(field != 0);
    const float fb = float(int32_t(b & 0x7FFFFFu));
    uint32_t fb_bits;
    std::memcpy(&fb_bits, &fb, 4);
    const uint32_t bn = (normal & (field + 22)) | (~normal & ((fb_bits >> 23) - 127));
    bin[i] = uint16_t((finite_nonzero & bn) | (~finite_nonzero & uint32_t(TraceRecord::kBins)));
    const uint32_t rest = (normal & (b & 0x7FFFFFu)) | (~normal & (b & (b - 1u)));
    pow2 |= uint32_t(rest == 0) & finite_nonzero;
    nonfinite += uint32_t(b >= 0x7F800000u);
    mx = std::max(mx, finite_nonzero & b);
    mn = std::min(mn, (finite_nonzero & b) | ~finite_nonzero);
  }
  f.max_bits = mx, f.min_bits = mn, f.nonfinite += nonfinite;
  return pow2 != 0;
}

/// The exact powers of two of a chunk into p (rare: only chunks that have one come here).
void count_pow2(const uint32_t* bits, size_t n, const uint16_t* bin, uint64_t* p) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = bits[i] & 0x7FFFFFFFu;
    const uint32_t rest = (b >> 23) ? (b & 0x7FFFFFu) : (b & (b - 1u));
    if (rest == 0 && b - 1u < 0x7F7FFFFFu) p[bin[i]]++;
  }
}

}  // namespace

void add_values(TraceRecord& r, const float* pre, size_t n) {
  // Per chunk: the bins in one vectorised pass, then the increments in four copies of the
  // histogram (element i into copy i % 4), so that consecutive values in one bin (values
  // cluster in a few) do not wait on each other.
  uint64_t h[4][kSlots] = {}, p[kSlots] = {};
  uint16_t bin[kChunk];
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(pre);
  ValueFacts f;
  for (size_t s = 0; s < n; s += kChunk) {
    const size_t m = std::min(kChunk, n - s);
    const bool pow2 = exponent_bins(bits + s, m, bin, f);
    size_t i = 0;
    for (; i + 4 <= m; i += 4)
      h[0][bin[i]]++, h[1][bin[i + 1]]++, h[2][bin[i + 2]]++, h[3][bin[i + 3]]++;
    for (; i < m; ++i) h[0][bin[i]]++;
    if (pow2) count_pow2(bits + s, m, bin, p);
  }
  for (size_t j = 0; j < size_t(TraceRecord::kBins); ++j) {
    r.hist[j] += h[0][j] + h[1][j] + h[2][j] + h[3][j];
    r.pow2[j] += p[j];
  }
  detail::add_value_facts(r, f.max_bits, f.min_bits, f.nonfinite);
}

void detail::add_value_facts(TraceRecord& r, uint32_t max_bits, uint32_t min_bits,
                             uint64_t nonfinite) {
  r.nonfinite_in += nonfinite;
  if (max_bits) {  // some value was finite and non-zero (else max_bits stays 0)
    float mx, mn;
    std::memcpy(&mx, &max_bits, 4);
    std::memcpy(&mn, &min_bits, 4);
    if (double(mx) > r.max_abs) r.max_abs = mx;
    if (r.min_abs == 0 || double(mn) < r.min_abs) r.min_abs = mn;
  }
}

void Tracer::begin_step(int step, double loss_scale) {
  current_.records.clear();  // keeps the capacity: no reallocation in the steady state
  current_.blocks.clear();
  wait_blocks();  // a step left unfinished (an error) drops what it still waited for
  current_.window.clear();
  current_.k_low = current_.k_high = INT_MIN;
  current_.step = step;
  current_.loss_scale = loss_scale;
  index_.clear();
  active_ = true;
}

void Tracer::record(const TraceTag& tag, const DType& dt, const float* pre, size_t n,
                    const EventCounts& ev) {
  if (!active_) return;
  auto [it, fresh] = index_.try_emplace(tag.name, current_.records.size());
  if (fresh) {
    TraceRecord r;
    r.name = tag.name;
    r.op = tag.op;
    r.kind = tag.kind;
    r.dtype = dt;
    current_.records.push_back(std::move(r));
  }
  TraceRecord& r = current_.records[it->second];
  r.events += ev;
  add_values(r, pre, n);
}

void Tracer::record(const TraceTag& tag, const DType& dt, const TraceRecord& values,
                    const EventCounts& ev) {
  if (!active_) return;
  record(tag, dt, nullptr, 0, ev);
  merge_values(current_.records[index_.at(tag.name)], values);
}

namespace {

float largest(const Format& fmt) {
  Env env;
  return static_cast<float>(to_f64(fmt, fmt.max_mag(), env));
}

}  // namespace

void add_rounding(TraceRecord& r, const Format& fmt, const float* x, const float* q, size_t n) {
  add_rounding_error(x, q, n, largest(fmt), r.noise, r.flushed_sq, nullptr, &r.signal);
}

void add_values_and_rounding(TraceRecord& r, const Format& fmt, const float* x, const float* q,
                             size_t n, float* out) {
  if (detail::values_and_error_avx512(r, x, q, n, largest(fmt), out)) return;
  add_values(r, x, n);
  add_rounding(r, fmt, x, q, n);
  if (out) std::copy(q, q + n, out);
}

void merge_values(TraceRecord& into, const TraceRecord& part) {
  for (size_t j = 0; j < size_t(TraceRecord::kBins); ++j) {
    into.hist[j] += part.hist[j];
    into.pow2[j] += part.pow2[j];
  }
  into.nonfinite_in += part.nonfinite_in;
  into.signal += part.signal;
  into.noise += part.noise;
  into.flushed_sq += part.flushed_sq;
  if (part.has_values()) {
    into.max_abs = std::max(into.max_abs, part.max_abs);
    into.min_abs = into.has_values() ? std::min(into.min_abs, part.min_abs) : part.min_abs;
  }
}

double BlockRecord::snr_db() const {
  if (!(signal > 0) || !std::isfinite(noise)) return std::numeric_limits<double>::quiet_NaN();
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

void BlockRecord::merge(const BlockRecord& o) {
  events += o.events;
  signal += o.signal;
  noise += o.noise;
  zero_scales += o.zero_scales;
  for (const auto& [e, n] : o.scale_hist) scale_hist[e] += n;
}

void Tracer::record_blocks(BlockRecord r) {
  if (!active_) return;
  if (pending_.empty()) return merge_blocks(std::move(r));
  std::promise<BlockRecord> now;  // behind the pending ones, in call order
  now.set_value(std::move(r));
  pending_.push_back(now.get_future());
}

void Tracer::record_blocks_later(std::future<BlockRecord> r) {
  if (active_) pending_.push_back(std::move(r));
}

void Tracer::merge_blocks(BlockRecord r) {
  for (BlockRecord& b : current_.blocks)
    if (b.name == r.name && b.gemm == r.gemm) return b.merge(r);
  current_.blocks.push_back(std::move(r));
}

void Tracer::drain_blocks() {
  for (auto& f : pending_) merge_blocks(f.get());
  pending_.clear();
}

void Tracer::wait_blocks() {
  for (auto& f : pending_)
    if (f.valid()) f.wait();
  pending_.clear();
}

void Tracer::add_update_counts(const std::string& name, uint64_t vanished, uint64_t small_update) {
  if (!active_) return;
  auto it = index_.find(name);
  if (it == index_.end()) return;
  current_.records[it->second].vanished += vanished;
  current_.records[it->second].small_update += small_update;
}

const StepTrace& Tracer::end_step() {
  drain_blocks();
  active_ = false;
  current_.window = predict_window(current_.records, current_.loss_scale, opt_.k_min, opt_.k_max);
  auto [lo, hi] = safe_window(current_.window, opt_.flush_tolerance);
  current_.k_low = lo;
  current_.k_high = hi;
  index_.clear();
  return current_;
}

std::vector<WindowRow> empty_window(int k_min, int k_max) {
  std::vector<WindowRow> rows;
  for (int k = k_min; k <= k_max; ++k) rows.push_back(WindowRow{k, 0, 0, false});
  return rows;
}

void add_to_window(std::vector<WindowRow>& rows, const TraceRecord& r, double loss_scale) {
  // A scale backed off to zero (or a non-finite one) leaves nothing to extrapolate from.
  if (!(loss_scale > 0 && std::isfinite(loss_scale)) || !r.dtype.is_low()) return;
  const double log2s = std::log2(loss_scale);
  std::vector<uint64_t> cum(TraceRecord::kBins + 1);
  const Format& f = r.dtype.fmt;
  // Overflow threshold under RNE: the midpoint between the largest finite value and the
  // next binade step; whether the midpoint itself overflows depends on the tie rule.
  Env e0;
  const double fmax = to_f64(f, f.max_mag(), e0);
  const double mid = fmax + std::ldexp(1.0, f.emax() - f.frac_bits - 1);
  Env e1;
  from_f64(f, mid, e1);
  const bool mid_overflows = (e1.flags & flag::overflow) != 0;
  // cum[i]: values in bins below i.
  cum[0] = 0;
  for (int i = 0; i < TraceRecord::kBins; ++i)
    cum[size_t(i + 1)] = cum[size_t(i)] + r.hist[size_t(i)];
  for (WindowRow& row : rows) {
    row.values += r.events.total;
    // Shift of the exponent bins when going from scale s to 2^k (an integer when s is a
    // power of two; otherwise only whole bins below the threshold are counted).
    const double t = double(row.k) - log2s;
    if (f.has_zero) {
      // Values at or below 2^u round to zero: half the smallest subnormal under RNE (the tie
      // goes to the even zero), or anything below the smallest normal when flushing. Bin e
      // ([2^e, 2^(e+1)) before scaling) lies wholly below when e + 1 + t <= u.
      const int u = f.ftz ? f.emin() : f.emin() - f.frac_bits - 1;
      const double last = std::floor(double(u) - 1.0 - t + 1e-9);  // highest such e
      const double idx = last - double(TraceRecord::kMinExp) + 1.0;  // bins below e + 1
      if (idx > 0) row.flushed += cum[size_t(std::min(idx, double(TraceRecord::kBins)))];
      // The tie itself: a value exactly 2^(u - t), which needs an integer t. (Flushing keeps
      // 2^emin, a normal number.)
      const double ti = std::round(t);
      if (!f.ftz && std::fabs(t - ti) < 1e-9) {
        const double e = double(u) - ti - double(TraceRecord::kMinExp);
        if (e >= 0 && e < double(TraceRecord::kBins)) row.flushed += r.pow2[size_t(e)];
      }
    }
    if (r.max_abs > 0 && !row.overflow) {
      const double v = std::ldexp(r.max_abs, row.k) / loss_scale;  // exact for 2^j scales
      if (v > mid || (v == mid && mid_overflows)) row.overflow = true;
    }
    // A value already infinite before this rounding came from an overflow upstream at the
    // current scale: every scale at least as large overflows too.
    if (r.nonfinite_in > 0 && row.k >= log2s - 1e-9) row.overflow = true;
  }
}

std::vector<WindowRow> predict_window(const std::vector<TraceRecord>& records, double loss_scale,
                                      int k_min, int k_max) {
  std::vector<WindowRow> rows = empty_window(k_min, k_max);
  for (const TraceRecord& r : records)
    if (r.is_grad()) add_to_window(rows, r, loss_scale);
  return rows;
}

std::pair<int, int> safe_window(const std::vector<WindowRow>& rows, double tolerance) {
  int lo = INT_MIN, hi = INT_MIN;
  for (const WindowRow& r : rows) {
    if (r.overflow || r.fraction() > tolerance) continue;
    if (lo == INT_MIN) lo = r.k;
    hi = r.k;
  }
  return {lo, hi};
}

const char* const kTraceCsvHeader =
    "step,name,op,kind,dtype,total,zeros,flushed,subnormal,overflow,nan,inexact,nonfinite_in,"
    "vanished,small_update,min_exp,max_exp,max_abs,hist,signal,noise,snr_db,flushed_l2_fraction\n";
const char* const kWindowCsvHeader =
    "step,loss_scale,k,values,flushed,flushed_fraction,overflow,safe\n";

const char* const kBlocksCsvHeader =
    "step,name,gemm,op,kind,scheme,axis,sr,rht,elements,blocks,flushed,saturated,"
    "scales_clamped,scales_clamped_harmless,scales_clamped_real,nan_scales,zero_scales,signal,"
    "noise,snr_db,scale_min_exp,scale_max_exp,scale_hist\n";

std::string k_str(int k) { return k == INT_MIN ? "" : std::to_string(k); }

void append_trace_columns(std::string& line, int step, const TraceRecord& t) {
  const EventCounts& e = t.events;
  append_value(line, step);
  line += ',' + t.name + ',' + t.op + ',' + kind_name(t.kind) + ',' + t.dtype.name() + ',';
  for (uint64_t v : {e.total, e.zero, e.flushed, e.subnormal, e.overflow, e.nan, e.inexact,
                     t.nonfinite_in, t.vanished, t.small_update})
    append_value(line, v), line += ',';
  line += k_str(t.min_exp()) + ',' + k_str(t.max_exp()) + ',';
  append_value(line, float(t.max_abs));
  line += ',';
  bool first = true;
  for (int i = 0; i < TraceRecord::kBins; ++i)
    if (t.hist[size_t(i)]) {
      if (!first) line += ';';
      first = false;
      append_value(line, i + TraceRecord::kMinExp), line += ':';
      append_value(line, t.hist[size_t(i)]);
    }
  line += ',';
  append_number(line, t.signal.value());
  line += ',';
  append_number(line, t.noise.value());
  line += ',';
  append_number(line, t.snr_db());
  line += ',';
  append_number(line, t.flushed_l2_fraction());
}

void append_block_columns(std::string& line, int step, const BlockRecord& r) {
  const BlockEvents& e = r.events;
  append_value(line, step);
  line += ',' + r.name + ',' + r.gemm + ',' + r.op + ',' + kind_name(r.kind) + ',' + r.scheme;
  line += r.axis == BlockAxis::first ? ",0," : ",-1,";
  append_value(line, int(r.sr)), line += ',', append_value(line, int(r.rht)), line += ',';
  for (uint64_t v : {e.elements, e.blocks, e.flushed, e.saturated, e.scales_clamped,
                     e.scales_clamped_harmless, e.scales_clamped - e.scales_clamped_harmless,
                     e.nan_scales, r.zero_scales})
    append_value(line, v), line += ',';
  append_value(line, r.signal), line += ',', append_value(line, r.noise), line += ',';
  append_number(line, r.snr_db());
  line += ',';
  if (!r.scale_hist.empty()) {
    append_value(line, r.scale_hist.begin()->first), line += ',';
    append_value(line, r.scale_hist.rbegin()->first);
  } else {
    line += ',';
  }
  line += ',';
  bool first = true;
  for (const auto& [k, n] : r.scale_hist) {
    if (!first) line += ';';
    first = false;
    append_value(line, k), line += ':', append_value(line, n);
  }
}

void append_window_columns(std::string& line, int step, double loss_scale, const WindowRow& w,
                           double tolerance) {
  const bool safe = !w.overflow && w.fraction() <= tolerance;
  append_value(line, step), line += ',', append_value(line, float(loss_scale)), line += ',';
  append_value(line, w.k), line += ',', append_value(line, w.values), line += ',';
  append_value(line, w.flushed), line += ',', append_value(line, w.fraction()), line += ',';
  append_value(line, int(w.overflow)), line += ',', append_value(line, int(safe));
}

}  // namespace halfway::sim
