# Shared settings for the scripts in this directory and in tests/, bench/ and tools/ (sourced, not run).
# ROOT: repository; LIB: the release libshim.so; BUILD: where test programs go.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIB="${SHIM_LIB_PATH:-$ROOT/target/release/libshim.so}"
BUILD="$ROOT/build"
MPICC="${MPICC:-mpicc.mpich}"
MPIRUN="${MPIRUN:-mpirun.mpich}"
# Seconds before a hung MPI run is killed (a hang must fail, not stall CI).
RUN_TIMEOUT="${RUN_TIMEOUT:-180}"

log() { printf '%s\n' "$*" >&2; }

build_shim() {
    (cd "$ROOT" && cargo build --release --quiet)
}

# run_mpi N prog args...: mpirun with a timeout; extra environment comes from the caller.
# MPIRUN may carry flags ("mpiexec --oversubscribe", as scripts/tools/mpi-env sets it).
run_mpi() {
    local n=$1; shift
    local -a launcher
    read -ra launcher <<<"$MPIRUN"
    timeout -k 10 "$RUN_TIMEOUT" "${launcher[@]}" -n "$n" "$@"
}
