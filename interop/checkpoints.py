#!/usr/bin/env python3
"""Checkpoints, live: a shardlab FULL_STATE_DICT loads into transformers' from_pretrained.

For each head, transformers initializes a small BertFor* (seeded, dropout 0) and saves it;
shardlab trains it on 4 FSDP ranks (FSDP1 and FSDP2) for 3 steps on a seeded batch file,
saving a FULL_STATE_DICT at step 2. transformers then loads step 2's model.safetensors
with from_pretrained: no missing, unexpected or mismatched keys, every parameter equal to
the file's bit for bit, and the loss it computes on the batch equal to the loss shardlab
reported for step 3 (the same weights on the same batch) within 1e-5 relative.

Exit 0 when all hold, 1 otherwise, 77 (ctest: skipped) without the peer environment.
Usage: checkpoints.py --shardlab build/bin/shardlab
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors.torch import load_file
    from transformers.utils import logging as hf_logging

    from peer_common import HEADS, small_bert, token_batch, train_on_files
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

B, T, W = 8, 16, 4


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    a = ap.parse_args()
    hf_logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    failed = 0
    for head in HEADS:
        for version in (1, 2):
            with tempfile.TemporaryDirectory() as d:
                src = os.path.join(d, "hf")
                batch = token_batch(src, head, small_bert(head, src).config, B, T, seed=3)
                ck = os.path.join(d, "ckpt")
                run = [a.shardlab] + train_on_files(src, head, T, B // W, W, 3, "name=peer_ckpt",
                                                    f"fsdp.fsdp_version={version}", "fsdp.state_dict_type=FULL_STATE_DICT",
                                                    f"checkpoint.dir={ck}", "checkpoint.every_steps=2") + [
                    "--out", os.path.join(d, "out")]
                done = subprocess.run(run, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"{head} FSDP{version}: shardlab run failed (exit {done.returncode}): {done.stderr.strip()}")
                    failed += 1
                    continue
                with open(os.path.join(d, "out", "metrics.json")) as f:
                    step3_loss = json.load(f)["loss"][2]
                dst = os.path.join(d, "loaded")
                os.makedirs(dst)
                shutil.copy(os.path.join(src, "config.json"), dst)
                shutil.copy(os.path.join(ck, "step-00000002", "model.safetensors"), dst)
                model, info = HEADS[head].from_pretrained(dst, output_loading_info=True)
                problems = [f"{k}: {v}" for k, v in info.items() if v and k != "error_msgs"] + list(info["error_msgs"])
                saved = load_file(os.path.join(dst, "model.safetensors"))
                for name, p in model.state_dict().items():
                    if name in saved and not torch.equal(p, saved[name].reshape(p.shape).to(p.dtype)):
                        problems.append(f"{name} differs from the file")
                model.train()
                with torch.no_grad():
                    theirs = float(model(**batch).loss)
                rel = abs(theirs - step3_loss) / max(abs(step3_loss), 1e-12)
                if rel > 1e-5:
                    problems.append(f"loss on the batch: transformers {theirs:.8f}, shardlab step 3 {step3_loss:.8f}")
                print(f"{head:14s} FSDP{version}: from_pretrained loads step 2 ({len(saved)} tensors); loss "
                      f"{theirs:.8f} vs shardlab's step 3 {step3_loss:.8f} (relative {rel:.1e}): "
                      + ("OK" if not problems else "; ".join(problems)))
                failed += bool(problems)
    print("checkpoints: " + ("every FULL_STATE_DICT loads into transformers" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
