#!/usr/bin/python3
"""Compare a Google Benchmark JSON run with a baseline, on ratios measured within each run.

Absolute times move with the machine, its load and its clock, so shardlab's benchmarks
judge our code by its ratio to a reference measured in the same run: MpiCommunicator
against raw MPI, CpuDevice::gemm against Eigen. Benchmarks are named
"<group>/<variant>/<size>[/...]"; for each (group, size) that has a reference variant
(default: raw_mpi, eigen), every other variant gets ratio = its time / the reference's
time (lower is better; the time Google Benchmark reports: manual/real time when the
benchmark uses it, else CPU time). A ratio that grew by more than --threshold
percent over the baseline's is a regression.

Usage:
  compare.py BASELINE.json NEW.json [--threshold PCT] [--reference VARIANT]... [--min-ratios N]
  compare.py --self-test BASELINE.json...

Exit codes: 0 no regression, 1 regression (or fewer than --min-ratios ratios compared),
2 bad input (unreadable JSON, wrong arguments). Standard library only.
"""

import argparse
import copy
import functools
import json
import statistics
import sys

DEFAULT_REFERENCES = ("raw_mpi", "eigen")
DEFAULT_THRESHOLD_PCT = 10.0

_NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


class InputError(Exception):
    """Bad input: reported with exit code 2."""


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: cannot read Google Benchmark JSON: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise InputError(f"{path}: no 'benchmarks' list; expected --benchmark_out_format=json output")
    data["_path"] = path  # for messages
    return data


def times_ns(data):
    """{(group, variant, size): time per iteration in ns}.

    Uses the 'median' aggregate when the run has repetitions, else the median of the
    iteration entries; skips errored runs and names that are not group/variant/size.
    """
    path = data.get("_path", "<json>")
    medians, iterations = {}, {}
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            continue
        name = b.get("run_name") or b.get("name", "")
        parts = name.split("/")
        if len(parts) < 3:
            continue
        key = (parts[0], parts[1], parts[2])
        # The time Google Benchmark itself reports: wall (manual or real) time when the
        # benchmark asked for it, else CPU time.
        field = "real_time" if ("/manual_time" in name or "/real_time" in name) else "cpu_time"
        unit = b.get("time_unit", "ns")
        if unit not in _NS_PER_UNIT or field not in b:
            raise InputError(f"{path}: benchmark '{b.get('name')}' has no usable {field}/time_unit")
        t = float(b[field]) * _NS_PER_UNIT[unit]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[key] = t
        else:
            iterations.setdefault(key, []).append(t)
    out = {k: statistics.median(v) for k, v in iterations.items()}
    out.update(medians)
    return out


def ratios(times, references=DEFAULT_REFERENCES):
    """{"group/variant/size": (ratio, reference variant)} for every non-reference variant."""
    out = {}
    for (group, variant, size), t in times.items():
        if variant in references:
            continue
        for ref in references:
            ref_t = times.get((group, ref, size))
            if ref_t:
                out[f"{group}/{variant}/{size}"] = (t / ref_t, ref)
                break
    return out


def _size_sort_key(name):
    group, variant, size = name.split("/")
    return (group, variant, int(size) if size.isdigit() else 0, size)


def compare(baseline, new, threshold_pct=DEFAULT_THRESHOLD_PCT, references=DEFAULT_REFERENCES):
    """Returns (rows, only_in_baseline, only_in_new); a row is
    (name, reference, base ratio, new ratio, change in %, regressed)."""
    base_r = ratios(times_ns(baseline), references)
    new_r = ratios(times_ns(new), references)
    rows = []
    for name in sorted(base_r.keys() & new_r.keys(), key=_size_sort_key):
        (b, ref), (n, _) = base_r[name], new_r[name]
        change = (n / b - 1.0) * 100.0
        rows.append((name, ref, b, n, change, change > threshold_pct))
    only_base = sorted(base_r.keys() - new_r.keys(), key=_size_sort_key)
    only_new = sorted(new_r.keys() - base_r.keys(), key=_size_sort_key)
    return rows, only_base, only_new


def print_table(rows, threshold_pct, out=sys.stdout):
    header = ("benchmark", "reference", "baseline", "new", "change", "status")
    lines = [header]
    for name, ref, b, n, change, regressed in rows:
        status = "REGRESSED" if regressed else ("improved" if change < -threshold_pct else "ok")
        lines.append((name, ref, f"{b:.3f}", f"{n:.3f}", f"{change:+.1f}%", status))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        print("  ".join(cell.ljust(widths[j]) if j < 2 else cell.rjust(widths[j]) for j, cell in enumerate(line)),
              file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths), file=out)
    print(f"(ratio = time / reference time in the same run; lower is better; "
          f"a rise above {threshold_pct:g}% fails)", file=out)


def run(baseline_path, new_path, threshold_pct, references, min_ratios):
    rows, only_base, only_new = compare(load(baseline_path), load(new_path), threshold_pct, references)
    print(f"baseline: {baseline_path}\nnew:      {new_path}")
    if rows:
        print_table(rows, threshold_pct)
    if only_base:
        print(f"not in the new run ({len(only_base)}): {', '.join(only_base)}")
    if only_new:
        print(f"not in the baseline ({len(only_new)}): {', '.join(only_new)}")
    regressed = [r[0] for r in rows if r[5]]
    if len(rows) < min_ratios:
        print(f"FAIL: {len(rows)} ratio(s) compared; expected at least {min_ratios} "
              f"(benchmark names must be <group>/<variant>/<size> with a reference variant among "
              f"{', '.join(references)})")
        return 1
    if regressed:
        print(f"FAIL: {len(regressed)} ratio(s) regressed by more than {threshold_pct:g}%: {', '.join(regressed)}")
        return 1
    print(f"OK: {len(rows)} ratio(s) within {threshold_pct:g}% of the baseline")
    return 0


def _scaled(data, factor, pick):
    """A copy of data whose real/cpu times are multiplied by factor where pick(variant)."""
    out = copy.deepcopy(data)
    for b in out["benchmarks"]:
        parts = (b.get("run_name") or b.get("name", "")).split("/")
        if len(parts) >= 3 and pick(parts[1]):
            for field in ("real_time", "cpu_time"):
                if field in b:
                    b[field] *= factor
    return out


def self_test(paths, references=DEFAULT_REFERENCES):
    """Checks compare() on real baseline files (ratios against `references`); returns an exit code."""
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    cmp = functools.partial(compare, references=references)
    is_ref = lambda v: v in references  # noqa: E731
    for path in paths:
        data = load(path)
        rows, only_base, only_new = cmp(data, data)
        check(len(rows) > 0, f"{path}: no ratios found (names or references out of step)")
        check(not any(r[5] for r in rows) and not only_base and not only_new,
              f"{path}: a file compared with itself must pass with every ratio paired")
        rows, _, _ = cmp(data, _scaled(data, 1.25, lambda v: not is_ref(v)))
        check(rows and all(r[5] for r in rows), f"{path}: a 25% slowdown of our code must be a regression")
        rows, _, _ = cmp(data, _scaled(data, 1.05, lambda v: not is_ref(v)))
        check(rows and not any(r[5] for r in rows), f"{path}: a 5% slowdown is within the 10% default")
        rows, _, _ = cmp(data, _scaled(data, 1.05, lambda v: not is_ref(v)), threshold_pct=2)
        check(rows and all(r[5] for r in rows), f"{path}: --threshold 2 must catch a 5% slowdown")
        rows, _, _ = cmp(data, _scaled(data, 1.25, is_ref))
        check(rows and not any(r[5] for r in rows), f"{path}: a slower reference is not our regression")
        same = cmp(data, data)[0]
        print(f"self-test: {path}: {len(same)} ratios")
        print_table(same, DEFAULT_THRESHOLD_PCT)
    for f in failures:
        print(f"self-test FAILED: {f}")
    if not failures:
        print("self-test OK")
    return 1 if failures else 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="BASELINE.json NEW.json (or, with --self-test, baselines)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD_PCT,
                   help="allowed rise of a ratio, in percent (default %(default)s)")
    p.add_argument("--reference", action="append", dest="references",
                   help=f"reference variant (repeatable; default {', '.join(DEFAULT_REFERENCES)})")
    p.add_argument("--min-ratios", type=int, default=1,
                   help="fail when fewer ratios than this are compared (default %(default)s)")
    p.add_argument("--self-test", action="store_true", help="check this script on the given baseline files (against --reference)")
    args = p.parse_args(argv)
    try:
        if args.self_test:
            return self_test(args.files, tuple(args.references or DEFAULT_REFERENCES))
        if len(args.files) != 2:
            p.error("expected BASELINE.json NEW.json")
        if args.threshold < 0:
            p.error("--threshold must be >= 0 (percent)")
        return run(args.files[0], args.files[1], args.threshold,
                   tuple(args.references or DEFAULT_REFERENCES), args.min_ratios)
    except InputError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
