"""Checks a run's output folder against what reports/FORMATS.md promises on every backend:
trace.json holds, for each of the first RANKS ranks, compute events with their tensors'
shapes, collectives, and FSDP phases (cat "fsdp") with unit, step and phase; metrics.json
records the stack, the provenance and the host<->device bytes of each step. With --failed N: the run failed, metrics.json keeps
each of the N failed ranks' errors, and the loss, memory and trace up to the failure are
there. Exit 0 when all holds, else 1 naming what does not.

    check_outputs.py DIR --ranks RANKS [--failed N] [--host-transfer zero|nonzero|batch-bound]

--host-transfer batch-bound is the device-resident bound of a BERT step without dropout
(docs/gaudi.md): rank 0 moves at most its input batch three times plus 4 KiB each step.
The batch is 4 int64 tensors of B*S tokens (ids, token types, positions, labels); it goes
up once, and comes down for the range checks of the forward and backward lookups and the
loss's labels. The 4 KiB hold the loss (row losses, the sum) and the ops' scalars. On the
Synapse test double it also requires the unsharded oracle's bitwise match.
"""
import argparse
import json
import os
import sys

# The phases every completed step has; a run that failed in its first steps may not have
# reached a reduction or an optimizer step.
PHASES_OF_A_STEP = {"unshard", "reshard", "reduce_grad", "reduce_grad_wait", "optimizer_step"}
PHASES_OF_A_FAILED_RUN = {"unshard"}


def batch_bound(metrics: dict) -> int:
    tokens = metrics["global_batch"] // metrics["world_size"] * metrics["seq_len"]
    return 3 * 4 * 8 * tokens + 4096


def check(folder: str, ranks: int, failed: int | None, host_transfer: str | None) -> list[str]:
    problems = []
    metrics = json.load(open(os.path.join(folder, "metrics.json"), encoding="utf-8"))
    moved = metrics.get("host_transfer_bytes_per_step")
    if not isinstance(moved, list):
        problems.append("metrics.json: host_transfer_bytes_per_step missing")
    elif failed is None and len(moved) != metrics.get("steps"):
        problems.append(f"metrics.json: host_transfer_bytes_per_step has {len(moved)} entries for {metrics.get('steps')} steps")
    elif host_transfer == "zero" and any(moved):
        problems.append(f"metrics.json: host_transfer_bytes_per_step {moved}, expected none")
    elif host_transfer == "nonzero" and not all(moved):
        problems.append(f"metrics.json: host_transfer_bytes_per_step {moved}, expected bytes every step")
    elif host_transfer == "batch-bound" and not metrics.get("grads_match_unsharded", {}).get("bitwise"):
        problems.append("metrics.json: grads_match_unsharded is not bitwise (the test double runs the cpu math)")
    elif host_transfer == "batch-bound" and not all(0 < m <= batch_bound(metrics) for m in moved):
        problems.append(f"metrics.json: host_transfer_bytes_per_step {moved}, expected 1..{batch_bound(metrics)} "
                        "(3 x the rank's batch + 4 KiB) every step")
    else:
        print(f"host_transfer_bytes_per_step: {moved}" +
              (f" (bound {batch_bound(metrics)})" if host_transfer == "batch-bound" else ""))
    for key in ("device", "network", "cpu_offload"):
        if key not in metrics.get("stack", {}):
            problems.append(f"metrics.json: stack.{key} missing")
    for key in ("shardlab_version", "host"):
        if not metrics.get("provenance", {}).get(key):
            problems.append(f"metrics.json: provenance.{key} missing or empty")
    if failed is not None:
        if metrics.get("status") == "ok":
            problems.append("metrics.json: status is ok for a failed run")
        if len(metrics.get("failures", [])) != failed:
            problems.append(f"metrics.json: {len(metrics.get('failures', []))} failures listed, expected {failed}")
        lines = open(os.path.join(folder, "loss.csv"), encoding="utf-8").read().splitlines()
        if len(lines) < 2:
            problems.append("loss.csv: no step before the failure")
    events = [e for e in json.load(open(os.path.join(folder, "trace.json"), encoding="utf-8"))["traceEvents"]
              if e.get("ph") == "X"]
    want = PHASES_OF_A_STEP if failed is None else PHASES_OF_A_FAILED_RUN
    for rank in range(ranks):
        mine = [e for e in events if e["pid"] == rank]
        compute = [e for e in mine if e["cat"] == "compute"]
        if not any(e.get("args", {}).get("shapes") for e in compute):
            problems.append(f"trace.json: rank {rank} has no compute event with shapes")
        if not any(e["cat"] == "comm" and e["args"].get("bytes", -1) >= 0 for e in mine):
            problems.append(f"trace.json: rank {rank} has no collective")
        fsdp = [e for e in mine if e["cat"] == "fsdp"]
        missing = want - {e["name"] for e in fsdp}
        if missing:
            problems.append(f"trace.json: rank {rank} has no fsdp event {sorted(missing)}")
        for e in fsdp:
            args = e.get("args", {})
            if not isinstance(args.get("unit"), int) or not isinstance(args.get("step"), int) or args["step"] < 1 \
                    or not args.get("phase"):
                problems.append(f"trace.json: rank {rank} fsdp event {e['name']} lacks unit/step/phase: {args}")
                break
        print(f"rank {rank}: {len(compute)} compute, {sum(e['cat'] == 'comm' for e in mine)} comm, "
              f"{len(fsdp)} fsdp events")
    if not any(e["pid"] == ranks - 1 for e in events):
        problems.append(f"trace.json: no events of rank {ranks - 1}")
    return problems


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--failed", type=int)
    p.add_argument("--host-transfer", choices=("zero", "nonzero", "batch-bound"),
                   help="what host_transfer_bytes_per_step must say about every step")
    a = p.parse_args()
    problems = check(a.folder, a.ranks, a.failed, a.host_transfer)
    for line in problems:
        print(line)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
