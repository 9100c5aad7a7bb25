"""Exit 0 when two runs' metrics.json report the same simulated timeline — the same step
times, exposed communication and per-rank peak memory, exactly (e.g. one scenario in
numerics and in timing mode), else 1 saying what differs."""
import json
import sys

KEYS = (("step_time_s", "per_step"), ("exposed_comm_s",), ("peak_memory_bytes",))


def pick(metrics, path):
    for key in path:
        metrics = metrics.get(key) if isinstance(metrics, dict) else None
    return metrics


def main(a: str, b: str) -> int:
    ma = json.load(open(a, encoding="utf-8"))
    mb = json.load(open(b, encoding="utf-8"))
    same = True
    for path in KEYS:
        va, vb = pick(ma, path), pick(mb, path)
        ok = va is not None and va == vb
        same &= ok
        print(f"{'.'.join(path)}: {'same' if ok else 'DIFFERS'}: {va} | {vb}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
