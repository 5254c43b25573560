// protocol_tests' paths into the build (tests/build_paths.h).
#include "tests/build_paths.h"

namespace tether::testing {
const char* const kTestDataDir = TETHER_TEST_DATA_DIR;
}  // namespace tether::testing
