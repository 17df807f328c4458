// selftest.cu - the GPU self-test's kernels (gpu-tests/src/bin/selftest.rs). Compiled by
// gpu-tests/build.rs into the test program only, never into librcclx.so.
#include "rcclx_port.h"
#include "selftest.cuh"
