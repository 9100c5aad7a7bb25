#!/usr/bin/python3
"""shardlab against PyTorch on this machine: the same BERT checkpoint and batch, one
forward + backward (fp32, training mode, dropout 0), gradients written to a file.

Usage (as root it installs Debian's python3-torch when `import torch` fails; the tests and
CI never run this):
    /usr/bin/python3 bench/vs_pytorch.py [--shardlab build/bin/shardlab] [--preset bert-base]
        [--batch 8] [--seq 128] [--runs 3] [--work DIR]

Both sides do the same work in a fresh process, timed from the outside (wall clock): read
config.json + model.safetensors and the batch, forward + backward of BertForMaskedLM
(labels on 15% of the tokens, -100 elsewhere), write every gradient as F32 safetensors.
shardlab is `shardlab grads --dropout 0` (one simulated rank); PyTorch is a plain
torch.nn model with Hugging Face's parameter names and BertForMaskedLM's math (exact-erf
GELU, LayerNorm eps 1e-12, decoder tied to the word embeddings). Runs alternate
(shardlab, PyTorch, shardlab, ...) and each side's best of --runs is reported, with the
ratio PyTorch time / shardlab time (> 1: shardlab is faster) and the largest gradient
difference relative to each tensor's largest |gradient|. The forward + backward alone is
compared too (PyTorch: timed around it in the script; shardlab: the step's wall time that
`shardlab grads` prints). PyTorch runs as installed: Debian's build starts one intra-op
thread here and its OpenBLAS GEMMs use every core (two intra-op threads made it slower,
contending with OpenBLAS's); shardlab's pool uses every core.

The checkpoint is shardlab's seeded initialization (`shardlab run ... checkpoint.dir`),
the batch seeded synthetic tokens: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

PRESETS = {  # hidden, layers, heads, intermediate (BERT's published sizes)
    "bert-tiny": (128, 2, 2, 512),
    "bert-mini": (256, 4, 4, 1024),
    "bert-small": (512, 4, 8, 2048),
    "bert-base": (768, 12, 12, 3072),
    "bert-large": (1024, 24, 16, 4096),
}

PYTORCH_SIDE = r'''
import ctypes, json, sys, time
import numpy as np
import torch
try:
    blas_threads = ctypes.CDLL("libblas.so.3").openblas_get_num_threads()
except (OSError, AttributeError):
    blas_threads = None
sys.path.insert(0, sys.argv[4])  # bench/: this script's safetensors reader and writer
from vs_pytorch import read_safetensors, write_safetensors

load = lambda path: {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(path).items()}
model_dir, batch_path, out_path = sys.argv[1:4]
cfg = json.load(open(model_dir + "/config.json"))
p = {k: torch.nn.Parameter(v) for k, v in load(model_dir + "/model.safetensors").items()}
batch = load(batch_path)
ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
H, A = cfg["hidden_size"], cfg["num_attention_heads"]
d = H // A
B, T = ids.shape
t0 = time.perf_counter()
ln = lambda x, pre: torch.nn.functional.layer_norm(x, (H,), p[pre + ".weight"], p[pre + ".bias"], 1e-12)
lin = lambda x, pre: torch.nn.functional.linear(x, p[pre + ".weight"], p[pre + ".bias"])
gelu = lambda x: torch.nn.functional.gelu(x)
e = "bert.embeddings."
x = p[e + "word_embeddings.weight"][ids] + p[e + "position_embeddings.weight"][:T] + p[e + "token_type_embeddings.weight"][torch.zeros_like(ids)]
x = ln(x, e + "LayerNorm")
bias = (1.0 - mask.to(torch.float32))[:, None, None, :] * torch.finfo(torch.float32).min
for l in range(cfg["num_hidden_layers"]):
    pre = "bert.encoder.layer.%d." % l
    heads = lambda t: t.view(B, T, A, d).transpose(1, 2)
    q, k, v = (heads(lin(x, pre + "attention.self." + n)) for n in ("query", "key", "value"))
    probs = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5 + bias, dim=-1)
    ctx = (probs @ v).transpose(1, 2).reshape(B, T, H)
    x = ln(lin(ctx, pre + "attention.output.dense") + x, pre + "attention.output.LayerNorm")
    x = ln(lin(gelu(lin(x, pre + "intermediate.dense")), pre + "output.dense") + x, pre + "output.LayerNorm")
h = ln(gelu(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
logits = h @ p[e + "word_embeddings.weight"].t() + p["cls.predictions.bias"]
loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
loss.backward()
t1 = time.perf_counter()
write_safetensors(out_path, {k: v.grad.detach().numpy() for k, v in p.items()}, {"loss": "%.9g" % loss.item()})
print(json.dumps({"forward_backward_s": t1 - t0, "loss": loss.item(), "threads": torch.get_num_threads(),
                  "blas_threads": blas_threads, "torch": torch.__version__}))
'''


# Debian's python3-torch calls the BLAS that libblas.so.3 points to; without OpenBLAS that
# is the reference BLAS (one core, no vector kernels), which made PyTorch ~50x slower here.
PACKAGES = {"python3-torch": "import torch", "libopenblas0-pthread": None}


def ensure_torch() -> None:
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    have_blas = os.path.exists("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3")
    if probe.returncode == 0 and have_blas:
        return
    if os.geteuid() != 0:
        sys.exit("vs_pytorch.py: PyTorch or OpenBLAS is missing; install Debian's python3-torch and "
                 "libopenblas0-pthread (apt-get install python3-torch libopenblas0-pthread)")
    print("installing Debian's python3-torch and libopenblas0-pthread (apt-get) ...", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


DTYPES = {"F32": np.float32, "I64": np.int64}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every F32 / I64 tensor of a safetensors file, shaped."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + s:8 + n + e], DTYPES[v["dtype"]]).reshape(v["shape"])
    return out


def write_safetensors(path: str, tensors: dict[str, np.ndarray], meta: dict[str, str] | None = None) -> None:
    """F32 / I64 arrays (others are written as F32), in key order, each written from its
    own buffer (no copy of the data when it is already contiguous F32 / I64)."""
    header, arrays, off = ({"__metadata__": meta} if meta else {}), [], 0
    for k in sorted(tensors):
        v = np.ascontiguousarray(tensors[k])
        if v.dtype != np.int64 and v.dtype != np.float32:
            v = v.astype(np.float32)
        header[k] = {"dtype": "I64" if v.dtype == np.int64 else "F32", "shape": list(v.shape),
                     "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes
        arrays.append(v)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for v in arrays:
            if v.size:
                f.write(memoryview(v.reshape(-1)).cast("B"))


def make_inputs(args, work: str) -> tuple[str, str]:
    model_dir, batch_path = os.path.join(work, "model"), os.path.join(work, "batch.safetensors")
    if os.path.exists(os.path.join(model_dir, "model.safetensors")) and os.path.exists(batch_path):
        return model_dir, batch_path
    hidden, layers, heads, inter = PRESETS[args.preset]
    ckpt = os.path.join(work, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    subprocess.run([args.shardlab, "run", "--set", "model.preset=" + args.preset, "--set", "model.head=mlm",
                    "--set", "train.steps=1", "--set", "world.devices_per_node=1",
                    "--set", "data.batch_size_per_rank=1", "--set", "data.seq_len=8",
                    "--set", "expect.grads_match_unsharded=false", "--set", "checkpoint.dir=" + ckpt,
                    "--out", os.path.join(work, "ckpt_run")], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(model_dir, exist_ok=True)
    shutil.copy(os.path.join(ckpt, "step-00000001", "model.safetensors"), model_dir)
    config = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 30522,
              "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": inter, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
              "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
              "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30522, (args.batch, args.seq)).astype(np.int64)
    labels = np.where(rng.random((args.batch, args.seq)) < 0.15, ids, -100).astype(np.int64)
    write_safetensors(batch_path, {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": labels})
    return model_dir, batch_path


def timed(cmd: list[str]) -> tuple[float, str]:
    # The previous run's output file is flushed first, so that its write-back does not
    # land in this run's time (shardlab fsyncs its own output inside its time; PyTorch's
    # side does not).
    os.sync()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardlab", default="build/bin/shardlab")
    ap.add_argument("--preset", default="bert-base", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/shardlab_vs_pytorch")
    args = ap.parse_args()
    if args.batch < 1 or args.seq < 1 or args.seq > 512 or args.runs < 1:
        print("vs_pytorch.py: --batch and --runs must be >= 1, --seq 1..512", file=sys.stderr)
        return 2
    ensure_torch()
    work = os.path.join(args.work, "%s_b%d_t%d" % (args.preset, args.batch, args.seq))
    os.makedirs(work, exist_ok=True)
    model_dir, batch_path = make_inputs(args, work)
    side = os.path.join(work, "pytorch_side.py")
    with open(side, "w") as f:
        f.write(PYTORCH_SIDE)
    ours_out, theirs_out = os.path.join(work, "grads_shardlab.safetensors"), os.path.join(work, "grads_torch.safetensors")
    ours, ours_inside, theirs, inside = [], [], [], []
    for _ in range(args.runs):
        t, out = timed([args.shardlab, "grads", "--model", model_dir, "--inputs", batch_path, "--out", ours_out,
                        "--dropout", "0"])
        ours.append(t)
        step = re.search(r"forward \+ backward \+ gradient reduction: ([0-9.]+) s wall", out)
        if step is None:
            sys.exit("vs_pytorch.py: shardlab grads did not print its step time:\n" + out)
        ours_inside.append(float(step.group(1)))
        t, out = timed([sys.executable, side, model_dir, batch_path, theirs_out, os.path.dirname(os.path.abspath(__file__))])
        theirs.append(t)
        inside.append(json.loads(out.strip().splitlines()[-1]))
    a, b = read_safetensors(ours_out), read_safetensors(theirs_out)
    worst, where = 0.0, ""
    for k in sorted(a):
        scale = float(np.max(np.abs(b[k]))) or 1.0  # per tensor, any shape
        if scale < 1e-6:  # analytically zero gradients (the key bias): rounding noise only
            continue
        diff = float(np.max(np.abs(a[k] - b[k]))) / scale
        if diff > worst:
            worst, where = diff, k
    best_ours, best_theirs = min(ours), min(theirs)
    info = inside[-1]
    print(f"{args.preset}, batch {args.batch} x {args.seq} tokens, fp32 forward + backward, one process each:")
    print(f"  shardlab grads ({len(os.sched_getaffinity(0))} threads) best {best_ours:.2f} s of "
          f"{', '.join('%.2f' % t for t in ours)}")
    blas = "" if info.get("blas_threads") is None else f", OpenBLAS {info['blas_threads']}"
    print(f"  PyTorch {info['torch']} ({info['threads']} intra-op threads{blas}) best {best_theirs:.2f} s of "
          f"{', '.join('%.2f' % t for t in theirs)} (forward + backward alone "
          f"{min(i['forward_backward_s'] for i in inside):.2f} s)")
    fb_theirs = min(i['forward_backward_s'] for i in inside)
    print(f"  speed ratio PyTorch / shardlab: {best_theirs / best_ours:.2f}x end to end; forward + backward alone "
          f"{fb_theirs:.2f} s / {min(ours_inside):.2f} s = {fb_theirs / min(ours_inside):.2f}x")
    print(f"  largest gradient difference: {worst:.2e} of the tensor's largest |gradient| ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
