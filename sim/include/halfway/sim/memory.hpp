/// \file memory.hpp
/// Memory accounting per policy: bytes held in each dtype by the weights (parameters, and
/// the low-precision copies a lowered op makes of them), the fp32 master weights, the
/// activations saved for backward, the gradients, the optimizer state (each state in its
/// format; a pow2 state's per-tensor scale and a dynamic8 state's per-block absmaxes as
/// `optimizer_state_scale`) and a Kahan
/// update's compensation buffer (`compensation`). Sizes are
/// elements × bits / 8, so fp8 counts one byte per value and fp4 half a byte.
///
///     auto rows = account_memory(loss, model.params(), policy, opt.state_dtypes());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halfway/sim/model.hpp"
#include "halfway/sim/optim.hpp"
#include "halfway/sim/policy.hpp"

namespace halfway::sim {

struct MemoryRow {
  std::string category;  ///< weights master_weights activations gradients optimizer_state
                         ///< optimizer_state_scale compensation
  std::string dtype;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

/// Walk the graph of `loss` (before backward releases nothing: call it right after the
/// forward pass) and the parameters.
std::vector<MemoryRow> account_memory(const Tensor& loss, std::vector<Param>& params,
                                      const Policy& policy,
                                      const std::vector<StateFormat>& optimizer_state);

uint64_t total_bytes(const std::vector<MemoryRow>& rows);

struct TrainConfig;
struct Dataset;

/// A run's peak memory estimated from its config alone, before anything is allocated: what
/// the simulator really holds (every value is a binary64 `double`, whatever its dtype), not
/// what memory.csv reports for the simulated dtypes. Meant as an upper bound of the process's
/// peak resident set within a factor of 3 (tests/sim/test_limits.py measures it). Computed in
/// floating point, so absurd sizes give huge numbers, never an overflow.
struct MemoryEstimate {
  double params = 0;       ///< parameters and their gradients, the optimizer's state and
                           ///< temporaries, the per-step fp32 gradients, weights/grads output
  double activations = 0;  ///< one step's autograd graph: every node's values and gradient,
                           ///< and the backward's temporaries
  double data = 0;         ///< the dataset and the loader's index (for an .npz: its arrays)
  double trace = 0;        ///< the tracer's per-step records
  double base = 0;         ///< the process itself: code, libraries, the allocator's slack
  double total() const { return params + activations + data + trace + base; }
};

/// The estimate for `c`; with `data` (an .npz dataset once loaded) its real size is used.
MemoryEstimate estimate_memory(const TrainConfig& c, const Dataset* data = nullptr);

/// The bytes a run writes, estimated from its config alone (an upper bound of the files it
/// leaves, within a factor of 3: tests/sim/test_limits.py): the CSVs (a row of
/// steps.csv a step; per traced step, trace.csv's records, scale_window.csv's scales,
/// updates.csv's parameters and blocks.csv's operand copies) and the archives (grads.npz's
/// gradients of every step and weights.npz, each with the spool file it is built from).
struct DiskEstimate {
  double csv = 0;       ///< steps.csv, trace.csv, scale_window.csv, updates.csv, blocks.csv
  double archives = 0;  ///< grads.npz and weights.npz, twice (spool and archive)
  double total() const { return csv + archives; }
};
DiskEstimate estimate_disk(const TrainConfig& c);
/// The free bytes of the file system that holds `path` (or its nearest existing parent); -1
/// when it cannot be told.
double free_disk_bytes(const std::string& path);
/// Throw InputError (one line naming the parts and the option) when `e` is over `limit`
/// bytes (--max-disk) or, with `limit` 0, over the free space where `out_dir` is. `what`
/// names the writer in the message ("the run", "the sweep's 12 runs left").
void check_disk(const DiskEstimate& e, uint64_t limit, const std::string& out_dir,
                const std::string& what = "the run");

/// "2G", "512M", "1.5GiB", "100000" (bytes): K, M, G, T are powers of 1024, with an optional
/// "B" or "iB". Throws InputError for anything else or a size of 0.
uint64_t parse_memory_size(const std::string& text);
/// "1.5 GiB", "312 KiB", "17 bytes".
std::string format_bytes(double bytes);
/// Throw InputError (one line naming the parts) when `e` is over `limit` bytes; `limit` 0
/// means the default.
void check_memory(const MemoryEstimate& e, uint64_t limit);

/// Make the C library's heap the run's buffer pool. A training step allocates and frees the
/// same tensor sizes every step; by default glibc returns large freed blocks to the system
/// (munmap, heap trimming), so every step faults in fresh zeroed pages (30% of a small model's
/// time). This keeps freed memory in the process and serves blocks up to 32 MiB (glibc's
/// largest allowed mmap threshold) from the heap, so from the second step on a step reuses the
/// pages of the one before. The process keeps its peak heap until it exits. No effect outside
/// glibc.
void reuse_freed_memory();

}  // namespace halfway::sim
