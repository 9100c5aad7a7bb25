#!/usr/bin/env python3
"""Gradients, live: transformers' BertFor* against `shardlab grads`, every parameter by name.

For each head (BertForSequenceClassification, BertForMaskedLM, BertForQuestionAnswering) a
small BERT is initialized by transformers (seeded, dropout 0) and saved with
save_pretrained; a seeded token batch (padding in the attention mask, token types, the
head's labels) goes to both sides. PyTorch: one forward + backward of the whole batch in
training mode. shardlab: `shardlab grads --dropout 0 --world-size W` (the batch split over
W simulated FSDP ranks). Every gradient is compared under its Hugging Face name, relative
to the tensor's largest |gradient|; fp32 tolerance 1e-5 (the summation orders differ). A
gradient that is zero analytically (attention key bias, QA head bias) must be below 1e-5 on
both sides.

Prints one line per (head, W) with the worst parameter; exit 0 when all are within
tolerance, 1 otherwise, 77 (ctest: skipped) without the peer environment.
Usage: grads.py --shardlab build/bin/shardlab [--worlds 1,4]
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors.torch import load_file

    from peer_common import HEADS, compare_tensors, small_bert, token_batch
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

TOLERANCE = 1e-5
B, T = 8, 16


def make_case(head, folder):
    model = small_bert(head, folder)
    batch = token_batch(folder, head, model.config, B, T, seed=2, token_types=True)
    model.train()
    model.zero_grad()
    model(**batch).loss.backward()
    theirs = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return os.path.join(folder, "batch.safetensors"), theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--worlds", default="1,4")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    failed = 0
    for head in HEADS:
        with tempfile.TemporaryDirectory() as d:
            batch, theirs = make_case(head, d)
            for world in (int(w) for w in a.worlds.split(",")):
                out = os.path.join(d, f"grads_{world}.safetensors")
                done = subprocess.run([a.shardlab, "grads", "--model", d, "--inputs", batch, "--out", out,
                                       "--dropout", "0", "--world-size", str(world)], capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"{head:14s} W={world}: shardlab grads failed (exit {done.returncode}):\n{done.stderr}")
                    failed += 1
                    continue
                ours = load_file(out)
                # Analytically zero gradients (the attention key bias; the QA head's bias, whose
                # softmax gradient sums to 0 over positions) must be rounding noise on both sides.
                worst, where, problems = compare_tensors(theirs, ours, "gradients", check_extra=True)
                ok = not problems and worst <= TOLERANCE
                print(f"{head:14s} W={world}: {len(theirs)} gradients, worst {worst:.2e} of the tensor's largest "
                      f"|gradient| ({where}): " + ("within 1e-5" if ok else "OUT OF TOLERANCE"))
                for p in problems[:5]:
                    print("  " + p)
                failed += not ok
    print("grads: " + ("every gradient matches transformers'" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
