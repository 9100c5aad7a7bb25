#!/usr/bin/env bash
# NOTE [Checkpoint integrity] + NOTE [Agreeing on bad input]: a checkpoint whose rank-1
# shard file changed after it was saved is refused on resume with exit 2, the changed
# file named first — not a screen of other ranks' timeouts and exit 3.
#   tampered_resume.sh SHARDLAB SCENARIO WORKDIR
set -u
exe=$1 scenario=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
common=(--set world.devices_per_node=2 --set fsdp.state_dict_type=SHARDED_STATE_DICT --set checkpoint.dir=ckpt)
"$exe" run "$scenario" "${common[@]}" --set train.steps=1 --out save > save.log 2>&1 || { cat save.log; exit 1; }
file=ckpt/step-00000001/rank-00001.safetensors
size=$(stat -c %s "$file")
printf '\x5a' | dd of="$file" bs=1 seek=$((size - 3)) conv=notrunc status=none
"$exe" run "$scenario" "${common[@]}" --set train.steps=2 --set checkpoint.resume=true --out resumed > out.log 2> err.log
rc=$?
first=$(head -1 err.log)
if [ "$rc" -ne 2 ] || [[ "$first" != *"rank-00001.safetensors: checksum mismatch"* ]]; then
  echo "FAIL: exit $rc; stderr:"; cat err.log; exit 1
fi
echo "ok: exit 2; $first"
