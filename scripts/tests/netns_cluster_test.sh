#!/bin/bash
# ctest driver for scripts/netns-cluster (label netns). Exit 77 (skipped) without root or
# ip netns, as the script itself does.
#   netns_cluster_test.sh roundtrip SCRIPT           up 2, status, mpirun (no rank bound to
#                                                   a subset of the cores), down: nothing
#                                                   left behind
#   netns_cluster_test.sh bad-args SCRIPT            bad input: exit 2 naming what is allowed
#   netns_cluster_test.sh slow-link SCRIPT SHARDLAB SCENARIO OUT PREFIX [REPEATS]
#                                                   both nodes at 1 Gbit/s, then node 1 at a
#                                                   tenth of it from a random moment after
#                                                   the first step (REPEATS times, default
#                                                   1): the run completes, matches the
#                                                   oracle, and its summary and per-rank
#                                                   breakdown say where the time went
#   netns_cluster_test.sh oracle SCRIPT SHARDLAB SCENARIO OUT PREFIX [STRATEGY]
#                                                   the scenario across 2 nodes x 2 ranks;
#                                                   with HYBRID_SHARD the trace must show the
#                                                   shard groups' traffic within a node and
#                                                   the replica all-reduces across nodes
set -uo pipefail
what=$1
script=$2
skip_unless_root() {
  if [[ $(id -u) != 0 ]] || ! command -v ip > /dev/null || ! ip netns list > /dev/null 2>&1; then
    echo "skipped: needs root and ip netns"
    exit 77
  fi
}
# The fixture's cluster (oracle): skipped when it could not go up for want of namespaces.
skip_unless_up() {
  [[ -f /run/shardlab-netns/$1/mpirun.args ]] || { echo "skipped: cluster $1 is not up (needs root and ip netns)"; exit 77; }
}
fail() { echo "FAIL: $*"; exit 1; }
case $what in
  roundtrip)
    skip_unless_root
    prefix=slrt
    trap '"$script" down --prefix $prefix > /dev/null 2>&1' EXIT
    "$script" up 2 --rate 500mbit --ranks-per-node 2 --prefix $prefix
    rc=$?
    [[ $rc == 77 ]] && { echo "skipped: no network namespaces on this machine"; exit 77; }
    [[ $rc == 0 ]] || fail "up exited $rc"
    [[ $(ip netns list | grep -c "^$prefix-") == 4 ]] || fail "up made $(ip netns list | grep -c "^$prefix-") namespaces, expected 4 (fabric, head, 2 nodes)"
    grep -q "^$prefix-n1 slots=2$" /run/shardlab-netns/$prefix/hostfile || fail "hostfile: $(cat /run/shardlab-netns/$prefix/hostfile)"
    tc -n $prefix-n0 qdisc show dev eth0 | grep -q "tbf.*rate 500Mbit" || fail "no 500mbit tbf on n0: $(tc -n $prefix-n0 qdisc show dev eth0)"
    grep -q '"gbit_per_s": 0.5' /run/shardlab-netns/$prefix/topology.json || fail "topology: $(cat /run/shardlab-netns/$prefix/topology.json)"
    # The root namespace has no 198.18 address: the cluster's addresses stay inside it.
    ip -4 -o addr show | grep -q "198\.18\." && fail "198.18 address outside the cluster's namespaces"
    status=$("$script" status --prefix $prefix)
    [[ $status == *"netns-cluster $prefix: up"* ]] || fail "status does not say up: $status"
    # The nodes share this machine's cores: no rank may be bound to some of them (Open MPI
    # binds a job of two ranks to cores, each node's daemon from core 0 on: one rank per
    # node would put both on core 0).
    cores=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    bound=$("$script" mpirun --prefix $prefix -n 2 --map-by node \
      sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status') || fail "mpirun exited $?: $bound"
    [[ $(grep -cx "$cores" <<< "$bound") == 2 ]] || fail "ranks bound to cores: $(tr '\n' ' ' <<< "$bound")(this machine: $cores)"
    "$script" down --prefix $prefix || fail "down exited $?"
    [[ $(ip netns list | grep -c "^$prefix-") == 0 ]] || fail "down left: $(ip netns list | grep "^$prefix-")"
    [[ ! -e /run/shardlab-netns/$prefix ]] || fail "down left /run/shardlab-netns/$prefix"
    status=$("$script" status --prefix $prefix)
    [[ $status == *"netns-cluster $prefix: down"* ]] || fail "status after down: $status"
    echo "ok: up, status, down leave nothing behind; ranks not bound to cores"
    ;;
  bad-args)
    expect2() {
      local out rc
      out=$("$script" "${@:2}" 2>&1); rc=$?
      [[ $rc == 2 ]] || fail "'${*:2}' exited $rc, expected 2: $out"
      [[ $out == *"$1"* ]] || fail "'${*:2}' said: $out; expected it to name: $1"
    }
    expect2 "N must be a positive integer" up 0
    expect2 "at most 64 nodes" up 65
    expect2 "--rate: a tc rate such as 1gbit" up 2 --rate fast
    expect2 "--prefix: 1 to 8 lowercase letters" up 2 --prefix Bad-Prefix
    expect2 "unknown command 'start'; allowed: up, down, status, shape, mpirun" start
    expect2 "shape: I must be a node index" shape x 1gbit
    expect2 "shape: RATE must be a tc rate such as 1gbit or 100mbit, or 0" shape 1 fast
    expect2 "--rate is an option of up" down --rate 1gbit
    echo "ok: bad arguments exit 2 naming what is allowed"
    ;;
  oracle)
    skip_unless_root
    shardlab=$3 scenario=$4 out=$5 prefix=$6 strategy=${7:-}
    skip_unless_up "$prefix"
    rm -rf "$out"
    sets=(--set world.nodes=2 --set world.devices_per_node=2)
    [[ -n $strategy ]] && sets+=(--set "fsdp.sharding_strategy=$strategy")
    "$script" mpirun --prefix "$prefix" -n 4 --oversubscribe --mca mpi_yield_when_idle 1 \
      "$shardlab" run "$scenario" --backend mpi "${sets[@]}" --out "$out"
    rc=$?
    [[ $rc == 0 ]] || fail "the run exited $rc"
    grep -q "^gradients vs unsharded training: MATCH" "$out/summary.txt" || fail "no oracle MATCH in $out/summary.txt"
    if [[ $strategy == HYBRID_SHARD ]]; then
      /usr/bin/python3 - "$out/trace.json" << 'PY' || fail "the trace does not place HYBRID_SHARD's traffic"
import collections, json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "comm"]
where = collections.defaultdict(set)
for e in events:
    where[e["name"]].add(e["args"]["algorithm"])
print({k: sorted(v) for k, v in where.items()})
# Shards are gathered and gradients reduce-scattered inside a node; the replicas all-reduce across.
ok = (where["all_gather"] == {"mpi, within a node"} and where["reduce_scatter"] == {"mpi, within a node"}
      and "mpi, across nodes" in where["all_reduce"])
sys.exit(0 if ok else 1)
PY
    fi
    echo "ok: 2 nodes x 2 ranks${strategy:+ under $strategy} match the unsharded oracle"
    ;;
  slow-link)
    shardlab=$3 scenario=$4 out=$5 prefix=$6 repeats=${7:-1}
    skip_unless_up "$prefix"
    trap '"$script" shape 0 0 --prefix "$prefix" > /dev/null; "$script" shape 1 0 --prefix "$prefix" > /dev/null' EXIT
    for ((rep = 1; rep <= repeats; rep++)); do
      rm -rf "$out" "$out.log"
      "$script" shape 0 1gbit --prefix "$prefix" && "$script" shape 1 1gbit --prefix "$prefix" || fail "shape exited $?"
      "$script" mpirun --prefix "$prefix" -n 4 --oversubscribe --mca mpi_yield_when_idle 1 \
        "$shardlab" run "$scenario" --backend mpi --set world.nodes=2 --set world.devices_per_node=2 \
        --set train.steps=3 --out "$out" > "$out.log" 2>&1 &
      run=$!
      # After the first step, at a random moment within the next 0.5 s: node 1 at 100 Mbit/s.
      for ((i = 0; i < 600; i++)); do grep -q "step 1/" "$out.log" 2> /dev/null && break; sleep 0.1; done
      delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", r / 32768 * 0.5 }')
      sleep "$delay"
      "$script" shape 1 100mbit --prefix "$prefix" || fail "shape exited $?"
      timeout 240 tail --pid=$run -f /dev/null
      wait $run
      rc=$?
      [[ $rc == 0 ]] || { tail -20 "$out.log"; fail "repeat $rep: the run exited $rc"; }
      grep -q "^gradients vs unsharded training: MATCH" "$out/summary.txt" || fail "repeat $rep: no oracle MATCH"
      # Where the time went: most of a step is exposed communication on every rank, in
      # metrics.json's per-rank breakdown and in summary.txt's line.
      /usr/bin/python3 - "$out/metrics.json" << 'PY' || fail "repeat $rep: the breakdown does not show the slow link"
import json, sys
m = json.load(open(sys.argv[1]))
step, per_rank = m["step_time_s"]["median"], m.get("step_breakdown_s_per_rank", [])
print(f"step {step:.3f} s (median); per rank compute / exposed communication: " +
      ", ".join(f"{r['compute']:.3f} / {r['exposed_comm']:.3f} s" for r in per_rank))
sys.exit(0 if len(per_rank) == 4 and all(r["exposed_comm"] > 0.7 * step for r in per_rank) else 1)
PY
      grep -q "^where the time went" "$out/summary.txt" || fail "repeat $rep: no 'where the time went' in summary.txt"
      echo "ok (slow link, repeat $rep): node 1 slowed ${delay} s after the first step; the run completed and matched"
    done
    grep "^where the time went" "$out/summary.txt"
    echo "ok: with node 1 at a tenth of node 0's rate from a random moment the run completes, its steps mostly exposed communication"
    ;;
  *) echo "unknown test '$what'"; exit 2 ;;
esac
