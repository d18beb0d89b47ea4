#include "halfway/sim/version.hpp"

namespace halfway::sim {
const char* sim_version() { return HALFWAY_SIM_VERSION; }
}  // namespace halfway::sim
