#!/usr/bin/env python3
"""Training, live: PyTorch FSDP1 and FSDP2 over gloo against shardlab under Open MPI, step by step.

The same BertForSequenceClassification (transformers, seeded init, dropout 0, saved with
save_pretrained) and the same batch file train for 5 steps with SGD (lr 0.1) on W CPU
processes: PyTorch's FullyShardedDataParallel (use_orig_params=True) or fully_shard over
gloo, each rank taking its rows of the batch, and `mpiexec -n W shardlab run --backend mpi` with the
folder as model.config/model.weights and the batch as data.path. Every step's global mean
loss and, at the end, every parameter (shardlab's FULL checkpoint against PyTorch's full
state dict) must agree within fp32 tolerance (1e-5 relative for losses, 1e-5 of each
tensor's largest |value| for parameters; one that stays zero — the attention key bias —
below 1e-5 on both sides), for FSDP1's FULL_SHARD, SHARD_GRAD_OP and NO_SHARD and FSDP2's
reshard_after_forward True and False (shardlab's fsdp_version 2, FULL_SHARD and
SHARD_GRAD_OP). FSDP2 on CPU needs PyTorch 2.7 (2.5 and 2.6 refuse or fail on its streams),
and over gloo its gradient average comes out as a sum (see torch_worker), which the loss
scaling undoes.

Exit 0 when all agree, 1 otherwise, 77 (ctest: skipped) without the peer environment.
Usage: training.py --shardlab build/bin/shardlab [--worlds 2,4]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from safetensors.torch import load_file, save_file
    from transformers import BertForSequenceClassification
    from transformers.utils import logging as hf_logging

    from peer_common import compare_tensors, free_port, small_bert, token_batch, train_on_files
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

B, T, STEPS, LR = 8, 16, 5, 0.1
# (FSDP version, strategy): FSDP2 spells the strategy as reshard_after_forward.
CASES = [(1, "FULL_SHARD"), (1, "SHARD_GRAD_OP"), (1, "NO_SHARD"), (2, "FULL_SHARD"), (2, "SHARD_GRAD_OP")]


def torch_worker(rank, world, port, folder, strategy, version, out):
    hf_logging.set_verbosity_error()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType
    from torch.distributed.fsdp import FullStateDictConfig
    model = BertForSequenceClassification.from_pretrained(folder)
    if version == 2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        # fully_shard on a 1-D mesh: reshard_after_forward True is FULL_SHARD, False SHARD_GRAD_OP.
        fully_shard(model, mesh=init_device_mesh("cpu", (world,)), reshard_after_forward=strategy == "FULL_SHARD")
    else:
        model = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True,
                     sharding_strategy=getattr(ShardingStrategy, strategy))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    batch = load_file(os.path.join(folder, "batch.safetensors"))
    rows = slice(rank * B // world, (rank + 1) * B // world)
    mine = {k: v[rows] for k, v in batch.items()}
    losses = []
    model.train()
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(**mine).loss
        # FSDP2 asks its reduce-scatter for ReduceOp.AVG, which NCCL averages but gloo's
        # reduce_scatter_tensor sums (PyTorch 2.7: the steps move W times too far); dividing
        # the loss by W gives the average FSDP2 computes on NCCL (and FSDP1 on gloo).
        (loss / world if version == 2 else loss).backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / world)
    if version == 2:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):
            state = model.state_dict()
    if rank == 0:
        save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(out, "params.safetensors"))
        with open(os.path.join(out, "losses.json"), "w") as f:
            json.dump(losses, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--worlds", default="2,4")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "hf")
        token_batch(src, "classification", small_bert("classification", src).config, B, T, seed=4)
        for world in (int(w) for w in a.worlds.split(",")):
            for version, strategy in CASES:
                tag = f"FSDP{version} {strategy} W={world}"
                out = os.path.join(d, f"torch_{version}_{strategy}_{world}")
                os.makedirs(out)
                mp.spawn(torch_worker, args=(world, free_port(), src, strategy, version, out), nprocs=world, join=True)
                with open(os.path.join(out, "losses.json")) as f:
                    theirs_losses = json.load(f)
                theirs = load_file(os.path.join(out, "params.safetensors"))
                ck, run_out = os.path.join(out, "ck"), os.path.join(out, "run")
                cmd = ["mpiexec", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-n", str(world), a.shardlab]
                cmd += train_on_files(src, "classification", T, B // world, world, STEPS, "name=peer_training",
                                      "train.optimizer.name=sgd", f"train.optimizer.lr={LR}",
                                      f"fsdp.sharding_strategy={strategy}", f"fsdp.fsdp_version={version}",
                                      "fsdp.state_dict_type=FULL_STATE_DICT", f"checkpoint.dir={ck}",
                                      "expect.grads_match_unsharded=false")
                cmd += ["--backend", "mpi", "--out", run_out]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    print(f"{tag}: shardlab under mpiexec failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
                    failed += 1
                    continue
                with open(os.path.join(run_out, "metrics.json")) as f:
                    ours_losses = json.load(f)["loss"]
                ours = load_file(os.path.join(ck, f"step-{STEPS:08d}", "model.safetensors"))
                loss_rel = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(ours_losses, theirs_losses))
                # The attention key bias is zero at init with an analytically zero gradient: it
                # stays at rounding noise on both sides.
                worst, where, problems = compare_tensors(theirs, ours, "checkpoint")
                ok = not problems and loss_rel <= 1e-5 and worst <= 1e-5 and len(ours_losses) == STEPS
                print(f"{tag}: losses {' '.join('%.6f' % x for x in theirs_losses)} (PyTorch); worst loss difference "
                      f"{loss_rel:.1e} relative; worst parameter {worst:.1e} of its largest |value| ({where}): "
                      + ("within fp32 tolerance" if ok else "OUT OF TOLERANCE " + "; ".join(problems[:3])))
                failed += not ok
    print("training: " + ("PyTorch FSDP and shardlab train alike" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
