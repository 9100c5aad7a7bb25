#!/usr/bin/env bash
# NOTE [Ending a failed job] (runtime/comm/mpi/communicator.h): a rank that stops or dies
# mid-run must not keep the others alive, and the survivors name it (NOTE [Roll call]).
# Runs 3 MPI ranks with a 5 s collective timeout and, once training is under way:
#   stop: SIGSTOPs rank 1; passes when mpirun ends with exit 3 within 30 s, the survivors
#         having said TIMEOUT and their roll call having named rank 1.
#   kill: SIGKILLs rank 1 under `mpirun --enable-recovery` (without it mpirun ends the job
#         itself and names the rank); passes when every process is gone within 30 s and
#         the survivors' roll call named rank 1. Open MPI 4.1's mpirun exits 0 in this mode
#         whatever the ranks' codes, so the exit code is not checked (docs/troubleshooting.md).
#   mpi_hung_rank.sh stop|kill MPIEXEC SHARDLAB WORKDIR
set -u
mode=$1 mpiexec=$2 exe=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
extra=()
signal=STOP
if [ "$mode" = kill ]; then extra=(--enable-recovery); signal=KILL; fi
"$mpiexec" "${extra[@]}" --oversubscribe --mca mpi_yield_when_idle 1 -n 3 "$exe" run --backend mpi \
  --set model.preset=mlp --set train.steps=1000000 --set world.devices_per_node=3 \
  --set world.collective_timeout_s=5 --no-oracle --out out > log 2>&1 &
launcher=$!
victim=""
cleanup() {
  [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
  kill -KILL "$launcher" 2>/dev/null
}
trap cleanup EXIT
for _ in $(seq 1 600); do  # until the first step is done (at most 60 s)
  grep -q "step 1/" log && break
  sleep 0.1
done
for d in /proc/[0-9]*; do  # (no procps needed)
  [ "$(readlink "$d/exe" 2>/dev/null)" = "$(readlink -f "$exe")" ] || continue
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=${d#/proc/}; fi
done
if [ -z "$victim" ]; then echo "FAIL: rank 1's process not found"; cat log; exit 1; fi
kill -"$signal" "$victim"
start=$(date +%s)
timeout 30 tail --pid="$launcher" -f /dev/null
ended=$?
wait "$launcher"
rc=$?
elapsed=$(( $(date +%s) - start ))
named=0
grep -q "never answered (ranks): 1 — hung, dead" log && named=1
if [ "$ended" -ne 0 ] || [ "$named" -ne 1 ] || { [ "$mode" = stop ] && { [ "$rc" -ne 3 ] || ! grep -q TIMEOUT log; }; }; then
  echo "FAIL ($mode): mpirun exited $rc after ${elapsed} s; expected the job gone within 30 s$( [ "$mode" = stop ] && echo ", exit 3 with TIMEOUT")" \
       "and a roll call naming rank 1"
  cat log
  exit 1
fi
if [ "$mode" = stop ]; then
  echo "ok: the job ended with exit 3 ${elapsed} s after rank 1 stopped, naming it"
else
  echo "ok: the job ended ${elapsed} s after rank 1 was killed, naming it"
fi
grep -E "TIMEOUT|roll call|never answered" log
