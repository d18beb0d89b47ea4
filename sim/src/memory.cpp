#include "halfway/sim/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_set>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "halfway/names.hpp"
#include "halfway/sim/config.hpp"
#include "halfway/sim/data.hpp"
#include "halfway/sim/io.hpp"

namespace halfway::sim {

std::vector<MemoryRow> account_memory(const Tensor& loss, std::vector<Param>& params,
                                      const Policy& policy,
                                      const std::vector<StateFormat>& optimizer_state) {
  // (category, dtype) → (elements, bits); std::map keeps the output order stable.
  std::map<std::pair<std::string, std::string>, std::pair<uint64_t, int>> acc;
  auto add = [&](const std::string& cat, const DType& dt, uint64_t n) {
    auto& e = acc[{cat, dt.name()}];
    e.first += n;
    e.second = dt.bits();
  };
  const bool master = policy.master_weights();
  for (Param& p : params) {
    const uint64_t n = uint64_t(p.t.numel());
    add(master ? "master_weights" : "weights", p.t.dtype(), n);
    add("gradients", p.t.dtype(), n);
    for (const StateFormat& d : optimizer_state) {
      if (d.dynamic() || d.pow2()) {
        // 8 bits a value, named by the state format ("dynamic8", "pow2:e4m3"), and its fp32
        // scales: an absmax per block (dynamic8) or one per tensor (pow2).
        auto& e = acc[{"optimizer_state", d.name()}];
        e.first += n;
        e.second = 8;
        add("optimizer_state_scale", DType::f32(),
            d.dynamic() ? (n + uint64_t(d.dynamic_block) - 1) / uint64_t(d.dynamic_block) : 1);
        continue;
      }
      add("optimizer_state", d.dtype, n);
    }
    if (policy.update.method == UpdateMethod::kahan) add("compensation", policy.update.compensation, n);
  }
  if (loss && loss.requires_grad()) {
    std::unordered_set<const TensorImpl*> seen;
    for (TensorImpl* node : topo_order(loss.impl())) {
      std::vector<const TensorImpl*> kept;
      for (const auto& s : node->saved) kept.push_back(s.get());
      if (node->saves_output) kept.push_back(node);
      for (const TensorImpl* t : kept) {
        if (t->is_param || !seen.insert(t).second) continue;
        add(t->weight ? "weights" : "activations", t->dtype, uint64_t(t->data.size()));
      }
    }
  }
  std::vector<MemoryRow> rows;
  for (const auto& [key, v] : acc) {
    MemoryRow r;
    r.category = key.first;
    r.dtype = key.second;
    r.elements = v.first;
    r.bytes = (v.first * uint64_t(v.second) + 7) / 8;
    rows.push_back(r);
  }
  return rows;
}

uint64_t total_bytes(const std::vector<MemoryRow>& rows) {
  uint64_t t = 0;
  for (const auto& r : rows) t += r.bytes;
  return t;
}

namespace {

// Sizes below are in bytes per element: `kValue` for binary64 values (data, and an op's
// temporaries), `kTensor` for a tensor's stored values (binary32 for every dtype but fp64). `kNode` is a graph node's fixed cost (TensorImpl, its name, the backward closure and
// its trace tags); `kRecord` a tracer record (two 277-bin histograms and names).
constexpr double kValue = 8, kTensor = 4, kNode = 1024, kRecord = sizeof(TraceRecord) + 256;
// The process before the run allocates anything: code, libraries, stacks, the allocator.
constexpr double kBase = 16.0 * 1024 * 1024;

/// One step's graph: the elements of all nodes, how many nodes, the largest node, and the
/// parameters (elements and tensors).
struct GraphSize {
  double elems = 0, nodes = 0, largest = 0, params = 0, param_tensors = 0, weight_elems = 0;
  void node(double n, double count = 1) {
    elems += n * count;
    nodes += count;
    largest = std::max(largest, n);
  }
  void param(double n) {
    params += n;
    param_tensors += 1;
    weight_elems = std::max(weight_elems, n);
  }
  /// Add `count` copies of `o` (identical blocks).
  void add(const GraphSize& o, double count) {
    elems += o.elems * count;
    nodes += o.nodes * count;
    params += o.params * count;
    param_tensors += o.param_tensors * count;
    largest = std::max(largest, o.largest);
    weight_elems = std::max(weight_elems, o.weight_elems);
  }
};

GraphSize mlp_graph(const TrainConfig& c, double B, bool casts) {
  GraphSize g;
  const auto& w = c.mlp.layers;
  const double k = casts ? 1 : 0;
  g.node(B * w.front());  // the input cast
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    const double fin = w[i], fout = w[i + 1];
    g.param(fin * fout);
    if (c.mlp.bias) g.param(fout);
    g.node(B * fin, k);            // input cast
    g.node(fin * fout, 1 + k);     // weight cast; the forward's transposed weight
    g.node(fout, k);               // bias cast
    g.node(B * fout);              // output
    if (i + 2 < w.size()) g.node(B * fout, 1 + k);  // activation (and its cast)
  }
  const double O = w.back();
  g.node(B * O, 4);  // loss: prediction and target casts, reshape, probabilities
  return g;
}

GraphSize transformer_graph(const TrainConfig& c, double B, bool casts) {
  GraphSize top, block;
  GraphSize* gp = &top;  // what lin() and ln() add to
  const auto& m = c.transformer;
  const double T = m.seq_len, d = m.d_model, h = double(m.d_model) * m.mlp_ratio,
               V = m.vocab, H = m.heads, M = B * T, S = B * H * T * T;
  const double k = casts ? 1 : 0;
  auto lin = [&](double fin, double fout) {
    GraphSize& g = *gp;
    g.param(fin * fout);
    g.param(fout);
    g.node(M * fin, k);
    g.node(fin * fout, 1 + k);
    g.node(fout, k);
    g.node(M * fout);
  };
  auto ln = [&] {
    GraphSize& g = *gp;
    g.param(d);
    g.param(d);
    g.node(M * d, 1 + k);
    g.node(d, 2 * k);
  };
  top.param(V * d);
  top.param(T * d);
  top.node(M * d, 2);  // token embedding, sum with the positions
  top.node(T * d);
  // One block, counted `blocks` times (no loop over a count that may be absurd).
  gp = &block;
  ln();
  for (int i = 0; i < 3; ++i) lin(d, d);  // q, k, v
  block.node(M * d, 7);                   // heads: reshape and transpose of q, k, v; k^T
  block.node(M * d, 2 * k);               // the score matmul's casts
  block.node(S, 4 + 2 * k);               // scores, scaled, masked, softmax (and casts)
  block.node(M * d, 3 + k);               // context (and v's cast), transposed, reshaped
  lin(d, d);                              // proj
  block.node(M * d);                      // residual
  ln();
  lin(d, h);
  block.node(M * h, 1 + k);  // activation
  lin(h, d);
  block.node(M * d);  // residual
  top.add(block, m.blocks);
  gp = &top;
  ln();
  lin(d, V);
  if (m.tie_embeddings) {  // no head parameters: the token embedding is the head's weight
    top.params -= V * d + V;
    top.param_tensors -= 2;
  }
  top.node(M * V, 3 + k);  // reshape, cross entropy's cast and probabilities
  return top;
}

}  // namespace

MemoryEstimate estimate_memory(const TrainConfig& c, const Dataset* data) {
  const Policy& p = c.precision.policy;
  bool casts = p.fp8 || p.input_dtype != DType::f32();
  for (int i = 0; i < kOpCount; ++i) casts = casts || p.rule(OpKind(i)) != CastRule::input;
  const bool mlp = c.model_kind == "mlp";
  double n = double(c.data_n);
  if (data) n = double(data->n());
  const double B = std::max(1.0, std::min(double(c.batch_size), n));
  const GraphSize g = mlp ? mlp_graph(c, B, casts) : transformer_graph(c, B, casts);
  MemoryEstimate e;
  e.base = kBase;
  // fp64 activations (a policy computing in fp64) are stored as binary64.
  const double act = p.low.is_f64() ? kValue : kTensor;
  // Parameters: values and gradient (binary32), the step's fp32 gradients, the optimizer's fp32
  // state and its per-tensor fp32 temporaries; an initial .npz read and copied; weights.npz.
  const auto& o = c.optimizer;
  const double state = o.kind == "sgd" ? (o.momentum != 0 ? 4 : 0) : 8;
  double per_param = kTensor * 2 + 4 + state;
  if (p.update.method == UpdateMethod::kahan) per_param += 4;  // fp32 compensation
  if (!c.init_npz.empty()) per_param += kValue * 2 + 4;
  if (c.save_weights) per_param += kValue + 8;
  // Per-tensor temporaries of a step: the fp32 values, the increments, the flags and the
  // state's rounding buffer.
  e.params = g.params * per_param + g.weight_elems * 24 + g.param_tensors * kNode;
  if (c.save_grads) e.params += g.params * (kValue + 8) + g.param_tensors * kNode;
  // The graph: every node's values and, after the backward, its gradient; the backward's
  // temporaries are a few of the largest node.
  e.activations = g.elems * act * 2 + g.largest * kValue * 4 + g.nodes * kNode;
  if (!c.reference.empty()) {
    // The reference run holds a second model, optimizer and graph (fp32: no casts).
    const GraphSize r = mlp ? mlp_graph(c, B, false) : transformer_graph(c, B, false);
    e.params += r.params * (kTensor * 2 + 4 + state) + r.param_tensors * kNode;
    e.activations += r.elems * kTensor * 2 + r.nodes * kNode;
  }
  // Records: a forward and a gradient rounding per node and parameter, when traced.
  if (c.trace) e.trace = (g.nodes + g.param_tensors) * 2 * kRecord;
  // Data: x and y as doubles and the loader's order; an .npz's arrays are also held once
  // more while they are read.
  if (data) {
    e.data = (double(data->x.size()) + double(data->y.size())) * kValue * 2 + n * 8;
  } else if (!c.text_files.empty()) {
    // Not read yet: at most kMaxTextBytes; the corpus once, and its windows' ids and targets
    // as binary64 (train() checks again with the real size).
    double bytes = 0;
    for (const std::string& f : c.text_files) {
      std::error_code ec;
      const auto b = std::filesystem::file_size(f, ec);
      if (!ec) bytes += double(b);
    }
    bytes = std::min(bytes, double(kMaxTextBytes));
    e.data = bytes * (1 + 2 * kValue) + bytes / std::max(1, c.transformer.seq_len) * 8;
  } else if (!c.data_npz.empty()) {
    // Not read yet: from the file's size, enough for float32 or float64 arrays stored as
    // numpy.savez writes them (8 bytes a value, twice, and the file); train() checks again
    // with the real sizes once the arrays are read.
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(c.data_npz, ec);
    if (!ec) e.data = 5.0 * double(bytes);
  } else {
    double cols = 0;
    if (!mlp) cols = 2.0 * c.transformer.seq_len;
    else cols = double(c.mlp.layers.front()) + (c.synthetic == "blobs" ? 1.0 : c.mlp.layers.back());
    e.data = n * cols * kValue + n * 8;
  }
  return e;
}

DiskEstimate estimate_disk(const TrainConfig& c) {
  const bool mlp = c.model_kind == "mlp";
  const double B = std::max(1.0, std::min(double(c.batch_size), double(c.data_n)));
  const GraphSize g = mlp ? mlp_graph(c, B, true) : transformer_graph(c, B, true);
  const double steps = double(c.steps);
  const double every = double(std::max<int64_t>(1, c.trace_every));
  const double traced = c.trace ? std::ceil(steps / every) : 0;
  // Bytes a row, about the longest seen (a trace.csv row's histogram makes it 100-260 bytes).
  constexpr double kStepRow = 128, kTraceRow = 256, kWindowRow = 48, kUpdateRow = 64,
                   kBlockRow = 256;
  DiskEstimate e;
  e.csv = 4096 + steps * kStepRow +
          traced * ((g.nodes + g.param_tensors) * kTraceRow +
                    double(c.tracer.k_max - c.tracer.k_min + 1) * kWindowRow +
                    g.param_tensors * kUpdateRow + (c.precision.policy.blocks ? g.nodes * 4 * kBlockRow : 0));
  // An archive member: its values, its .npy header and its zip headers (local and central,
  // with a name such as "step123.0.weight"), in the spool file and in the archive.
  const double member = 128 + 30 + 46 + 2 * 32;
  if (c.save_grads) e.archives += 2 * steps * (g.params * 4 + g.param_tensors * member);
  if (c.save_weights) e.archives += 2 * (g.params * 4 + g.param_tensors * member);
  return e;
}

double free_disk_bytes(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path())
    p = p.parent_path();
  const auto sp = std::filesystem::space(p, ec);
  return ec ? -1.0 : double(sp.available);
}

void check_disk(const DiskEstimate& e, uint64_t limit, const std::string& out_dir,
                const std::string& what) {
  const double total = e.total();
  const double free = limit ? double(limit) : free_disk_bytes(out_dir);
  if (free < 0 || total <= free) return;
  char exact[32];
  std::snprintf(exact, sizeof exact, "%.0f", total);
  const std::string parts = format_bytes(total) + " (" + exact + " bytes: CSV files " +
                            format_bytes(e.csv) +
                            ", grads.npz and weights.npz " + format_bytes(e.archives) + ")";
  if (limit)
    throw InputError(what + " would write an estimated " + parts + ", more than the disk "
                     "limit of " + format_bytes(free) + " (--max-disk); make the run shorter, "
                     "trace fewer steps (trace.every), leave out output.grads, or raise the "
                     "limit");
  throw InputError(what + " would write an estimated " + parts + ", more than the " +
                   format_bytes(free) + " free where '" + out_dir + "' is; make the run "
                   "shorter, trace fewer steps (trace.every), leave out output.grads, or set "
                   "--max-disk to a larger size if the estimate is too high");
}

uint64_t parse_memory_size(const std::string& text) {
  const std::string bad = "bad memory size '" + text + "' (e.g. 2G, 512M, 1.5GiB, or bytes)";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0 || i > 30) throw InputError(bad);
  const std::string num = text.substr(0, i);
  if (std::count(num.begin(), num.end(), '.') > 1 || num == ".") throw InputError(bad);
  std::string unit = text.substr(i);
  double mult = 1;
  if (!unit.empty()) {
    const char u = char(std::toupper(static_cast<unsigned char>(unit[0])));
    const char* units = "KMGT";
    const char* at = std::strchr(units, u);
    if (u == 'B' && unit.size() == 1) {
      unit.clear();
    } else if (!at || u == '\0') {
      throw InputError(bad);
    } else {
      mult = std::ldexp(1.0, 10 * int(at - units + 1));
      const std::string rest = unit.substr(1);
      if (!(rest.empty() || rest == "B" || rest == "b" || rest == "iB")) throw InputError(bad);
    }
  }
  const double v = std::strtod(num.c_str(), nullptr) * mult;
  if (!(v >= 1) || v >= 0x1p63) throw InputError(bad + ": must be at least 1 byte");
  return uint64_t(v);
}

std::string format_bytes(double b) {
  char buf[64];
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!(b >= 1024)) {
    std::snprintf(buf, sizeof buf, "%.0f bytes", b);
    return buf;
  }
  int u = -1;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.3g %s", b, units[u]);
  } else {
    const char* f = b < 10 ? "%.2f %s" : b < 100 ? "%.1f %s" : "%.0f %s";
    std::snprintf(buf, sizeof buf, f, b, units[u]);
  }
  return buf;
}

void check_memory(const MemoryEstimate& e, uint64_t limit) {
  if (limit == 0) limit = default_memory_limit();
  const double total = e.total();
  if (total <= double(limit)) return;
  char exact[32];
  std::snprintf(exact, sizeof exact, "%.0f", total);
  throw InputError("the run needs an estimated " + format_bytes(total) + " (" + exact +
                   " bytes: parameters " + format_bytes(e.params) + ", activations " +
                   format_bytes(e.activations) + ", data " + format_bytes(e.data) + ", trace " +
                   format_bytes(e.trace) + "), more than the memory limit of " +
                   format_bytes(double(limit)) + " (--max-memory); make the model, batch or data "
                   "smaller, or raise the limit");
}

void reuse_freed_memory() {
#if defined(__GLIBC__)
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)once;
#endif
}

}  // namespace halfway::sim
