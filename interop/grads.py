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
    from safetensors.torch import load_file, save_file
    from transformers import (BertConfig, BertForMaskedLM, BertForQuestionAnswering,
                              BertForSequenceClassification)
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

TOLERANCE = 1e-5
HEADS = {"classification": BertForSequenceClassification, "mlm": BertForMaskedLM, "qa": BertForQuestionAnswering}
B, T = 8, 16


def make_case(head, folder):
    cfg = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, type_vocab_size=2,
                     num_labels=2 if head == "qa" else 3,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(1)
    model = HEADS[head](cfg)
    model.save_pretrained(folder, safe_serialization=True)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, cfg.vocab_size, (B, T), generator=g)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    types = (torch.arange(T)[None, :] >= (lengths[:, None] // 2)).long() * mask
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if head == "classification":
        batch["labels"] = torch.randint(0, cfg.num_labels, (B,), generator=g)
    elif head == "mlm":
        pick = (torch.rand((B, T), generator=g) < 0.3) & (mask == 1)
        batch["labels"] = torch.where(pick, ids, torch.full_like(ids, -100))
    else:
        batch["start_positions"] = torch.randint(0, T, (B,), generator=g)
        batch["end_positions"] = torch.randint(0, T, (B,), generator=g)
    path = os.path.join(folder, "batch.safetensors")
    save_file({k: v.contiguous() for k, v in batch.items()}, path)
    model.train()
    model.zero_grad()
    model(**batch).loss.backward()
    theirs = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return path, theirs


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
                worst, where, problems = 0.0, "", []
                for name, g in theirs.items():
                    if name not in ours:
                        problems.append(f"{name}: missing from shardlab's gradients")
                        continue
                    mine = ours[name].reshape(g.shape)
                    scale = float(g.abs().max())
                    if scale < 1e-6:
                        # Analytically zero (the attention key bias; the QA head's bias, whose softmax
                        # gradient sums to 0 over positions): both sides must be rounding noise.
                        if float(mine.abs().max()) > 1e-5:
                            problems.append(f"{name}: analytically zero, shardlab {float(mine.abs().max()):.2e}")
                        continue
                    diff = float((mine - g).abs().max()) / scale
                    if os.environ.get("GRADS_DEBUG") and diff > TOLERANCE:
                        print(f"    {name}: PyTorch {g.reshape(-1)[:4].tolist()}, shardlab {mine.reshape(-1)[:4].tolist()}")
                    if diff > worst:
                        worst, where = diff, name
                extra = sorted(set(ours) - set(theirs))
                if extra:
                    problems.append(f"shardlab has gradients PyTorch has not: {extra[:5]}")
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
