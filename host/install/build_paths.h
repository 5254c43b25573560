// Where FindSupervisorBinary() looks besides $TETHER_SUPERVISOR_DIR and
// beside the executable: this build tree's supervisors and the install
// prefix's libexec (empty when not configured). They are defined in
// build_paths.cc alone, so that a path into one clone is on one small
// file's command line, not on every file of host/install/ (each of which
// would then miss the compiler cache in another clone; issue 29).
#pragma once

namespace tether::internal {

extern const char* const kBuildSupervisorDir;
extern const char* const kInstallLibexecDir;

}  // namespace tether::internal
