#include "halfway/sim/analyze.hpp"

#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <algorithm>
#include <optional>
#include <set>

#include <unistd.h>

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/sim/version.hpp"

#include <nlohmann/json.hpp>

namespace halfway::sim {

double FormatAnalysis::snr_db() const { return sim::snr_db(signal, noise); }

double FormatAnalysis::flushed_l2_fraction() const {
  return sim::flushed_l2_fraction(signal, flushed);
}

TensorAnalyzer::TensorAnalyzer(std::string name, TraceKind kind, std::vector<DType> formats,
                               std::string op)
    : name_(std::move(name)), op_(std::move(op)), kind_(kind), formats_(std::move(formats)) {
  for (const DType& d : formats_) {
    if (!d.is_low()) throw InputError("cannot analyse rounding into " + d.name() +
                                      " (a low-precision format is needed)");
    Env env;
    PerFormat p;
    p.fmax = static_cast<float>(to_f64(d.fmt, d.fmt.max_mag(), env));
    per_.push_back(p);
  }
}

void TensorAnalyzer::add(const float* x, size_t n) {
  add_values(input_, x, n);
  input_.events.total += n;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) finite_.add(x[i]);
  q_.resize(n);
  for (size_t j = 0; j < formats_.size(); ++j) {
    PerFormat& p = per_[j];
    EventCounts ev;
    quantize_f32(formats_[j].fmt, x, q_.data(), n, {}, &ev);
    p.events += ev;
    add_rounding_error(x, q_.data(), n, p.fmax, p.noise, p.flushed, &p.beyond);
  }
}

TensorAnalysis TensorAnalyzer::finish(const AnalyzeOptions& o, double loss_scale) const {
  TensorAnalysis t;
  t.name = name_;
  t.loss_scale = loss_scale;
  for (size_t j = 0; j < formats_.size(); ++j) {
    FormatAnalysis f;
    f.record = input_;
    f.record.name = name_;
    f.record.op = op_;
    f.record.kind = kind_;
    f.record.dtype = formats_[j];
    f.record.events = per_[j].events;
    f.signal = finite_;
    f.signal -= per_[j].beyond;
    f.noise = per_[j].noise;
    f.flushed = per_[j].flushed;
    f.record.signal = f.signal;  // trace.csv's snr_db and flushed_l2_fraction
    f.record.noise = f.noise;
    f.record.flushed_sq = f.flushed;
    f.window = empty_window(o.k_min, o.k_max);
    add_to_window(f.window, f.record, loss_scale);
    std::tie(f.k_low, f.k_high) = safe_window(f.window, o.flush_tolerance);
    t.formats.push_back(std::move(f));
  }
  return t;
}

std::vector<DType> parse_format_list(const std::string& text) {
  std::vector<DType> out;
  std::set<std::string> seen;
  size_t p = 0;
  while (true) {
    const size_t c = text.find(',', p);
    const std::string item = text.substr(p, c == std::string::npos ? std::string::npos : c - p);
    if (item.empty()) throw InputError("empty format name in '" + text + "'");
    const DType d = parse_dtype(item);
    if (!d.is_low()) throw InputError("format '" + item + "' is not a low-precision format");
    if (!seen.insert(d.name()).second) throw InputError("format '" + item + "' given twice");
    out.push_back(d);
    if (c == std::string::npos) break;
    p = c + 1;
  }
  return out;
}

AnalysisFormats parse_analysis_formats(const std::string& text) {
  AnalysisFormats out;
  std::set<std::string> seen;
  const std::vector<std::string>& schemes = block_scheme_names();
  size_t p = 0;
  while (true) {
    const size_t c = text.find(',', p);
    const std::string item = text.substr(p, c == std::string::npos ? std::string::npos : c - p);
    if (item.empty()) throw InputError("empty format name in '" + text + "'");
    // An element format, else a block scheme (lib's parser judges the scheme's options, so
    // new scheme names and options come with it).
    std::string name;
    std::optional<DType> d;
    std::string dtype_error;
    try {
      d = parse_dtype(item);
    } catch (const InputError& e) {
      dtype_error = e.what();
    }
    if (d) {
      if (!d->is_low()) throw InputError("format '" + item + "' is not a low-precision format");
      out.elements.push_back(*d);
      name = d->name();
    } else {
      try {
        out.blocks.push_back(parse_block_scheme(item));
      } catch (const InputError&) {
        // A scheme's name with a bad option: lib's message; anything else: both kinds named.
        for (const std::string& n : schemes)
          if (item.compare(0, n.size(), n) == 0) throw;
        std::string list;
        for (const std::string& n : schemes) list += (list.empty() ? "" : ", ") + n;
        throw InputError(dtype_error + " (nor a block scheme: " + list + ")");
      }
      name = out.blocks.back().name;
    }
    if (!seen.insert(name).second) throw InputError("format '" + item + "' given twice");
    if (c == std::string::npos) break;
    p = c + 1;
  }
  return out;
}

std::pair<int, int> parse_scale_range(const std::string& text) {
  const auto bad = [&]() {
    return InputError("scales '" + text + "': expected K_MIN..K_MAX, integers in [-300, 300]");
  };
  const size_t dots = text.find("..");
  if (dots == std::string::npos) throw bad();
  int lo = 0, hi = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  const auto r1 = std::from_chars(b, b + dots, lo);
  const auto r2 = std::from_chars(b + dots + 2, e, hi);
  if (r1.ec != std::errc() || r1.ptr != b + dots || r2.ec != std::errc() || r2.ptr != e ||
      lo < -300 || hi > 300 || lo > hi)
    throw bad();
  return {lo, hi};
}

void check_analyze_options(const AnalyzeOptions& o) {
  if (o.k_min < -300 || o.k_max > 300 || o.k_min > o.k_max)
    throw InputError("scales " + std::to_string(o.k_min) + ".." + std::to_string(o.k_max) +
                     ": expected K_MIN <= K_MAX, integers in [-300, 300]");
  if (!(o.flush_tolerance >= 0 && o.flush_tolerance <= 1)) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", o.flush_tolerance);
    throw InputError(std::string("flush_tolerance must be in [0, 1], got ") + b);
  }
  if (o.block_chunk == 0) throw InputError("the block chunk must be at least 1 value");
  if (o.max_detail_rows == 0) throw InputError("the row limit of blocks_detail.csv must be at least 1");
}

const char* const kAnalyzeExtraColumns = ",k_low,k_high";

void append_analyze_columns(std::string& line, const FormatAnalysis& f) {
  line += ',' + k_str(f.k_low) + ',' + k_str(f.k_high);
}

// ---------------------------------------------------------------------------------------------
// The run folder.

/// A file with no name on the output's file system, for the rows that wait for the end of a
/// step (without their first column, the step, which is known then): created under
/// NAME.tmp.PID@HOST.rows (which remove_stale_tmp_files knows) and unlinked at once.
class AnalysisRun::Scratch {
 public:
  Scratch(const std::string& dir, const std::string& name) : what_("'" + dir + "/" + name + "'") {
    const std::string path = dir + "/" + name + tmp_suffix() + ".rows";
    f_ = std::fopen(path.c_str(), "w+xb");
    if (!f_) throw InputError("cannot create '" + path + "': " + std::strerror(errno));
    std::remove(path.c_str());
  }
  ~Scratch() { std::fclose(f_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void write(const std::string& s) {
    if (!s.empty() && std::fwrite(s.data(), 1, s.size(), f_) != s.size()) fail();
  }
  /// Every line written since the last drain, into `out`, each after `prefix`; then empty.
  void drain(std::ostream& out, const std::string& prefix) {
    if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0) fail();
    std::vector<char> buf(1 << 16);
    bool line_start = true;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f_)) > 0) {
      const char* p = buf.data();
      const char* end = p + n;
      while (p < end) {
        if (line_start) out << prefix;
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)));
        const char* stop = nl ? nl + 1 : end;
        out.write(p, long(stop - p));
        line_start = nl != nullptr;
        p = stop;
      }
    }
    if (std::ferror(f_)) fail();
    if (std::fseek(f_, 0, SEEK_SET) != 0 || ::ftruncate(::fileno(f_), 0) != 0) fail();
  }

 private:
  [[noreturn]] void fail() {
    throw std::runtime_error("write to the scratch file of " + what_ + " failed: " +
                             std::strerror(errno));
  }
  std::FILE* f_;
  std::string what_;
};

/// A tensor's binary32 values in a file with no name on the output's file system, for the
/// block schemes, which read them back by position (analyze_blocks' ValueReader).
class AnalysisRun::Spool {
 public:
  explicit Spool(const std::string& dir) : what_("'" + dir + "/values" + tmp_suffix() + "'") {
    const std::string path = dir + "/values" + tmp_suffix() + ".rows";
    f_ = std::fopen(path.c_str(), "w+xb");
    if (!f_) throw InputError("cannot create '" + path + "': " + std::strerror(errno));
    std::remove(path.c_str());
  }
  ~Spool() { std::fclose(f_); }
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;
  void append(const float* x, size_t n) {
    if (n && std::fwrite(x, sizeof(float), n, f_) != n) fail("write to");
    size_ += n;
  }
  uint64_t size() const { return size_; }
  void read(uint64_t offset, float* out, size_t n) {
    if (offset + n > size_) throw std::logic_error("Spool::read beyond its values");
    if (std::fflush(f_) != 0) fail("write to");
    const ssize_t want = ssize_t(n * sizeof(float));
    if (::pread(::fileno(f_), out, size_t(want), off_t(offset * sizeof(float))) != want)
      fail("read from");
  }
  void clear() {
    if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0 ||
        ::ftruncate(::fileno(f_), 0) != 0)
      fail("truncate");
    size_ = 0;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string(what) + " the scratch file " + what_ + " failed: " +
                             std::strerror(errno));
  }
  std::FILE* f_;
  std::string what_;
  uint64_t size_ = 0;
};

AnalysisRun::AnalysisRun(std::string dir, std::vector<DType> formats, AnalyzeOptions o,
                         bool steps_csv, bool tensor_windows)
    : AnalysisRun(std::move(dir), AnalysisFormats{std::move(formats), {}}, o, steps_csv,
                  tensor_windows) {}

AnalysisRun::AnalysisRun(std::string dir, AnalysisFormats formats, AnalyzeOptions o,
                         bool steps_csv, bool tensor_windows)
    : dir_(std::move(dir)),
      formats_(std::move(formats.elements)),
      schemes_(std::move(formats.blocks)),
      opt_(o),
      tensor_windows_(tensor_windows) {
  if (formats_.empty() && schemes_.empty()) throw InputError("no formats to analyse");
  if (opt_.per_block && schemes_.empty())
    throw InputError("per_block: blocks_detail.csv needs a block scheme among the formats");
  check_analyze_options(opt_);
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw InputError("cannot create output directory '" + dir_ + "': " + ec.message());
  remove_stale_tmp_files(dir_, {"steps.csv", "trace.csv", "scale_window.csv", "manifest.json",
                                "blocks.csv", "blocks_detail.csv", "values"});
  const std::string d = dir_ + "/";
  trace_ = std::make_unique<AtomicFile>(d + "trace.csv");
  window_ = std::make_unique<AtomicFile>(d + "scale_window.csv");
  std::string h = kTraceCsvHeader;
  h.pop_back();
  trace_->out() << h << kAnalyzeExtraColumns << '\n';
  h = kWindowCsvHeader;
  h.pop_back();
  window_->out() << h << ",dtype,name\n";
  if (steps_csv) {
    steps_ = std::make_unique<AtomicFile>(d + "steps.csv");
    steps_->out() << "step,loss,loss_scale,found_inf,skipped,growth_tracker,next_scale,"
                     "grad_values,grad_flushed,grad_overflow,k_low,k_high\n";
  }
  if (!schemes_.empty()) {
    blocks_ = std::make_unique<AtomicFile>(d + "blocks.csv");
    h = kBlocksCsvHeader;
    h.pop_back();
    blocks_->out() << h << kAnalyzeBlockColumns << '\n';
    block_rows_ = std::make_unique<Scratch>(dir_, "blocks.csv");
    spool_ = std::make_unique<Spool>(dir_);
    if (opt_.per_block) {
      detail_ = std::make_unique<AtomicFile>(d + "blocks_detail.csv");
      detail_->out() << kBlocksDetailCsvHeader;
      detail_rows_ = std::make_unique<Scratch>(dir_, "blocks_detail.csv");
    }
  }
  trace_rows_ = std::make_unique<Scratch>(dir_, "trace.csv");
  if (tensor_windows_)
    for (size_t j = 0; j < formats_.size(); ++j)
      own_rows_.push_back(std::make_unique<Scratch>(dir_, "scale_window.csv"));
  begin_step();
}

AnalysisRun::~AnalysisRun() = default;

uint64_t AnalysisRun::working_set_bytes(size_t formats, int scales) {
  // The analyser (per format: events and three exact square sums; the input's histogram,
  // extremes and square sum), its results (per format: a record, three square sums and the
  // window) and the rows written from them, with room for the allocator's overhead.
  const uint64_t sums = sizeof(SquareSum);
  const uint64_t per_format = 2 * (sizeof(TensorAnalyzer) + sizeof(FormatAnalysis) + 4 * sums +
                                   uint64_t(scales) * (sizeof(WindowRow) + 160));
  return 2 * (sizeof(TensorAnalyzer) + sums) + uint64_t(formats) * per_format;
}

void AnalysisRun::begin_step() {
  names_.clear();
  tensors_in_step_ = 0;
  combined_.assign(formats_.size(), empty_window(opt_.k_min, opt_.k_max));
  grad_values_ = grad_flushed_ = grad_overflow_ = 0;
}

size_t AnalysisRun::tensor(const std::string& name, TraceKind kind, const std::string& op,
                           double loss_scale, const std::vector<uint64_t>& shape) {
  finish_tensor();
  if (name.find_first_of(",\n\r\"") != std::string::npos)
    throw InputError("tensor name '" + name + "' holds a comma, quote or line break");
  if (!names_.insert(name).second)
    throw InputError("two tensors named '" + name + "' (names must be unique)");
  if (!schemes_.empty() && !shape.empty()) count_detail_rows(name, shape);
  open_ = std::make_unique<Open>(
      Open{TensorAnalyzer(name, kind, formats_, op), loss_scale, kind, op});
  shape_ = shape;
  return tensors_in_step_++;
}

void AnalysisRun::count_detail_rows(const std::string& name, const std::vector<uint64_t>& shape) {
  BlockView v;
  try {
    v = block_view(shape, opt_.axis);
  } catch (const InputError& e) {
    throw InputError("tensor '" + name + "': " + e.what() + " (the blocks' axis)");
  }
  if (!opt_.per_block) return;
  for (const BlockScheme& s : schemes_) detail_rows_count_ += block_count(s, v);
  if (detail_rows_count_ > opt_.max_detail_rows)
    throw InputError("blocks_detail.csv would have more than " +
                     std::to_string(opt_.max_detail_rows) + " rows (" +
                     std::to_string(detail_rows_count_) + " with tensor '" + name +
                     "'); raise the limit (--max-rows) or analyse fewer tensors");
}

void AnalysisRun::add(size_t id, const float* x, size_t n) {
  if (!open_ || id + 1 != tensors_in_step_)
    throw InputError(id < tensors_in_step_
                         ? "tensor " + std::to_string(id) + " is finished (a tensor's values "
                           "are all added before the next tensor begins)"
                         : "no tensor " + std::to_string(id) + " in this step");
  open_->analyzer.add(x, n);
  if (spool_) spool_->append(x, n);
}

namespace {

/// A number cell as trace.csv writes one (tracer.hpp's append_number: empty for NaN).
void put_field(std::string& line, double v) { append_number(line, v); }

bool in_combined_window(TraceKind k) {
  return k == TraceKind::activation_grad || k == TraceKind::weight_grad || k == TraceKind::tensor;
}

}  // namespace

/// Rows for a Scratch: `append` writes one row for step 0, whose "0" is taken off again.
template <class F>
void append_row_tail(std::string& line, F append) {
  const size_t at = line.size();
  append(line);
  line.erase(at, 1);
}

void AnalysisRun::finish_blocks(const std::string& name, TraceKind kind, const std::string& op) {
  if (shape_.empty()) {
    shape_ = {spool_->size()};
    count_detail_rows(name, shape_);
  }
  uint64_t want = 1;
  for (uint64_t d : shape_) want *= d;
  if (want != spool_->size())
    throw InputError("tensor '" + name + "' has " + std::to_string(spool_->size()) +
                     " values, its shape " + std::to_string(want));
  const BlockView v = block_view(shape_, opt_.axis);
  const ValueReader read = [this](uint64_t at, float* out, size_t n) { spool_->read(at, out, n); };
  std::string line, rows;
  for (const BlockScheme& s : schemes_) {
    std::function<void(const BlockDetail&)> each;
    if (detail_rows_)
      each = [&](const BlockDetail& b) {
        append_row_tail(rows, [&](std::string& l) {
          append_block_detail_columns(l, 0, name, s.name, b);
        });
        rows += '\n';
        if (rows.size() > (1u << 16)) detail_rows_->write(rows), rows.clear();
      };
    BlockAnalysis a = analyze_blocks(s, v, read, opt_.block_chunk, each);
    if (detail_rows_) detail_rows_->write(rows), rows.clear();
    a.record.name = name;
    a.record.op = op;
    a.record.kind = kind;
    append_row_tail(line, [&](std::string& l) { append_block_columns(l, 0, a.record); });
    append_analyze_block_columns(line, a, v);
    line += '\n';
  }
  block_rows_->write(line);
  spool_->clear();
}

void AnalysisRun::finish_tensor() {
  if (!open_) return;
  const TensorAnalysis t = open_->analyzer.finish(opt_, open_->loss_scale);
  const TraceKind kind = open_->kind;
  const std::string op = open_->op;
  open_.reset();
  if (spool_) finish_blocks(t.name, kind, op);
  std::string line;
  for (const FormatAnalysis& f : t.formats) {
    append_row_tail(line, [&](std::string& l) { append_trace_columns(l, 0, f.record); });
    append_analyze_columns(line, f);
    line += '\n';
  }
  trace_rows_->write(line);
  for (size_t j = 0; j < formats_.size(); ++j) {
    const FormatAnalysis& f = t.formats[j];
    if (in_combined_window(f.record.kind)) add_to_window(combined_[j], f.record, t.loss_scale);
    if (!tensor_windows_) continue;
    line.clear();
    const std::string dtype = formats_[j].name();
    for (const WindowRow& w : f.window) {
      if (w.values == 0) continue;
      append_row_tail(line, [&](std::string& l) {
        append_window_columns(l, 0, t.loss_scale, w, opt_.flush_tolerance);
      });
      line += ',' + dtype + ',' + t.name + '\n';
    }
    own_rows_[j]->write(line);
  }
  if (t.formats.empty()) return;
  const TraceRecord& r = t.formats[0].record;
  if (r.is_grad())
    grad_values_ += r.events.total, grad_flushed_ += r.events.flushed,
        grad_overflow_ += r.events.overflow;
}

void AnalysisRun::end_step(int step, const StepInfo& info) {
  finish_tensor();
  const std::string step_field = std::to_string(step);
  trace_rows_->drain(trace_->out(), step_field);
  if (block_rows_) block_rows_->drain(blocks_->out(), step_field);
  if (detail_rows_) detail_rows_->drain(detail_->out(), step_field);
  // Per format: the gradient tensors together (halfway train's rows), then each tensor alone.
  std::string line;
  for (size_t j = 0; j < formats_.size(); ++j) {
    line.clear();
    const std::string dtype = formats_[j].name();
    for (const WindowRow& w : combined_[j]) {
      if (w.values == 0) continue;
      append_window_columns(line, step, info.loss_scale, w, opt_.flush_tolerance);
      line += ',' + dtype + ",\n";
    }
    window_->out() << line;
    if (tensor_windows_) own_rows_[j]->drain(window_->out(), step_field);
  }
  if (steps_) {
    // The counters of halfway train's steps.csv, for the first format (empty without an
    // element format: block schemes only).
    line.clear();
    put_field(line, step), line += ',', put_field(line, info.loss), line += ',';
    put_field(line, info.loss_scale), line += ',';
    if (info.found_inf >= 0) put_field(line, info.found_inf);
    line += ',';
    if (info.skipped >= 0) put_field(line, info.skipped);
    line += ",,";
    put_field(line, info.next_scale), line += ',';
    if (formats_.empty()) {
      line += ",,,,\n";
    } else {
      const auto [lo, hi] = safe_window(combined_[0], opt_.flush_tolerance);
      line += std::to_string(grad_values_) + ',' + std::to_string(grad_flushed_) + ',' +
              std::to_string(grad_overflow_) + ',' + k_str(lo) + ',' + k_str(hi) + '\n';
    }
    steps_->out() << line;
  }
  ++steps_done_;
  begin_step();
}

void AnalysisRun::commit(const std::string& fields_json, const std::string& tensors_json) {
  using nlohmann::json;
  json m = json::parse(fields_json);
  if (!tensors_json.empty() && m.contains("tensors"))
    throw std::logic_error("AnalysisRun::commit: \"tensors\" given twice");
  m["halfway_version"] = sim_version();
  m["git_revision"] = git_revision();
  if (!m.contains("complete")) m["complete"] = true;
  m["steps_done"] = steps_done_;
  json fs = json::array();
  for (const DType& d : formats_) fs.push_back(d.name());
  m["formats"] = fs;
  json bs = json::array();
  for (const BlockScheme& b : schemes_) bs.push_back(b.name);
  m["block_schemes"] = bs;
  if (!schemes_.empty()) {
    m["axis"] = opt_.axis;
    m["per_block"] = opt_.per_block;
    if (opt_.per_block) m["max_rows"] = opt_.max_detail_rows;
  }
  m["scales"] = {{"k_min", opt_.k_min}, {"k_max", opt_.k_max}};
  m["flush_tolerance"] = opt_.flush_tolerance;
  m["tensor_windows"] = tensor_windows_;
  json outputs = {"trace.csv", "scale_window.csv"};
  if (steps_) outputs.push_back("steps.csv");
  if (blocks_) outputs.push_back("blocks.csv");
  if (detail_) outputs.push_back("blocks_detail.csv");
  m["outputs"] = outputs;
  std::vector<std::function<void()>> renames;
  for (AtomicFile* f : {trace_.get(), window_.get(), steps_.get(), blocks_.get(), detail_.get()})
    if (f) {
      f->finish();
      renames.push_back([f] { f->publish(); });
    }
  std::string text = m.dump(2);
  if (!tensors_json.empty()) {
    // Spliced in as text: a tree of 100,000 entries would take some 600 bytes each.
    text.resize(text.size() - 2);  // "\n}"
    text += ",\n  \"tensors\": " + tensors_json + "\n}";
  }
  publish_folder(dir_, stale_outputs(), renames, text + "\n");
}

std::vector<std::string> AnalysisRun::stale_outputs() const {
  std::vector<std::string> stale;
  if (!steps_) stale.push_back("steps.csv");
  if (!blocks_) stale.push_back("blocks.csv");
  if (!detail_) stale.push_back("blocks_detail.csv");
  return stale;
}

void AnalysisRun::unpublish() {
  if (!unpublished_) unpublish_folder(dir_, stale_outputs());
  unpublished_ = true;
}

}  // namespace halfway::sim
