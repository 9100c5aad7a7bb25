#!/usr/bin/env python3
"""Predicts each published Gaudi training run in timing mode and prints the error.

The published figures are optimum-habana's regression baselines
(`train_samples_per_second`, which leaves the warm-up steps and graph compilation out):
bert-large SQuAD fine-tuning with run_qa.py on 1 and 8 Gaudi1 (HLS-1) and Gaudi2
(HLS-2) cards, DDP, bf16 autocast, HPU lazy mode. Each configuration is a scenario
under scenarios/published/ (its header says how it maps the run); this script runs
`shardlab run` on each in timing mode (a few seconds in all) and prints configuration,
published samples/s, predicted, and the error (predicted / published - 1); then the same
for published runs that are not in the reference (OTHERS: bert-base on Gaudi1), which
the model is checked against but was never built from.

Nothing in the model is fitted to these figures: the device profiles, the network and the
software stack (world.stack: pytorch_lazy, the published runs' HPU lazy mode) come from
vendor specifications, published micro-benchmarks and the framework's code path
(sim/profiles/README.md), so there is no leave-one-out table to print. The verdict line says how many points are
within the target (10%); --check makes the exit code say it too (1 when any point is
outside).

Usage: /usr/bin/python3 bench/validate_gaudi.py [--shardlab build/bin/shardlab] [--check]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(os.path.dirname(HERE), "scenarios", "published")

# (scenario, configuration, published samples/s: newer baseline, older baseline)
PUBLISHED = [
    ("bert_large_squad_ddp_1x_gaudi1.yaml", "Gaudi1 x1 (HLS-1), bert-large SQuAD, batch 24", 54.101, 52.704),
    ("bert_large_squad_ddp_8x_gaudi1.yaml", "Gaudi1 x8 (HLS-1), bert-large SQuAD, batch 24", 398.459, 397.945),
    ("bert_large_squad_ddp_1x_gaudi2.yaml", "Gaudi2 x1 (HLS-2), bert-large SQuAD, batch 32", 286.435, 278.791),
    ("bert_large_squad_ddp_8x_gaudi2.yaml", "Gaudi2 x8 (HLS-2), bert-large SQuAD, batch 32", 2150.333, 2069.857),
]
# Published runs that are not in the reference the model was built from (nothing in the
# model was set from them): (scenario, configuration, published samples/s, source).
OTHERS = [
    ("bert_base_squad_ddp_1x_gaudi1.yaml", "Gaudi1 x1 (HLS-1), bert-base SQuAD, batch 24", 155.037,
     "optimum-habana tests/baselines/bert_base_uncased.json (Gaudi1 release)"),
    ("bert_base_squad_ddp_8x_gaudi1.yaml", "Gaudi1 x8 (HLS-1), bert-base SQuAD, batch 24", 882.256,
     "optimum-habana tests/baselines/bert_base_uncased.json (Gaudi1 release)"),
]
TARGET = 0.10


def predict(shardlab: str, scenario: str, out: str) -> dict:
    done = subprocess.run([shardlab, "run", scenario, "--out", out], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("validate_gaudi.py: shardlab run %s exited %d:\n%s" % (scenario, done.returncode, done.stderr))
    with open(os.path.join(out, "metrics.json")) as f:
        m = json.load(f)
    if m.get("mode") != "timing":
        sys.exit("validate_gaudi.py: %s did not run in timing mode (mode %r)" % (scenario, m.get("mode")))
    return m


def point(shardlab: str, work: str, scenario: str, published: float) -> dict:
    """One scenario's prediction against its published samples/s: predicted, error
    (predicted / published - 1), step and exposed communication (s), MFU."""
    m = predict(shardlab, os.path.join(SCENARIOS, scenario), os.path.join(work, scenario))
    predicted = float(m["samples_per_s"])
    return {"predicted": predicted, "error": predicted / published - 1.0, "step": float(m["step_time_s"]["median"]),
            "comm": float(m["step_breakdown_s"]["exposed_comm"]), "mfu": float(m["mfu"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardlab", default=os.path.join(os.path.dirname(HERE), "build", "bin", "shardlab"))
    ap.add_argument("--check", action="store_true", help="exit 1 when a point is outside the target")
    args = ap.parse_args()
    if not os.access(args.shardlab, os.X_OK):
        print("validate_gaudi.py: no shardlab binary at %s (build first, or pass --shardlab)" % args.shardlab,
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="validate_gaudi_") as work:
        rows = [(label, newer, older, point(args.shardlab, work, scenario, newer))
                for scenario, label, newer, older in PUBLISHED]
        others = [(label, published, source, point(args.shardlab, work, scenario, published))
                  for scenario, label, published, source in OTHERS]
    print("Published Gaudi runs (optimum-habana baselines, newer figure) against the simulator, timing mode:")
    print()
    print("| configuration | published samples/s | predicted | error | step (s) | exposed comm (s) | MFU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, newer, older, p in rows:
        print("| %s | %.1f (older %.1f) | %.1f | %+.1f%% | %.4f | %.4f | %.2f |" %
              (label, newer, older, p["predicted"], 100 * p["error"], p["step"], p["comm"], p["mfu"]))
    inside = sum(1 for r in rows if abs(r[3]["error"]) <= TARGET)
    worst = max(rows, key=lambda r: abs(r[3]["error"]))
    print()
    print("within %d%%: %d of %d points; mean |error| %.1f%%; worst %+.1f%% (%s)" %
          (round(100 * TARGET), inside, len(rows), 100 * sum(abs(r[3]["error"]) for r in rows) / len(rows),
           100 * worst[3]["error"], worst[0]))
    print("fitted parameters: none (profiles and stacks from specifications; sim/profiles/README.md)")
    print()
    print("Published runs not in the reference (checked with the same model, never used to set it):")
    print()
    print("| configuration | published samples/s | predicted | error | step (s) | exposed comm (s) | source |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, published, source, p in others:
        print("| %s | %.1f | %.1f | %+.1f%% | %.4f | %.4f | %s |" %
              (label, published, p["predicted"], 100 * p["error"], p["step"], p["comm"], source))
    inside_others = sum(1 for o in others if abs(o[3]["error"]) <= TARGET)
    print()
    print("other published runs within %d%%: %d of %d points" % (round(100 * TARGET), inside_others, len(others)))
    return 1 if args.check and (inside < len(rows) or inside_others < len(others)) else 0


if __name__ == "__main__":
    sys.exit(main())
