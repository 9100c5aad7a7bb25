#!/usr/bin/env python3
"""Gradients, live: transformers' BertFor* against `shardlab grads`, every parameter by name.

For each head (BertForSequenceClassification, BertForMaskedLM, BertForQuestionAnswering) a
small BERT is initialized by transformers (seeded) and saved with save_pretrained; a seeded
token batch (padding in the attention mask, token types, the head's labels) goes to both
sides. PyTorch: one forward + backward of the whole batch in training mode. shardlab:
`shardlab grads --world-size W` (the batch split over W simulated FSDP ranks).

Two cases per head:
- dropout 0 (`--dropout 0`);
- dropout 0.1 with the same masks on both sides: shardlab writes the masks its step applies
  (`--dropout-masks`, one per Dropout module by its Hugging Face name) and PyTorch applies
  them in place of its own draws (eager attention, a forward hook per Dropout module). Every
  Dropout module of the PyTorch model must get exactly one mask, used exactly once.

Every gradient is compared under its Hugging Face name, relative to the tensor's largest
|gradient|; fp32 tolerance 1e-5 (the summation orders differ). A gradient that is zero
analytically (attention key bias, QA head bias) must be below 1e-5 on both sides.

Prints one line per (head, dropout, W) with the worst parameter; exit 0 when all are within
tolerance, 1 otherwise, 77 (ctest: skipped) without the peer environment.
Usage: grads.py --shardlab build/bin/shardlab [--worlds 1,4] [--dropout 0,0.1]
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
SEED = 5  # shardlab's --seed: keys its dropout masks


def with_masks(model, masks):
    """Makes every Dropout module of `model` multiply by its mask from `masks` (by module
    name) instead of drawing; returns the hook handles and the per-module call counts."""
    calls, handles = {}, []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Dropout):
            continue
        if name not in masks:
            raise KeyError(f"shardlab wrote no dropout mask for PyTorch's {name}")
        calls[name] = 0

        def hook(mod, inputs, output, name=name):
            calls[name] += 1
            return inputs[0] * masks[name]

        handles.append(module.register_forward_hook(hook))
    unused = sorted(set(masks) - set(calls))
    if unused:
        raise KeyError(f"shardlab wrote dropout masks for modules PyTorch has not: {unused[:5]}")
    return handles, calls


def pytorch_grads(head, folder, batch, masks):
    """One training forward + backward of the saved model; with `masks`, eager attention and
    shardlab's masks in every Dropout module."""
    kwargs = {"attn_implementation": "eager"} if masks is not None else {}
    model = HEADS[head].from_pretrained(folder, **kwargs)
    model.train()
    calls = {}
    if masks is not None:
        _, calls = with_masks(model, masks)
    model.zero_grad()
    model(**batch).loss.backward()
    twice = [n for n, c in calls.items() if c != 1]
    if twice:
        raise RuntimeError(f"dropout modules not called exactly once: {twice[:5]}")
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def run_shardlab(shardlab, folder, world, dropout, out, masks_out=None):
    cmd = [shardlab, "grads", "--model", folder, "--inputs", os.path.join(folder, "batch.safetensors"), "--out", out,
           "--dropout", str(dropout), "--world-size", str(world), "--seed", str(SEED)]
    if masks_out:
        cmd += ["--dropout-masks", masks_out]
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--worlds", default="1,4")
    ap.add_argument("--dropout", default="0,0.1")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    worlds = [int(w) for w in a.worlds.split(",")]
    failed = 0
    for head in HEADS:
        with tempfile.TemporaryDirectory() as d:
            model = small_bert(head, d)
            batch = token_batch(d, head, model.config, B, T, seed=2, token_types=True)
            for p in (float(x) for x in a.dropout.split(",")):
                masks = theirs = None
                for world in worlds:
                    out = os.path.join(d, f"grads_{world}.safetensors")
                    masks_out = os.path.join(d, f"masks_{world}.safetensors") if p > 0 else None
                    done = run_shardlab(a.shardlab, d, world, p, out, masks_out)
                    label = f"{head:14s} dropout {p:g} W={world}"
                    if done.returncode != 0:
                        print(f"{label}: shardlab grads failed (exit {done.returncode}):\n{done.stderr}")
                        failed += 1
                        continue
                    if p > 0:
                        mine = load_file(masks_out)
                        if masks is None:
                            masks = mine
                        elif any(not torch.equal(masks[k], mine[k]) for k in masks) or set(masks) != set(mine):
                            print(f"{label}: the dropout masks differ from W={worlds[0]}'s")
                            failed += 1
                            continue
                    if theirs is None:
                        theirs = pytorch_grads(head, d, batch, masks)
                    ours = load_file(out)
                    worst, where, problems = compare_tensors(theirs, ours, "gradients", check_extra=True)
                    ok = not problems and worst <= TOLERANCE
                    sites = f", {len(masks)} masks" if p > 0 else ""
                    print(f"{label}: {len(theirs)} gradients{sites}, worst {worst:.2e} of the tensor's largest "
                          f"|gradient| ({where}): " + ("within 1e-5" if ok else "OUT OF TOLERANCE"))
                    for line in problems[:5]:
                        print("  " + line)
                    failed += not ok
    print("grads: " + ("every gradient matches transformers'" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
