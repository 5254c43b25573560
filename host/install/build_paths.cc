#include "host/install/build_paths.h"

namespace tether::internal {

#ifdef TETHER_BUILD_SUPERVISOR_DIR
const char* const kBuildSupervisorDir = TETHER_BUILD_SUPERVISOR_DIR;
#else
const char* const kBuildSupervisorDir = "";
#endif
#ifdef TETHER_INSTALL_LIBEXEC_DIR
const char* const kInstallLibexecDir = TETHER_INSTALL_LIBEXEC_DIR;
#else
const char* const kInstallLibexecDir = "";
#endif

}  // namespace tether::internal
