"""Exit 0 when two runs' metrics.json have the same number of steps and losses equal within
a relative tolerance (an MPI replay of a simulated scenario), else 1 with the differences."""
import json
import sys


def main(a: str, b: str, rtol: float) -> int:
    la = json.load(open(a, encoding="utf-8"))["loss"]
    lb = json.load(open(b, encoding="utf-8"))["loss"]
    if len(la) != len(lb):
        print(f"{a} has {len(la)} steps, {b} has {len(lb)}")
        return 1
    worst = max((abs(x - y) / max(abs(y), 1e-30) for x, y in zip(la, lb)), default=0.0)
    print(f"{len(la)} steps, largest relative loss difference {worst:.3g} (tolerance {rtol:g})")
    return 0 if worst <= rtol else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
