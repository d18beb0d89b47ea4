#include "commands.hpp"
#include "halfway/names.hpp"

namespace halfway::cli {
int cmd_testfloat(int, char**) { throw InputError("'testfloat' is being written"); }
}  // namespace halfway::cli
