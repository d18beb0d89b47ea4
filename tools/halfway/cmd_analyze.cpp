// `halfway analyze INPUT... [--formats F,...] [--scales K_MIN..K_MAX] [--out DIR] [--plot]`:
// what rounding each named array of .npz files into each format would do, in the tracer's
// schema (trace.csv, scale_window.csv, manifest.json; docs/analyze.md). Arrays are streamed in
// chunks: memory does not grow with their size.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "format_util.hpp"
#include "size_option.hpp"
#include "spawn.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/analyze.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/memory.hpp"
#include "halfway/sim/npz.hpp"

namespace halfway::cli {

namespace {

namespace fs = std::filesystem;

/// The .npz files named by the inputs: a file as given, a folder's *.npz in name order.
std::vector<std::string> input_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in, ec))
        if (e.path().extension() == ".npz") found.push_back(e.path().string());
      if (ec) throw InputError("cannot list '" + in + "': " + ec.message());
      if (found.empty()) throw InputError("'" + in + "' holds no .npz file");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  return files;
}

/// Binary32 values of a chunk of raw little-endian items. float16 and bfloat16 (uint16 bit
/// patterns) widen exactly; float64 rounds to nearest even, and `rounded` counts the values
/// that changed (NaN excepted).
void to_f32(const std::string& dtype, const unsigned char* raw, size_t n, float* out,
            uint64_t& rounded) {
  if (dtype == "f4") {
    std::memcpy(out, raw, n * 4);
  } else if (dtype == "f2" || dtype == "u2") {
    const Format& f = dtype == "f2" ? formats::fp16 : formats::bf16;
    std::vector<uint16_t> bits(n);
    std::memcpy(bits.data(), raw, n * 2);
    decode_f32(f, bits.data(), out, n);
  } else {
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, raw + 8 * i, 8);
      out[i] = static_cast<float>(v);
      rounded += double(out[i]) != v && !std::isnan(v);
    }
  }
}

struct Options {
  std::vector<std::string> inputs;
  std::string formats = "fp16,bf16,e4m3,e5m2", scales = "-20..40", out, python;
  bool plot = false, per_block = false;
  int axis = -1;
  // Signed, so that a negative count is refused rather than wrapped around.
  long long max_rows = 10'000'000;
  long long block_chunk = (long long)sim::AnalyzeOptions{}.block_chunk;
};

std::string default_out(const std::string& first_input) {
  fs::path p(first_input);
  if (p.extension() == ".npz") p.replace_extension();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s + "-analysis";
}

/// What the figures need, checked before the analysis: the Python program exists.
void check_plot(const std::string& python) {
  if (!program_exists(python))
    throw InputError("--plot: no program '" + python + "' (--python, $HALFWAY_PYTHON)");
}

int plot(const std::string& python, const std::string& out) {
  return draw_figures("halfway analyze", python, out);
}

/// The memory an analysis takes: a working set that does not depend on the arrays (one
/// analyser, the chunk buffers, the archive's directory), plus, for each array, its name and
/// its entry of manifest.json, which lists every array (docs/analyze.md: the bound).
struct MemoryBudget {
  uint64_t limit, working_set, arrays = 0, per_array_bytes = 0;
  /// Bytes of bookkeeping an array (measured: 1.15 KiB with 7-character names), and per
  /// character of its name, which the archive reader, the checks and the manifest each hold.
  static constexpr uint64_t kPerArray = 1536, kPerNameByte = 6;
  void add_array(const std::string& name, const std::string& file) {
    ++arrays;
    per_array_bytes += kPerArray + kPerNameByte * name.size();
    if (working_set + per_array_bytes <= limit) return;
    throw InputError("the analysis needs more than the memory limit of " +
                     sim::format_bytes(double(limit)) + " (--max-memory) at array " +
                     std::to_string(arrays) + " ('" + sim::shown_text(name) + "' of '" + file +
                     "'): " + sim::format_bytes(double(working_set)) + " of working set and " +
                     sim::format_bytes(double(per_array_bytes)) + " for the arrays' names and "
                     "manifest entries; analyse fewer arrays at a time, or raise the limit");
  }
};

/// The working set: the analysis of one array (AnalysisRun::working_set_bytes), the chunk
/// buffers (stream_npz's 64 Ki items of up to 8 bytes, their binary32 values, float16 bits),
/// and 1 MiB for the archive reader and the rows being written.
uint64_t analyze_working_set(const sim::AnalysisFormats& f, int scales,
                             const sim::AnalyzeOptions& o) {
  return sim::AnalysisRun::working_set_bytes(f.elements.size(), scales) +
         (f.blocks.empty() ? 0 : sim::block_working_set_bytes(o.block_chunk)) +
         (uint64_t(1) << 16) * 14 + (uint64_t(1) << 20);
}

/// One array's entry of manifest.json, written when its last value is read.
struct ArrayEntry {
  std::string name, file, dtype;
  std::vector<uint64_t> shape;
  uint64_t float64_rounded = 0;  ///< float64 values that binary32 could not hold
  std::string json() const {
    nlohmann::json t = {{"name", name}, {"file", file}, {"dtype", dtype}, {"shape", shape}};
    if (dtype == "f8") t["float64_rounded"] = float64_rounded;
    return t.dump();
  }
};

/// Analyse the arrays of `files` into the folder `out`; the number of arrays. Throws
/// sim::Stopped on a stop request (SIGINT, ...), with nothing changed in `out`.
size_t analyze_files(const std::vector<std::string>& files,
                     const sim::AnalysisFormats& formats, const sim::AnalyzeOptions& ao,
                     const std::string& out, MemoryBudget& budget) {
  auto check_stop = [] {
    if (const int sig = sim::stop_signal()) throw sim::Stopped(sig);
  };
  sim::AnalysisRun run(out, formats, ao, false);
  std::unordered_map<std::string, size_t> where;  // array name -> the file that has it
  std::string entries;  // the manifest's "tensors", one JSON object after another
  ArrayEntry cur;
  auto end_array = [&] {
    if (cur.name.empty() && cur.file.empty()) return;
    entries += (entries.empty() ? "" : ",\n    ") + cur.json();
    cur = {};
  };
  std::vector<float> buf;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::string& file = files[fi];
    check_stop();
    sim::stream_npz(file, [&](const std::string& key, const sim::NpyHeader& h,
                              const std::string& what) -> sim::NpyChunkFn {
      if (h.dtype != "f4" && h.dtype != "f2" && h.dtype != "f8" && h.dtype != "u2")
        throw InputError(what + ": unsupported dtype '" + h.dtype + "' (float32, float16, "
                         "float64, or uint16 holding bfloat16 bit patterns)");
      if (auto [it, fresh] = where.emplace(key, fi); !fresh)
        throw InputError("array '" + sim::shown_text(key) + "' is in both '" +
                         files[it->second] + "' and '" + file + "'");
      budget.add_array(key, file);
      end_array();
      cur = {key, file, h.dtype, std::vector<uint64_t>(h.shape.begin(), h.shape.end()), 0};
      const size_t id = run.tensor(key, sim::TraceKind::tensor, "analyze", 1.0,
                                   cur.shape.empty() ? std::vector<uint64_t>{1} : cur.shape);
      return [&run, &buf, &cur, &check_stop, id, dtype = h.dtype](const unsigned char* raw,
                                                                  size_t n) {
        check_stop();
        buf.resize(n);
        to_f32(dtype, raw, n, buf.data(), cur.float64_rounded);
        run.add(id, buf.data(), n);
      };
    });
  }
  end_array();
  check_stop();
  run.end_step(0, {});
  run.commit(R"({"tool": "analyze"})", entries.empty() ? "[]" : "[\n    " + entries + "\n  ]");
  return where.size();
}

}  // namespace

int cmd_analyze(int argc, char** argv) {
  CLI::App app{"What rounding each array of .npz files into each format would do",
               "halfway analyze"};
  Options o;
  o.python = std::getenv("HALFWAY_PYTHON") ? std::getenv("HALFWAY_PYTHON") : "/usr/bin/python3";
  app.add_option("inputs", o.inputs, ".npz files or folders of them (float32, float16, float64, "
                                     "or uint16 holding bfloat16 bit patterns)")
      ->required();
  app.add_option("--formats", o.formats, "comma-separated element formats and block schemes "
                                         "(mxfp8_e4m3, mxfp4, nvfp4, fp8_block, ...; default "
                                         "fp16,bf16,e4m3,e5m2)");
  app.add_option("--axis", o.axis, "block schemes: the axis the blocks run along, as a GEMM "
                                   "reduces it (default -1, the last)");
  app.add_flag("--per-block", o.per_block, "block schemes: also write blocks_detail.csv, one row "
                                           "per block");
  app.add_option("--max-rows", o.max_rows, "refuse a blocks_detail.csv of more rows (default "
                                           "10000000)");
  app.add_option("--block-chunk", o.block_chunk, "block schemes: values quantized in one call "
                                                 "(default 262144; no result depends on it)");
  app.add_option("--scales", o.scales, "loss scales 2^K of the safe window, K_MIN..K_MAX "
                                       "(default -20..40)");
  app.add_option("--out", o.out, "output folder (default: the first input's name + -analysis)");
  app.add_flag("--plot", o.plot, "also draw the figures (Python with matplotlib)");
  app.add_option("--python", o.python, "Python for --plot (default $HALFWAY_PYTHON or "
                                       "/usr/bin/python3)");
  const SizeOption max_memory(app, "--max-memory", "refuse an analysis whose memory would be "
                              "over SIZE (e.g. 2G, 512M; default: 80% of physical memory); it "
                              "is a fixed working set plus about 1.5 KiB an array");
  if (parse_or_help(app, argc, argv)) return 0;
  const sim::AnalysisFormats formats = sim::parse_analysis_formats(o.formats);
  sim::AnalyzeOptions ao;
  std::tie(ao.k_min, ao.k_max) = sim::parse_scale_range(o.scales);
  ao.axis = o.axis;
  ao.per_block = o.per_block;
  if (o.max_rows < 1) throw InputError("--max-rows must be at least 1, got " +
                                       std::to_string(o.max_rows));
  if (o.block_chunk < 1) throw InputError("--block-chunk must be at least 1, got " +
                                          std::to_string(o.block_chunk));
  ao.max_detail_rows = uint64_t(o.max_rows);
  ao.block_chunk = size_t(o.block_chunk);
  sim::check_analyze_options(ao);
  if ((o.per_block || app.count("--axis") || app.count("--max-rows") ||
       app.count("--block-chunk")) && formats.blocks.empty())
    throw InputError("--axis, --per-block, --max-rows and --block-chunk apply to block schemes, "
                     "and --formats names none");
  if (app.count("--max-rows") && !o.per_block)
    throw InputError("--max-rows limits --per-block's blocks_detail.csv; give --per-block");
  const uint64_t limit = max_memory.bytes();
  MemoryBudget budget{limit ? limit : sim::default_memory_limit(),
                      analyze_working_set(formats, ao.k_max - ao.k_min + 1, ao)};
  if (budget.working_set > budget.limit)
    throw InputError("the analysis needs " + sim::format_bytes(double(budget.working_set)) +
                     " of working set, more than the memory limit of " +
                     sim::format_bytes(double(budget.limit)) + " (--max-memory); analyse "
                     "fewer formats or scales, or raise the limit");
  if (o.plot) check_plot(o.python);
  const std::vector<std::string> files = input_files(o.inputs);
  if (o.out.empty()) o.out = default_out(o.inputs.front());
  // SIGINT, SIGTERM, SIGHUP, SIGQUIT: stop within a chunk, remove the temporary files and
  // leave the output folder as it was.
  sim::install_stop_handlers();
  size_t arrays = 0;
  try {
    arrays = analyze_files(files, formats, ao, o.out, budget);
  } catch (const sim::Stopped& e) {
    std::fprintf(stderr, "halfway analyze: %s; %s is as it was (no temporary file left)\n",
                 e.what(), o.out.c_str());
    return 128 + e.signal_number;
  }
  std::printf("halfway analyze: %zu arrays x %zu formats -> %s\n", arrays,
              formats.elements.size() + formats.blocks.size(), o.out.c_str());
  return o.plot ? plot(o.python, o.out) : 0;
}

}  // namespace halfway::cli
