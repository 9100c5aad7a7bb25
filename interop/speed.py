#!/usr/bin/env python3
"""Speed, live (a benchmark, not a test): PyTorch FSDP over gloo against shardlab over Open
MPI, the same BERT training step on the same machine, in one run.

A transformers BertForMaskedLM of the given size (seeded, dropout 0, save_pretrained) and
one token batch train for --steps SGD steps on --world CPU processes, one FSDP unit per
BertLayer: PyTorch 2.x FullyShardedDataParallel (FULL_SHARD, use_orig_params=True,
transformer_auto_wrap_policy) and fully_shard (FSDP2) over gloo, and `mpiexec -n W shardlab
run --backend mpi` (fsdp_version 1 and 2) on the same files. Reported per FSDP version:
each side's median step time (after the first step) and the ratio PyTorch / shardlab (> 1:
shardlab is faster). Thread
counts are left as each side sets them; run it on an otherwise idle machine.
Usage: speed.py --shardlab build/bin/shardlab [--size mini|base] [--world 2] [--batch 4] [--seq 128]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertForMaskedLM
    from transformers.utils import logging as hf_logging

    from peer_common import free_port, train_on_files
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

SIZES = {"mini": (4, 256, 4), "base": (12, 768, 12)}


def make_case(folder, size, rows, seq):
    layers, hidden, heads = SIZES[size]
    cfg = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * hidden, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(1)
    BertForMaskedLM(cfg).save_pretrained(folder, safe_serialization=True)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(1000, cfg.vocab_size, (rows, seq), generator=g)
    labels = torch.where(torch.rand((rows, seq), generator=g) < 0.15, ids, torch.full_like(ids, -100))
    save_file({"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
               "labels": labels}, os.path.join(folder, "batch.safetensors"))


def torch_worker(rank, world, port, folder, steps, version, out):
    hf_logging.set_verbosity_error()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = BertForMaskedLM.from_pretrained(folder)
    if version == 2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        # One unit per BertLayer, then the root: shardlab's transformer wrap policy.
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.bert.encoder.layer:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        import functools
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        from transformers.models.bert.modeling_bert import BertLayer
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={BertLayer})
        model = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True, auto_wrap_policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = load_file(os.path.join(folder, "batch.safetensors"))
    rows = batch["input_ids"].shape[0]
    mine = {k: v[rank * rows // world:(rank + 1) * rows // world] for k, v in batch.items()}
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        model(**mine).loss.backward()
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"times": times, "threads": torch.get_num_threads()}, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--size", default="mini", choices=sorted(SIZES))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4, help="rows per rank")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "hf")
        make_case(src, a.size, a.batch * a.world, a.seq)
        for version in (1, 2):
            out = os.path.join(d, f"torch{version}.json")
            mp.spawn(torch_worker, args=(a.world, free_port(), src, a.steps, version, out), nprocs=a.world, join=True)
            with open(out) as f:
                theirs = json.load(f)
            run_out = os.path.join(d, f"run{version}")
            cmd = ["mpiexec", "--oversubscribe", "-n", str(a.world), a.shardlab]
            cmd += train_on_files(src, "mlm", a.seq, a.batch, a.world, a.steps, "name=peer_speed",
                                  "train.optimizer.name=sgd", "train.optimizer.lr=0.01",
                                  f"fsdp.fsdp_version={version}", "expect.grads_match_unsharded=false")
            cmd += ["--backend", "mpi", "--out", run_out]
            subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
            with open(os.path.join(run_out, "metrics.json")) as f:
                ours = json.load(f)["step_time_s"]["median"]
            rows.append((version, statistics.median(theirs["times"][1:] or theirs["times"]), ours))
    print(f"bert-{a.size}, {a.world} processes x {a.batch} rows x {a.seq} tokens, FULL_SHARD, one unit per BertLayer, "
          f"fp32, SGD; torch {torch.__version__} ({theirs['threads']} threads per process) over gloo vs shardlab over "
          "Open MPI")
    for version, t, ours in rows:
        print(f"  FSDP{version}: median step PyTorch {t:.3f} s, shardlab {ours:.3f} s; ratio PyTorch / shardlab "
              f"{t / ours:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
