#!/usr/bin/env python3
"""Configs, live: config files written by accelerate itself, read by `--fsdp-config`.

accelerate's ClusterConfig (what `accelerate config` fills in and saves) writes FSDP1 and
FSDP2 configs for 2 machines × 4 processes with bf16; `shardlab validate --print
--fsdp-config FILE` must accept each and resolve it to the same settings: world size,
precision, FSDP version, sharding strategy, prefetch, wrap policy and classes, offload,
state dict type, use_orig_params, sync_module_states, activation checkpointing. A config
that leaves every fsdp_* key out must resolve to what accelerate's
FullyShardedDataParallelPlugin holds by default (read from the installed accelerate),
whatever the scenario's fsdp section says.

Exit 0 when every config means the same to shardlab, 1 otherwise, 77 (ctest: skipped)
without the peer environment.
Usage: configs.py --shardlab build/bin/shardlab --scenario scenarios/default.yaml
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import accelerate
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import ComputeEnvironment, DistributedType
except ImportError as e:
    print(f"skipped: PyTorch peer not installed ({e}); run ./bootstrap peer")
    sys.exit(77)

COMMON = {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
          "fsdp_cpu_ram_efficient_loading": True, "fsdp_state_dict_type": "SHARDED_STATE_DICT",
          "fsdp_activation_checkpointing": True}
# (name, fsdp_config, what shardlab's canonical YAML must say)
CASES = [
    ("fsdp1_full_shard", {**COMMON, "fsdp_version": 1, "fsdp_sharding_strategy": "FULL_SHARD",
                          "fsdp_backward_prefetch": "BACKWARD_PRE", "fsdp_forward_prefetch": False,
                          "fsdp_offload_params": False, "fsdp_sync_module_states": True, "fsdp_use_orig_params": True},
     {"sharding_strategy": "FULL_SHARD", "backward_prefetch": "BACKWARD_PRE", "forward_prefetch": "false",
      "cpu_offload": "false", "sync_module_states": "true", "use_orig_params": "true", "fsdp_version": None}),
    ("fsdp1_shard_grad_op", {**COMMON, "fsdp_sharding_strategy": 2, "fsdp_backward_prefetch": "NO_PREFETCH",
                             "fsdp_offload_params": True, "fsdp_sync_module_states": False,
                             "fsdp_use_orig_params": False},
     {"sharding_strategy": "SHARD_GRAD_OP", "backward_prefetch": "NONE", "cpu_offload": "true",
      "sync_module_states": "false", "use_orig_params": "false", "fsdp_version": None}),
    ("fsdp2_reshard", {**COMMON, "fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_offload_params": False},
     {"sharding_strategy": "FULL_SHARD", "fsdp_version": "2"}),
    ("fsdp2_no_reshard", {**COMMON, "fsdp_version": 2, "fsdp_reshard_after_forward": False,
                          "fsdp_offload_params": False},
     {"sharding_strategy": "SHARD_GRAD_OP", "fsdp_version": "2"}),
]
EVERY = {"auto_wrap_policy": "transformer", "transformer_layer_cls_to_wrap": '["BertLayer"]',
         "state_dict_type": "SHARDED_STATE_DICT", "activation_checkpointing": "true", "precision": "bf16",
         "nodes": "2", "devices_per_node": "4"}


def plugin_defaults(version):
    """What accelerate's FullyShardedDataParallelPlugin(fsdp_version=version) holds when
    `accelerate launch` sets no other FSDP environment variable (a config whose only fsdp_*
    key is its version), in shardlab's spelling. FSDP2's plugin leaves the FSDP1-only
    settings (sharding_strategy, forward_prefetch, use_orig_params, sync_module_states)
    unset: its strategy is reshard_after_forward's, the others are not compared."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("FSDP_")}
    try:
        p = FullyShardedDataParallelPlugin(fsdp_version=version)
    finally:
        os.environ.update(saved)
    lower = lambda b: str(bool(b)).lower()  # noqa: E731
    wrap = {None: "none", "TRANSFORMER_BASED_WRAP": "transformer", "SIZE_BASED_WRAP": "size", "NO_WRAP": "none"}
    policy = p.auto_wrap_policy if p.auto_wrap_policy is None or isinstance(p.auto_wrap_policy, str) else "callable"
    offload = p.cpu_offload
    out = {"backward_prefetch": "NONE" if p.backward_prefetch is None else p.backward_prefetch.name,
           "cpu_offload": lower(offload.offload_params if hasattr(offload, "offload_params")
                                else type(offload).__name__ == "CPUOffloadPolicy"),
           "auto_wrap_policy": wrap.get(policy, policy), "state_dict_type": p.state_dict_type.name,
           "activation_checkpointing": lower(p.activation_checkpointing),
           "limit_all_gathers": lower(p.limit_all_gathers), "fsdp_version": None if version == 1 else "2"}
    if version == 1:
        out.update({"sharding_strategy": p.sharding_strategy.name, "forward_prefetch": lower(p.forward_prefetch),
                    "use_orig_params": lower(p.use_orig_params), "sync_module_states": lower(p.sync_module_states)})
    else:
        out["sharding_strategy"] = "FULL_SHARD" if p.reshard_after_forward is True else "SHARD_GRAD_OP"
    if getattr(p, "min_num_params", None) is not None:
        out["min_num_params"] = str(int(p.min_num_params))
    return out


def resolved(text):
    """The key: value lines of `validate --print` (sections flattened, last one wins)."""
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(":")
            out[key] = value.strip()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardlab", required=True)
    ap.add_argument("--scenario", required=True)
    a = ap.parse_args()
    print(f"accelerate {accelerate.__version__}")
    failed = 0
    # accelerate's own defaults: a config that leaves every fsdp_* key out means the plugin's
    # defaults, whatever the scenario's fsdp section says.
    cases = CASES + [("plugin_defaults_fsdp1", {}, plugin_defaults(1)),
                     ("plugin_defaults_fsdp2", {"fsdp_version": 2}, plugin_defaults(2))]
    with tempfile.TemporaryDirectory() as d:
        for name, fsdp, want in cases:
            path = os.path.join(d, name + ".yaml")
            ClusterConfig(compute_environment=ComputeEnvironment.LOCAL_MACHINE, distributed_type=DistributedType.FSDP,
                          mixed_precision="bf16", use_cpu=True, debug=False, num_processes=8, num_machines=2,
                          machine_rank=0, main_process_ip="10.0.0.1", main_process_port=29500,
                          fsdp_config=fsdp).to_yaml_file(path)
            done = subprocess.run([a.shardlab, "validate", "--print", a.scenario, "--fsdp-config", path],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{name}: refused (exit {done.returncode}): {done.stderr.strip()}")
                failed += 1
                continue
            got = resolved(done.stdout)
            sparse = name.startswith("plugin_defaults")
            every = {k: v for k, v in EVERY.items() if not sparse or not k.startswith(("transformer", "auto", "state",
                                                                                        "activation"))}
            wrong = [f"{k}: want {v}, got {got.get(k)}" for k, v in {**every, **want}.items() if got.get(k) != v]
            print(f"{name}: " + ("same settings" if not wrong else "DIFFERENT: " + "; ".join(wrong)))
            failed += bool(wrong)
    print("configs: " + ("every accelerate config means the same to shardlab" if not failed else f"{failed} differ"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
