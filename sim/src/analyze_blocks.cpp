#include "halfway/sim/analyze_blocks.hpp"

#include "halfway/names.hpp"
#include "halfway/sim/csv.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace halfway::sim {

namespace {

uint64_t round_up(uint64_t n, uint64_t k) { return (n + k - 1) / k * k; }

/// The largest finite |x| of the tensor, and whether it holds a NaN or an infinity.
std::pair<float, bool> tensor_amax(const ValueReader& read, uint64_t n, size_t chunk) {
  std::vector<float> buf(std::min<uint64_t>(n, chunk));
  float amax = 0;
  bool nonfinite = false;
  for (uint64_t at = 0; at < n; at += buf.size()) {
    const size_t m = size_t(std::min<uint64_t>(buf.size(), n - at));
    read(at, buf.data(), m);
    for (size_t i = 0; i < m; ++i) {
      const float a = std::fabs(buf[i]);
      if (!std::isfinite(a)) nonfinite = true;
      else if (a > amax) amax = a;
    }
  }
  return {amax, nonfinite};
}

/// Row-scaled NVFP4: the largest |x| of each line of matrix m of the view (each row for blocks
/// along the last axis, each column for blocks down the first), read `chunk` values at a time.
std::vector<float> line_amax(const ValueReader& read, const BlockView& v, uint64_t m,
                             size_t chunk) {
  const bool last = v.axis == BlockAxis::last;
  std::vector<float> line(size_t(last ? v.rows : v.cols), 0.0f);
  const uint64_t n = v.rows * v.cols;
  std::vector<float> buf(size_t(std::min<uint64_t>(n, chunk)));
  for (uint64_t at = 0; at < n; at += buf.size()) {
    const size_t k = size_t(std::min<uint64_t>(buf.size(), n - at));
    read(m * n + at, buf.data(), k);
    for (size_t i = 0; i < k; ++i) {
      float& a = line[size_t(last ? (at + i) / v.cols : (at + i) % v.cols)];
      a = std::max(a, std::fabs(buf[i]));
    }
  }
  return line;
}

}  // namespace

BlockView block_view(const std::vector<uint64_t>& shape, int axis) {
  const std::vector<uint64_t> sh = shape.empty() ? std::vector<uint64_t>{1} : shape;
  const int nd = int(sh.size());
  if (axis < -nd || axis >= nd)
    throw InputError("axis " + std::to_string(axis) + " is out of range for " +
                     std::to_string(nd) + "-d values");
  const int a = axis < 0 ? axis + nd : axis;
  uint64_t before = 1, after = 1;
  for (int i = 0; i < a; ++i) before *= sh[size_t(i)];
  for (int i = a + 1; i < nd; ++i) after *= sh[size_t(i)];
  BlockView v;
  v.tensor_axis = a;
  if (a == nd - 1) {
    v.rows = before, v.cols = sh[size_t(a)], v.axis = BlockAxis::last;
  } else {
    v.count = before, v.rows = sh[size_t(a)], v.cols = after, v.axis = BlockAxis::first;
  }
  return v;
}

uint64_t block_count(const BlockScheme& s, const BlockView& v) {
  const auto [tr, tc] = block_tile(s, v.axis, v.rows, v.cols);
  return v.count * (round_up(v.rows, tr) / tr) * (round_up(v.cols, tc) / tc);
}

double BlockAnalysis::clipped_fraction() const {
  if (record.events.blocks == 0) return std::numeric_limits<double>::quiet_NaN();
  return double(clipped_blocks) / double(record.events.blocks);
}

double BlockAnalysis::scale_exp_mean() const {
  // Integer sums: exact whatever the order the blocks were counted in.
  int64_t n = 0, sum = 0;
  for (const auto& [k, c] : record.scale_hist) n += int64_t(c), sum += int64_t(c) * k;
  return n ? double(sum) / double(n) : std::numeric_limits<double>::quiet_NaN();
}

double BlockAnalysis::scale_exp_std() const {
  const double mean = scale_exp_mean();
  if (std::isnan(mean)) return mean;
  double n = 0, ss = 0;
  for (const auto& [k, c] : record.scale_hist) {
    const double d = double(k) - mean;
    n += double(c), ss += double(c) * d * d;
  }
  return std::sqrt(ss / n);
}

BlockAnalysis analyze_blocks(const BlockScheme& scheme, const BlockView& v,
                             const ValueReader& read, size_t chunk,
                             const std::function<void(const BlockDetail&)>& detail) {
  // A whole-dimension block is the matrix's, whatever part of it a chunk holds.
  const BlockScheme s = fixed_blocks(scheme, v.axis, v.rows, v.cols);
  const std::pair<size_t, size_t> tile = block_tile(s, v.axis);
  const uint64_t tr = tile.first, tc = tile.second;
  const uint64_t prows = round_up(v.rows, tr), pcols = round_up(v.cols, tc);
  BlockAnalysis a;
  a.record.scheme = s.name;
  a.record.axis = v.axis;
  a.values = v.values();
  const uint64_t budget = std::max<uint64_t>(chunk, tr * tc);
  float amax = 0;  // the tensor's, for the per-tensor global scale
  if (s.family != BlockFamily::mx) {
    bool nonfinite = false;
    std::tie(amax, nonfinite) = tensor_amax(read, v.values(), size_t(budget));
    if (nonfinite) {
      mark_nonfinite(a.record, v.count * prows * pcols, block_count(s, v));
      return a;
    }
  }
  // A chunk: whole rows of blocks when one fits, else one row of blocks cut into runs of
  // whole blocks; either way its blocks come in the tensor's row-major block order.
  const uint64_t band = tr * pcols;
  const uint64_t crows = band <= budget ? tr * std::max<uint64_t>(1, budget / band) : tr;
  const uint64_t ccols = band <= budget ? pcols : tc * std::max<uint64_t>(1, budget / (tr * tc));
  // The global scales are the whole tensor's, whatever the chunk: each call is given the
  // amax they come from (BlockOptions::global_amax): the tensor's (NVFP4, 4over6), or, for
  // row-scaled NVFP4 where a line spans several calls (a row cut into runs, a column into
  // bands of rows), each line's, from one more pass over the matrix (4 bytes a line).
  const bool last = v.axis == BlockAxis::last;
  const bool split_lines = s.row_scaled && (last ? ccols < pcols : crows < prows);
  std::vector<float> lines;
  BlockOptions o;
  o.axis = v.axis;
  o.per_block_events = true;
  if (s.has_global_scale()) o.global_amax = std::span<const float>(&amax, 1);
  std::vector<float> x, q;
  for (uint64_t m = 0; m < v.count; ++m) {
    if (split_lines) lines = line_amax(read, v, m, size_t(budget));
    for (uint64_t r0 = 0; r0 < prows; r0 += crows) {
      const uint64_t nr = std::min(crows, prows - r0);  // (budget: at most chunk + a band)
      for (uint64_t c0 = 0; c0 < pcols; c0 += ccols) {
        const uint64_t nc = std::min(ccols, pcols - c0);
        x.assign(size_t(nr * nc), 0.0f);
        const uint64_t real_cols = c0 < v.cols ? std::min(nc, v.cols - c0) : 0;
        for (uint64_t i = 0; i < nr && r0 + i < v.rows && real_cols; ++i)
          read((m * v.rows + r0 + i) * v.cols + c0, x.data() + i * nc, size_t(real_cols));
        // (1-D blocks: along the rows no padding rows, down the columns no padding columns)
        if (split_lines)
          o.global_amax = std::span<const float>(lines).subspan(size_t(last ? r0 : c0),
                                                                size_t(last ? nr : nc));
        const BlockEncoding e = encode_blocks(s, x.data(), size_t(nr), size_t(nc), o);
        q.resize(x.size());
        decode_blocks(s, e, q.data());
        add_block_errors(a.record, e, x.data(), q.data(), size_t(nr / tr), [&](const BlockStat& b) {
          BlockEvents ev = e.block_events[b.row * e.scale_cols() + b.col];
          ev.elements = tr * tc;
          ev.blocks = 1;
          a.record.events += ev;
          // NVFP4's clamp at 448 leaves the scale as e4m3 would have rounded it anyway (lib's
          // count: BlockEvents::scales_clamped_harmless).
          const bool harmless = ev.scales_clamped_harmless != 0;
          a.clamped_harmless += ev.scales_clamped_harmless;
          a.clamped_real += ev.scales_clamped - ev.scales_clamped_harmless;
          a.clipped_blocks += ev.saturated > 0;
          if (detail) detail(BlockDetail{m, r0 / tr + b.row, c0 / tc + b.col, ev, b, harmless});
        });
      }
    }
  }
  return a;
}

uint64_t block_working_set_bytes(size_t chunk) {
  // Per value of a chunk of up to 2·chunk (a margin: a call holds at most `chunk` values, or
  // one block): x and q (4 bytes each), a code (1), and per block of at least 16 values its
  // scale, scale code and events; the amax buffer: 4 per value.
  const uint64_t c = std::max<uint64_t>(chunk, 128 * 128);
  return 2 * c * (4 + 4 + 1) + 2 * c / 16 * (4 + 1 + sizeof(BlockEvents)) + 4 * c;
}

const char* const kAnalyzeBlockColumns =
    ",values,tensor_axis,clipped_blocks,"
    "clipped_fraction,scale_exp_mean,scale_exp_std";

void append_analyze_block_columns(std::string& line, const BlockAnalysis& a, const BlockView& v) {
  for (uint64_t n : {a.values, uint64_t(v.tensor_axis), a.clipped_blocks})
    line += ',', append_value(line, n);
  for (double d : {a.clipped_fraction(), a.scale_exp_mean(), a.scale_exp_std()})
    line += ',', append_number(line, d);
}

const char* const kBlocksDetailCsvHeader =
    "step,name,scheme,matrix,block_row,block_col,amax,scale,flushed,saturated,"
    "scale_clamped_harmless,scale_clamped_real,nan_scale,signal,noise,snr_db\n";

void append_block_detail_columns(std::string& line, int step, const std::string& name,
                                 const std::string& scheme, const BlockDetail& b) {
  append_value(line, step);
  line += ',' + name + ',' + scheme;
  for (uint64_t n : {b.matrix, b.row, b.col}) line += ',', append_value(line, n);
  for (float f : {b.stat.amax, b.stat.scale}) {
    line += ',';
    if (std::isnan(f)) line += "nan";
    else append_number(line, double(f));
  }
  const bool clamped = b.events.scales_clamped > 0;
  for (uint64_t n : {b.events.flushed, b.events.saturated, uint64_t(clamped && b.clamped_harmless),
                     uint64_t(clamped && !b.clamped_harmless), b.events.nan_scales})
    line += ',', append_value(line, n);
  BlockRecord one;
  one.signal = b.stat.signal;
  one.noise = b.stat.noise;
  line += ',', append_number(line, one.signal);
  line += ',', append_number(line, one.noise);
  line += ',', append_number(line, one.snr_db());
}

}  // namespace halfway::sim
