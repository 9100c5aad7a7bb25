#!/usr/bin/python3
"""Validate the simulator against real Open MPI runs on this machine (issue 6, "Validation
against reality").

1. Calibrate once per process count P of the sweep: `shardlab calibrate` writes a device
   profile; it runs under `mpiexec -n P` with `--topology-out`, so that every process
   measures at once (sharing the cores as the real runs will) and the MPI collectives are
   timed on P ranks and fitted as a `switch` topology — per-call overhead, α, β, γ, under
   the simulator's own schedules (NOTE [Calibrate with the run's process count] and NOTE
   [Fitting the collective model] in calibrate/calibrate.h); with one process, the per-call
   overhead and the one-rank reduce_scatter's copy rate.
2. For every point (processes × model × sharding strategy): run the same scenario for real
   (`shardlab run --backend mpi` under `mpiexec -n P`) and in the simulator with the
   calibrated profiles (`--set world.device=… --set world.topology=…`). A process count's
   --calibrations calibrations and --repeats real runs take turns (real repeat i of its
   points right after calibration i), so that both sample the same minutes of a machine
   whose speed drifts.
3. Compare steady-state step times, measured (wall clock on rank 0) against predicted
   (simulated time, the median step). Measured is the least disturbed stretch of the
   --repeats real runs, as calibrate keeps each op's least disturbed window: each run's
   steps are cut into windows of at least --window-steps steps and --window-s seconds and
   the smallest window median counts (--statistic best-window; or the fastest repeat's
   median, best-repeat; or the median of all repeats' steps, pooled). The MLP's real runs
   take --mlp-steps steps (its steps take tens of µs), the others --steps. The first
   --warmup steps are left out (a real run takes several steps to settle: the first one
   initializes, the next few still fault in fresh pages while the allocator caches fill);
   at least one step is always kept. (The full gradients and parameters a run gathers for
   its result come after its last step, FsdpTrainOptions::gather_results.)

4. Per launch: calibration i's own profiles (warm-up + 3 simulated steps) against real
   repeat i, which ran right after it. Points with more processes than cores
   (oversubscribed: 4 on the 2-core reference VM) are reported as the median of those
   launch errors with their spread — there the scheduler alone moves a raw MPI all_gather
   by ±15% between launches — and are not held to the 10% target; the others are.
5. --comm-points (default 2:bert-mini) adds points on no more processes than cores whose
   step is mostly communication: a larger model at batch 1 x sequence 16 per rank
   (bert-mini's 11 M parameters: MB-sized all-gathers and reductions).

Prints a table (procs, model, strategy, measured s/step, predicted s/step, error %, the
spread % of the real repeats: max − min of their medians over the pooled median, the
error against the pooled median, and the launches' errors: median (min … max)) and
writes the same as JSON (--json). Accuracy is reported, never enforced: the exit code is 0
when every run worked, 1 when a run or the calibration failed, 2 for bad arguments.
`--table-from RESULT.json` reprints the table of a saved result (exit 1 when it is not a
complete result file); `--self-test` checks the step statistics on made-up runs.

Thread variables (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS = 1) are set here, for the children
only, so that ranks and BLAS threads never fight for cores. As root, Open MPI also needs
OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); they are set when running as root. Standard library only.

Usage (from the repository root, after `cmake --build --preset dev`):
  bench/validate_sim.py --json validate_sim.json
  bench/validate_sim.py --procs 2 --models mlp --strategies FULL_SHARD --steps 2 --repeats 1 --json smoke.json
  bench/validate_sim.py --table-from validate_sim.json
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SHARDLAB = os.path.join(REPO, "build", "dev", "bin", "shardlab")
# What the project's MPI ctests use (CMakePresets.json: SHARDLAB_MPIEXEC_PREFLAGS): more
# ranks than cores need --oversubscribe, and yielding while idle lets the others run.
MPIEXEC_FLAGS = ["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
TARGET_PCT = 10.0
RESULT_SCHEMA = "shardlab.validate_sim/1"


class BrokenRun(Exception):
    """A calibration or a run that failed: exit code 1."""


def child_env():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["OPENBLAS_NUM_THREADS"] = "1"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def run(cmd, what, log_path, timeout):
    """Runs cmd; its output goes to log_path. Raises BrokenRun on failure."""
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), timeout=timeout,
                               check=False)
        except subprocess.TimeoutExpired:
            raise BrokenRun(f"{what}: timed out after {timeout} s (log: {log_path})") from None
        except OSError as e:
            raise BrokenRun(f"{what}: cannot start {cmd[0]}: {e}") from None
    if p.returncode != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = "".join(f.readlines()[-15:])
        raise BrokenRun(f"{what}: exit code {p.returncode} (log: {log_path})\n{tail}")


def mpiexec_cmd(args, procs):
    return [args.mpiexec, "-n", str(procs)] + MPIEXEC_FLAGS


def write_scenario(path, args):
    """The validation scenario: synthetic data, AdamW, one node of `procs` devices (set per run)."""
    text = f"""# Written by bench/validate_sim.py: one scenario, run for real and in the simulator.
name: validate_sim
description: real Open MPI step time against the simulator's prediction with calibrated profiles
seed: 0
model:
  preset: bert-tiny
  head: mlm
data:
  kind: synthetic
  batch_size_per_rank: {args.batch_size_per_rank}
  seq_len: {args.seq_len}
train:
  steps: {args.steps}
  precision: fp32
  optimizer: {{name: adamw, lr: 1.0e-3}}
fsdp:
  sharding_strategy: FULL_SHARD
  auto_wrap_policy: transformer
  transformer_layer_cls_to_wrap: [BertLayer]
  backward_prefetch: BACKWARD_PRE
world:
  backend: sim
  mode: numerics
  nodes: 1
  devices_per_node: 1
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def kept_steps(per_step, warmup):
    """The steady-state steps: drops the first `warmup` steps, keeping at least one step."""
    return list(per_step)[min(warmup, len(per_step) - 1):]


def best_window(steps, min_steps, min_s):
    """The least disturbed stretch of a run: its steps cut, in order, into windows of at
    least `min_steps` steps and `min_s` seconds (a short tail joins the last window), and
    the smallest of the windows' medians. One window (a short run) is the run's median."""
    windows, current = [], []
    for t in steps:
        current.append(t)
        if len(current) >= min_steps and sum(current) >= min_s:
            windows.append(current)
            current = []
    if current:
        if windows:
            windows[-1].extend(current)
        else:
            windows.append(current)
    return min(statistics.median(w) for w in windows)


def read_step_times(out_dir, what):
    path = os.path.join(out_dir, "metrics.json")
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
        per_step = [float(t) for t in m["step_time_s"]["per_step"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BrokenRun(f"{what}: no step times in {path}: {e}") from None
    if not per_step or any(not (t > 0) for t in per_step):
        raise BrokenRun(f"{what}: bad step times in {path}: {per_step}")
    return per_step, m.get("step_breakdown_s")


def median_profile(profiles):
    """Field by field median of profiles of one shape (JSON objects): numbers take their
    median (the lower middle one for integers, which stay integers), objects merge key by
    key, lists of one length element by element (a measured collective table's rows:
    the same sizes, the median time), anything else (names, flags) comes from the first."""
    first = profiles[0]
    if isinstance(first, dict):
        keys = list(first) + [k for p in profiles[1:] for k in p if k not in first]
        return {k: median_profile([p[k] for p in profiles if k in p]) for k in keys}
    if isinstance(first, list) and all(isinstance(p, list) and len(p) == len(first) for p in profiles):
        return [median_profile([p[i] for p in profiles]) for i in range(len(first))]
    if isinstance(first, bool) or not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in profiles):
        return first
    if all(isinstance(p, int) for p in profiles):
        return statistics.median_low(profiles)
    return statistics.median(profiles)


def device_speed(profile):
    """How undisturbed a calibration was: the geometric mean of its matrix, vector and
    memory rates (a calibration during outside load measures all of them lower)."""
    rates = (profile["matrix_flops_per_s"]["fp32"], profile["vector_flops_per_s"]["fp32"],
             profile["memory_bytes_per_s"])
    return (rates[0] * rates[1] * rates[2]) ** (1.0 / 3.0)


def calibrate(args, work, procs, after_each=None):
    """Profiles measured with `procs` processes: (device path, topology path, log path).
    calibrate runs --calibrations K times (one calibration is one sample of a shared
    machine); with --calibration-pick median (the default) the profiles are the field by
    field medians of the K; with fastest, those of the least disturbed calibration
    (device_speed), the device and topology of the same run. On the reference VM the median
    was steadier: one run with fastest had 6/12 points within 10% and mean |error| 18.8%
    (its 2-process network fit was the fastest of three, and 2-process MLP steps came out
    half the measured), five runs with median 3–7/12 and 12.7–15.9%."""
    dev = os.path.join(work, f"device_{procs}p.json")
    topo = os.path.join(work, f"topology_{procs}p.json")
    log = os.path.join(work, f"calibrate_{procs}p.log")
    samples = {dev: [], topo: []}
    each = []  # (device, topology) of every calibration, for the per-launch comparison
    with open(log, "w", encoding="utf-8") as merged_log:
        for i in range(args.calibrations):
            one_dev = os.path.join(work, f"device_{procs}p_{i + 1}.json")
            one_topo = os.path.join(work, f"topology_{procs}p_{i + 1}.json")
            one_log = os.path.join(work, f"calibrate_{procs}p_{i + 1}.log")
            # Every process measures at once (NOTE [Calibrate with the run's process count]) and
            # fits the collectives' per-call overhead (NOTE [Collective overhead]), α, β and γ.
            cmd = mpiexec_cmd(args, procs) + [args.shardlab, "calibrate", "--out", one_dev, "--topology-out", one_topo]
            run(cmd, f"calibrate ({procs} processes, {i + 1} of {args.calibrations})", one_log, args.timeout)
            each.append((one_dev, one_topo))
            for merged, one in ((dev, one_dev), (topo, one_topo)):
                try:
                    with open(one, encoding="utf-8") as f:
                        samples[merged].append(json.load(f))
                except (OSError, ValueError) as e:
                    raise BrokenRun(f"calibrate ({procs} processes) wrote no readable {one}: {e}") from None
            with open(one_log, encoding="utf-8", errors="replace") as f:
                for line in f:
                    merged_log.write(line)
                    if line.startswith(("device:", "MPI:")):
                        print(f"  calibrated, {procs} process{'es' if procs > 1 else ''}: {line.strip()}", flush=True)
            if after_each is not None:
                after_each(i)
    fastest = max(range(len(samples[dev])), key=lambda i: device_speed(samples[dev][i]))
    for merged, profiles in samples.items():
        if args.calibration_pick == "fastest":
            profile = dict(profiles[fastest])
            if len(profiles) > 1:
                profile["description"] = (f"{profile.get('description', '')} (calibration {fastest + 1} of "
                                          f"{len(profiles)}, the least disturbed)")
        else:
            profile = median_profile(profiles)
            if len(profiles) > 1:
                profile["description"] = f"{profile.get('description', '')} (median of {len(profiles)} calibrations)"
        with open(merged, "w", encoding="utf-8") as f:
            json.dump(profile, f, indent=2)
            f.write("\n")
    return dev, topo, log, each


# A point: (processes, model, strategy, shape). shape None: the scenario's batch and
# sequence; else (samples per rank, sequence length) — the communication-bound points.
COMM_SHAPE = (1, 16)


def point_tag(point):
    procs, model, strategy, shape = point
    return f"{procs}p_{model}_{strategy}" + (f"_b{shape[0]}s{shape[1]}" if shape else "")


def point_label(point):
    procs, model, strategy, shape = point
    return f"{procs}p {model}{f' {shape[0]}x{shape[1]}' if shape else ''} {strategy}"


def point_overrides(point):
    procs, model, strategy, shape = point
    sets = ["--set", f"world.devices_per_node={procs}", "--set", f"model.preset={model}",
            "--set", f"fsdp.sharding_strategy={strategy}"]
    if shape:
        sets += ["--set", f"data.batch_size_per_rank={shape[0]}", "--set", f"data.seq_len={shape[1]}"]
    return sets


def oversubscribed(procs):
    """More processes than cores: the scheduler, not the program, decides much of the time
    (a raw MPI all_gather moved by ±15% between launches, bench/README.md)."""
    return procs > (os.cpu_count() or 1)


def real_step_count(args, model):
    """Steps of a real run: --mlp-steps for the MLP, whose step takes tens of µs (40 steps
    would time 1–5 ms of a machine whose speed changes over 0.1–1 s, bench/README.md);
    --steps otherwise. The simulated run always takes --steps: it is deterministic, and its
    steady state repeats from the first steps after warm-up."""
    return args.mlp_steps if model == "mlp" else args.steps


def real_run(args, work, scenario, point, repeat):
    procs, model = point[0], point[1]
    tag = point_tag(point)
    out = os.path.join(work, "real", f"{tag}_r{repeat}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = (mpiexec_cmd(args, procs) + [args.shardlab, "run", scenario, "--backend", "mpi"] +
           point_overrides(point) + ["--set", f"train.steps={real_step_count(args, model)}", "--out", out])
    run(cmd, f"real run {tag} (repeat {repeat + 1})", out + ".log", args.timeout)
    per_step, _ = read_step_times(out, f"real run {tag}")
    return per_step, out


def simulated_run(args, work, scenario, point, dev, topo, launch=None):
    """The point in the simulator with the profiles `dev`, `topo`: the median profiles
    (launch None, --steps steps) or calibration `launch`'s (warm-up + 3 steps: the
    simulator is deterministic and its steady state repeats)."""
    tag = point_tag(point) + ("" if launch is None else f"_c{launch + 1}")
    out = os.path.join(work, "sim", tag)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.shardlab, "run", scenario] + point_overrides(point)
    cmd += ["--set", f"world.device={dev}", "--set", f"world.topology={topo}"]
    if launch is not None:
        cmd += ["--set", f"train.steps={args.warmup + 3}"]
    cmd += ["--out", out]
    run(cmd, f"simulated run {tag}", out + ".log", args.timeout)
    per_step, breakdown = read_step_times(out, f"simulated run {tag}")
    return per_step, breakdown, out


def compare(args, point, real, sim, profiles, launch_sims):
    procs, model, strategy, shape = point
    real_steps = [steps for steps, _ in real]
    kept = [kept_steps(steps, args.warmup) for steps in real_steps]
    sim_steps, breakdown, sim_out = sim
    pooled = statistics.median([t for steps in kept for t in steps])
    predicted = statistics.median(kept_steps(sim_steps, args.warmup))
    # How far the real runs of this point disagree with each other: the spread of the
    # per-repeat medians around the pooled one (0 with one repeat). An error inside it
    # cannot be told from measurement noise.
    repeat_medians = [statistics.median(steps) for steps in kept]
    spread = (max(repeat_medians) - min(repeat_medians)) / pooled * 100.0
    # The measured time compared: the least disturbed stretch of the real runs (the fastest
    # window's median, or the fastest repeat's median), as calibrate keeps each op's least
    # disturbed window — both describe the machine without other load. On the reference VM
    # the same run switches between a fast and a 1.6–2x slower state every 0.1–1 s for
    # host-bound code (bench/README.md); the pooled median of all repeats is reported next to it.
    def measure(runs):
        if args.statistic == "best-window":
            return min(best_window(steps, args.window_steps, args.window_s) for steps in runs)
        if args.statistic == "best-repeat":
            return min(statistics.median(steps) for steps in runs)
        return statistics.median([t for steps in runs for t in steps])

    measured = measure(kept)
    # Per launch: calibration i's profiles against real repeat i, which ran right after it.
    launch_errors = []
    for i, launch_sim in enumerate(launch_sims):
        if i < len(kept):
            m = measure([kept[i]])
            pr = statistics.median(kept_steps(launch_sim, args.warmup))
            launch_errors.append((pr - m) / m * 100.0)
    return {
        "procs": procs,
        "model": model,
        "strategy": strategy,
        "shape": list(shape) if shape else None,
        "oversubscribed": oversubscribed(procs),
        "measured_s": measured,
        "predicted_s": predicted,
        "error_pct": (predicted - measured) / measured * 100.0,
        "launch_errors_pct": launch_errors,
        "pooled_median_s": pooled,
        "pooled_error_pct": (predicted - pooled) / pooled * 100.0,
        "repeat_spread_pct": spread,
        "repeat_medians_s": repeat_medians,
        "measured_per_step_s": real_steps,
        "predicted_per_step_s": sim_steps,
        "predicted_breakdown_s": breakdown,
        "device_profile": profiles[procs][0],
        "topology_profile": profiles[procs][1],
        "real_out": [out for _, out in real],
        "sim_out": sim_out,
    }


def launch_text(p):
    """The per-launch errors of a point: median (min … max), or '-' without them."""
    errs = p.get("launch_errors_pct") or []
    if not errs:
        return "-"
    return f"{statistics.median(errs):+.1f} ({min(errs):+.1f} … {max(errs):+.1f})"


def format_table(points):
    """The table and its verdict. Points with no more processes than cores are held to the
    target; oversubscribed ones (more processes than cores) are reported as the median of
    their launches' errors with the spread (NOTE in bench/README.md: the scheduler alone
    moves a raw MPI collective by ±15% between launches there), not held to it."""
    lines = [f"{'procs':>5}  {'model':<16} {'strategy':<11} {'measured s/step':>15} {'predicted s/step':>16} "
             f"{'error %':>8} {'spread %':>9} {'pooled error %':>15}  launches: error % median (min … max)"]
    for p in points:
        over = p.get("oversubscribed", False)
        mark = "" if abs(p["error_pct"]) <= TARGET_PCT or over else "  (miss)"
        # Absent in results written before they existed.
        spread = p.get("repeat_spread_pct")
        spread_text = f"{spread:>9.1f}" if spread is not None else f"{'-':>9}"
        pooled = p.get("pooled_error_pct")
        pooled_text = f"{pooled:>+15.1f}" if pooled is not None else f"{'-':>15}"
        shape = p.get("shape")
        model = p["model"] + (f" {shape[0]}x{shape[1]}" if shape else "")
        lines.append(f"{p['procs']:>5}  {model:<16} {p['strategy']:<11} {p['measured_s']:>15.6f} "
                     f"{p['predicted_s']:>16.6f} {p['error_pct']:>+8.1f} {spread_text} {pooled_text}  "
                     f"{launch_text(p)}{'  (oversubscribed)' if over else ''}{mark}")
    held = [p for p in points if not p.get("oversubscribed", False)]
    if held:
        errs = [abs(p["error_pct"]) for p in held]
        within = sum(e <= TARGET_PCT for e in errs)
        lines.append(f"{within}/{len(held)} points with no more processes than cores within ±{TARGET_PCT:g}%; "
                     f"mean |error| {statistics.mean(errs):.1f}%, max |error| {max(errs):.1f}%")
        pooled = [abs(p["pooled_error_pct"]) for p in held if p.get("pooled_error_pct") is not None]
        if pooled:
            lines.append(f"against the pooled median of all repeats: {sum(e <= TARGET_PCT for e in pooled)}/"
                         f"{len(pooled)} within ±{TARGET_PCT:g}%, mean |error| {statistics.mean(pooled):.1f}%")
    over = [p for p in points if p.get("oversubscribed", False)]
    if over:
        meds = [statistics.median(p["launch_errors_pct"]) for p in over if p.get("launch_errors_pct")]
        lines.append(f"{len(over)} oversubscribed point(s), reported not held to the target: median launch error "
                     + (f"within ±{TARGET_PCT:g}% for {sum(abs(m) <= TARGET_PCT for m in meds)}/{len(meds)}"
                        if meds else "not measured (results written before launches were compared)"))
    return "\n".join(lines)


def table_from(path):
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        if result.get("schema") != RESULT_SCHEMA:
            raise ValueError(f"schema is {result.get('schema')!r}, expected {RESULT_SCHEMA!r}")
        points = result["points"]
        if not points:
            raise ValueError("no points")
        for p in points:
            for key in ("procs", "model", "strategy", "measured_s", "predicted_s", "error_pct"):
                if key not in p:
                    raise ValueError(f"a point has no {key!r}: {p}")
            if not (p["measured_s"] > 0 and p["predicted_s"] > 0):
                raise ValueError(f"a point has a non-positive time: {p}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"validate_sim: {path}: not a complete result file: {e}", file=sys.stderr)
        return 1
    print(format_table(points))
    return 0


def self_test():
    """Checks the step statistics on made-up runs; returns an exit code."""
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    # A run that is fast for its first 60 steps, then twice as slow.
    run = [1e-3] * 60 + [2e-3] * 60
    check(best_window(run, 20, 0.0) == 1e-3, "best-window must find the fast stretch")
    check(best_window(run[::-1], 20, 0.0) == 1e-3, "... wherever it lies in the run")
    check(best_window(run, 200, 0.0) == statistics.median(run), "one window (a short run) is the run's median")
    # Windows must also last min_s: 20 steps of 1 ms are too short for 0.05 s, so each
    # window takes 50 steps and the one that straddles the change has a fast median.
    check(best_window([1e-3] * 30 + [2e-3] * 70, 20, 0.05) == 1e-3, "the duration decides the window length")
    check(best_window([2e-3] * 70 + [1e-3] * 5, 20, 0.05) == 2e-3,
          "a short fast tail joins the last window and does not count on its own")
    check(best_window([5e-3], 20, 0.02) == 5e-3, "a single step is its own window")
    check(kept_steps([9, 1, 2, 3, 4], 1) == [1, 2, 3, 4], "warm-up is left out, the last step kept")
    check(kept_steps([4], 5) == [4], "at least one step is kept")
    merged = median_profile([{"a": 1, "b": {"c": 1.0}, "n": "x"}, {"a": 3, "b": {"c": 3.0}, "n": "y"},
                             {"a": 2, "b": {"c": 2.0}, "n": "z"}])
    check(merged == {"a": 2, "b": {"c": 2.0}, "n": "x"}, f"median_profile field by field: {merged}")
    table = median_profile([{"t": [[64, 10], [4096, 30]]}, {"t": [[64, 14], [4096, 20]]}, {"t": [[64, 12], [4096, 50]]}])
    check(table == {"t": [[64, 12], [4096, 30]]}, f"median_profile row by row: {table}")
    # Oversubscribed points are reported by their launches' median, not held to the target.
    held = {"procs": 2, "model": "mlp", "strategy": "NO_SHARD", "measured_s": 1.0, "predicted_s": 1.05,
            "error_pct": 5.0, "launch_errors_pct": [4.0, 6.0, 5.0], "oversubscribed": False}
    over = dict(held, procs=4, error_pct=-14.0, launch_errors_pct=[-14.0, -3.0, 2.0, -8.0, 11.0], oversubscribed=True)
    table = format_table([held, over])
    check("1/1 points with no more processes than cores within" in table, f"the verdict counts held points: {table}")
    check("(miss)" not in table, f"an oversubscribed point is not a miss: {table}")
    check(launch_text(over) == "-3.0 (-14.0 … +11.0)", f"launch median and spread: {launch_text(over)}")
    check("median launch error within ±10% for 1/1" in table, f"oversubscribed verdict: {table}")
    for f in failures:
        print(f"self-test FAILED: {f}")
    if not failures:
        print("self-test OK")
    return 1 if failures else 0


def parse_list(text, convert=str):
    return [convert(x) for x in text.split(",") if x]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shardlab", default=DEFAULT_SHARDLAB, help="the shardlab binary (default: %(default)s)")
    ap.add_argument("--mpiexec", default="mpiexec", help="Open MPI's launcher (default: %(default)s)")
    ap.add_argument("--json", help="where to write the result (JSON)")
    ap.add_argument("--work", help="folder for profiles, run outputs and logs (default: a temporary folder, kept)")
    ap.add_argument("--procs", default="1,2,4", help="process counts (default: %(default)s)")
    ap.add_argument("--models", default="mlp,bert-tiny", help="model presets (default: %(default)s)")
    ap.add_argument("--strategies", default="FULL_SHARD,NO_SHARD", help="sharding strategies (default: %(default)s)")
    ap.add_argument("--comm-points", default="2:bert-mini",
                    help="PROCS:MODEL pairs run at batch 1 x sequence 16 per rank, where the step is mostly "
                         "communication (with every --strategies; a PROCS not in --procs is skipped; '' for none; "
                         "default: %(default)s)")
    ap.add_argument("--steps", type=int, default=40,
                    help="training steps per run, but the MLP's real runs (default: %(default)s)")
    ap.add_argument("--mlp-steps", type=int, default=5000,
                    help="training steps of the MLP's real runs, whose steps take tens of µs (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="leading steps left out of the comparison (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="real runs per point, taking turns with the calibrations "
                    "(default: %(default)s)")
    ap.add_argument("--calibrations", type=int, default=5, help="calibrations per process count (default: %(default)s)")
    ap.add_argument("--calibration-pick", choices=("fastest", "median"), default="median",
                    help="which profiles to use: the least disturbed calibration's, or the field by field median "
                         "(default: %(default)s)")
    ap.add_argument("--statistic", choices=("best-window", "best-repeat", "pooled"), default="best-window",
                    help="the measured step time compared: the smallest median of a window of steps (of any "
                         "repeat), the fastest repeat's median step, or the median of all repeats' steps pooled "
                         "(the pooled error is reported beside it; default: %(default)s)")
    ap.add_argument("--window-steps", type=int, default=20,
                    help="best-window: a window has at least this many steps (default: %(default)s)")
    ap.add_argument("--window-s", type=float, default=0.02,
                    help="best-window: ... and lasts at least this many seconds (default: %(default)s)")
    ap.add_argument("--batch-size-per-rank", type=int, default=2, help="samples per rank (default: %(default)s)")
    ap.add_argument("--seq-len", type=int, default=64, help="BERT sequence length (default: %(default)s)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds allowed per command (default: %(default)s)")
    ap.add_argument("--table-from", metavar="RESULT.json", help="reprint the table of a saved result and exit")
    ap.add_argument("--self-test", action="store_true", help="check the step statistics on made-up runs and exit")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.table_from:
        return table_from(args.table_from)
    try:
        procs_list = parse_list(args.procs, int)
        models = parse_list(args.models)
        strategies = parse_list(args.strategies)
    except ValueError as e:
        ap.error(f"--procs: {e}")
    comm_points = []
    for pair in parse_list(args.comm_points):
        procs, _, model = pair.partition(":")
        if not procs.isdigit() or int(procs) < 1 or not model:
            ap.error(f"--comm-points: '{pair}' is not PROCS:MODEL; allowed: a comma-separated list such as "
                     "2:bert-mini, or '' for none")
        comm_points.append((int(procs), model))
    if not procs_list or any(p < 1 for p in procs_list) or not models or not strategies:
        ap.error("--procs (positive integers), --models and --strategies need at least one value each")
    if args.steps < 1 or args.mlp_steps < 1 or args.repeats < 1 or args.calibrations < 1 or args.warmup < 0:
        ap.error("--steps, --mlp-steps, --repeats and --calibrations must be >= 1, --warmup >= 0")
    if args.window_steps < 1 or not args.window_s >= 0:
        ap.error("--window-steps must be >= 1 and --window-s >= 0")
    if not os.access(args.shardlab, os.X_OK):
        ap.error(f"--shardlab {args.shardlab}: not an executable (build it: cmake --build --preset dev)")
    if shutil.which(args.mpiexec) is None:
        ap.error(f"--mpiexec {args.mpiexec}: not found")

    work = args.work or tempfile.mkdtemp(prefix="shardlab_validate_sim_")
    for sub in ("", "real", "sim"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    scenario = os.path.join(work, "validate_sim.yaml")
    write_scenario(scenario, args)
    started = time.monotonic()
    load_before = os.getloadavg()
    if load_before[0] > (os.cpu_count() or 1):
        print(f"validate_sim: warning: load average {load_before[0]:.1f} on {os.cpu_count()} cores before the "
              "start; other jobs will disturb the measured times", file=sys.stderr)
    points = []
    profiles = {}
    try:
        grid = [(procs, model, strategy, None) for procs in procs_list for model in models for strategy in strategies]
        # Communication-bound points on no more processes than cores: a larger model at a
        # small batch, so that the step is mostly its collectives' time.
        grid += [(procs, model, strategy, COMM_SHAPE) for procs, model in comm_points for strategy in strategies
                 if procs in procs_list]
        real = {point: [] for point in grid}
        for procs in procs_list:
            # Calibrations and real runs of a process count take turns: real repeat i of
            # its points right after calibration i (repeats beyond the calibrations after
            # the last one). The machine's speed drifts over minutes (bench/README.md), so
            # the profiles' median and the measured runs come from the same stretch of time
            # rather than minutes apart. A repeat goes round all of the process count's
            # points, so that a burst of load from elsewhere lands on one run of several
            # points rather than on every run of one point.
            mine = [point for point in grid if point[0] == procs]

            def real_repeat(repeat, mine=mine):
                if repeat < args.repeats:
                    for point in mine:
                        real[point].append(real_run(args, work, scenario, point, repeat))

            profiles[procs] = calibrate(args, work, procs, real_repeat)
            for repeat in range(args.calibrations, args.repeats):
                real_repeat(repeat)
        for point in grid:
            dev, topo, _, each = profiles[point[0]]
            sim = simulated_run(args, work, scenario, point, dev, topo)
            launch_sims = [simulated_run(args, work, scenario, point, d, t, launch=i)[0] for i, (d, t) in enumerate(each)]
            p = compare(args, point, real[point], sim, profiles, launch_sims)
            points.append(p)
            print(f"  {point_label(point)}: measured {p['measured_s']:.6f} s, predicted {p['predicted_s']:.6f} s "
                  f"({p['error_pct']:+.1f}%); launches {launch_text(p)}", flush=True)
    except BrokenRun as e:
        print(f"validate_sim: {e}", file=sys.stderr)
        return 1
    calibrations = {}
    for procs, (dev, topo, log, _) in profiles.items():
        entry = {}
        for key, path in (("device", dev), ("topology", topo)):
            if path:
                with open(path, encoding="utf-8") as f:
                    entry[key] = json.load(f)
        with open(log, encoding="utf-8", errors="replace") as f:  # with the per-collective fit
            entry["output"] = [line.rstrip("\n") for line in f if not line.startswith("$ ")]
        calibrations[str(procs)] = entry
    result = {
        "schema": RESULT_SCHEMA,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"name": platform.node(), "cpus": os.cpu_count(), "machine": platform.machine(),
                 "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "shardlab": args.shardlab,
        "work": work,
        "config": {"steps": args.steps, "mlp_steps": args.mlp_steps, "warmup": args.warmup, "repeats": args.repeats,
                   "comm_points": args.comm_points, "comm_shape": list(COMM_SHAPE),
                   "calibrations": args.calibrations, "calibration_pick": args.calibration_pick,
                   "batch_size_per_rank": args.batch_size_per_rank, "seq_len": args.seq_len,
                   "mpiexec_flags": MPIEXEC_FLAGS,
                   "step_statistic": "median of steps warmup+1..steps-1; real: " + {
                       "best-window": f"the smallest median of a window of >= {args.window_steps} steps and "
                                      f">= {args.window_s:g} s, over all repeats",
                       "best-repeat": "the fastest repeat's",
                       "pooled": "pooled over repeats"}[args.statistic]},
        "target_pct": TARGET_PCT,
        "calibration": calibrations,
        "points": points,
        "wall_s": time.monotonic() - started,
    }
    print()
    print(format_table(points))
    print(f"(work folder: {work}; {result['wall_s']:.0f} s)")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.json)
        print(f"result: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
