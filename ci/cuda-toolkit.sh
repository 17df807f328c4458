# Sourced by the nvcc-built GPU programs' build scripts (rccl-tests-compat/build.sh,
# gpu-tests/fidelity/build.sh): finds nvcc and the static CUDA runtime.
# Needs REPO (the repository root). Sets NVCC (kept when already set), CUDA_ROOT, CUDART_DIR;
# exits with a message when either is missing.
if [ -z "${NVCC:-}" ] && [ -x "$REPO/.tools/cuda/nvidia/cu13/bin/nvcc" ]; then
  NVCC="$REPO/.tools/cuda/nvidia/cu13/bin/nvcc"
fi
NVCC="${NVCC:-$(command -v nvcc || true)}"
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
  echo "build.sh: nvcc not found: set NVCC or run ci/install-toolchains.sh" >&2
  exit 1
fi
CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
CUDART_DIR=""
for d in "$CUDA_ROOT/lib" "$CUDA_ROOT/lib64" "$CUDA_ROOT/targets/x86_64-linux/lib"; do
  if [ -f "$d/libcudart_static.a" ]; then CUDART_DIR="$d"; break; fi
done
if [ -z "$CUDART_DIR" ]; then
  echo "build.sh: libcudart_static.a not found under $CUDA_ROOT" >&2
  exit 1
fi
