/// \file analyze.hpp
/// The tracer's per-tensor answers for tensors that come from elsewhere (a `.npz` of a real
/// run, PyTorch hooks): for each tensor and each low-precision format, what rounding the
/// values into it would do. The counts, the power-of-two histogram and the safe scale window
/// are the tracer's own (tracer.hpp: add_values, add_to_window); on top of them the SNR of the
/// rounding and the part of the L2 norm lost to flushing, from exact sums of squares.
///
///     TensorAnalyzer a("0.weight", TraceKind::tensor, {parse_dtype("fp16"), parse_dtype("e4m3")});
///     a.add(chunk1, n1);  a.add(chunk2, n2);        // any split gives the same result
///     TensorAnalysis r = a.finish({}, 1.0);          // r.formats[0].record.events.flushed, ...
///
/// Every result is independent of how the values are split into chunks: the counts are
/// integers, the extremes are extremes, and the sums of squares are exact (SquareSum), so
/// neither the chunking nor the order of the elements can change a bit of them.
#pragma once

#include <array>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "halfway/blocks.hpp"
#include "halfway/sim/analyze_blocks.hpp"
#include "halfway/sim/dtype.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/tracer.hpp"

namespace halfway::sim {

struct AnalyzeOptions {
  int k_min = -20, k_max = 40;       ///< the loss scales 2^k of the window
  double flush_tolerance = 0.0;  ///< a scale is safe when at most this fraction is flushed
  /// Block schemes: the tensor axis the blocks run along (negative: from the end), the
  /// values of one encode_blocks call (analyze_blocks' chunk), and blocks_detail.csv (one row
  /// per block, refused beyond max_detail_rows rows).
  int axis = -1;
  size_t block_chunk = size_t(1) << 18;
  bool per_block = false;
  uint64_t max_detail_rows = 10'000'000;
};
/// Throws InputError unless -300 <= k_min <= k_max <= 300 and flush_tolerance is in [0, 1]
/// (NaN refused), as the config's keys are, and block_chunk and max_detail_rows are positive.
void check_analyze_options(const AnalyzeOptions& o);

/// One tensor rounded into one format.
struct FormatAnalysis {
  /// The tracer's record: name, op, kind, dtype (the format), events (total, zero, flushed =
  /// non-zero values rounded to zero, subnormal, overflow = overflowed or saturated, nan, inexact),
  /// nonfinite_in, histogram, extremes.
  TraceRecord record;
  /// Over the finite values within the format's range (|x| <= largest finite value): the
  /// signal Σx², the error Σ(x - q)² of their rounding q, and Σx² of those flushed to zero.
  /// Values beyond the range are counted by events.overflow instead.
  SquareSum signal, noise, flushed;
  std::vector<WindowRow> window;          ///< k_min .. k_max, at the tensor's loss scale
  int k_low = INT_MIN, k_high = INT_MIN;  ///< safe window; INT_MIN when no scale is safe
  /// 10·log10(signal / noise): +inf when the rounding is exact, NaN when there is no signal.
  double snr_db() const;
  /// sqrt(flushed / signal): the part of the L2 norm lost to flushing (NaN without signal).
  double flushed_l2_fraction() const;
};

struct TensorAnalysis {
  std::string name;
  double loss_scale = 1;
  std::vector<FormatAnalysis> formats;  ///< in the order given
};

/// Analyses one tensor for several formats, fed in chunks of binary32 values.
class TensorAnalyzer {
 public:
  /// `formats`: low-precision dtypes (InputError for fp32 or fp64).
  TensorAnalyzer(std::string name, TraceKind kind, std::vector<DType> formats,
                 std::string op = "analyze");
  void add(const float* x, size_t n);
  /// The results; the window predicts the scales 2^k relative to a tensor taken at
  /// `loss_scale` (1: the values as they are).
  TensorAnalysis finish(const AnalyzeOptions& o, double loss_scale = 1.0) const;
  uint64_t values() const { return input_.events.total; }
  const std::string& name() const { return name_; }

 private:
  struct PerFormat {
    EventCounts events;
    SquareSum beyond, noise, flushed;  ///< beyond: Σx² of the finite values beyond the range
    float fmax;
  };
  std::string name_, op_;
  TraceKind kind_;
  std::vector<DType> formats_;
  TraceRecord input_;  ///< histogram, extremes, non-finite count and total of the input
  SquareSum finite_;   ///< Σx² of the finite values
  std::vector<PerFormat> per_;
  std::vector<float> q_;  ///< scratch: the rounded chunk
};

/// The formats of a comma-separated list ("fp16,bf16,e4m3"), each a low-precision format
/// halfway knows. Throws InputError naming the first unknown one, a repeated one, fp32 or fp64.
std::vector<DType> parse_format_list(const std::string& text);
/// What an analysis rounds into: element formats, value by value, and block schemes.
struct AnalysisFormats {
  std::vector<DType> elements;
  std::vector<BlockScheme> blocks;
};
/// A comma-separated list of element formats (as parse_format_list) and block schemes
/// (parse_block_scheme: "mxfp4", "nvfp4", "fp8_block", ...), in any order. Throws InputError
/// naming the first unknown, repeated or high-precision one.
AnalysisFormats parse_analysis_formats(const std::string& text);
/// "K_MIN..K_MAX" → {k_min, k_max}, each in [-300, 300], k_min <= k_max. Throws InputError.
std::pair<int, int> parse_scale_range(const std::string& text);

/// The columns appended to kTraceCsvHeader's (which end in the SNR and the flushed norm) in
/// analyze's trace.csv: the tensor's own safe window (empty when no scale is safe).
extern const char* const kAnalyzeExtraColumns;  ///< ",k_low,k_high"
/// Append the columns of kAnalyzeExtraColumns (with their leading commas) for `f`.
void append_analyze_columns(std::string& line, const FormatAnalysis& f);

}  // namespace halfway::sim


namespace halfway::sim {

/// What a training step adds to steps.csv besides the tracer's counts (NaN: not known).
struct StepInfo {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double loss_scale = 1;  ///< the scale the step's gradients were computed at
  int found_inf = -1;     ///< -1: not known
  int skipped = -1;
  double next_scale = std::numeric_limits<double>::quiet_NaN();
};

/// A run folder in `halfway train`'s schema, written from analysed tensors, step by step:
/// trace.csv (kTraceCsvHeader's columns, then kAnalyzeExtraColumns: one row per step, tensor
/// and format), scale_window.csv (kWindowCsvHeader's columns, then `dtype,name`: per step and
/// format, the rows of all gradient tensors together under an empty name, as `halfway train`
/// writes them, then, with `tensor_windows`, each tensor's own rows: 61 a tensor and format
/// with the default scales, so a traced training run leaves them out and keeps each tensor's
/// k_low and k_high in trace.csv), steps.csv when asked for, and manifest.json on commit().
/// Every file is written atomically, and the folder changes in one step (publish_folder):
/// nothing is left without commit().
///
/// Memory does not grow with the number of tensors: a tensor is finished, its rows written
/// and its analyser freed, when the next one begins (or the step ends), so all of a tensor's
/// values are added before the next tensor(). The step's rows wait for its end (which names
/// the step) in unlinked scratch files on the output's file system. What is
/// kept per tensor is its name until the step ends (names are unique in a step).
///
///     AnalysisRun run("out", parse_format_list("fp16,e4m3"), {}, false);
///     size_t id = run.tensor("x", TraceKind::tensor, "analyze", 1.0);
///     run.add(id, values, n);                // in chunks, any split
///     run.end_step(0, {});
///     run.commit(R"({"inputs": ["x.npz"]})");
class AnalysisRun {
 public:
  /// Throws InputError when `o` is out of range (check_analyze_options).
  AnalysisRun(std::string dir, std::vector<DType> formats, AnalyzeOptions o, bool steps_csv,
              bool tensor_windows = true);
  /// With block schemes too: blocks.csv (kBlocksCsvHeader's columns, then
  /// kAnalyzeBlockColumns: one row per step, tensor and scheme) and, with o.per_block,
  /// blocks_detail.csv. A tensor's values then wait in an unlinked scratch file on the
  /// output's file system until it is finished (analyze_blocks reads them from there).
  AnalysisRun(std::string dir, AnalysisFormats formats, AnalyzeOptions o, bool steps_csv,
              bool tensor_windows = true);
  ~AnalysisRun();
  /// Begin tensor `name` of the current step, taken at `loss_scale`, and finish the one
  /// before. Throws InputError when the step has it already (a name collision). `shape`
  /// (C order) places the values for the block schemes; empty: one axis of all the values
  /// added. Throws InputError when the blocks' axis is out of range for it or blocks_detail.csv
  /// would pass its limit.
  size_t tensor(const std::string& name, TraceKind kind, const std::string& op,
                double loss_scale = 1.0, const std::vector<uint64_t>& shape = {});
  /// Values of the tensor begun last (InputError for any other id).
  void add(size_t id, const float* x, size_t n);
  /// Write the step's rows and forget its tensors.
  void end_step(int step, const StepInfo& info);
  /// Write manifest.json (the members of the JSON object `fields_json`, plus the version,
  /// formats, scales, outputs and steps) and rename every file into place. `tensors_json`, a
  /// JSON array as text, becomes the member "tensors" without being parsed (it lists every
  /// tensor, so it may be large).
  void commit(const std::string& fields_json = "{}", const std::string& tensors_json = "");
  /// Remove the folder's old manifest.json before other files change in it (a caller's own
  /// files, such as halfway.torch.trace's tensors/): until commit() the folder is no finished
  /// run. commit() does this itself (publish_folder).
  void unpublish();
  const std::vector<DType>& formats() const { return formats_; }
  /// The most memory the analysis of one tensor takes besides its name and its caller's
  /// chunk: the analyser and its results for `formats` formats and `scales` loss scales.
  static uint64_t working_set_bytes(size_t formats, int scales);

 private:
  class Scratch;
  class Spool;
  std::vector<std::string> stale_outputs() const;
  void finish_blocks(const std::string& name, TraceKind kind, const std::string& op);
  void count_detail_rows(const std::string& name, const std::vector<uint64_t>& shape);
  void finish_tensor();  ///< write the rows of the tensor begun last, and free its analyser
  void begin_step();
  std::string dir_;
  std::vector<DType> formats_;
  std::vector<BlockScheme> schemes_;
  AnalyzeOptions opt_;
  bool tensor_windows_;
  std::unique_ptr<AtomicFile> blocks_, detail_;
  std::unique_ptr<Scratch> block_rows_, detail_rows_;  ///< the step's rows of both
  std::unique_ptr<Spool> spool_;  ///< the values of the tensor being fed (block schemes)
  std::vector<uint64_t> shape_;   ///< its shape (empty: not given)
  uint64_t detail_rows_count_ = 0;
  std::unique_ptr<AtomicFile> trace_, window_, steps_;
  struct Open {
    TensorAnalyzer analyzer;
    double loss_scale;
    TraceKind kind;
    std::string op;
  };
  std::unique_ptr<Open> open_;       ///< the tensor being fed (an analyser: some 40 KB a format)
  size_t tensors_in_step_ = 0;       ///< ids handed out in this step
  std::unordered_set<std::string> names_;         ///< this step's tensor names
  std::vector<std::vector<WindowRow>> combined_;  ///< per format: the gradients together
  std::unique_ptr<Scratch> trace_rows_;             ///< the step's trace.csv rows
  std::vector<std::unique_ptr<Scratch>> own_rows_;  ///< per format: each tensor's window rows
  uint64_t grad_values_ = 0, grad_flushed_ = 0, grad_overflow_ = 0;  ///< steps.csv, format 0
  int steps_done_ = 0;
  bool unpublished_ = false;
};

}  // namespace halfway::sim
