"""Exit 0 when two runs' metrics.json report the same final-parameter checksum (e.g. a
resumed run and an uninterrupted one), else 1 saying what differs."""
import json
import sys


def main(a: str, b: str) -> int:
    ha = json.load(open(a, encoding="utf-8")).get("final_params_fnv1a")
    hb = json.load(open(b, encoding="utf-8")).get("final_params_fnv1a")
    print(f"{a}: {ha}\n{b}: {hb}")
    return 0 if ha is not None and ha == hb else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
