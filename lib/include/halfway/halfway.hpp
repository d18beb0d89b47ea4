/// \file halfway.hpp
/// Umbrella header: formats, environment, scalar soft-float, names, bulk kernels.
#pragma once
#include "halfway/accumulate.hpp"
#include "halfway/blocks.hpp"
#include "halfway/bulk.hpp"
#include "halfway/env.hpp"
#include "halfway/format.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
