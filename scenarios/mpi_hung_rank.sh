#!/usr/bin/env bash
# NOTE [Ending a failed job] (runtime/comm/mpi/communicator.h): a rank that stops
# (SIGSTOP) mid-run must not keep the others alive. Runs 3 MPI ranks with a 5 s collective
# timeout, stops rank 1 once training is under way, and passes when mpirun ends with exit 3
# within 30 s of the stop, the survivors having said TIMEOUT.
#   mpi_hung_rank.sh MPIEXEC SHARDLAB WORKDIR
set -u
mpiexec=$1 exe=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$mpiexec" --oversubscribe --mca mpi_yield_when_idle 1 -n 3 "$exe" run --backend mpi --set model.preset=mlp \
  --set train.steps=1000000 --set world.devices_per_node=3 --set world.collective_timeout_s=5 --no-oracle \
  --out out > log 2>&1 &
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
kill -STOP "$victim"
start=$(date +%s)
timeout 30 tail --pid="$launcher" -f /dev/null
wait "$launcher"
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ "$rc" -ne 3 ] || ! grep -q "TIMEOUT" log; then
  echo "FAIL: mpirun exited $rc after ${elapsed} s (expected 3, with TIMEOUT from the survivors)"
  cat log
  exit 1
fi
echo "ok: the job ended with exit 3 ${elapsed} s after rank 1 stopped"
grep TIMEOUT log
