// The result files of a run (run_files.hpp): each CSV row assembled with csv.hpp's writer and
// written with one call per step and file, the archives built at the end, and the folder
// replaced in one step (publish_folder), manifest last.
#include "run_files.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

namespace halfway::sim::detail {

namespace {

struct GradCounts {
  uint64_t values = 0, flushed = 0, overflow = 0;
};
GradCounts grad_counts(const StepTrace& st) {
  GradCounts g;
  for (const auto& r : st.records)
    if (r.is_grad() && r.dtype.is_low()) {
      g.values += r.events.total;
      g.flushed += r.events.flushed;
      g.overflow += r.events.overflow;
    }
  return g;
}

/// Every file a run writes, in the order they are renamed into place (manifest.json last).
const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names{"steps.csv", "trace.csv", "scale_window.csv",
                                              "memory.csv", "updates.csv", "blocks.csv",
                                              "weights.npz", "grads.npz"};
  return names;
}

}  // namespace

template <class T>
void RunFiles::num(T v) {
  append_value(line_, v);
}

RunFiles::RunFiles(const TrainConfig& c, const std::string& d)
    : c_(c),
      dir_(d),
      steps_(d + "steps.csv"),
      trace_(d + "trace.csv"),
      window_(d + "scale_window.csv"),
      updates_(d + "updates.csv"),
      blocks_(d + "blocks.csv") {
  blocks_.out() << kBlocksCsvHeader;
  updates_.out() << "step,name,dtype,elements,nonzero,vanished,drift\n";
  steps_.out() << "step,loss,loss_scale,found_inf,skipped,growth_tracker,next_scale,"
                  "grad_values,grad_flushed,grad_overflow,k_low,k_high,val_loss\n";
  trace_.out() << kTraceCsvHeader;
  window_.out() << kWindowCsvHeader;
  // Each step's gradients go to disk as the run goes (grads.npz is built at the end).
  if (c.save_grads) grads_ = std::make_unique<NpzWriter>(d + "grads.npz");
}

void RunFiles::add_step(const StepRow& r, const StepTrace* st, const std::vector<Param>& params,
                        const std::vector<std::vector<float>>& grads) {
  step_row(r, st);
  if (st) {
    trace_rows(*st);
    window_rows(*st);
    update_rows(r);
    block_rows(*st);
  }
  if (grads_)
    for (size_t i = 0; i < params.size(); ++i)
      grads_->add_f4("step" + std::to_string(r.step) + "." + params[i].name,
                     params[i].t.shape(), grads[i].data(), grads[i].size());
}

void RunFiles::finish(const TrainSummary& sum) {
  memory_ = std::make_unique<AtomicFile>(dir_ + "memory.csv");
  memory_->out() << "category,dtype,elements,bytes\n";
  for (const MemoryRow& m : sum.memory)
    memory_->out() << m.category << ',' << m.dtype << ',' << m.elements << ',' << m.bytes
                   << '\n';
  for (AtomicFile* f : {&steps_, &trace_, &window_, memory_.get(), &updates_, &blocks_})
    f->finish();
  if (c_.save_weights) {
    // The final parameters as float32 arrays, by name.
    weights_ = std::make_unique<NpzWriter>(dir_ + "weights.npz");
    for (const Param& p : sum.final_params) {
      NpyArray a;
      a.dtype = "f4";
      a.shape = p.t.shape();
      a.values = p.t.data().to_vector();
      weights_->add(p.name, a);
    }
    weights_->finish();
  }
  if (grads_) grads_->finish();
}

std::vector<std::string> RunFiles::outputs() const {
  std::vector<std::string> o;
  for (const std::string& n : run_file_names())
    if ((n != "weights.npz" || weights_) && (n != "grads.npz" || grads_)) o.push_back(n);
  return o;
}

void RunFiles::publish(const std::string& manifest) {
  std::vector<std::string> stale;
  const std::vector<std::string> mine = outputs();
  for (const std::string& n : run_file_names())
    if (std::find(mine.begin(), mine.end(), n) == mine.end()) stale.push_back(n);
  std::vector<std::function<void()>> renames;
  for (AtomicFile* f : {&steps_, &trace_, &window_, memory_.get(), &updates_, &blocks_})
    renames.push_back([f] { f->publish(); });
  if (weights_) renames.push_back([this] { weights_->publish(); });
  if (grads_) renames.push_back([this] { grads_->publish(); });
  publish_folder(dir_, stale, renames, manifest);
}

void RunFiles::step_row(const StepRow& r, const StepTrace* st) {
  line_.clear();
  num(r.step), sep(), num(float(r.loss)), sep(), num(r.loss_scale), sep();
  num(int(r.found_inf)), sep(), num(int(r.skipped)), sep(), num(r.growth_tracker), sep();
  num(r.next_scale), sep();
  if (st) {
    const GradCounts g = grad_counts(*st);
    num(g.values), sep(), num(g.flushed), sep(), num(g.overflow), sep();
    line_ += k_str(st->k_low) + ',' + k_str(st->k_high);
  } else {
    line_ += ",,,,";
  }
  sep();
  if (!std::isnan(r.val_loss)) num(float(r.val_loss));
  line_ += '\n';
  steps_.out() << line_;
}

void RunFiles::trace_rows(const StepTrace& st) {
  line_.clear();
  for (const TraceRecord& t : st.records) {
    if (t.kind == TraceKind::optimizer_state) {
      state_values += t.events.total;
      state_flushed += t.events.flushed;
      state_overflow += t.events.overflow;
    }
    append_trace_columns(line_, st.step, t);
    line_ += '\n';
  }
  trace_.out() << line_;
}

void RunFiles::window_rows(const StepTrace& st) {
  line_.clear();
  for (const WindowRow& w : st.window) {
    if (w.values == 0) continue;
    append_window_columns(line_, st.step, st.loss_scale, w, c_.tracer.flush_tolerance);
    line_ += '\n';
  }
  window_.out() << line_;
}

void RunFiles::update_rows(const StepRow& r) {
  line_.clear();
  for (const UpdateRow& u : r.updates) {
    num(r.step), sep();
    line_ += u.name + ',' + u.dtype + ',';
    num(u.elements), sep(), num(u.nonzero), sep(), num(u.vanished), sep();
    if (!std::isnan(u.drift)) num(u.drift);
    line_ += '\n';
  }
  updates_.out() << line_;
}

void RunFiles::block_rows(const StepTrace& st) {
  line_.clear();
  for (const BlockRecord& b : st.blocks) {
    append_block_columns(line_, st.step, b);
    line_ += '\n';
  }
  blocks_.out() << line_;
}

}  // namespace halfway::sim::detail
