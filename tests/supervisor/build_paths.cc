// supervisor_tests' paths into the build (tests/build_paths.h).
#include "tests/build_paths.h"

namespace tether::testing {
const char* const kNativeSupervisorPath = TETHER_NATIVE_SUPERVISOR;
}  // namespace tether::testing
