#!/usr/bin/env bash
# Runs inside the soft-RoCE VM (tools/softroce/ferry-vm): the parameter server and the trainer
# over verbs on rxe0. The data transport listens on the rxe netdev's address (FERRY_DATA_HOST:
# rdma_cm cannot use lo); the control plane stays on 127.0.0.1.
#   vm-ps.sh PS_JOB_TEST FERRY_GEN FERRY_TRAIN FERRY_PREDICT
set -euo pipefail
ps_job_test=$1 ferry_gen=$2 ferry_train=$3 ferry_predict=$4
export FERRY_DATA_HOST=${FERRY_RDMA_ADDR:?run me inside tools/softroce/ferry-vm}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== ps_job_test over verbs"
# The emulated fabric is slow: the data-path, optimizer, BSP and error-reply cases, not the
# whole matrix (the host runs all of it over tcp and ucx).
FERRY_TEST_BACKENDS=verbs "$ps_job_test" --gtest_filter='Backends/PsJob.*:Backends/OptimizerJob.*bsp2:*BspPullSeesExactly*:*PullsAreChunkedAcrossServers*:*Fp16*:*BadRequestsGetErrorReplies*:*TicketsReleasedOutOfOrder*:*ColocatedRoles*:Backends/PsOneSided.RowsEqualTheRequestPathsAcrossServers*:Backends/PsOneSided.MixedCachedAndUncachedKeys*:Backends/PsOneSided.StaleDescriptorAfterGrowthFallsBack*'
echo "== ps_job_test over ucx on rc_verbs"
FERRY_TEST_BACKENDS=ucx-rc "$ps_job_test" --gtest_filter='Backends/PsJob.*:*PullsAreChunkedAcrossServers*'

echo "== ferry-train over verbs: fm on 2 servers + 2 workers"
"$ferry_gen" --samples 20000 --test-samples 4000 --out "$work/tr.svm" --test-out "$work/te.svm" \
  --truth fm --seed 5 -q
"$ferry_train" --transport verbs --model fm --train "$work/tr.svm" --test "$work/te.svm" \
  --metrics-json "$work/m.jsonl" --model-out "$work/fm.model" --progress never
final=$(tail -n1 "$work/m.jsonl")
echo "$final"
python3 - "$final" <<'PY'
import json, sys
m = json.loads(sys.argv[1])
assert m["event"] == "final", m
assert m["test_samples"] == 4000, m
assert m["auc"] > 0.6, f"AUC {m['auc']} over verbs is not a trained model"
PY
"$ferry_predict" "$work/fm.model" "$work/te.svm" -o "$work/p.txt" --summary
test "$(wc -l <"$work/p.txt")" -eq 4000
echo "PS OVER VERBS OK"
