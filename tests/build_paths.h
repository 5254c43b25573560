// Absolute paths into this build tree that tests need (the native
// supervisor, the test data). Each is defined in one small file of its
// own (tests/*/build_paths.cc), never as a define on the test files: a
// path into one clone on every test file's command line made each of them
// miss the compiler cache in any other clone of the same commit (issue 29).
#pragma once

namespace tether::testing {

// tests/data (protocol_tests).
extern const char* const kTestDataDir;
// The build's native tether-supervisor (supervisor_tests).
extern const char* const kNativeSupervisorPath;

}  // namespace tether::testing
