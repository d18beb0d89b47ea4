// A run's manifest.json (manifest.cpp), internal to sim/: what the run was (the build, the
// seed, the config, the resolved policy, the optimizer state's formats) and how it ended
// (complete or stopped, the files it wrote, its summary).
#pragma once

#include <string>

#include "halfway/sim/trainer.hpp"

namespace halfway::sim::detail {

class RunFiles;

/// The text of manifest.json for the run of `c` that ended with `sum` and wrote `files`.
std::string run_manifest(const TrainConfig& c, const TrainSummary& sum, const RunFiles& files);

}  // namespace halfway::sim::detail
