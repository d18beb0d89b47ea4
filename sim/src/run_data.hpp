// A run's data as its config names it (run_data.cpp), internal to sim/: an .npz's arrays checked
// against the model and the loss, seeded synthetic data, or a text corpus cut into training and
// validation windows.
#pragma once

#include <cstdint>

#include "halfway/sim/config.hpp"
#include "halfway/sim/data.hpp"

namespace halfway::sim::detail {

/// The training windows and, for text data, the validation windows (cut to c.val_windows).
struct RunData {
  Dataset train, val;
};

/// `npz_bytes`: the most an .npz's values may take (read_npz's limit). Throws InputError for
/// missing or misshapen arrays, ids out of the model's range, values fp32 cannot hold, and data
/// the model or the loss cannot take.
RunData load_run_data(const TrainConfig& c, uint64_t npz_bytes);

}  // namespace halfway::sim::detail
