// rcclx_kernels.cu - the single translation unit of all rcclx device code.
//
// build.rs compiles this file ahead of time, once per target (nvcc: sm_90 cubin + compute_90
// PTX; clang -x hip: gfx942, gfx950), and embeds the code objects in the library.
// Only rcclx_port.h may contain vendor #ifs; algorithm files include nothing themselves.
#include "rcclx_port.h"

#include "selftest.cuh"
#include "dda.cuh"   // DDA flat/tree AllReduce
#include "lowp.cuh"  // FP8 low-precision collectives
