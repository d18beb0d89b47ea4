/// \file version.hpp
/// The simulator build's version and git revision, as manifest.json and analyze's records give
/// them.
#pragma once

namespace halfway::sim {

const char* sim_version();
const char* git_revision();

}  // namespace halfway::sim
