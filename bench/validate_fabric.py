#!/usr/bin/python3
"""The simulator's network model against a real fabric (issue 26): Open MPI over TCP
between network-namespace nodes whose links are shaped by tc (scripts/netns-cluster).

For every point (nodes × ranks per node, model, sharding strategy) this
1. brings up the cluster (`netns-cluster up N --ranks-per-node K --rate R`),
2. runs the scenario for real across it (`netns-cluster mpirun … shardlab run --backend mpi`),
3. predicts it in the simulator from what is known without that run: the topology
   netns-cluster writes (each node one port at the shaped rate R, TCP's payload per frame,
   the link latency; NOTE in scripts/netns-cluster), Open MPI's nonblocking schedules
   (`world.collective_algorithm=libnbc`, NOTE [Open MPI's nonblocking schedules] in
   sim/models/network/collectives.h) under per-link max-min sharing (`world.network_model=contention`),
   and the host: a device profile and the collectives' per-call overhead, reduction rate
   and shared-memory link calibrated by `shardlab calibrate` on this machine with the
   same number of processes, outside the cluster. Nothing is fitted to the runs compared.
4. compares the steady-state step time (median of the steps after --warmup, rank 0's wall
   clock) with the prediction (the simulated run's median step).

Prints a table (point, link rate, measured s/step, predicted s/step, error %) and writes
it as JSON (--json). Accuracy is reported, never enforced: exit 0 when every run worked, 1
when one failed, 2 for bad arguments, 77 without root or network namespaces (skipped).
The cluster is always taken down. Standard library only; run as root from the repository
root after `cmake --build --preset release`:
  bench/validate_fabric.py --json validate_fabric.json
  bench/validate_fabric.py --points 2x1:bert-mini:FULL_SHARD --json smoke.json
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validate_sim import MPIEXEC_FLAGS, BrokenRun, kept_steps, read_step_times, run  # noqa: E402

CLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "netns-cluster")
PREFIX = "vf"
# Points: nodes x ranks per node : model : strategy. HYBRID_SHARD with one rank per node is
# a replicated model all-reduced across the nodes (DDP's traffic, libnbc's schedule).
DEFAULT_POINTS = ("2x1:bert-mini:FULL_SHARD,2x1:bert-mini:HYBRID_SHARD,4x1:bert-mini:FULL_SHARD,"
                  "4x1:bert-mini:HYBRID_SHARD,2x2:bert-mini:FULL_SHARD,2x2:bert-mini:HYBRID_SHARD,"
                  "2x1:mlp:FULL_SHARD,2x1:mlp:HYBRID_SHARD,4x1:mlp:FULL_SHARD,4x1:mlp:HYBRID_SHARD")


def write_scenario(path):
    with open(path, "w", encoding="utf-8") as f:
        f.write("""# Written by bench/validate_fabric.py: one scenario, across namespace nodes and in the simulator.
name: validate_fabric
description: a real run across shaped links against the simulator's prediction
seed: 0
model: {preset: bert-mini, head: mlm}
data: {kind: synthetic, batch_size_per_rank: 1, seq_len: 16}
train: {steps: 6, precision: fp32, optimizer: {name: adamw, lr: 1.0e-3}}
fsdp:
  sharding_strategy: FULL_SHARD
  auto_wrap_policy: transformer
  transformer_layer_cls_to_wrap: [BertLayer]
  backward_prefetch: BACKWARD_PRE
world: {backend: sim, mode: numerics, nodes: 1, devices_per_node: 1}
""")


def bad_argument(message):
    print(f"validate_fabric: {message}", file=sys.stderr)
    sys.exit(2)


def parse_points(text):
    points = []
    for item in text.split(","):
        try:
            shape, model, strategy = item.split(":")
            nodes, per_node = (int(x) for x in shape.split("x"))
        except ValueError:
            bad_argument(f"bad point '{item}'; allowed: NxK:MODEL:STRATEGY, e.g. 2x1:bert-mini:FULL_SHARD")
        if nodes < 1 or per_node < 1 or strategy not in ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD"):
            bad_argument(f"bad point '{item}': N and K at least 1, STRATEGY one of FULL_SHARD, SHARD_GRAD_OP, "
                         "HYBRID_SHARD, NO_SHARD")
        points.append((nodes, per_node, model, strategy))
    return points


def steady(out_dir, what, warmup):
    """The median of a run's steps after `warmup` (validate_sim's readers and statistics)."""
    per_step, _ = read_step_times(out_dir, what)
    return statistics.median(kept_steps(per_step, warmup))


def calibrate(args, work, procs):
    """Device profile and host-side collective terms measured with `procs` processes on
    this machine (shared memory, outside the cluster)."""
    dev = os.path.join(work, f"device_{procs}p.json")
    topo = os.path.join(work, f"topology_{procs}p.json")
    cmd = ["mpiexec", "-n", str(procs)] + MPIEXEC_FLAGS + ["--allow-run-as-root",
           args.shardlab, "calibrate", "--out", dev, "--topology-out", topo]
    run(cmd, f"calibrate ({procs} processes)", os.path.join(work, f"calibrate_{procs}p.log"), args.timeout)
    with open(topo, encoding="utf-8") as f:
        return dev, json.load(f)


def fabric_topology(cluster_topo, host, path):
    """netns-cluster's topology with the host-side terms calibrated on this machine: the
    per-call overhead, the reduction rate and the shared-memory link inside a node (the
    calibrated switch port). Its measured tables stay out (they time groups on one
    machine's shared memory, not across the links), and so does its host progress: on
    shared memory a collective moves only while its ranks are inside MPI, but across TCP
    the kernel carries what a rank has posted (socket buffers of up to 4 MiB) while it
    computes, so the links' collectives progress on their own (NOTE [Host-progressed
    collectives] in sim/models/network/topology.h)."""
    with open(cluster_topo, encoding="utf-8") as f:
        t = json.load(f)
    for key in ("collective_overhead_ns", "reduce_gbyte_per_s"):
        if key in host:
            t[key] = host[key]
    if "port" in host:
        t["peer"] = host["port"]
    t["notes"] = t.get("notes", "") + " Host terms and the shared-memory peer link: shardlab calibrate."
    with open(path, "w", encoding="utf-8") as f:
        json.dump(t, f, indent=2)
        f.write("\n")
    return path


def overrides(point, steps):
    nodes, per_node, model, strategy = point
    return ["--set", f"world.nodes={nodes}", "--set", f"world.devices_per_node={per_node}", "--set",
            f"model.preset={model}", "--set", f"fsdp.sharding_strategy={strategy}", "--set", f"train.steps={steps}"]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardlab", default="build/bin/shardlab")
    ap.add_argument("--points", default=DEFAULT_POINTS)
    ap.add_argument("--rate", default="1gbit", help="every node's link (a tc rate: 1gbit, 200mbit)")
    ap.add_argument("--steps", type=int, default=6, help="steps of a bert run")
    ap.add_argument("--mlp-steps", type=int, default=300, help="steps of an MLP run (its steps take < 1 ms)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out (MLP: 10x)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--json")
    ap.add_argument("--work", help="keep logs and outputs here (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    points = parse_points(args.points)
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        print("validate_fabric: skipped: needs root and ip netns (iproute2)")
        return 77
    if not os.path.exists(args.shardlab):
        print(f"validate_fabric: {args.shardlab} not found; build first (cmake --build --preset release)")
        return 2
    work = args.work or tempfile.mkdtemp(prefix="validate_fabric-")
    for sub in ("real", "sim"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    scenario = os.path.join(work, "scenario.yaml")
    write_scenario(scenario)
    rows = []
    host = {}
    try:
        for point in points:
            nodes, per_node, model, strategy = point
            procs = nodes * per_node
            tag = f"{nodes}x{per_node}_{model}_{strategy}"
            if procs not in host:
                host[procs] = calibrate(args, work, procs)
                print(f"calibrated with {procs} processes: {host[procs][0]}", flush=True)
            dev, host_topo = host[procs]
            up = subprocess.run([CLUSTER, "up", str(nodes), "--ranks-per-node", str(per_node), "--rate", args.rate,
                                 "--prefix", PREFIX], capture_output=True, text=True, check=False)
            if up.returncode == 77:
                print("validate_fabric: skipped: " + up.stderr.strip())
                return 77
            if up.returncode != 0:
                raise BrokenRun(f"netns-cluster up: {up.stderr.strip()}")
            steps = args.mlp_steps if model == "mlp" else args.steps
            warmup = args.warmup * 10 if model == "mlp" else args.warmup
            real_out = os.path.join(work, "real", tag)
            shutil.rmtree(real_out, ignore_errors=True)
            cmd = ([CLUSTER, "mpirun", "--prefix", PREFIX, "-n", str(procs)] + MPIEXEC_FLAGS +
                   [args.shardlab, "run", scenario, "--backend", "mpi", "--no-oracle"])
            run(cmd + overrides(point, steps) + ["--out", real_out], f"real run {tag}", real_out + ".log",
                args.timeout)
            topo = fabric_topology(f"/run/shardlab-netns/{PREFIX}/topology.json", host_topo,
                                   os.path.join(work, f"fabric_{tag}.json"))
            subprocess.run([CLUSTER, "down", "--prefix", PREFIX], capture_output=True, check=False)
            sim_out = os.path.join(work, "sim", tag)
            shutil.rmtree(sim_out, ignore_errors=True)
            cmd = [args.shardlab, "run", scenario, "--no-oracle", "--set", f"world.device={dev}", "--set",
                   f"world.topology={topo}", "--set", "world.network_model=contention", "--set",
                   "world.collective_algorithm=libnbc"]
            run(cmd + overrides(point, steps) + ["--out", sim_out], f"simulated run {tag}", sim_out + ".log",
                args.timeout)
            measured = steady(real_out, f"real run {tag}", warmup)
            predicted = steady(sim_out, f"simulated run {tag}", warmup)
            row = {"nodes": nodes, "ranks_per_node": per_node, "model": model, "strategy": strategy,
                   "rate": args.rate, "measured_s": measured, "predicted_s": predicted,
                   "error_pct": (predicted - measured) / measured * 100.0, "topology": topo, "device": dev}
            rows.append(row)
            print(f"  {tag:<34} measured {measured:.4g} s/step, predicted {predicted:.4g} s/step, "
                  f"error {row['error_pct']:+.1f}%", flush=True)
    except BrokenRun as e:
        print(f"validate_fabric: {e}", file=sys.stderr)
        return 1
    finally:
        subprocess.run([CLUSTER, "down", "--prefix", PREFIX], capture_output=True, check=False)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'nodes x ranks':>13}  {'model':<10} {'strategy':<13} {'link':>6} {'measured s/step':>15} "
          f"{'predicted s/step':>16} {'error %':>8}")
    for r in rows:
        print(f"{r['nodes']:>7} x {r['ranks_per_node']:<3}  {r['model']:<10} {r['strategy']:<13} {r['rate']:>6} "
              f"{r['measured_s']:>15.4g} {r['predicted_s']:>16.4g} {r['error_pct']:>+8.1f}")
    errors = [abs(r["error_pct"]) for r in rows]
    if errors:
        print(f"within 10%: {sum(e <= 10 for e in errors)} of {len(errors)}; mean |error| "
              f"{statistics.mean(errors):.1f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"points": rows}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
