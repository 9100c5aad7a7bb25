#!/usr/bin/env python3
"""Layouts, live: shardlab's FSDP1 and FSDP2 layouts against PyTorch's own, same shapes.

For every model and world size, W CPU processes (gloo) wrap the model three ways with the
PyTorch of interop/requirements.txt: FullyShardedDataParallel with use_orig_params True and
False (one unit: the whole model) and fully_shard (FSDP2). Each rank reports what PyTorch
built: the FlatParameter's shard size, unpadded and padded sizes and its _shard_param_infos;
the DTensor local shape of every parameter. The parent compares them with
`shardlab layout --shapes ... --world-size W [--align-bytes 16|0 | --fsdp-version 2]`.

Prints one line per (model, world size) and the worst mismatch; exit 0 when everything
matches, 1 on any mismatch, 77 (ctest: skipped) without the peer environment.
Usage: layouts.py --shardlab build/bin/shardlab [--worlds 1,2,3,4,8]
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
    import torch.nn as nn
    from transformers import BertConfig, BertModel

    from peer_common import free_port
except ImportError as e:  # the peer environment is not set up
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)


def bert(size):
    # bert-tiny / mini / base as Hugging Face sizes them (google/bert_uncased_L-*_H-*_A-*).
    layers, hidden, heads = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "base": (12, 768, 12)}[size]
    cfg = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * hidden)
    return BertModel(cfg, add_pooling_layer=True)


def random_tree(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=g))
    mods = [nn.Embedding(r(5, 40), r(2, 9))]
    for _ in range(r(2, 6)):
        kind = r(0, 3)
        mods.append(nn.Linear(r(1, 13), r(1, 13)) if kind == 0 else nn.LayerNorm(r(1, 17)) if kind == 1
                    else nn.Conv1d(r(1, 5), r(1, 5), r(1, 4)))
    return nn.Sequential(*mods)


MODELS = {"tree_a": lambda: random_tree(1), "tree_b": lambda: random_tree(7), "bert-tiny": lambda: bert("tiny"),
          "bert-mini": lambda: bert("mini"), "bert-base": lambda: bert("base")}


def worker(rank, world, port, model_name, out_dir):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    try:
        from torch.distributed.fsdp import fully_shard  # public from PyTorch 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    report = {}
    for orig in (True, False):
        torch.manual_seed(0)
        m = FSDP(MODELS[model_name](), use_orig_params=orig, device_id=torch.device("cpu"))
        fp = m._flat_param
        infos = [[i.in_shard, i.offset_in_shard, i.numel_in_shard, i.intra_param_start_idx, i.intra_param_end_idx]
                 for i in fp._shard_param_infos]
        report[f"fsdp1_orig_{orig}"] = {"shard_numel": fp.numel(), "numels_with_padding": list(fp._numels_with_padding),
                                        "infos": infos, "shapes": [list(s) for s in fp._shapes]}
    torch.manual_seed(0)
    m = MODELS[model_name]()
    fully_shard(m, mesh=init_device_mesh("cpu", (world,)))
    report["fsdp2"] = {"local_shapes": [list(p.to_local().shape) for p in m.parameters()],
                       "shapes": [list(p.shape) for p in m.parameters()]}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


def shardlab_layout(exe, shapes, world, *extra):
    arg = ",".join("x".join(str(d) for d in s) for s in shapes)
    out = subprocess.run([exe, "layout", "--shapes", arg, "--world-size", str(world), *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def compare(exe, model_name, world, ranks):
    problems = []
    for orig in (True, False):
        key = f"fsdp1_orig_{orig}"
        shapes = ranks[0][key]["shapes"]
        ours = shardlab_layout(exe, shapes, world, "--align-bytes", "16" if orig else "0")
        for r, rep in enumerate(ranks):
            t = rep[key]
            if t["shard_numel"] != ours["shard_numel"]:
                problems.append(f"{key} rank {r}: shard size PyTorch {t['shard_numel']}, shardlab {ours['shard_numel']}")
            # The flat parameter as PyTorch lists it: each alignment gap, each parameter, and (with
            # use_orig_params, which pads the flat parameter itself to a multiple of W) the tail.
            mine, cursor = [], 0
            for p in ours["params"]:
                if p["flat_offset"] > cursor:
                    mine.append(p["flat_offset"] - cursor)
                mine.append(p["numel"])
                cursor = p["flat_offset"] + p["numel"]
            if orig and ours["total_numel"] > cursor and world > 1:
                mine.append(ours["total_numel"] - cursor)
            if t["numels_with_padding"] != mine:
                problems.append(f"{key} rank {r}: numels with padding PyTorch {t['numels_with_padding']}, "
                                f"shardlab {mine}")
            pieces = {p["param"]: p for p in ours["shards"][r]["pieces"]}
            for i, (in_shard, off, n, start, end) in enumerate(t["infos"]):
                p = pieces.get(i)
                if not in_shard:
                    if p is not None:
                        problems.append(f"{key} rank {r} param {i}: PyTorch holds none of it, shardlab {p}")
                    continue
                # _ShardParamInfo's intra_param_end_idx is inclusive.
                mine = None if p is None else [p["offset_in_shard"], p["param_end"] - p["param_begin"],
                                               p["param_begin"], p["param_end"] - 1]
                if mine != [off, n, start, end]:
                    problems.append(f"{key} rank {r} param {i}: PyTorch (offset, numel, start, end) "
                                    f"{[off, n, start, end]}, shardlab {mine}")
    shapes = ranks[0]["fsdp2"]["shapes"]
    ours = shardlab_layout(exe, shapes, world, "--fsdp-version", "2")
    for r, rep in enumerate(ranks):
        mine = [p["local_shape"] for p in ours["shards"][r]["params"]]
        if mine != rep["fsdp2"]["local_shapes"]:
            problems.append(f"fsdp2 rank {r}: PyTorch local shapes {rep['fsdp2']['local_shapes']}, shardlab {mine}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--worlds", default="1,2,3,4,8")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    failed = 0
    for model_name in a.models.split(","):
        for world in (int(w) for w in a.worlds.split(",")):
            with tempfile.TemporaryDirectory() as d:
                mp.spawn(worker, args=(world, free_port(), model_name, d), nprocs=world, join=True)
                ranks = []
                for r in range(world):
                    with open(os.path.join(d, f"rank{r}.json")) as f:
                        ranks.append(json.load(f))
            problems = compare(a.shardlab, model_name, world, ranks)
            n = len(ranks[0]["fsdp2"]["shapes"])
            print(f"{model_name:9s} W={world}: {n} parameters, FSDP1 (use_orig_params True/False) and FSDP2: "
                  + ("MATCH" if not problems else f"{len(problems)} MISMATCHES"))
            for p in problems[:10]:
                print("  " + p)
            failed += bool(problems)
    print("layouts: " + ("every layout matches PyTorch's" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
