# Sourced by build.sh and portable.sh: sets NCCL_INCLUDE to a folder holding nccl.h (only the
# header is used: the programs load NCCL at run time). $NCCL_INCLUDE if set, else the 2.28.9
# wheel that ci/fetch-nccl.sh unpacked into .cache/nccl/, else that wheel downloaded with pip and
# unpacked into build/nccl-2.28.9/. Needs HERE (this folder) and REPO.
if [ -z "${NCCL_INCLUDE:-}" ] && [ -f "$REPO/.cache/nccl/2.28.9/nvidia/nccl/include/nccl.h" ]; then
  NCCL_INCLUDE="$REPO/.cache/nccl/2.28.9/nvidia/nccl/include"
fi
if [ -z "${NCCL_INCLUDE:-}" ]; then
  NCCL_INCLUDE="$HERE/build/nccl-2.28.9/nvidia/nccl/include"
  if [ ! -f "$NCCL_INCLUDE/nccl.h" ]; then
    echo "rccl-tests-compat: fetching nccl.h from the nvidia-nccl-cu13==2.28.9 wheel"
    rm -rf "$HERE/build/whl"
    python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
      --dest "$HERE/build/whl" nvidia-nccl-cu13==2.28.9
    python3 - "$HERE/build/whl" "$HERE/build/nccl-2.28.9" <<'EOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/nvidia_nccl_cu13-2.28.9-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("nvidia/nccl/")])
EOF
    rm -rf "$HERE/build/whl"
  fi
fi
if [ ! -f "$NCCL_INCLUDE/nccl.h" ]; then
  echo "rccl-tests-compat: $NCCL_INCLUDE/nccl.h not found" >&2
  exit 1
fi
