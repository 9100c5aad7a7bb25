#!/bin/bash
# Faults under real processes across namespace nodes (label netns; docs/multinode.md).
#   netns_fault_test.sh kill|link-down SCRIPT SHARDLAB WORK PREFIX REPEATS
# On the cluster PREFIX (2 nodes x 2 ranks, up), REPEATS times: start the MLP training
# across the 4 ranks with a 5 s collective timeout, wait a random 0-1.5 s after its first
# step, then
#   kill:      SIGKILL one random rank other than 0. Across nodes the TCP BTL sees the
#              peer's connection drop at once and mpirun ends the job, naming the rank
#              and its signal. (Under --enable-recovery, as scenarios/mpi_hung_rank.sh
#              runs one node, the survivors time out and name it in their roll call, but
#              Open MPI 4.1's mpirun then hangs after their MPI_Abort across daemons —
#              "PMIX ERROR: BAD-PARAM" — so it is not used here.)
#   link-down: take node 1's link down (ip link set eth0 down in its namespace): mpirun
#              loses node 1's daemon (the cluster's keepalive settings, ~5 s) and ends the
#              job, naming the node — before the survivors' 5 s collective timeout, whose
#              roll call (NOTE [Roll call] in runtime/comm/mpi/communicator.h) names node
#              1's ranks when it gets there first.
# Each time it passes when the job is gone within the timeout plus 25 s, the rank(s) that
# disappeared are named, no process is left in any of the cluster's namespaces (no rank,
# no orted, no mpirun), and the output folder is whole (summary.txt and metrics.json
# written, or none of the outputs). In kill mode the training also checkpoints every 50
# steps (the kill comes after the first one), and then the last complete checkpoint must
# load: a run resumed from it for 20 more steps ends with the same per-step losses and
# bit-identical parameters as one run uninterrupted to the same step. Exit 77 when the
# cluster is not up.
set -u
mode=$1 script=$2 exe=$3 work=$4 prefix=$5 repeats=$6
state=/run/shardlab-netns/$prefix
[[ -f $state/mpirun.args ]] || { echo "skipped: cluster $prefix is not up (needs root and ip netns)"; exit 77; }
fail() { echo "FAIL ($mode, repeat $rep): $*"; [[ -f $work/log ]] && tail -30 "$work/log"; exit 1; }
left_in_cluster() {
  local ns pids=""
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$prefix-(head|n[0-9]+)$"); do
    pids+=" $(ip netns pids "$ns" 2> /dev/null)"
  done
  echo $pids
}
timeout_s=5
RANDOM=$$
for ((rep = 1; rep <= repeats; rep++)); do
  rm -rf "$work" && mkdir -p "$work"
  extra=() checkpoints=()
  [[ $mode == kill && ${RECOVERY:-0} == 1 ]] && extra=(--enable-recovery)
  [[ $mode == kill ]] && checkpoints=(--set checkpoint.dir="$work/ckpt" --set checkpoint.every_steps=50)
  "$script" mpirun --prefix "$prefix" -n 4 "${extra[@]}" --oversubscribe --mca mpi_yield_when_idle 1 \
    "$exe" run --backend mpi --set model.preset=mlp --set train.steps=1000000 --set world.nodes=2 \
    --set world.devices_per_node=2 --set world.collective_timeout_s=$timeout_s --no-oracle "${checkpoints[@]}" \
    --out "$work/out" > "$work/log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 600); do
    grep -q "step 1/" "$work/log" && break
    sleep 0.1
  done
  grep -q "step 1/" "$work/log" || { kill -KILL $launcher; fail "training never reached step 1"; }
  if [[ $mode == kill ]]; then
    for _ in $(seq 1 300); do
      [[ -f $work/ckpt/latest ]] && break
      sleep 0.1
    done
    [[ -f $work/ckpt/latest ]] || { kill -KILL $launcher; fail "no checkpoint within 30 s"; }
  fi
  delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", r % 1500 / 1000 }')
  sleep "$delay"
  victim_rank=""
  if [[ $mode == kill ]]; then
    victim_rank=$((1 + RANDOM % 3))
    victim=""
    for d in /proc/[0-9]*; do
      [[ $(readlink "$d/exe" 2> /dev/null) == "$(readlink -f "$exe")" ]] || continue
      tr '\0' '\n' < "$d/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim_rank" && victim=${d#/proc/}
    done
    [[ -n $victim ]] || { kill -KILL $launcher; fail "rank $victim_rank's process not found"; }
    kill -KILL "$victim"
    what="rank $victim_rank killed after ${delay} s"
    named="process rank $victim_rank with PID $victim on node $prefix-n$((victim_rank / 2)) exited on signal 9"
  else
    ip -n "$prefix-n1" link set eth0 down
    what="node 1's link down after ${delay} s"
    named="Remote daemon: \[\[[0-9]+,0\],[0-9]+\] on node $prefix-n1"
  fi
  start=$(date +%s)
  timeout $((timeout_s + 25)) tail --pid=$launcher -f /dev/null
  ended=$?
  [[ $mode == link-down ]] && ip -n "$prefix-n1" link set eth0 up
  if [[ $ended != 0 ]]; then
    kill -KILL $launcher 2> /dev/null
    for p in $(left_in_cluster); do kill -KILL "$p" 2> /dev/null; done
    fail "$what: the job was still running $((timeout_s + 25)) s later"
  fi
  wait $launcher
  rc=$?
  elapsed=$(($(date +%s) - start))
  # Daemons and ranks finishing their exit: a node cut off learns that the job ended only by
  # its own keepalive on the lost link (a few seconds), then ends its ranks; what is still
  # there 10 s after mpirun is an orphan.
  for ((i = 0; i < 100; i++)); do
    left=$(left_in_cluster)
    [[ -z $left ]] && break
    sleep 0.1
  done
  [[ -z $left ]] || { for p in $left; do kill -KILL "$p" 2> /dev/null; done; fail "$what: processes left: $left"; }
  grep -qE "$named" "$work/log" || fail "$what: nothing names it ('$named')"
  if [[ -d $work/out ]] && [[ -n $(ls -A "$work/out") ]]; then
    [[ -s $work/out/summary.txt && -s $work/out/metrics.json ]] || fail "$what: a partial output folder: $(ls "$work/out")"
  fi
  resumed=""
  if [[ $mode == kill ]]; then
    saved=$(sed 's/^step-0*//' "$work/ckpt/latest")
    total=$((saved + 20))
    common=(--backend mpi --set model.preset=mlp --set train.steps=$total --set world.nodes=2
            --set world.devices_per_node=2 --set world.collective_timeout_s=$timeout_s)
    for run in resumed reference; do
      more=()
      [[ $run == resumed ]] && more=(--set checkpoint.dir="$work/ckpt" --set checkpoint.resume=true)
      timeout 120 "$script" mpirun --prefix "$prefix" -n 4 --oversubscribe --mca mpi_yield_when_idle 1 \
        "$exe" run "${common[@]}" "${more[@]}" --out "$work/$run" > "$work/$run.log" 2>&1 ||
        { tail -20 "$work/$run.log"; fail "$what: the $run run to step $total failed"; }
    done
    grep -q "resumed from .*step-0*$saved" "$work/resumed.log" || fail "$what: the resumed run does not say it resumed from step $saved"
    /usr/bin/python3 - "$work/resumed/metrics.json" "$work/reference/metrics.json" "$saved" <<'PY' || fail "$what: the resumed run differs from the uninterrupted one"
import json, sys
resumed, reference = (json.load(open(p)) for p in sys.argv[1:3])
saved = int(sys.argv[3])
ok = (resumed["first_step"] == saved and resumed["loss"] == reference["loss"][saved:]
      and resumed["final_params_fnv1a"] == reference["final_params_fnv1a"])
print(f"resumed at step {resumed['first_step']}: {len(resumed['loss'])} losses "
      f"{'equal' if resumed['loss'] == reference['loss'][saved:] else 'DIFFERENT'}, parameters "
      f"{resumed['final_params_fnv1a']} vs {reference['final_params_fnv1a']}")
sys.exit(0 if ok else 1)
PY
    resumed="; resumed from step $saved to $total: the same losses and parameters as an uninterrupted run"
  fi
  echo "ok ($mode, repeat $rep): $what; the job ended ${elapsed} s later (mpirun exit $rc), naming it, nothing left$resumed"
done
