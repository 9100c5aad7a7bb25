#!/usr/bin/env python3
"""Training, live: PyTorch FSDP1 and FSDP2 over gloo against shardlab under Open MPI, step by step.

The same BertForSequenceClassification (transformers, seeded init, dropout 0, saved with
save_pretrained) and the same batch file train for 5 steps with SGD (lr 0.1) or AdamW (lr
1e-3, weight decay 0.01), in fp32 or under bf16 mixed precision, on W CPU processes:
PyTorch's FullyShardedDataParallel (use_orig_params=True) or fully_shard over gloo, each
rank taking its rows of the batch, and `mpiexec -n W shardlab run --backend mpi` with the
folder as model.config/model.weights and the batch as data.path. Every step's global mean
loss and, at the end, every parameter (shardlab's FULL checkpoint against PyTorch's full
state dict) must agree within tolerance (TOLERANCE; for SGD in fp32, 1e-5 relative for
losses and 1e-5 of each tensor's largest |value| for parameters, one that stays zero — the
attention key bias — below 1e-5 on both sides), for FSDP1's FULL_SHARD, SHARD_GRAD_OP and
NO_SHARD and FSDP2's reshard_after_forward True and False (shardlab's fsdp_version 2,
FULL_SHARD and SHARD_GRAD_OP), with AdamW, and with bf16 MixedPrecision /
MixedPrecisionPolicy (param_dtype and reduce_dtype bf16). FSDP2 on CPU needs PyTorch 2.7
(2.5 and 2.6 refuse or fail on its streams), and over gloo its gradient average comes out
as a sum (see torch_worker), which the loss scaling undoes.

Exit 0 when all agree, 1 otherwise, 77 (ctest: skipped) without the peer environment.
Usage: training.py --shardlab build/bin/shardlab [--worlds 2,4] [--only TEXT]
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
    from safetensors.torch import load_file
    from transformers import BertForSequenceClassification
    from transformers.utils import logging as hf_logging

    from peer_common import (compare_tensors, free_port, fsdp_steps, full_state_dict, load_result, rank_rows,
                             save_result, small_bert, token_batch, train_on_files, wrap_fsdp)
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

B, T, STEPS = 8, 16, 5
LR = {"sgd": 0.1, "adamw": 1e-3}
WEIGHT_DECAY = {"sgd": 0.0, "adamw": 0.01}
# (FSDP version, strategy, optimizer, precision): FSDP2 spells the strategy as
# reshard_after_forward; bf16 is FSDP's mixed precision (parameters, compute and gradient
# reduction in bf16, fp32 master parameters and optimizer).
CASES = [(1, "FULL_SHARD", "sgd", "fp32"), (1, "SHARD_GRAD_OP", "sgd", "fp32"), (1, "NO_SHARD", "sgd", "fp32"),
         (2, "FULL_SHARD", "sgd", "fp32"), (2, "SHARD_GRAD_OP", "sgd", "fp32"),
         (1, "FULL_SHARD", "adamw", "fp32"), (2, "FULL_SHARD", "adamw", "fp32"),
         (1, "FULL_SHARD", "sgd", "bf16"), (2, "FULL_SHARD", "sgd", "bf16"), (1, "SHARD_GRAD_OP", "sgd", "bf16")]
# fp32 with SGD: the summation orders differ, nothing else. AdamW divides each gradient by
# its running RMS, so the rounding difference of a small gradient becomes a difference in a
# step of size lr: 1e-4 of lr · steps. bf16: each side rounds its matmul outputs,
# activations, losses and reduced gradients at different points (8-bit mantissas: 2^-8 =
# 3.9e-3 per rounding); the worst case, a LayerNorm bias (a sum over every token of
# gradients of both signs, zero at init), differs by 1.9e-2 of its largest |value|; the
# tolerance is 3e-2. (A bf16 tolerance cannot tell a bf16 run from an fp32 one in 5 steps;
# the bf16 path's own numerics are checked bitwise against the unsharded oracle.) (AdamW on bf16 gradients is
# not compared element by element: a gradient within bf16 noise of 0 flips the sign of an
# lr-sized step.)
TOLERANCE = {("sgd", "fp32"): 1e-5, ("adamw", "fp32"): 1e-4, ("sgd", "bf16"): 3e-2}


def torch_worker(rank, world, port, folder, strategy, version, optimizer, precision, out):
    hf_logging.set_verbosity_error()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = wrap_fsdp(BertForSequenceClassification.from_pretrained(folder), version, world, strategy,
                      bf16=precision == "bf16")
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=LR[optimizer], weight_decay=WEIGHT_DECAY[optimizer])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=LR[optimizer])
    losses = fsdp_steps(model, opt, rank_rows(folder, rank, world), version, world, STEPS)
    save_result(out, rank, losses, full_state_dict(model, version))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--only", default="", help="run only the cases whose tag holds this text (e.g. 'adamw bf16')")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "hf")
        token_batch(src, "classification", small_bert("classification", src).config, B, T, seed=4)
        for world in (int(w) for w in a.worlds.split(",")):
            for version, strategy, optimizer, precision in CASES:
                tag = f"FSDP{version} {strategy} {optimizer} {precision} W={world}"
                if a.only not in tag:
                    continue
                out = os.path.join(d, f"torch_{version}_{strategy}_{optimizer}_{precision}_{world}")
                os.makedirs(out)
                mp.spawn(torch_worker, args=(world, free_port(), src, strategy, version, optimizer, precision, out),
                         nprocs=world, join=True)
                theirs_losses, theirs = load_result(out)
                ck, run_out = os.path.join(out, "ck"), os.path.join(out, "run")
                cmd = ["mpiexec", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-n", str(world), a.shardlab]
                cmd += train_on_files(src, "classification", T, B // world, world, STEPS, "name=peer_training",
                                      f"train.optimizer.name={optimizer}", f"train.optimizer.lr={LR[optimizer]}",
                                      f"train.optimizer.weight_decay={WEIGHT_DECAY[optimizer]}",
                                      f"train.precision={precision}",
                                      f"fsdp.mixed_precision.param_dtype={precision}",
                                      f"fsdp.mixed_precision.reduce_dtype={precision}",
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
                # AdamW divides each gradient by its running RMS: the key bias's gradient, zero
                # but for rounding, takes steps of up to lr made of noise on either side (checked
                # to stay within lr · steps), and every parameter is compared relative to at
                # least lr · steps, the most Adam moves one.
                adam = optimizer == "adamw"
                worst, where, problems = compare_tensors(
                    theirs, ours, "checkpoint", floor=LR[optimizer] * STEPS if adam else 0.0,
                    bounded=("attention.self.key.bias",) if adam else ())
                tol = TOLERANCE[(optimizer, precision)]
                ok = not problems and loss_rel <= tol and worst <= tol and len(ours_losses) == STEPS
                print(f"{tag}: losses {' '.join('%.6f' % x for x in theirs_losses)} (PyTorch); worst loss difference "
                      f"{loss_rel:.1e} relative; worst parameter {worst:.1e} of its largest |value| ({where}): "
                      + (f"within {precision} tolerance {tol:g}" if ok else "OUT OF TOLERANCE " + "; ".join(problems[:3])))
                failed += not ok
    print("training: " + ("PyTorch FSDP and shardlab train alike" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
