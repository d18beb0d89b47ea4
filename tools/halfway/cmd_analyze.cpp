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
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/analyze.hpp"
#include "halfway/sim/io.hpp"
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
  bool plot = false;
};

std::string default_out(const std::string& first_input) {
  fs::path p(first_input);
  if (p.extension() == ".npz") p.replace_extension();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s + "-analysis";
}

int plot(const std::string& python, const std::string& out) {
  // The figures are drawn by the Python package (halfway.figures); the build tree's package
  // comes first when this program runs from it.
  std::string env = HALFWAY_BUILD_PYTHON_DIR;
  if (const char* p = std::getenv("PYTHONPATH"); p && *p) env += std::string(":") + p;
  setenv("PYTHONPATH", env.c_str(), 1);
  const std::string cmd = "'" + python + "' -m halfway.figures '" + out + "'";
  if (python.find('\'') != std::string::npos || out.find('\'') != std::string::npos)
    throw InputError("--plot: the output path or --python holds a single quote");
  std::fflush(stdout);  // this program's lines first
  const int st = std::system(cmd.c_str());
  if (st != 0) {
    std::fprintf(stderr, "halfway analyze: the figures failed (%s -m halfway.figures, status %d)\n",
                 python.c_str(), st);
    return 1;
  }
  return 0;
}

/// Analyse the arrays of `files` into the folder `out`; the number of arrays. Throws
/// sim::Stopped on a stop request (SIGINT, ...), with nothing changed in `out`.
size_t analyze_files(const std::vector<std::string>& files,
                     const std::vector<sim::DType>& formats, const sim::AnalyzeOptions& ao,
                     const std::string& out) {
  auto check_stop = [] {
    if (const int sig = sim::stop_signal()) throw sim::Stopped(sig);
  };
  sim::AnalysisRun run(out, formats, ao, false);
  std::map<std::string, std::string> where;  // tensor name -> the file that has it
  nlohmann::json tensors = nlohmann::json::array();
  std::vector<uint64_t> rounded;  // float64 values that binary32 could not hold, per tensor
  std::vector<float> buf;
  for (const std::string& file : files) {
    check_stop();
    sim::stream_npz(file, [&](const std::string& key, const sim::NpyHeader& h,
                              const std::string& what) -> sim::NpyChunkFn {
      if (h.dtype != "f4" && h.dtype != "f2" && h.dtype != "f8" && h.dtype != "u2")
        throw InputError(what + ": unsupported dtype '" + h.dtype + "' (float32, float16, "
                         "float64, or uint16 holding bfloat16 bit patterns)");
      if (auto [it, fresh] = where.emplace(key, file); !fresh)
        throw InputError("array '" + sim::shown_text(key) + "' is in both '" + it->second +
                         "' and '" + file + "'");
      const size_t id = run.tensor(key, sim::TraceKind::tensor, "analyze");
      tensors.push_back({{"name", key}, {"file", file}, {"dtype", h.dtype}, {"shape", h.shape}});
      rounded.push_back(0);
      return [&run, &buf, &rounded, &check_stop, id, dtype = h.dtype](const unsigned char* raw, size_t n) {
        check_stop();
        buf.resize(n);
        to_f32(dtype, raw, n, buf.data(), rounded[id]);
        run.add(id, buf.data(), n);
      };
    });
  }
  for (size_t i = 0; i < rounded.size(); ++i)
    if (tensors[i]["dtype"] == "f8") tensors[i]["float64_rounded"] = rounded[i];
  check_stop();
  run.end_step(0, {});
  run.commit(nlohmann::json{{"tool", "analyze"}, {"tensors", tensors}}.dump());
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
  app.add_option("--formats", o.formats, "comma-separated formats (default fp16,bf16,e4m3,e5m2)");
  app.add_option("--scales", o.scales, "loss scales 2^K of the safe window, K_MIN..K_MAX "
                                       "(default -20..40)");
  app.add_option("--out", o.out, "output folder (default: the first input's name + -analysis)");
  app.add_flag("--plot", o.plot, "also draw the figures (Python with matplotlib)");
  app.add_option("--python", o.python, "Python for --plot (default $HALFWAY_PYTHON or "
                                       "/usr/bin/python3)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    throw InputError(msg);
  }
  const std::vector<sim::DType> formats = sim::parse_format_list(o.formats);
  sim::AnalyzeOptions ao;
  std::tie(ao.k_min, ao.k_max) = sim::parse_scale_range(o.scales);
  const std::vector<std::string> files = input_files(o.inputs);
  if (o.out.empty()) o.out = default_out(o.inputs.front());
  // SIGINT, SIGTERM, SIGHUP, SIGQUIT: stop within a chunk, remove the temporary files and
  // leave the output folder as it was.
  sim::install_stop_handlers();
  size_t arrays = 0;
  try {
    arrays = analyze_files(files, formats, ao, o.out);
  } catch (const sim::Stopped& e) {
    std::fprintf(stderr, "halfway analyze: %s; %s is as it was (no temporary file left)\n",
                 e.what(), o.out.c_str());
    return 128 + e.signal_number;
  }
  std::printf("halfway analyze: %zu arrays x %zu formats -> %s\n", arrays, formats.size(),
              o.out.c_str());
  return o.plot ? plot(o.python, o.out) : 0;
}

}  // namespace halfway::cli
