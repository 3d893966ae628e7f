#!/usr/bin/env bash
# soak-cluster.sh runs the chaos suite's cluster variant (TestChaosCluster)
# N times on both transaction versions, each time on a fresh 3-node cluster
# per version, appends every run's summary line to a file, and prints a
# tally: runs passed, duplicates and missing summed, and the p50/p99 of the
# transaction coordinator failover times (coord_failover_ms: from a
# coordinator's kill -9 until its slot commits again).
#
#   integration/chaos/soak-cluster.sh [N] [SUMMARY_FILE]
#
# N defaults to 10: 10 invocations x 2 versions x 2 runs (k2k/2to3,
# dedupe/2to3) = 20 runs per transaction version, about 14 minutes per
# invocation on a quiet 2-core machine. SUMMARY_FILE defaults to
# chaos-cluster-summary.txt; the go test output of invocation i goes to
# SUMMARY_FILE.i.log. Any CHAOS_* knob in the environment applies (e.g.
# CHAOS_CLUSTER_TVS=2 for one version). Exits non-zero if any invocation
# failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

N=${1:-10}
OUT=${2:-chaos-cluster-summary.txt}
[[ $OUT == /* ]] || OUT=$PWD/$OUT
export CHAOS=1 CHAOS_CLUSTER_TVS=${CHAOS_CLUSTER_TVS:-0,2} CHAOS_SUMMARY=$OUT
if [[ -z ${CONNECT_EOS_BIN:-} ]]; then
	mkdir -p bin
	go build -o bin/connect-eos ./cmd/connect-eos || exit 1
	export CONNECT_EOS_BIN=$PWD/bin/connect-eos
fi

failed=0
for ((i = 1; i <= N; i++)); do
	start=$SECONDS
	if go test -count=1 -run '^TestChaosCluster$' -v -timeout 60m ./integration/chaos >"$OUT.$i.log" 2>&1; then
		echo "soak-cluster: invocation $i of $N passed in $((SECONDS - start)) s" >&2
	else
		failed=$((failed + 1))
		echo "soak-cluster: invocation $i of $N FAILED in $((SECONDS - start)) s (see $OUT.$i.log)" >&2
	fi
done

# The tally, from the summary lines (a failed run prints none: its
# invocation's log says why).
awk -v failed="$failed" -v n="$N" '
# rank is the nearest-rank percentile index (1-based) of p among n values.
function rank(p, n,   r) { r = int(p * n); if (r < p * n) r++; return r < 1 ? 1 : r }
/^chaos: .*cluster_nodes=3/ {
	runs++
	for (i = 1; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[1] == "duplicates" && $0 !~ /mode=plain/) dups += kv[2]
		if (kv[1] == "missing") miss += kv[2]
		if (kv[1] == "tv") tv[kv[2]]++
		if (kv[1] == "hanging_found") hang += kv[2]
		if (kv[1] == "hanging_closed") closed += kv[2]
	}
	if (match($0, /coord_failover_ms=\[[0-9 ]*\]/)) {
		s = substr($0, RSTART + 19, RLENGTH - 20)
		m = split(s, ms, " ")
		for (j = 1; j <= m; j++) if (ms[j] != "") f[++nf] = ms[j] + 0
	}
}
END {
	printf "soak-cluster: %d invocations, %d failed; %d summary lines (tv0: %d, tv2: %d); duplicates %d, missing %d; hanging transactions found %d, closed %d\n", n, failed, runs, tv[0], tv[2], dups, miss, hang, closed
	if (nf == 0) { print "soak-cluster: no coordinator failover measured"; exit }
	for (i = 1; i <= nf; i++) for (j = i + 1; j <= nf; j++) if (f[j] < f[i]) { t = f[i]; f[i] = f[j]; f[j] = t }
	p50 = f[rank(0.50, nf)]; p99 = f[rank(0.99, nf)]
	printf "soak-cluster: coordinator failover over %d kills: p50 %d ms, p99 %d ms, min %d ms, max %d ms\n", nf, p50, p99, f[1], f[nf]
}' "$OUT"
[[ $failed == 0 ]]
