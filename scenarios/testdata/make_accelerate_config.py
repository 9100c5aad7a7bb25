"""Writes accelerate_fsdp_config.yaml as `accelerate config` does for an FSDP run.

accelerate's ClusterConfig.to_yaml_file is yaml.safe_dump(config_dict, file): sorted keys,
block style, 'no' quoted. The dict below holds the keys `accelerate config` asks for an FSDP
run on one machine (accelerate 0.3x/1.x). Rerun to regenerate: python3 make_accelerate_config.py
"""
import pathlib

import yaml

config = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "distributed_type": "FSDP",
    "downcast_bf16": "no",
    "enable_cpu_affinity": False,
    "fsdp_config": {
        "fsdp_activation_checkpointing": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_POST",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_forward_prefetch": True,
        "fsdp_offload_params": False,
        "fsdp_sharding_strategy": "SHARD_GRAD_OP",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
        "fsdp_use_orig_params": True,
    },
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 4,
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": False,
}

out = pathlib.Path(__file__).with_name("accelerate_fsdp_config.yaml")
with open(out, "w") as f:
    yaml.safe_dump(config, f)
