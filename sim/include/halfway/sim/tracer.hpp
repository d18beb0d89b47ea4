/// \file tracer.hpp
/// Counts every rounding of a tensor into a low-precision dtype: per step, per tensor (stable
/// names like "0.weight", "1.output", "1.grad_input"), with the core's bulk event counts, a
/// histogram of the pre-rounding magnitudes (one bin per power of two) and the extreme
/// exponents. From the gradient histograms of a step it predicts, for every loss scale 2^k,
/// how many gradient values would be flushed to zero and whether any would overflow.
///
///     Tracer tr;
///     tr.begin_step(0, 65536.0);
///     ... forward/backward under a ContextGuard whose Runtime points at tr ...
///     StepTrace st = tr.end_step();     // st.records, st.window, st.k_low, st.k_high
#pragma once

#include <array>
#include <climits>
#include <future>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "halfway/blocks.hpp"
#include "halfway/bulk.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/dtype.hpp"
#include "halfway/sim/square_sum.hpp"
#include "halfway/sim/tensor.hpp"
#include "halfway/sim/csv.hpp"

namespace halfway::sim {

struct TraceRecord {
  static constexpr int kMinExp = -149;  ///< smallest binary32 exponent (subnormal 2^-149)
  static constexpr int kMaxExp = 127;
  static constexpr int kBins = kMaxExp - kMinExp + 1;

  std::string name;
  std::string op;
  TraceKind kind = TraceKind::activation;
  DType dtype;
  EventCounts events;         ///< from quantize_f32: total, zero, flushed, subnormal, ...
  uint64_t nonfinite_in = 0;  ///< inf/NaN before rounding
  uint64_t vanished = 0;      ///< updates: w + Δw != w in fp32 but rounds back to w
  uint64_t small_update = 0;  ///< updates: Δw != 0 and |w| >= 2^p·|Δw| (p: precision)
  double max_abs = 0;         ///< largest finite pre-rounding magnitude
  double min_abs = 0;         ///< smallest non-zero finite pre-rounding magnitude (0: none)
  /// hist[e - kMinExp]: pre-rounding values with 2^e <= |v| < 2^(e+1) (finite, non-zero).
  std::array<uint64_t, kBins> hist{};
  /// pow2[e - kMinExp]: those of them that are exactly ±2^e. At a power-of-two scale such a
  /// value can land exactly on the flush threshold, a tie that rounds to zero. (Gradients
  /// computed from fp16 subnormals, which have few significant bits, often are powers of two.)
  std::array<uint64_t, kBins> pow2{};
  /// The rounding's error (square_sum.hpp), over the finite values within the dtype's range:
  /// the signal Σx², the noise Σ(x − q)² and Σx² of the values flushed to zero, exact. Every
  /// traced rounding fills them (add_rounding); trace.csv gives snr_db and flushed_l2_fraction.
  SquareSum signal, noise, flushed_sq;

  bool has_values() const { return min_abs > 0; }
  double snr_db() const { return sim::snr_db(signal, noise); }
  double flushed_l2_fraction() const { return sim::flushed_l2_fraction(signal, flushed_sq); }
  int min_exp() const;  ///< floor(log2 min_abs); INT_MIN when no non-zero value
  int max_exp() const;  ///< floor(log2 max_abs); INT_MIN when no non-zero value
  bool is_grad() const {
    return kind == TraceKind::activation_grad || kind == TraceKind::weight_grad;
  }
};

/// Prediction for one power-of-two loss scale.
struct WindowRow {
  int k = 0;
  uint64_t flushed = 0;  ///< gradient values predicted to become zero
  uint64_t values = 0;     ///< gradient values rounded into low precision
  bool overflow = false;   ///< some gradient value predicted to overflow
  double fraction() const { return values ? double(flushed) / double(values) : 0.0; }
};

/// One block-scaled copy of a GEMM operand in one step (blocks.csv): the library's event
/// counts, the quantization error and the distribution of the block scales.
struct BlockRecord {
  std::string name;  ///< the operand: "<layer>.input", "<layer>.weight", "<layer>.grad_output"
  std::string gemm;  ///< the GEMM that reads this copy: "fprop", "dgrad" or "wgrad"
  std::string op;
  TraceKind kind = TraceKind::activation;
  std::string scheme;  ///< blocks.hpp's name, e.g. "mxfp8_e4m3:rceil"
  BlockAxis axis = BlockAxis::last;
  bool sr = false;   ///< elements rounded stochastically
  bool rht = false;  ///< random Hadamard transform applied
  BlockEvents events;  ///< elements and blocks quantized (zero padding included)
  double signal = 0;   ///< Σ x² over the fp32 values quantized (transformed with rht), binary64
  double noise = 0;    ///< Σ (x − q)², q the dequantized values
  uint64_t zero_scales = 0;  ///< blocks whose scale is 0
  std::map<int, uint64_t> scale_hist;  ///< floor(log2 scale) -> blocks (finite, non-zero scales)

  /// 10·log10(signal / noise): +inf when exact (noise 0, signal > 0), NaN when the tensor is
  /// all zero (signal 0) or the error is not finite.
  double snr_db() const;
  /// Add another quantization of the same copy (a layer called twice in a step).
  void merge(const BlockRecord& o);
};

struct StepTrace {
  int step = 0;
  double loss_scale = 1;
  std::vector<TraceRecord> records;  ///< in the order the tensors were first rounded
  std::vector<BlockRecord> blocks;   ///< block-scaled operand copies, in the order first made
  std::vector<WindowRow> window;     ///< k = k_min .. k_max
  int k_low = INT_MIN, k_high = INT_MIN;  ///< safe window; INT_MIN when no scale is safe
};

struct TracerOptions {
  int k_min = -20, k_max = 40;
  double flush_tolerance = 0.0;  ///< a scale is safe when the fraction is at most this
};

/// Add binary32 values (before rounding) to `r`: the histogram, the powers of two, the extremes
/// and the non-finite count. The tracer's one pass over a tensor; a tensor added in chunks gives
/// the same record as added whole, in any split.
void add_values(TraceRecord& r, const float* pre, size_t n);
/// Add the error of rounding x[0..n) to q[0..n) in `fmt` to r's signal, noise and flushed
/// sums. Exact sums: a tensor added in chunks gives the same record as added whole.
void add_rounding(TraceRecord& r, const Format& fmt, const float* x, const float* q, size_t n);
/// add_values(r, x, n) then add_rounding(r, fmt, x, q, n), in one pass where the CPU has
/// AVX-512: the same record, bit for bit. With `out`, q's values are then copied there (out
/// may be x: a rounding in place).
void add_values_and_rounding(TraceRecord& r, const Format& fmt, const float* x, const float* q,
                             size_t n, float* out = nullptr);
/// Adds the value statistics of `part` (add_values and add_rounding over other values) to
/// `into`: what they give over both sets of values, whatever the split.
void merge_values(TraceRecord& into, const TraceRecord& part);

/// Rows k = k_min .. k_max with nothing counted yet.
std::vector<WindowRow> empty_window(int k_min, int k_max);
/// Add one record's prediction to `rows`, whatever its kind (nothing for a record that is not
/// low precision, or a scale that is not positive and finite): its values, those that would
/// be flushed to zero at each 2^k, and whether any would overflow. See predict_window.
void add_to_window(std::vector<WindowRow>& rows, const TraceRecord& r, double loss_scale);

/// Predict the scale window from the records of one step taken at `loss_scale`. A gradient
/// value v at scale s becomes v·2^k/s at scale 2^k (exact for power-of-two ratios while it
/// stays in the normal range); it is flushed to zero when that lands at or below half the
/// smallest subnormal (RNE), and overflows when the largest one rounds past the largest finite
/// value. For a power-of-two s the count is exact for the same pre-rounding values; a real run
/// at 2^k differs through upstream roundings (see docs/sim.md, "Scale window").
std::vector<WindowRow> predict_window(const std::vector<TraceRecord>& records, double loss_scale,
                                      int k_min, int k_max);
/// The safe window [k_low, k_high]: the smallest and largest k with no overflow and a
/// flushed fraction at most `tolerance` (INT_MIN, INT_MIN when none).
std::pair<int, int> safe_window(const std::vector<WindowRow>& rows, double tolerance);

/// trace.csv and scale_window.csv, the tracer's files (docs/sim.md): their header lines and
/// rows, written the same way by `halfway train` and `halfway analyze`. Numbers are written by
/// csv.hpp (std::to_chars: locale-free, shortest round-trip text); rows end in '\n'.
extern const char* const kTraceCsvHeader;   ///< "step,name,...,hist\n"
extern const char* const kWindowCsvHeader;  ///< "step,loss_scale,k,...,safe\n"
extern const char* const kBlocksCsvHeader;  ///< blocks.csv: "step,name,gemm,...,scale_hist\n"
/// Append the columns of kTraceCsvHeader for `r` at `step`, without the line end.
void append_trace_columns(std::string& line, int step, const TraceRecord& r);
/// Append the columns of kWindowCsvHeader for `w`, without the line end: safe when it does
/// not overflow and its flushed fraction is at most `tolerance`.
void append_window_columns(std::string& line, int step, double loss_scale, const WindowRow& w,
                           double tolerance);
/// Append the columns of kBlocksCsvHeader for `r` at `step`, without the line end.
void append_block_columns(std::string& line, int step, const BlockRecord& r);
/// An exponent as a CSV field: empty for INT_MIN (none).
std::string k_str(int k);

class Tracer {
 public:
  explicit Tracer(TracerOptions o = {}) : opt_(o) {}
  Tracer(Tracer&&) = default;
  Tracer& operator=(Tracer&&) = default;
  ~Tracer() { wait_blocks(); }

  void begin_step(int step, double loss_scale);
  bool active() const { return active_; }
  /// Record one rounding: `pre` are the binary32 values before rounding, `ev` the counts.
  void record(const TraceTag& tag, const DType& dt, const float* pre, size_t n,
              const EventCounts& ev);
  /// The same with the values' statistics already gathered (add_values, merge_values).
  void record(const TraceTag& tag, const DType& dt, const TraceRecord& values,
              const EventCounts& ev);
  /// Record one block-scaled operand copy (merged with an earlier one of the same name and GEMM).
  void record_blocks(BlockRecord r);
  /// The same for a copy whose record is still being computed on another thread: it keeps its
  /// place among the record_blocks calls and is merged, in that order, when the step ends.
  void record_blocks_later(std::future<BlockRecord> r);
  /// Record vanished / tiny updates for a rounding of kind `update` already recorded.
  void add_update_counts(const std::string& name, uint64_t vanished, uint64_t small_update);
  /// Close the step: computes the scale window. The result stays valid until the next
  /// begin_step (the storage is reused from step to step).
  const StepTrace& end_step();
  const TracerOptions& options() const { return opt_; }

 private:
  void merge_blocks(BlockRecord r);
  void drain_blocks();
  /// Waits for the pending records' work without keeping them (a step left unfinished).
  void wait_blocks();

  TracerOptions opt_;
  bool active_ = false;
  StepTrace current_;
  std::unordered_map<std::string, size_t> index_;
  /// Block records in call order once one is pending (record_blocks_later); empty otherwise.
  std::vector<std::future<BlockRecord>> pending_;
};

}  // namespace halfway::sim
