#!/usr/bin/python3
"""Turn shardlab run folders into pictures and an index.html.

Usage:
    /usr/bin/python3 reports/shardlab_report.py DIR [--out OUTDIR]

DIR is a run folder (it holds metrics.json) or a folder of run folders (each immediate
subfolder with a metrics.json is one run of a sweep). The inputs are the files described
in reports/FORMATS.md and nothing else. Each picture is drawn only when its input exists:

    timeline.png        trace.json      per-(rank, stream) timeline of the last step
    memory.png          memory.csv      bytes per category over time (rank 0) + total per rank
    step_breakdown.png  metrics.json    compute / exposed communication / idle per step
    loss.png            loss.csv        loss per step, unsharded oracle overlaid
    scaling.png         metrics.json    (sweeps only) throughput and step time vs world
                                        size, step time and peak memory per strategy

For a sweep every run gets its own report in OUTDIR/<run folder>/ and OUTDIR gets the
comparison pictures (step_breakdown, loss, scaling) and an index.html linking the runs.
OUTDIR defaults to DIR.

Exit codes: 0 written; 2 bad input (a missing or malformed file, a DIR without any
metrics.json, an output path that cannot be written) with one message on stderr naming
the file and what is wrong; 1 when matplotlib/numpy are missing (run Debian's
/usr/bin/python3 with python3-matplotlib and python3-numpy installed).

NOTE [Determinism]: the same inputs give byte-identical PNGs and HTML. Figure sizes and
dpi depend only on the inputs, matplotlib's defaults are restored before drawing (a
user's matplotlibrc cannot change the pictures), PNGs carry no "Software" metadata, the
HTML holds no timestamps or absolute paths, and every list is sorted before it is drawn.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import math
import os
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

# Agg unless MPLBACKEND names another backend. matplotlib refuses to import at all with
# an unknown MPLBACKEND, so it is taken out of the environment around the import; an
# unknown or unusable one (an interactive backend on a headless machine) falls back to
# Agg with a warning.
_REQUESTED_BACKEND = os.environ.pop("MPLBACKEND", None)
try:
    import matplotlib

    try:
        matplotlib.use(_REQUESTED_BACKEND or "Agg")
    except (ValueError, ImportError):
        print(f"shardlab_report: warning: unknown MPLBACKEND={_REQUESTED_BACKEND!r}; using Agg", file=sys.stderr)
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        plt.switch_backend(matplotlib.get_backend())  # resolve it now, not at the first figure
    except ImportError:
        print(f"shardlab_report: warning: cannot use MPLBACKEND={_REQUESTED_BACKEND!r} here; using Agg",
              file=sys.stderr)
        plt.switch_backend("Agg")
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullFormatter
    import numpy as np

    _IMPORT_ERROR: ImportError | None = None
except ImportError as e:  # pragma: no cover - exercised only without the Debian packages
    _IMPORT_ERROR = e
finally:
    if _REQUESTED_BACKEND is not None:
        os.environ["MPLBACKEND"] = _REQUESTED_BACKEND

PROG = "shardlab_report"
DPI = 100
MAX_TIMELINE_RANKS = 16
MAX_MEMORY_RANKS = 8

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
GREY = "#999999"

STREAM_NAMES = {0: "compute", 1: "all_gather", 2: "reduce_scatter", 3: "all_reduce", 4: "other", 5: "fsdp",
                6: "host"}
STREAM_COLORS = {0: "#0072B2", 1: "#E69F00", 2: "#009E73", 3: "#CC79A7", 4: GREY}
FSDP_PHASE_COLOR = "#000000"

MEMORY_CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "comm_buffers", "other"]
MEMORY_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", GREY]
MEMORY_COLUMNS = ["rank", "step", "event", "time_s"] + MEMORY_CATEGORIES

BREAKDOWN_PARTS = [("compute", "compute", "#0072B2"),
                   ("exposed_comm", "exposed communication", "#D55E00"),
                   ("idle", "idle", "#BBBBBB")]
# Timing runs under a software stack other than ideal also report the device's time waiting
# for its host (metrics step_breakdown_s.host_bound); drawn only where a run has it.
HOST_BOUND_PART = ("host_bound", "host-bound (device waiting for its host)", "#009E73")


def breakdown_parts(metrics_list: list[dict]) -> list[tuple[str, str, str]]:
    """BREAKDOWN_PARTS, with the host-bound part when any of the runs reports it."""
    has_host = any("host_bound" in (m.get("step_breakdown_s") or {}) for m in metrics_list)
    return BREAKDOWN_PARTS + ([HOST_BOUND_PART] if has_host else [])


class InputError(Exception):
    """Bad input: `where` names the file (optionally file:line[:col]), `what` the problem."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: {what}")
        self.where = where
        self.what = what


# --------------------------------------------------------------------------------------
# Reading and validating the inputs
# --------------------------------------------------------------------------------------

def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_json(path: str) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(path, "no such file")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (byte {e.start}); expected JSON")
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}")
    if not text.strip():
        raise InputError(path, "empty file; expected a JSON object")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}:{e.colno}", f"invalid JSON: {e.msg}")
    except RecursionError:
        raise InputError(path, "JSON nested too deeply")


# A checker takes (value, key path) and raises InputError's `what` as a ValueError.
Checker = Callable[[Any, str], None]


def _fail(key: str, expected: str, v: Any) -> None:
    raise ValueError(f"key '{key}': expected {expected}, got {_type_name(v)}")


def _opt_num(v: Any, key: str) -> None:
    # nlohmann::json writes NaN/inf as null, so null stands for "no value" everywhere.
    if v is not None and not _is_num(v):
        _fail(key, "a number or null", v)


def _str(v: Any, key: str) -> None:
    if not isinstance(v, str):
        _fail(key, "a string", v)


def _int(v: Any, key: str) -> None:
    if not _is_int(v):
        _fail(key, "an integer", v)


def _pos_int(v: Any, key: str) -> None:
    if not _is_int(v):
        _fail(key, "an integer >= 1", v)
    if v < 1:
        raise ValueError(f"key '{key}': expected an integer >= 1, got {v}")


def _nonneg_int(v: Any, key: str) -> None:
    if not _is_int(v):
        _fail(key, "an integer >= 0", v)
    if v < 0:
        raise ValueError(f"key '{key}': expected an integer >= 0, got {v}")


def _bool(v: Any, key: str) -> None:
    if not isinstance(v, bool):
        _fail(key, "true or false", v)


def _list_of(item: Checker) -> Checker:
    def check(v: Any, key: str) -> None:
        if not isinstance(v, list):
            _fail(key, "a list", v)
        for i, x in enumerate(v):
            item(x, f"{key}[{i}]")
    return check


def _object(fields: dict[str, Checker], required: tuple[str, ...] = (),
            other: Checker | None = None) -> Checker:
    def check(v: Any, key: str) -> None:
        if not isinstance(v, dict):
            _fail(key, "an object", v)
        for name in required:
            if name not in v:
                raise ValueError(f"key '{key}': missing '{name}' (needs {', '.join(required)})")
        for name, x in v.items():
            if name in fields:
                fields[name](x, f"{key}.{name}")
            elif other is not None:
                other(x, f"{key}.{name}")
    return check


def _nullable(inner: Checker) -> Checker:
    def check(v: Any, key: str) -> None:
        if v is not None:
            inner(v, key)
    return check


# Known keys of metrics.json (FORMATS.md). Unknown keys are ignored; absent keys only
# switch off what depends on them; a present key of the wrong type is an error.
METRICS_SCHEMA: dict[str, Checker] = {
    "scenario": _str,
    "seed": _int,
    "backend": _str,
    "mode": _str,
    "world_size": _pos_int,
    "steps": _nonneg_int,
    "model": _object({"name": _str, "head": _str, "parameters": _nullable(_nonneg_int)}),
    "fsdp": _object({"sharding_strategy": _str, "backward_prefetch": _nullable(_str),
                     "devices_per_node": _nullable(_pos_int)}),
    "global_batch": _nonneg_int,
    "seq_len": _nonneg_int,
    "step_time_s": _object({"median": _opt_num, "min": _opt_num, "max": _opt_num,
                            "per_step": _list_of(_opt_num)}),
    "step_breakdown_s": _object({"compute": _opt_num, "exposed_comm": _opt_num, "idle": _opt_num,
                                 "host_bound": _opt_num},
                                required=("compute", "exposed_comm", "idle")),
    "host_bound_s_per_step": _list_of(_opt_num),
    "samples_per_s": _opt_num,
    "tokens_per_s": _opt_num,
    "tflops_per_device": _opt_num,
    "mfu": _opt_num,
    "exposed_comm_s": _opt_num,
    "exposed_comm_s_per_step": _list_of(_opt_num),
    "comm_bytes": _object({}, other=_opt_num),
    "peak_memory_bytes": _list_of(_nonneg_int),
    "host_transfer_bytes_per_step": _list_of(_nonneg_int),
    "peak_memory_bytes_by_category": _object({}, other=_nullable(_nonneg_int)),
    "peak_memory_breakdown_bytes": _object({"rank": _nonneg_int}, other=_nullable(_nonneg_int)),
    "loss": _list_of(_opt_num),
    "oracle_loss": _list_of(_opt_num),
    "grads_match_unsharded": _object({"bitwise": _bool, "within_tolerance": _bool,
                                      "max_grad_diff": _opt_num, "max_param_diff": _opt_num,
                                      "rtol": _opt_num, "atol": _opt_num}),
    "expect": _list_of(_object({"name": _str, "ok": _bool, "detail": _nullable(_str)},
                               required=("name", "ok"))),
    "status": _str,
    "failures": _list_of(_str),
    "traced_ranks": _list_of(_nonneg_int),
    "stack": _object({"device": _str, "network": _str, "cpu_offload": _bool, "offload_host": _str}),
    "provenance": _object({"shardlab_version": _str, "host": _str}),
}


def read_metrics(path: str) -> dict:
    m = read_json(path)
    if not isinstance(m, dict):
        raise InputError(path, f"expected a JSON object, got {_type_name(m)}")
    for key in sorted(METRICS_SCHEMA):
        if key in m:
            try:
                METRICS_SCHEMA[key](m[key], key)
            except ValueError as e:
                raise InputError(path, str(e))
    return m


@dataclass
class TraceEvent:
    rank: int
    stream: int
    start_us: float
    dur_us: float
    name: str
    cat: str
    step: int | None


@dataclass
class Trace:
    events: list[TraceEvent]
    rank_names: dict[int, str]
    stream_names: dict[tuple[int, int], str]


def read_trace(path: str) -> Trace:
    doc = read_json(path)
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise InputError(path, "missing key 'traceEvents'; expected {\"traceEvents\": [...], ...}")
        raw = doc["traceEvents"]
    elif isinstance(doc, list):  # the Chrome trace format also allows a bare array
        raw = doc
    else:
        raise InputError(path, f"expected a JSON object with 'traceEvents', got {_type_name(doc)}")
    if not isinstance(raw, list):
        raise InputError(path, f"'traceEvents' must be a list, got {_type_name(raw)}")

    events: list[TraceEvent] = []
    rank_names: dict[int, str] = {}
    stream_names: dict[tuple[int, int], str] = {}
    for i, ev in enumerate(raw):
        where = f"traceEvents[{i}]"

        def bad(what: str) -> InputError:
            return InputError(path, f"{where}: {what}")

        if not isinstance(ev, dict):
            raise bad(f"expected an object, got {_type_name(ev)}")
        ph = ev.get("ph")
        if not isinstance(ph, str):
            raise bad(f"'ph' must be a string such as \"X\" or \"M\", got {_type_name(ph)}")
        if ph not in ("X", "M"):
            continue  # other Chrome trace phases carry nothing this report draws
        pid, tid = ev.get("pid"), ev.get("tid")
        if not _is_int(pid) or pid < 0:
            raise bad(f"'pid' (the rank) must be an integer >= 0, got {pid!r}")
        args = ev.get("args", {})
        if not isinstance(args, dict):
            raise bad(f"'args' must be an object, got {_type_name(args)}")
        if ph == "M":
            name = ev.get("name")
            label = args.get("name")
            if name == "process_name" and isinstance(label, str):
                rank_names[pid] = label
            elif name == "thread_name" and isinstance(label, str) and _is_int(tid):
                stream_names[(pid, tid)] = label
            continue
        if not _is_int(tid) or tid < 0:
            raise bad(f"'tid' (the stream) must be an integer >= 0, got {tid!r}")
        ts, dur = ev.get("ts"), ev.get("dur")
        if not _is_num(ts) or not math.isfinite(ts):
            raise bad(f"complete event needs 'ts' (microseconds) as a finite number, got {ts!r}")
        if not _is_num(dur) or not math.isfinite(dur) or dur < 0:
            raise bad(f"complete event needs 'dur' (microseconds) as a number >= 0, got {dur!r}")
        name = ev.get("name", "")
        if not isinstance(name, str):
            raise bad(f"'name' must be a string, got {_type_name(name)}")
        cat = ev.get("cat", "")
        if not isinstance(cat, str):
            raise bad(f"'cat' must be a string, got {_type_name(cat)}")
        step = args.get("step")
        events.append(TraceEvent(pid, tid, float(ts), float(dur), name, cat,
                                 step if _is_int(step) else None))
    return Trace(events, rank_names, stream_names)


def _open_csv(path: str, required: list[str]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Returns (header, [(line number, row)]); checks the header has the required columns."""
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(path, "no such file")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (byte {e.start}); expected CSV")
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}")
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    header: list[str] | None = None
    try:
        for row in reader:
            if header is None:
                header = [c.strip() for c in row]
                continue
            if not row or all(not c.strip() for c in row):
                continue
            rows.append((reader.line_num, row))
    except csv.Error as e:
        raise InputError(f"{path}:{reader.line_num}", f"invalid CSV: {e}")
    if header is None:
        raise InputError(path, f"empty file; expected the header {','.join(required)}")
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(f"{path}:1", f"header lacks {', '.join(missing)}; expected "
                         f"{','.join(required)}, got {','.join(header)}")
    for line, row in rows:
        if len(row) != len(header):
            raise InputError(f"{path}:{line}", f"{len(row)} fields, the header has {len(header)}")
    return header, rows


@dataclass
class LossCurve:
    steps: list[int]
    loss: list[float]
    oracle: list[float | None]

    @property
    def has_oracle(self) -> bool:
        return any(v is not None for v in self.oracle)


def read_loss(path: str) -> LossCurve:
    header, rows = _open_csv(path, ["step", "loss"])
    ci = {c: header.index(c) for c in ("step", "loss", "oracle_loss") if c in header}
    out = LossCurve([], [], [])
    for line, row in rows:
        where = f"{path}:{line}"
        s = row[ci["step"]].strip()
        try:
            step = int(s)
        except ValueError:
            raise InputError(where, f"step {s!r} is not an integer; steps are 1-based integers")
        if step < 1:
            raise InputError(where, f"step {step}; steps are 1-based")
        if out.steps and step <= out.steps[-1]:
            raise InputError(where, f"step {step} after step {out.steps[-1]}; steps must increase")
        # An empty loss is a step without one (timing mode computes no math): skipped.
        loss = _csv_float(row[ci["loss"]], where, "loss", allow_empty=True)
        if loss is None:
            continue
        oracle = None
        if "oracle_loss" in ci:
            oracle = _csv_float(row[ci["oracle_loss"]], where, "oracle_loss", allow_empty=True)
        out.steps.append(step)
        out.loss.append(loss)
        out.oracle.append(oracle)
    return out


def _csv_float(s: str, where: str, column: str, allow_empty: bool) -> float | None:
    s = s.strip()
    if not s:
        if allow_empty:
            return None
        raise InputError(where, f"{column} is empty; expected a number")
    try:
        return float(s)
    except ValueError:
        raise InputError(where, f"{column} {s!r} is not a number")


@dataclass
class MemorySamples:
    rank: "np.ndarray"
    step: "np.ndarray"
    time_s: "np.ndarray"
    bytes: "np.ndarray"  # shape (samples, len(MEMORY_CATEGORIES))


def read_memory(path: str) -> MemorySamples:
    header, rows = _open_csv(path, MEMORY_COLUMNS)
    ci = {c: header.index(c) for c in MEMORY_COLUMNS}
    ranks, steps, times, values = [], [], [], []
    for line, row in rows:
        where = f"{path}:{line}"
        for col in ("rank", "step"):
            s = row[ci[col]].strip()
            if not s.isdigit():
                raise InputError(where, f"{col} {s!r}; expected an integer >= 0")
        t = _csv_float(row[ci["time_s"]], where, "time_s", allow_empty=False)
        if not math.isfinite(t):
            raise InputError(where, f"time_s {t}; expected a finite number of seconds")
        b = []
        for col in MEMORY_CATEGORIES:
            s = row[ci[col]].strip()
            if not s.isdigit():
                raise InputError(where, f"{col} {s!r}; expected a byte count (an integer >= 0)")
            b.append(int(s))
        ranks.append(int(row[ci["rank"]]))
        steps.append(int(row[ci["step"]]))
        times.append(t)
        values.append(b)
    return MemorySamples(np.array(ranks, dtype=np.int64), np.array(steps, dtype=np.int64),
                         np.array(times, dtype=np.float64),
                         np.array(values, dtype=np.float64).reshape(len(values), len(MEMORY_CATEGORIES)))


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------

@dataclass
class Run:
    folder: str          # the run folder's name (unique within a sweep)
    path: str            # the run folder
    metrics: dict
    label: str = ""      # scenario name (plus the folder when two runs share a name)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def has(self, name: str) -> bool:
        return os.path.isfile(self.file(name))

    @property
    def world_size(self) -> int | None:
        return self.metrics.get("world_size")

    @property
    def strategy(self) -> str | None:
        return (self.metrics.get("fsdp") or {}).get("sharding_strategy")

    @property
    def model(self) -> str | None:
        model = self.metrics.get("model") or {}
        return " ".join(str(model[k]) for k in ("name", "head") if model.get(k) is not None) or None

    @property
    def device(self) -> str | None:
        return (self.metrics.get("stack") or {}).get("device")


def find_runs(root: str) -> tuple[list[Run], bool]:
    """Returns (runs, is_sweep). Raises InputError when root holds no run."""
    if not os.path.exists(root):
        raise InputError(root, "no such directory")
    if not os.path.isdir(root):
        raise InputError(root, "not a directory; expected a run folder or a folder of run folders")
    if os.path.isfile(os.path.join(root, "metrics.json")):
        m = read_metrics(os.path.join(root, "metrics.json"))
        folder = os.path.basename(os.path.normpath(os.path.abspath(root)))
        run = Run(folder, root, m)
        run.label = m.get("scenario") or folder
        return [run], False
    try:
        names = sorted(os.listdir(root))
    except OSError as e:
        raise InputError(root, f"cannot list: {e.strerror}")
    runs = []
    for name in names:
        sub = os.path.join(root, name)
        if os.path.isdir(sub) and os.path.isfile(os.path.join(sub, "metrics.json")):
            runs.append(Run(name, sub, read_metrics(os.path.join(sub, "metrics.json"))))
    if not runs:
        raise InputError(root, "no metrics.json here or in any immediate subfolder; "
                         "expected a run folder written by `shardlab run` or a folder of them")
    counts: dict[str, int] = {}
    for r in runs:
        name = r.metrics.get("scenario") or r.folder
        counts[name] = counts.get(name, 0) + 1
    for r in runs:
        name = r.metrics.get("scenario") or r.folder
        r.label = name if counts[name] == 1 or name == r.folder else f"{name} ({r.folder})"
    runs.sort(key=lambda r: (r.world_size or 0, r.strategy or "", r.label, r.folder))
    return runs, True


# --------------------------------------------------------------------------------------
# Formatting helpers
# --------------------------------------------------------------------------------------

def byte_unit(max_bytes: float) -> tuple[str, float]:
    for name, scale in (("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10)):
        if max_bytes >= scale:
            return name, scale
    return "bytes", 1.0


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    unit, scale = byte_unit(n)
    return f"{n:.0f} bytes" if unit == "bytes" else f"{n / scale:.2f} {unit}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    if s == 0 or abs(s) >= 1:
        return f"{s:.3f} s"
    if abs(s) >= 1e-4:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.3f} µs"


def fmt_num(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "–"
    if _is_int(v):
        return f"{v:,}"
    if not math.isfinite(v) or abs(v) < 1000:
        return f"{v:.{digits}g}"
    return f"{v:,.0f}"


def pick_evenly(items: list[int], k: int) -> list[int]:
    """At most k items, evenly spaced, always keeping the first and the last."""
    if len(items) <= k:
        return list(items)
    n = len(items)
    idx = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in idx]


def describe_ranks(shown: list[int], total: int) -> str:
    if len(shown) == total:
        return f"all {total} ranks" if total != 1 else "rank " + str(shown[0])
    return f"{len(shown)} of {total} ranks shown ({', '.join(str(r) for r in shown)})"


def bitwise_equal(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)


def _style() -> None:
    """matplotlib's defaults plus a few readability settings; see NOTE [Determinism]."""
    matplotlib.rcdefaults()
    matplotlib.rcParams.update({
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),
        "font.size": 9,
        "axes.titlesize": 10,
        "figure.titlesize": 12,
        "legend.fontsize": 8,
        "svg.hashsalt": "shardlab",
        "path.simplify": False,
    })


def save_png(fig: "plt.Figure", path: str) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def write_atomic(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise InputError(folder, f"cannot create the output folder: {e.strerror}")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror}")


@dataclass
class Picture:
    file: str
    title: str
    caption: str


@dataclass
class Report:
    pictures: list[Picture] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # pictures skipped and why


# --------------------------------------------------------------------------------------
# 1. timeline.png
# --------------------------------------------------------------------------------------

def plot_timeline(trace: Trace, scenario: str, out_path: str) -> str | None:
    """Draws the last step (or the whole trace when it has no step numbers). Returns the
    caption, or None when there is nothing to draw."""
    evs = trace.events
    if not evs:
        return None
    steps = sorted({e.step for e in evs if e.step is not None})
    if len(steps) >= 2:
        # Only FSDP phases carry args.step; collectives do not (FORMATS.md). The window
        # therefore runs from the end of the previous step's last phase (so the leading
        # all-gathers of the last step are in it) to the end of the last step's phases,
        # stretched over untagged events that started inside it (the closing all-reduce
        # or barrier), by at most a quarter of its length.
        last = steps[-1]
        tagged = [e for e in evs if e.step == last]
        lo = min(e.start_us for e in tagged)
        hi = max(e.start_us + e.dur_us for e in tagged)
        prev_end = max(e.start_us + e.dur_us for e in evs if e.step is not None and e.step < last)
        if prev_end < lo:
            lo = prev_end
        tail = [e.start_us + e.dur_us for e in evs if e.step is None and lo <= e.start_us <= hi]
        if tail:
            hi = min(max(hi, max(tail)), hi + 0.25 * (hi - lo))
        what = f"step {last} (the last of steps {steps[0]}–{last})"
    else:
        lo = min(e.start_us for e in evs)
        hi = max(e.start_us + e.dur_us for e in evs)
        what = "the whole trace" if not steps else f"step {steps[0]} (the whole trace)"
    if hi <= lo:
        hi = lo + 1.0
    pad = 0.02 * (hi - lo)
    win_lo, win_hi = lo - pad, hi + pad

    all_ranks = sorted({e.rank for e in evs})
    shown = pick_evenly(all_ranks, MAX_TIMELINE_RANKS)
    shown_set = set(shown)
    streams = sorted({e.stream for e in evs})
    rows = [(r, s) for r in shown for s in streams]
    row_of = {rs: i for i, rs in enumerate(rows)}

    bars: dict[int, dict[str, list[tuple[float, float]]]] = {i: {"op": [], "fsdp": []} for i in range(len(rows))}
    for e in evs:
        if e.rank not in shown_set:
            continue
        a, b = max(e.start_us, lo), min(e.start_us + e.dur_us, hi)
        if b < a or (b == a and e.dur_us > 0):
            continue
        # Every event is a full-height bar; FSDP phases (which may enclose the ops of
        # their unit on the same stream) also get a thin band along the row's top edge.
        row_bars = bars[row_of[(e.rank, e.stream)]]
        row_bars["op"].append((a / 1e3, (b - a) / 1e3))
        if e.cat == "fsdp":
            row_bars["fsdp"].append((a / 1e3, (b - a) / 1e3))

    height = min(max(1.4 + 0.26 * len(rows), 3.0), 20.0)
    fig, ax = plt.subplots(figsize=(12, height))
    for i, (r, s) in enumerate(rows):
        color = STREAM_COLORS.get(s, OKABE_ITO[s % len(OKABE_ITO)])
        ops = sorted(bars[i]["op"])
        if ops:
            ax.broken_barh(ops, (i - 0.38, 0.76), facecolors=color, edgecolors="none")
        phases = sorted(bars[i]["fsdp"])
        if phases:
            ax.broken_barh(phases, (i - 0.46, 0.08), facecolors=FSDP_PHASE_COLOR, edgecolors="none")
    labels = []
    for r, s in rows:
        rank_label = trace.rank_names.get(r, f"rank {r}")
        stream_label = trace.stream_names.get((r, s), STREAM_NAMES.get(s, f"stream {s}"))
        labels.append(f"{rank_label} · {stream_label}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7 if len(rows) > 30 else 8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    for k in range(1, len(shown)):
        ax.axhline(k * len(streams) - 0.5, color="#444444", linewidth=0.6)
    ax.grid(axis="y", visible=False)
    ax.set_xlim(win_lo / 1e3, win_hi / 1e3)
    ax.set_xlabel("time since trace start (ms)")
    rank_note = describe_ranks(shown, len(all_ranks))
    ax.set_title(f"{scenario}: timeline of {what}; {rank_note}")
    handles = [Patch(facecolor=STREAM_COLORS.get(s, OKABE_ITO[s % len(OKABE_ITO)]),
                     label=STREAM_NAMES.get(s, f"stream {s}")) for s in streams]
    if any(e.cat == "fsdp" for e in evs):
        handles.append(Patch(facecolor=FSDP_PHASE_COLOR, label="FSDP phase (thin band above)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    save_png(fig, out_path)
    return (f"Per-rank streams over {what}, {(hi - lo) / 1e3:.3f} ms from "
            f"{lo / 1e3:.3f} ms; {rank_note}.")


# --------------------------------------------------------------------------------------
# 2. memory.png
# --------------------------------------------------------------------------------------

def plot_memory(mem: MemorySamples, scenario: str, out_path: str) -> str | None:
    if mem.rank.size == 0:
        return None
    all_ranks = sorted(int(r) for r in np.unique(mem.rank))
    first = all_ranks[0]
    span = float(mem.time_s.max() - mem.time_s.min()) if mem.time_s.size else 0.0
    t_unit, t_scale = ("s", 1.0) if span > 10.0 else ("ms", 1e3)
    totals = mem.bytes.sum(axis=1)
    b_unit, b_scale = byte_unit(float(totals.max()))

    def rank_rows(r: int) -> "np.ndarray":
        idx = np.nonzero(mem.rank == r)[0]
        return idx[np.argsort(mem.time_s[idx], kind="stable")]

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True)
    idx = rank_rows(first)
    x = mem.time_s[idx] * t_scale
    ys = [mem.bytes[idx, c] / b_scale for c in range(len(MEMORY_CATEGORIES))]
    top.stackplot(x, *ys, labels=MEMORY_CATEGORIES, colors=MEMORY_COLORS, step="post", linewidth=0)
    top.set_title(f"rank {first}: allocated bytes by category (stacked)")
    top.set_ylabel(f"allocated ({b_unit})")
    handles, labels = top.get_legend_handles_labels()  # legend top-down like the stack
    top.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    top.set_ylim(bottom=0)

    steps = mem.step[idx]
    changes = [i for i in range(1, len(steps)) if steps[i] != steps[i - 1]]
    if len(changes) <= 40:
        for i in changes:
            for ax in (top, bottom):
                ax.axvline(x[i], color="#444444", linewidth=0.6, linestyle=":")
            top.annotate(f"step {steps[i]}", (x[i], 1.0), xycoords=("data", "axes fraction"),
                         xytext=(2, -2), textcoords="offset points", va="top", fontsize=7)

    shown = pick_evenly(all_ranks, MAX_MEMORY_RANKS)
    styles = ["-", "--", "-.", ":"]
    for k, r in enumerate(shown):
        ridx = rank_rows(r)
        bottom.plot(mem.time_s[ridx] * t_scale, totals[ridx] / b_scale, drawstyle="steps-post",
                    color=OKABE_ITO[k % len(OKABE_ITO)], linestyle=styles[k % len(styles)],
                    linewidth=1.4, label=f"rank {r}")
    rank_note = describe_ranks(shown, len(all_ranks))
    bottom.set_title(f"total allocated per rank; {rank_note}")
    bottom.set_ylabel(f"allocated ({b_unit})")
    bottom.set_xlabel(f"time ({t_unit})")
    bottom.set_ylim(bottom=0)
    bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.suptitle(f"{scenario}: device memory over time (sampled at FSDP hooks)")
    fig.tight_layout()
    save_png(fig, out_path)
    peak = float(totals.max())
    return (f"Top: rank {first} by category. Bottom: total per rank ({rank_note}). "
            f"Highest sampled total: {fmt_bytes(peak)}.")


# --------------------------------------------------------------------------------------
# 3. step_breakdown.png
# --------------------------------------------------------------------------------------

def plot_step_breakdown(runs: list[Run], title: str, out_path: str) -> str | None:
    have = [r for r in runs if "step_breakdown_s" in r.metrics]
    if not have:
        return None
    kinds = breakdown_parts([r.metrics for r in have])
    parts = [[(r.metrics["step_breakdown_s"].get(k) or 0.0) * 1e3 for k, _, _ in kinds] for r in have]
    medians = [(r.metrics.get("step_time_s") or {}).get("median") for r in have]
    n = len(have)
    fig, ax = plt.subplots(figsize=(10, min(max(2.4 + 0.55 * n, 3.2), 20.0)))
    ypos = np.arange(n)
    left = np.zeros(n)
    for j, (_, label, color) in enumerate(kinds):
        width = np.array([p[j] for p in parts])
        ax.barh(ypos, width, left=left, height=0.6, color=color, label=label)
        left += width
    xmax = float(left.max()) if n else 1.0
    for i, med in enumerate(medians):
        if med is not None:
            ax.plot([med * 1e3, med * 1e3], [i - 0.38, i + 0.38], color="#000000", linewidth=2)
            xmax = max(xmax, med * 1e3)
    for i in range(n):
        text = " + ".join(f"{parts[i][j]:.3f}" for j in range(len(kinds))) + f" = {left[i]:.3f} ms"
        ax.annotate(text, (left[i], i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.plot([], [], color="#000000", linewidth=2, label="median step time")
    ax.set_yticks(ypos)
    ax.set_yticklabels([r.label for r in have])
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, xmax * 1.6 if xmax > 0 else 1.0)
    ax.set_xlabel("time per step, median (ms)")
    ax.grid(axis="y", visible=False)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    save_png(fig, out_path)
    skipped = [r.label for r in runs if r not in have]
    cap = ("Median step split into compute, communication not hidden behind compute (exposed), and idle "
           "time; the black tick is the median step time.")
    if skipped:
        cap += f" No step_breakdown_s in: {', '.join(skipped)}."
    return cap


# --------------------------------------------------------------------------------------
# 4. loss.png
# --------------------------------------------------------------------------------------

def compare_to_oracle(curve: LossCurve) -> str | None:
    pairs = [(a, b) for a, b in zip(curve.loss, curve.oracle) if b is not None]
    if not pairs:
        return None
    if len(pairs) == len(curve.loss) and all(bitwise_equal(a, b) for a, b in pairs):
        return f"loss bitwise equal to the unsharded oracle at all {len(pairs)} steps"
    diff = max(abs(a - b) for a, b in pairs)
    return f"max |loss − oracle| = {diff:.3g} over {len(pairs)} checked steps (not bitwise equal)"


def plot_loss(curves: list[tuple[str, LossCurve]], title: str, out_path: str) -> str | None:
    curves = [(label, c) for label, c in curves if c.steps]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(9, 5))
    notes = []
    single = len(curves) == 1
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    for k, (label, c) in enumerate(curves):
        color = OKABE_ITO[k % len(OKABE_ITO)]
        ax.plot(c.steps, c.loss, color=color, marker=markers[k % len(markers)], markersize=4 + (k % 3),
                linewidth=1.6, fillstyle="full" if k % 2 == 0 else "none",
                label="FSDP loss" if single else label)
        if c.has_oracle:
            xs = [s for s, o in zip(c.steps, c.oracle) if o is not None]
            ys = [o for o in c.oracle if o is not None]
            ax.plot(xs, ys, color=OKABE_ITO[5] if single else color, linestyle="--", marker="x",
                    markersize=6, linewidth=1.2,
                    label="unsharded oracle" if single else f"{label}: unsharded oracle")
        note = compare_to_oracle(c)
        if note:
            notes.append(note if single else f"{label}: {note}")
    if single and notes:
        ax.text(0.99, 0.97, notes[0], transform=ax.transAxes, ha="right", va="top", fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "#999999"})
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (global mean)")
    steps = sorted({s for _, c in curves for s in c.steps})
    if len(steps) <= 20:
        ax.set_xticks(steps)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    save_png(fig, out_path)
    if not notes:
        return "Loss per optimizer step (no oracle in loss.csv)."
    return "Loss per optimizer step; " + "; ".join(notes) + "."


# --------------------------------------------------------------------------------------
# 5. scaling.png
# --------------------------------------------------------------------------------------

def plot_scaling(runs: list[Run], out_path: str) -> str | None:
    worlds = {r.world_size for r in runs if r.world_size is not None}
    strategies = {r.strategy for r in runs if r.strategy is not None}
    by_world = len(worlds) > 1
    by_strategy = len(strategies) > 1
    if not by_world and not by_strategy:
        return None
    nrows = int(by_world) + int(by_strategy)
    fig, axes = plt.subplots(nrows, 2, figsize=(12, 4.6 * nrows), squeeze=False)
    strat_list = sorted(strategies)
    strat_color = {s: OKABE_ITO[i % len(OKABE_ITO)] for i, s in enumerate(strat_list)}
    row = 0
    caption = []

    def median_ms(r: Run) -> float | None:
        med = (r.metrics.get("step_time_s") or {}).get("median")
        return None if med is None else med * 1e3

    if by_world:
        ax_tp, ax_st = axes[row]
        row += 1
        groups = strat_list if by_strategy else [None]
        ideal_labelled = False
        for g in groups:
            members = [r for r in runs if r.world_size is not None and (g is None or r.strategy == g)]
            color = strat_color.get(g, OKABE_ITO[0]) if g is not None else OKABE_ITO[0]
            name = g if g is not None else "runs"
            tp = [(r.world_size, r.metrics.get("samples_per_s"), r.label) for r in members
                  if r.metrics.get("samples_per_s") is not None]
            st = [(r.world_size, median_ms(r), r.label) for r in members if median_ms(r) is not None]
            for ax, pts in ((ax_tp, tp), (ax_st, st)):
                if not pts:
                    continue
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker="o", label=name)
                for w, v, label in pts:
                    ax.annotate(label, (w, v), xytext=(4, 4), textcoords="offset points", fontsize=7)
            if len(tp) >= 2:
                w0, v0, _ = tp[0]
                ws = np.geomspace(w0, max(p[0] for p in tp), 64)  # smooth on a log axis too
                ax_tp.plot(ws, v0 * ws / w0, color=color, linestyle=":", linewidth=1,
                           label=None if ideal_labelled else "ideal linear scaling")
                ideal_labelled = True
        ws = sorted(worlds)
        for ax in (ax_tp, ax_st):
            if ws[-1] / ws[0] >= 4:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(ws)
            ax.set_xticklabels([str(w) for w in ws])
            ax.set_xlabel("world size (ranks)")
            ax.margins(x=0.12)
            ax.set_ylim(bottom=0)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(frameon=False, loc="best")
        ax_tp.set_ylabel("throughput (samples/s)")
        ax_tp.set_title("Throughput vs world size")
        ax_st.set_ylabel("median step time (ms)")
        ax_st.set_title("Median step time vs world size")
        caption.append(f"world sizes {', '.join(str(w) for w in ws)}")

    if by_strategy:
        ax_st, ax_mem = axes[row]
        members = sorted([r for r in runs if r.strategy is not None],
                         key=lambda r: (strat_list.index(r.strategy), r.world_size or 0, r.label))
        peaks = [max(r.metrics["peak_memory_bytes"]) if r.metrics.get("peak_memory_bytes") else None
                 for r in members]
        b_unit, b_scale = byte_unit(max([p for p in peaks if p is not None], default=0))
        x = np.arange(len(members))
        colors = [strat_color[r.strategy] for r in members]
        for ax, values, ylabel, title, fmt in (
                (ax_st, [median_ms(r) for r in members], "median step time (ms)",
                 "Median step time by sharding strategy", "{:.3f}"),
                (ax_mem, [None if p is None else p / b_scale for p in peaks], f"peak memory ({b_unit})",
                 "Peak memory by sharding strategy (max over ranks)", "{:.2f}")):
            heights = [0.0 if v is None else v for v in values]
            ax.bar(x, heights, color=colors, width=0.65)
            for xi, v in zip(x, values):
                ax.annotate("n/a" if v is None else fmt.format(v), (xi, 0 if v is None else v),
                            xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8)
            ax.set_xticks(x)
            ax.set_xticklabels([r.label for r in members], rotation=25, ha="right")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(axis="x", visible=False)
            ax.margins(y=0.15)
            ax.legend(handles=[Patch(facecolor=strat_color[s], label=s) for s in strat_list],
                      frameon=False, loc="best")
        caption.append(f"strategies {', '.join(strat_list)}")

    fig.suptitle(f"Comparison of {len(runs)} runs")
    fig.tight_layout()
    save_png(fig, out_path)
    return "Runs compared by " + " and ".join(caption) + "; runs are labelled by scenario name."


# --------------------------------------------------------------------------------------
# index.html
# --------------------------------------------------------------------------------------

def run_summary(m: dict) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []

    def add(key: str, value: str | None) -> None:
        if value is not None:
            rows.append((key, value))

    add("scenario", m.get("scenario"))
    add("status", m.get("status"))
    if "backend" in m or "mode" in m:
        add("backend / mode", f"{m.get('backend', '–')} / {m.get('mode', '–')}")
    add("seed", None if m.get("seed") is None else str(m["seed"]))
    add("world size", None if m.get("world_size") is None else str(m["world_size"]))
    add("steps", None if m.get("steps") is None else str(m["steps"]))
    model = m.get("model")
    if model:
        desc = " ".join(str(model[k]) for k in ("name", "head") if model.get(k) is not None)
        if model.get("parameters") is not None:
            desc += f" ({model['parameters']:,} parameters)"
        add("model", desc)
    stack = m.get("stack")
    if stack:
        add("device", stack.get("device"))
        add("network", stack.get("network"))
        if "cpu_offload" in stack:
            add("CPU offload", f"on, host {stack.get('offload_host', '–')}" if stack["cpu_offload"] else "off")
    prov = m.get("provenance")
    if prov:
        add("produced by", f"shardlab {prov.get('shardlab_version') or 'unknown'} on {prov.get('host') or 'unknown host'}")
    fsdp = m.get("fsdp")
    if fsdp:
        add("FSDP", ", ".join(f"{k}={fsdp[k] if isinstance(fsdp[k], str) else json.dumps(fsdp[k])}"
                              for k in sorted(fsdp)))
    if m.get("global_batch") is not None:
        add("global batch × seq_len", f"{m['global_batch']} × {m.get('seq_len', '–')}")
    st = m.get("step_time_s")
    if st:
        add("step time median (min–max)",
            f"{fmt_seconds(st.get('median'))} ({fmt_seconds(st.get('min'))} – {fmt_seconds(st.get('max'))})")
    bd = m.get("step_breakdown_s")
    if bd:
        add("step breakdown", ", ".join(f"{label} {fmt_seconds(bd.get(k))}" for k, label, _ in breakdown_parts([m])))
    for key, label in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s"),
                       ("tflops_per_device", "TFLOP/s per device")):
        if m.get(key) is not None:
            add(label, fmt_num(m[key]))
    if "mfu" in m:
        add("MFU", "unknown" if m["mfu"] is None else f"{100 * m['mfu']:.2f} %")
    cb = m.get("comm_bytes")
    if cb:
        known = ["all_gather", "reduce_scatter", "all_reduce", "broadcast"]
        order = [k for k in known if k in cb] + sorted(k for k in cb if k not in known)
        add("comm bytes per step and rank", ", ".join(f"{k} {fmt_bytes(cb[k])}" for k in order))
    pm = m.get("peak_memory_bytes")
    if pm:
        add("peak memory (max over ranks)", f"{fmt_bytes(max(pm))} (min over ranks {fmt_bytes(min(pm))})")
    pb = m.get("peak_memory_breakdown_bytes")
    if pb:
        cats = {c: v for c, v in pb.items() if c != "rank"}
        order = [c for c in MEMORY_CATEGORIES if c in cats] + sorted(c for c in cats if c not in MEMORY_CATEGORIES)
        add(f"at the highest peak (rank {pb.get('rank')})", ", ".join(f"{c} {fmt_bytes(cats[c])}" for c in order))
    pc = m.get("peak_memory_bytes_by_category")
    if pc:
        order = [c for c in MEMORY_CATEGORIES if c in pc] + sorted(c for c in pc if c not in MEMORY_CATEGORIES)
        add("category peaks (each at its own moment)", ", ".join(f"{c} {fmt_bytes(pc[c])}" for c in order))
    g = m.get("grads_match_unsharded")
    if g:
        verdict = ("bitwise equal" if g.get("bitwise") else
                   "within tolerance" if g.get("within_tolerance") else "MISMATCH")
        add("gradients vs unsharded", f"{verdict} (max grad diff {fmt_num(g.get('max_grad_diff'))}, "
                                      f"max param diff {fmt_num(g.get('max_param_diff'))})")
    return rows


HTML_STYLE = """body{font-family:sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f2}img{max-width:100%;border:1px solid #ddd}figure{margin:1.5em 0}
figcaption{color:#444;font-size:0.9em}.fail{color:#b00;font-weight:bold}.ok{color:#060}
pre{background:#f7f7f7;padding:0.6em;overflow-x:auto;font-size:0.85em}"""


def _html_page(title: str, body: list[str]) -> bytes:
    head = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            f"<title>{html.escape(title)}</title>", f"<style>{HTML_STYLE}</style>", "</head>", "<body>"]
    return ("\n".join(head + body + ["</body>", "</html>"]) + "\n").encode("utf-8")


def _figures_html(report: Report) -> list[str]:
    out = []
    for p in report.pictures:
        src = html.escape(p.file)
        out += [f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(p.title)}"></a>',
                f"<figcaption><b>{html.escape(p.title)}.</b> {html.escape(p.caption)}</figcaption></figure>"]
    if report.notes:
        out.append("<p>Not drawn:</p><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in report.notes) + "</ul>")
    return out


SUMMARY_TXT_LIMIT = 200_000


def write_run_index(run: Run, report: Report, outdir: str, parent_link: bool) -> None:
    m = run.metrics
    body = []
    if parent_link:
        body.append('<p><a href="../index.html">&larr; all runs</a></p>')
    body.append(f"<h1>shardlab run: {html.escape(run.label)}</h1>")
    status = m.get("status")
    if status is not None and status != "ok":
        body.append(f'<p class="fail">status: {html.escape(status)}</p>')
    body.append("<table>")
    for k, v in run_summary(m):
        body.append(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>")
    body.append("</table>")
    expects = m.get("expect") or []
    if expects:
        body.append("<h2>Expectations</h2><table><tr><th>expectation</th><th>verdict</th><th>detail</th></tr>")
        for e in expects:
            verdict = '<span class="ok">ok</span>' if e["ok"] else '<span class="fail">FAILED</span>'
            body.append(f"<tr><td>{html.escape(e['name'])}</td><td>{verdict}</td>"
                        f"<td>{html.escape(e.get('detail') or '')}</td></tr>")
        body.append("</table>")
    body.append("<h2>Pictures</h2>")
    body += _figures_html(report)
    if run.has("summary.txt"):
        try:
            with open(run.file("summary.txt"), "r", encoding="utf-8", errors="replace") as f:
                text = f.read(SUMMARY_TXT_LIMIT + 1)
        except OSError as e:
            raise InputError(run.file("summary.txt"), f"cannot read: {e.strerror}")
        if len(text) > SUMMARY_TXT_LIMIT:
            text = text[:SUMMARY_TXT_LIMIT] + "\n… (truncated; see summary.txt)"
        body += ["<h2>summary.txt</h2>", f"<pre>{html.escape(text)}</pre>"]
    write_atomic(os.path.join(outdir, "index.html"), _html_page(f"shardlab: {run.label}", body))


def write_sweep_index(runs: list[Run], report: Report, outdir: str) -> None:
    body = [f"<h1>shardlab sweep: {len(runs)} runs</h1>",
            "<table><tr><th>run</th><th>status</th><th>model</th><th>device</th><th>world size</th><th>strategy</th>"
            "<th>median step time</th><th>samples/s</th><th>peak memory</th></tr>"]
    for r in runs:
        m = r.metrics
        status = m.get("status", "–")
        cls = "ok" if status == "ok" else "fail"
        pm = m.get("peak_memory_bytes")
        body.append(
            f'<tr><td><a href="{html.escape(r.folder)}/index.html">{html.escape(r.label)}</a></td>'
            f'<td class="{cls}">{html.escape(status)}</td><td>{html.escape(r.model or "–")}</td>'
            f'<td>{html.escape(r.device or "–")}</td><td>{r.world_size if r.world_size is not None else "–"}</td>'
            f"<td>{html.escape(r.strategy or '–')}</td>"
            f"<td>{fmt_seconds((m.get('step_time_s') or {}).get('median'))}</td>"
            f"<td>{fmt_num(m.get('samples_per_s'))}</td><td>{fmt_bytes(max(pm) if pm else None)}</td></tr>")
    body.append("</table><h2>Comparison</h2>")
    body += _figures_html(report)
    write_atomic(os.path.join(outdir, "index.html"), _html_page("shardlab sweep", body))


# --------------------------------------------------------------------------------------
# Driving it
# --------------------------------------------------------------------------------------

def report_run(run: Run, outdir: str) -> Report:
    rep = Report()
    name = run.label

    def add(file: str, title: str, caption: str | None, input_name: str) -> None:
        if caption is None:
            rep.notes.append(f"{title}: {input_name} holds nothing to draw")
        else:
            rep.pictures.append(Picture(file, title, caption))

    if run.has("trace.json"):
        cap = plot_timeline(read_trace(run.file("trace.json")), name, os.path.join(outdir, "timeline.png"))
        add("timeline.png", "Timeline", cap, "trace.json")
    else:
        rep.notes.append("Timeline: no trace.json")
    if run.has("memory.csv"):
        cap = plot_memory(read_memory(run.file("memory.csv")), name, os.path.join(outdir, "memory.png"))
        add("memory.png", "Memory", cap, "memory.csv")
    else:
        rep.notes.append("Memory: no memory.csv")
    cap = plot_step_breakdown([run], f"{name}: step-time breakdown", os.path.join(outdir, "step_breakdown.png"))
    if cap is None:
        rep.notes.append("Step-time breakdown: metrics.json has no step_breakdown_s")
    else:
        rep.pictures.append(Picture("step_breakdown.png", "Step-time breakdown", cap))
    if run.has("loss.csv"):
        curve = read_loss(run.file("loss.csv"))
        cap = plot_loss([(name, curve)], f"{name}: training loss", os.path.join(outdir, "loss.png"))
        add("loss.png", "Loss", cap, "loss.csv")
    else:
        rep.notes.append("Loss: no loss.csv")
    return rep


def report_sweep(runs: list[Run], outdir: str) -> Report:
    rep = Report()
    for r in runs:
        sub = os.path.join(outdir, r.folder)
        write_run_index(r, report_run(r, sub), sub, parent_link=True)
    cap = plot_step_breakdown(runs, "Step-time breakdown per run", os.path.join(outdir, "step_breakdown.png"))
    if cap is None:
        rep.notes.append("Step-time breakdown: no run has step_breakdown_s")
    else:
        rep.pictures.append(Picture("step_breakdown.png", "Step-time breakdown", cap))
    curves = [(r.label, read_loss(r.file("loss.csv"))) for r in runs if r.has("loss.csv")]
    cap = plot_loss(curves, "Training loss per run", os.path.join(outdir, "loss.png")) if curves else None
    if cap is None:
        rep.notes.append("Loss: no run has a loss.csv with rows")
    else:
        rep.pictures.append(Picture("loss.png", "Loss", cap))
    cap = plot_scaling(runs, os.path.join(outdir, "scaling.png"))
    if cap is None:
        rep.notes.append("Scaling: the runs share one world size and one sharding strategy")
    else:
        rep.pictures.append(Picture("scaling.png", "Scaling", cap))
    return rep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Draw shardlab run outputs (reports/FORMATS.md) as PNGs plus an index.html.")
    parser.add_argument("dir", metavar="DIR", help="a run folder (with metrics.json) or a folder of run folders")
    parser.add_argument("--out", metavar="OUTDIR", help="where to write the pictures and index.html (default: DIR)")
    args = parser.parse_args(argv)
    if _IMPORT_ERROR is not None:
        print(f"{PROG}: error: {_IMPORT_ERROR}; run with Debian's /usr/bin/python3 "
              "(packages python3-matplotlib and python3-numpy)", file=sys.stderr)
        return 1
    outdir = args.out or args.dir
    try:
        runs, is_sweep = find_runs(args.dir)
        _style()
        if is_sweep:
            write_sweep_index(runs, report_sweep(runs, outdir), outdir)
        else:
            write_run_index(runs[0], report_run(runs[0], outdir), outdir, parent_link=False)
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    finally:
        plt.close("all")
    print(f"{PROG}: wrote {os.path.join(outdir, 'index.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
