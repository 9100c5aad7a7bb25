#!/usr/bin/env python3
"""Checkpoints through torch.distributed.checkpoint (DCP), live: PyTorch's sharded
checkpoints convert to shardlab SHARDED_STATE_DICT checkpoints and back, and a run resumed
from either continues as the uninterrupted run does.

Converter (importable; also a command):
  dcp.py to-shardlab DCP_DIR CHECKPOINT_DIR --step N   a DCP checkpoint of {"model": …,
      "optimizer": …} (torch.distributed.checkpoint.state_dict's get_state_dict, AdamW) →
      CHECKPOINT_DIR/step-NNNNNNNN/ (one rank-RRRRR.safetensors per DCP file, each DCP
      chunk a piece of its tensor) and CHECKPOINT_DIR/latest.
  dcp.py to-dcp STEP_DIR DCP_DIR   a shardlab FULL or SHARDED checkpoint step directory →
      a DCP checkpoint of the same {"model": …, "optimizer": …} (written by one process;
      DCP reshards it on load).

Test (`dcp.py test --shardlab build/bin/shardlab`, ctest peer_dcp): a
BertForSequenceClassification (transformers, seeded, dropout 0) and a batch file; AdamW (lr
1e-3, weight decay 0.01), 5 steps, W = 2, FSDP1 (use_orig_params) and FSDP2 over gloo.
- PyTorch → shardlab: PyTorch trains 5 steps and saves DCP after step 2; the converted
  checkpoint resumes in shardlab (2 and 4 simulated ranks) for steps 3-5: losses and final
  parameters equal PyTorch's steps 3-5 within the AdamW tolerance of peer_training (1e-4;
  losses 1e-5 relative).
- shardlab → PyTorch: shardlab trains 5 steps with a SHARDED checkpoint after step 2; its
  conversion to DCP resumes in PyTorch for steps 3-5: the same comparison with shardlab's
  uninterrupted run.
- Round trip: DCP → shardlab → DCP gives back every tensor bit for bit, and the step count.
Exit 0 when all hold, 1 otherwise, 77 (ctest: skipped) without the peer environment.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from safetensors.torch import load_file, save_file

    from peer_common import (compare_tensors, free_port, fsdp_steps, full_state_dict, load_result, rank_rows,
                             save_result, small_bert, token_batch, train_on_files, wrap_fsdp)
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

B, T, STEPS, SAVE_AT, LR, WD = 8, 16, 5, 2, 1e-3, 0.01
STATES = ["exp_avg", "exp_avg_sq"]  # AdamW's per-parameter state, shardlab's order


# ---- the converter ---------------------------------------------------------------------


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_index(step_dir, index):
    """index.json with the files' checksums and the index's own (SHA-256 of its compact JSON,
    keys sorted, without "checksum"), as shardlab writes it."""
    index["files"] = {f: {"sha256": _sha256(os.path.join(step_dir, f)), "bytes": os.path.getsize(os.path.join(step_dir, f))}
                      for f in sorted({p["file"] for t in index["tensors"].values() for p in t["pieces"]})}
    compact = json.dumps(index, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    index["checksum"] = hashlib.sha256(compact.encode()).hexdigest()
    with open(os.path.join(step_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)


def _split_optimizer_key(key):
    """'optimizer.state.<fqn>.<state>' → (fqn, state); None for other optimizer entries."""
    prefix = "optimizer.state."
    if not key.startswith(prefix):
        return None
    fqn, _, state = key[len(prefix):].rpartition(".")
    return fqn, state


def dcp_to_shardlab(dcp_dir, checkpoint_dir, step):
    """Converts a DCP checkpoint of {"model", "optimizer"} (AdamW) to a shardlab SHARDED
    checkpoint at `step`; returns the step directory. Each DCP chunk becomes a piece of its
    tensor in the file standing for the DCP file that holds it. Chunks must be ranges of
    rows (dim 0), as FSDP1's and FSDP2's are."""
    reader = dcp.FileSystemReader(dcp_dir)
    meta = reader.read_metadata()
    full = {}
    dcp_to_torch = os.path.join(checkpoint_dir, ".full.pt")
    os.makedirs(checkpoint_dir, exist_ok=True)
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(dcp_dir, dcp_to_torch)
    loaded = torch.load(dcp_to_torch, weights_only=False)
    os.remove(dcp_to_torch)
    for fqn, t in loaded["model"].items():
        full[f"model.{fqn}"] = t
    adam_steps = set()
    for fqn, states in loaded["optimizer"]["state"].items():
        for name, t in states.items():
            if name == "step":
                adam_steps.add(int(t))
            else:
                full[f"optimizer.state.{fqn}.{name}"] = t
    if len(adam_steps) != 1:
        raise ValueError(f"{dcp_dir}: the parameters' AdamW step counts differ: {sorted(adam_steps)}")
    # Which DCP file holds each chunk: its pieces go to the shardlab file of that index.
    files = {}  # DCP relative path -> shardlab file name
    pieces = {}  # shardlab file -> {key: tensor}
    index = {"format": "shardlab-fsdp-checkpoint", "version": 2, "type": "SHARDED_STATE_DICT", "step": step,
             "world_size": 0, "optimizer": {"steps": adam_steps.pop(), "states": STATES}, "tensors": {},
             "run": {"converted_from": "torch.distributed.checkpoint"}}
    for key, tmeta in meta.state_dict_metadata.items():
        if not hasattr(tmeta, "chunks") or key not in full:
            continue  # param_groups, step counts
        if key.startswith("model."):
            name = "model/" + key[len("model."):]
        else:
            fqn, state = _split_optimizer_key(key)
            if state not in STATES:
                raise ValueError(f"{dcp_dir}: optimizer state {state!r} of {fqn}: shardlab's AdamW holds {STATES}")
            name = f"optim/{state}/{fqn}"
        tensor = full[key].to(torch.float32).contiguous()
        shape = list(tensor.shape)
        row = tensor[0].numel() if tensor.dim() > 0 and shape[0] > 0 else 1
        entry = {"shape": shape, "dtype": "F32", "pieces": []}
        for chunk in sorted(tmeta.chunks, key=lambda c: list(c.offsets)):
            if any(o != 0 for o in list(chunk.offsets)[1:]) or list(chunk.sizes)[1:] != shape[1:]:
                raise ValueError(f"{dcp_dir}: {key} chunk at {list(chunk.offsets)} is not a range of rows")
            rows = chunk.sizes[0] if shape else 1
            if rows == 0:
                continue
            begin = (chunk.offsets[0] if shape else 0) * row
            from torch.distributed.checkpoint.metadata import MetadataIndex
            info = meta.storage_data[MetadataIndex(key, chunk.offsets)]
            file = files.setdefault(info.relative_path, f"rank-{len(files):05d}.safetensors")
            piece_key = f"{name}@{begin}"
            pieces.setdefault(file, {})[piece_key] = tensor.reshape(-1)[begin:begin + rows * row].clone()
            entry["pieces"].append({"file": file, "key": piece_key, "offset": begin, "length": rows * row})
        index["tensors"][name] = entry
    index["world_size"] = len(files)
    step_dir = os.path.join(checkpoint_dir, f"step-{step:08d}")
    os.makedirs(step_dir)
    for file, tensors in pieces.items():
        save_file(tensors, os.path.join(step_dir, file))
    _write_index(step_dir, index)
    with open(os.path.join(checkpoint_dir, "latest"), "w") as f:
        f.write(f"step-{step:08d}")
    return step_dir


def shardlab_tensors(step_dir):
    """A shardlab FULL or SHARDED checkpoint step directory, whole: ({name: tensor} with
    names "model/<fqn>" and "optim/<state>/<fqn>", AdamW step count). FULL keeps its model
    in model.safetensors under the model names."""
    with open(os.path.join(step_dir, "index.json")) as f:
        index = json.load(f)
    if index["type"] not in ("SHARDED_STATE_DICT", "FULL_STATE_DICT"):
        raise ValueError(f"{step_dir}: a {index['type']} checkpoint holds flat shards; convert FULL or SHARDED ones")
    files = {}
    out = {}
    for name, entry in index["tensors"].items():
        flat = torch.empty(int(torch.tensor(entry["shape"]).prod()) if entry["shape"] else 1, dtype=torch.float32)
        for p in entry["pieces"]:
            data = files.setdefault(p["file"], load_file(os.path.join(step_dir, p["file"])))
            flat[p["offset"]:p["offset"] + p["length"]] = data[p["key"]].reshape(-1).to(torch.float32)
        out[name] = flat.reshape(entry["shape"])
    return out, index["optimizer"]["steps"]


def shardlab_to_dcp(step_dir, dcp_dir):
    """Writes the checkpoint in `step_dir` as a DCP checkpoint of {"model": {fqn: tensor},
    "optimizer": {"state": {fqn: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": […]}}
    — the layout get_state_dict / set_state_dict use (one process writes it)."""
    tensors, steps = shardlab_tensors(step_dir)
    model = {n[len("model/"):]: t for n, t in tensors.items() if n.startswith("model/")}
    state = {fqn: {"step": torch.tensor(float(steps))} for fqn in model}
    for n, t in tensors.items():
        if n.startswith("optim/"):
            _, st, fqn = n.split("/", 2)
            state[fqn][st] = t
    # One parameter group with AdamW's settings as this PyTorch spells them (its keys vary by
    # version), naming the parameters by FQN as get_state_dict does.
    group = dict(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=LR, weight_decay=WD).param_groups[0])
    group["params"] = list(model)
    groups = [group]
    dcp.save({"model": model, "optimizer": {"state": state, "param_groups": groups}}, checkpoint_id=dcp_dir,
             no_dist=True)


# ---- the comparison --------------------------------------------------------------------


def torch_worker(rank, world, port, folder, version, load_dcp, save_dcp, first_step, out):
    from transformers import BertForSequenceClassification
    from transformers.utils import logging as hf_logging
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    hf_logging.set_verbosity_error()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = wrap_fsdp(BertForSequenceClassification.from_pretrained(folder), version, world)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    if load_dcp:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optimizer": osd}
        dcp.load(state, checkpoint_id=load_dcp)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    def save(i):
        if save_dcp and first_step + i - 1 == SAVE_AT:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=save_dcp)

    losses = fsdp_steps(model, opt, rank_rows(folder, rank, world), version, world, STEPS + 1 - first_step, save)
    save_result(out, rank, losses, full_state_dict(model, version))
    dist.destroy_process_group()


def run_torch(folder, version, world, out, load_dcp=None, save_dcp=None, first_step=1):
    os.makedirs(out, exist_ok=True)
    mp.spawn(torch_worker, args=(world, free_port(), folder, version, load_dcp, save_dcp, first_step, out),
             nprocs=world, join=True)
    return load_result(out)


def run_shardlab(shardlab, folder, version, world, ck, out, *sets):
    cmd = [shardlab] + train_on_files(folder, "classification", T, B // world, world, STEPS, "name=peer_dcp",
                                      "train.optimizer.name=adamw", f"train.optimizer.lr={LR}",
                                      f"train.optimizer.weight_decay={WD}", f"fsdp.fsdp_version={version}",
                                      f"checkpoint.dir={ck}", "expect.grads_match_unsharded=false", *sets)
    done = subprocess.run(cmd + ["--out", out], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"shardlab run failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    with open(os.path.join(out, "metrics.json")) as f:
        losses = json.load(f)["loss"]
    tensors, _ = shardlab_tensors(os.path.join(ck, f"step-{STEPS:08d}"))
    return losses, {n[len("model/"):]: t for n, t in tensors.items() if n.startswith("model/")}, done.stdout


def verdict(tag, ours, theirs):
    """Steps 3-5's losses and the final parameters, as peer_training compares AdamW runs."""
    (ours_losses, ours_params), (theirs_losses, theirs_params) = ours, theirs
    if len(ours_losses) != len(theirs_losses):
        print(f"{tag}: {len(ours_losses)} losses against {len(theirs_losses)}")
        return False
    loss_rel = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(ours_losses, theirs_losses))
    worst, where, problems = compare_tensors(theirs_params, ours_params, "parameters", floor=LR * STEPS,
                                             bounded=("attention.self.key.bias",))
    ok = not problems and loss_rel <= 1e-5 and worst <= 1e-4
    print(f"{tag}: losses {' '.join('%.6f' % x for x in theirs_losses)}; worst loss difference {loss_rel:.1e} "
          f"relative; worst parameter {worst:.1e} of max(|value|, lr · steps) ({where}): "
          + ("identical continuation within tolerance" if ok else "OUT OF TOLERANCE " + "; ".join(problems[:3])))
    return ok


def test(shardlab):
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "hf")
        token_batch(src, "classification", small_bert("classification", src).config, B, T, seed=4)
        for version in (1, 2):
            base = os.path.join(d, f"v{version}")
            # PyTorch → shardlab.
            saved = os.path.join(base, "torch_dcp")
            theirs_losses, theirs_params = run_torch(src, version, 2, os.path.join(base, "torch"), save_dcp=saved)
            for world in (2, 4):
                ck = os.path.join(base, f"from_torch_{world}")
                dcp_to_shardlab(saved, ck, SAVE_AT)
                losses, params, stdout = run_shardlab(shardlab, src, version, world, ck, os.path.join(ck, "run"),
                                                      "fsdp.state_dict_type=SHARDED_STATE_DICT", "checkpoint.resume=true")
                if "resumed from" not in stdout:
                    print(f"FSDP{version} DCP → shardlab W={world}: shardlab did not resume:\n{stdout}")
                    failed += 1
                    continue
                failed += not verdict(f"FSDP{version} PyTorch DCP (step {SAVE_AT}) → shardlab SHARDED, resumed on "
                                      f"{world} ranks", (losses, params), (theirs_losses[SAVE_AT:], theirs_params))
            # Round trip: DCP → shardlab → DCP, bit for bit.
            back = os.path.join(base, "back_dcp")
            shardlab_to_dcp(os.path.join(base, "from_torch_2", f"step-{SAVE_AT:08d}"), back)
            a, b = os.path.join(base, "a.pt"), os.path.join(base, "b.pt")
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
            dcp_to_torch_save(saved, a)
            dcp_to_torch_save(back, b)
            sa, sb = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
            flat_a = {f"model/{k}": v for k, v in sa["model"].items()}
            flat_b = {f"model/{k}": v for k, v in sb["model"].items()}
            for src_state, dst in ((sa, flat_a), (sb, flat_b)):
                for fqn, st in src_state["optimizer"]["state"].items():
                    for k, v in st.items():
                        dst[f"optim/{k}/{fqn}"] = v
            same = set(flat_a) == set(flat_b) and all(torch.equal(flat_a[k].float(), flat_b[k].float()) for k in flat_a)
            print(f"FSDP{version} DCP → shardlab → DCP: {len(flat_a)} tensors (steps included) "
                  + ("bit for bit" if same else "DIFFER"))
            failed += not same
            # shardlab → PyTorch.
            ck = os.path.join(base, "shardlab")
            ours_losses, ours_params, _ = run_shardlab(shardlab, src, version, 2, ck, os.path.join(ck, "run"),
                                                       "fsdp.state_dict_type=SHARDED_STATE_DICT",
                                                       f"checkpoint.every_steps={SAVE_AT}")
            converted = os.path.join(base, "shardlab_dcp")
            shardlab_to_dcp(os.path.join(ck, f"step-{SAVE_AT:08d}"), converted)
            resumed = run_torch(src, version, 2, os.path.join(base, "torch_resumed"), load_dcp=converted,
                                first_step=SAVE_AT + 1)
            failed += not verdict(f"FSDP{version} shardlab SHARDED (step {SAVE_AT}) → DCP, resumed in PyTorch on 2 ranks",
                                  resumed, (ours_losses[SAVE_AT:], ours_params))
    print("dcp: " + ("both directions resume identically" if not failed else f"{failed} cases differ"))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("test")
    t.add_argument("--shardlab", required=True)
    c = sub.add_parser("to-shardlab")
    c.add_argument("dcp_dir")
    c.add_argument("checkpoint_dir")
    c.add_argument("--step", type=int, required=True)
    c = sub.add_parser("to-dcp")
    c.add_argument("step_dir")
    c.add_argument("dcp_dir")
    a = ap.parse_args()
    if a.command == "test":
        return test(a.shardlab)
    if a.command == "to-shardlab":
        print(dcp_to_shardlab(a.dcp_dir, a.checkpoint_dir, a.step))
    else:
        shardlab_to_dcp(a.step_dir, a.dcp_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
