"""What the peer scripts share: the small BERT and the token batch both sides get, a free
port for gloo, and the `shardlab run` arguments that train those files.

Importing it needs the peer environment (torch, transformers, safetensors); a script that
cannot import it prints "skipped: run ./bootstrap peer" and exits 77.
"""
import os
import socket

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM, BertForQuestionAnswering, BertForSequenceClassification

HEADS = {"classification": BertForSequenceClassification, "mlm": BertForMaskedLM, "qa": BertForQuestionAnswering}


def small_bert(head, folder, seed=1):
    """A 2-layer BERT with `head` (hidden 32, dropout 0), initialized by transformers with
    `seed` and saved in `folder` with save_pretrained; returns the model."""
    cfg = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, type_vocab_size=2,
                     num_labels=2 if head == "qa" else 3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    model = HEADS[head](cfg)
    model.save_pretrained(folder, safe_serialization=True)
    return model


def token_batch(folder, head, config, rows, seq, seed, token_types=False):
    """A seeded batch for `head` (padding in the attention mask; token types in the second half
    of each sequence when `token_types`), saved as folder/batch.safetensors; returns it."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, config.vocab_size, (rows, seq), generator=g)
    lengths = torch.randint(seq // 2, seq + 1, (rows,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    types = (torch.arange(seq)[None, :] >= (lengths[:, None] // 2)).long() * mask if token_types else torch.zeros_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if head == "classification":
        batch["labels"] = torch.randint(0, config.num_labels, (rows,), generator=g)
    elif head == "mlm":
        pick = (torch.rand((rows, seq), generator=g) < 0.3) & (mask == 1)
        batch["labels"] = torch.where(pick, ids, torch.full_like(ids, -100))
    else:
        batch["start_positions"] = torch.randint(0, seq, (rows,), generator=g)
        batch["end_positions"] = torch.randint(0, seq, (rows,), generator=g)
    save_file({k: v.contiguous() for k, v in batch.items()}, os.path.join(folder, "batch.safetensors"))
    return batch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_on_files(folder, head, seq, rows_per_rank, world, steps, *sets):
    """`shardlab run` arguments (after the executable) that train folder's config.json,
    model.safetensors and batch.safetensors on `world` ranks, plus `sets` (key=value)."""
    args = ["run", "--set", f"model.config={folder}/config.json", "--set", f"model.weights={folder}/model.safetensors",
            "--set", f"model.head={head}", "--set", "data.kind=file", "--set", f"data.path={folder}/batch.safetensors",
            "--set", f"data.seq_len={seq}", "--set", f"data.batch_size_per_rank={rows_per_rank}",
            "--set", f"world.devices_per_node={world}", "--set", f"train.steps={steps}"]
    for s in sets:
        args += ["--set", s]
    return args


def compare_tensors(theirs, ours, what, check_extra=False, floor=0.0, bounded=()):
    """Compares shardlab's tensors with PyTorch's by name, each relative to the PyTorch
    tensor's largest |value| (or `floor`, when larger). One PyTorch holds at zero (< 1e-6: an
    analytically zero gradient, or a parameter that never moves) must be below 1e-5 in
    shardlab too. Tensors whose name ends with one of `bounded` are only checked to stay
    within `floor` on both sides (values made of rounding noise, as Adam's steps on an
    analytically zero gradient). Returns (worst relative difference, its name, problems);
    `what` names the tensors."""
    worst, where, problems = 0.0, "", []
    for name, t in theirs.items():
        if name not in ours:
            problems.append(f"{name}: missing from shardlab's {what}")
            continue
        mine = ours[name].reshape(t.shape).to(t.dtype)
        if name.endswith(tuple(bounded)):
            largest = max(float(t.abs().max()), float(mine.abs().max()))
            if largest > floor:
                problems.append(f"{name}: |value| {largest:.2e} above the bound {floor:.2e}")
            continue
        scale = max(float(t.abs().max()), floor)
        if scale < 1e-6:
            if float(mine.abs().max()) > 1e-5:
                problems.append(f"{name}: zero in PyTorch, shardlab {float(mine.abs().max()):.2e}")
            continue
        diff = float((mine - t).abs().max()) / scale
        if diff > worst:
            worst, where = diff, name
    extra = sorted(set(ours) - set(theirs))
    if check_extra and extra:
        problems.append(f"shardlab has {what} PyTorch has not: {extra[:5]}")
    return worst, where, problems


def fsdp_steps(model, opt, mine, version, world, steps, after_step=None):
    """Trains an FSDP-wrapped `model` for `steps` steps on this rank's rows `mine` (a batch
    dict); returns each step's global mean loss. Collective over the default group.

    FSDP2 asks its reduce-scatter for ReduceOp.AVG, which NCCL averages but gloo's
    reduce_scatter_tensor sums (PyTorch 2.7: the steps move W times too far); dividing the
    loss by W gives the average FSDP2 computes on NCCL (and FSDP1 on gloo). `after_step(i)`
    runs after step i (1-based), e.g. to save a checkpoint."""
    import torch.distributed as dist
    losses = []
    model.train()
    for i in range(1, steps + 1):
        opt.zero_grad()
        loss = model(**mine).loss
        (loss / world if version == 2 else loss).backward()
        opt.step()
        total = loss.detach().float()
        dist.all_reduce(total)
        losses.append(float(total) / world)
        if after_step is not None:
            after_step(i)
    return losses


def full_state_dict(model, version):
    """The full model state dict of an FSDP1- or FSDP2-wrapped model (complete on rank 0).
    Collective. FSDP1 goes through FSDP.state_dict_type: get_model_state_dict's full state
    dict crashes FSDP1 on CPU in PyTorch 2.7."""
    if version == 2:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):
        return model.state_dict()


def wrap_fsdp(model, version, world, strategy="FULL_SHARD", bf16=False):
    """`model` under FSDP1 (FullyShardedDataParallel, use_orig_params=True, `strategy`) or
    FSDP2 (fully_shard on a 1-D mesh of `world` CPU ranks; FULL_SHARD is
    reshard_after_forward=True, SHARD_GRAD_OP False), one unit for the whole model; with
    `bf16`, MixedPrecision / MixedPrecisionPolicy with param and reduce dtype bf16."""
    import torch.distributed.fsdp as fsdp
    if version == 2:
        from torch.distributed.device_mesh import init_device_mesh
        extra = {"mp_policy": fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)}
        fsdp.fully_shard(model, mesh=init_device_mesh("cpu", (world,)), reshard_after_forward=strategy == "FULL_SHARD",
                         **(extra if bf16 else {}))
        return model
    mixed = fsdp.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if bf16 else None
    return fsdp.FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=True,
                                         sharding_strategy=getattr(fsdp.ShardingStrategy, strategy),
                                         mixed_precision=mixed)


def rank_rows(folder, rank, world):
    """This rank's rows of folder/batch.safetensors (an equal share of them, in order)."""
    from safetensors.torch import load_file
    batch = load_file(os.path.join(folder, "batch.safetensors"))
    rows = next(iter(batch.values())).shape[0]
    return {k: v[rank * rows // world:(rank + 1) * rows // world] for k, v in batch.items()}


def save_result(out, rank, losses, state):
    """Rank 0 writes a PyTorch run's per-step losses and final full state dict to `out`."""
    if rank != 0:
        return
    import json
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(out, "params.safetensors"))
    with open(os.path.join(out, "losses.json"), "w") as f:
        json.dump(losses, f)


def load_result(out):
    """What save_result wrote: (losses, {name: tensor})."""
    import json
    from safetensors.torch import load_file
    with open(os.path.join(out, "losses.json")) as f:
        return json.load(f), load_file(os.path.join(out, "params.safetensors"))
