#!/usr/bin/env bash
# up-cluster.sh starts a 3-node Apache Kafka cluster on 127.0.0.1 for the tests
# that need the topology users run: KRaft with a controller quorum of 3 (every
# node is broker and controller, so one JVM per node), replication factor 3 and
# min.insync.replicas 2 for the internal topics and as the default for every
# topic created without a replication factor. It prints
# KAFKA_BROKERS=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 and
# KAFKA_CLUSTER_STATE=<state dir> on stdout (everything else goes to stderr).
#
#   up-cluster.sh [--tv 0|2] [--name NAME]
#
#   --tv    the finalized transaction.version (0 classic, 2 KIP-890). Default 2.
#   --name  names the cluster (state dir ${TMPDIR:-/tmp}/connect-eos-kafka-NAME);
#           default cluster-tv<N>. If it already runs, its lines are printed again.
#
# PLAINTEXT only (no secured listener, no authorizer): the single-node broker
# of up.sh covers security. Each node has a small heap (KAFKA_CLUSTER_HEAP,
# default -Xmx384m -Xms64m), so the three fit a 2-core machine beside the
# tests; KAFKA_START_TIMEOUT (seconds, default 120) bounds the start.
#
# Layout of the state dir: checkout, cluster (the node count), brokers,
# up.env (the lines printed), and one dir per node, n1 n2 n3, laid out like
# up.sh's state dir (server.properties, pid, data, logs/server.log, kafka.out,
# broker = its own host:port), so lib.sh's owned_pid and stop_broker work on a
# node. node.sh stops, kills (-9) and restarts one node by index for the chaos
# suite; down.sh --name NAME stops the whole cluster (down.sh --all too).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TV=2
NAME=
NODES=3
while [[ $# -gt 0 ]]; do
	case $1 in
	--tv) TV=${2:?--tv needs 0 or 2} && shift 2 ;;
	--name) NAME=${2:?--name needs a value} && shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2 && exit 0 ;;
	*) die "unknown argument $1 (usage: up-cluster.sh [--tv 0|2] [--name NAME])" ;;
	esac
done
[[ $TV == 0 || $TV == 2 ]] || die "--tv must be 0 or 2, not $TV"
NAME=${NAME:-cluster-tv$TV}
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "--name may hold only letters, digits, '.', '_' and '-'"
STATE=$(state_dir "$NAME")
TIMEOUT=${KAFKA_START_TIMEOUT:-120}
HEAP=${KAFKA_CLUSTER_HEAP:--Xmx384m -Xms64m}

ensure_libs

mkdir -p "$KAFKA_STATE_ROOT"
if command -v flock >/dev/null; then
	exec 9>"$STATE.lock"
	flock -w "$TIMEOUT" 9 || die "another up-cluster.sh --name $NAME still holds $STATE.lock after ${TIMEOUT}s"
fi
if [[ -f $STATE/cluster ]]; then
	running=0
	for ((i = 1; i <= $(<"$STATE/cluster"); i++)); do
		[[ -z $(owned_pid "$STATE/n$i") ]] || running=$((running + 1))
	done
	if ((running > 0)) && [[ -f $STATE/up.env ]]; then
		log "cluster $NAME already running ($running nodes)"
		cat "$STATE/up.env"
		exit 0
	fi
	((running == 0)) || die "cluster $NAME runs but the up-cluster.sh that started it did not finish; stop it with down.sh --name $NAME"
fi
rm -rf "$STATE"

fail() {
	trap - EXIT
	log "error: $*"
	local d
	for d in "$STATE"/n*; do
		[[ -s $d/logs/server.log ]] && log "--- last lines of $d/logs/server.log:" && tail -n 20 "$d/logs/server.log" >&2
		[[ -s $d/kafka.out ]] && log "--- last lines of $d/kafka.out:" && tail -n 20 "$d/kafka.out" >&2
	done
	kill_all
	rm -rf "$STATE"
	exit 1
}
kill_all() {
	local d pid
	for d in "$STATE"/n*; do
		pid=$(owned_pid "$d")
		[[ -z $pid ]] || kill -KILL "$pid" 2>/dev/null || true
	done
	for d in "$STATE"/n*; do
		[[ -f $d/pid ]] && wait "$(<"$d/pid")" 2>/dev/null || true
	done
}
set -o errtrace
failed_at=
trap 'failed_at=$LINENO' ERR
trap 'fail "up-cluster.sh ${failed_at:+failed at line }${failed_at:-interrupted}"' EXIT
trap 'exit 1' INT TERM HUP

# node_properties N PORT CPORT VOTERS prints node N's server.properties.
node_properties() {
	local n=$1 port=$2 cport=$3 voters=$4
	cat <<-EOF
		# Written by integration/kafka/up-cluster.sh --tv $TV --name $NAME (Kafka $KAFKA_VERSION), node $n of $NODES
		process.roles=broker,controller
		node.id=$n
		controller.quorum.voters=$voters
		controller.listener.names=CONTROLLER
		inter.broker.listener.name=PLAINTEXT
		listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
		advertised.listeners=PLAINTEXT://127.0.0.1:$port
		listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
		log.dirs=$STATE/n$n/data

		# The production topology: three replicas, two of them in sync for a
		# write to be acknowledged (acks=all), for the internal topics and as
		# the default of every topic created without a replication factor.
		default.replication.factor=3
		min.insync.replicas=2
		offsets.topic.replication.factor=3
		transaction.state.log.replication.factor=3
		transaction.state.log.min.isr=2
		share.coordinator.state.topic.replication.factor=3
		share.coordinator.state.topic.min.isr=2
		# Fewer internal partitions than the default 50: faster first use on small
		# machines (10 still spreads the coordinators over the three nodes).
		offsets.topic.num.partitions=10
		transaction.state.log.num.partitions=10

		auto.create.topics.enable=false
		num.partitions=1
		group.initial.rebalance.delay.ms=0
		transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
		transaction.remove.expired.transaction.cleanup.interval.ms=1000

		# A restarted node gets its preferred leaderships back (and with them the
		# coordinators of its partitions) within seconds, as production
		# clusters do within the default 5 minutes.
		leader.imbalance.check.interval.seconds=10

		# Fewer threads than the defaults (8 I/O, 3 network): three JVMs share
		# two cores with the tests.
		num.io.threads=4
		num.network.threads=2
		background.threads=4
	EOF
}

# start_once formats and starts every node with fresh ports; sets RETRY=1 if
# a port was taken between picking and binding.
start_once() {
	RETRY=0
	kill_all
	rm -rf "$STATE"
	mkdir -p "$STATE"
	echo "$KAFKA_CHECKOUT" | write_atomic "$STATE/checkout"
	echo "$NODES" | write_atomic "$STATE/cluster"
	local taken=() ports=() cports=() n voters="" brokers=""
	for ((n = 1; n <= NODES; n++)); do
		ports[n]=$(pick_port "${taken[@]}")
		taken+=("${ports[n]}")
		cports[n]=$(pick_port "${taken[@]}")
		taken+=("${cports[n]}")
		voters+="${voters:+,}$n@127.0.0.1:${cports[n]}"
		brokers+="${brokers:+,}127.0.0.1:${ports[n]}"
	done
	local id
	id=$(kafka_java kafka.tools.StorageTool random-uuid)
	for ((n = 1; n <= NODES; n++)); do
		local d=$STATE/n$n
		mkdir -p "$d/data" "$d/logs"
		echo "$KAFKA_CHECKOUT" | write_atomic "$d/checkout"
		node_properties "$n" "${ports[n]}" "${cports[n]}" "$voters" >"$d/server.properties"
		echo "127.0.0.1:${ports[n]}" | write_atomic "$d/broker"
		echo "$HEAP" | write_atomic "$d/heap"
	done
	# Format the three log dirs at once (one JVM each).
	local pids=() rc=0 p
	for ((n = 1; n <= NODES; n++)); do
		kafka_java kafka.tools.StorageTool format -t "$id" -c "$STATE/n$n/server.properties" \
			--feature "transaction.version=$TV" >"$STATE/n$n/format.out" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || rc=1
	done
	[[ $rc == 0 ]] || fail "formatting storage failed: $(cat "$STATE"/n*/format.out)"
	for ((n = 1; n <= NODES; n++)); do
		launch_broker "$STATE/n$n" "$HEAP"
		ln -sf logs/server.log "$STATE/n$n/server.log"
	done
	echo "$brokers" | write_atomic "$STATE/brokers"
	log "started cluster $NAME: nodes at $brokers (controllers $voters), transaction.version=$TV, Kafka $KAFKA_VERSION"

	# Ready = every node listens, all three are in the metadata
	# (BrokerApiVersionsCommand prints a line per broker "host:port (id: N
	# rack: ...) -> (") and the features are finalized (FeatureCommand).
	local deadline=$((SECONDS + TIMEOUT)) up
	while ((SECONDS < deadline)); do
		up=0
		for ((n = 1; n <= NODES; n++)); do
			if ! alive "$(<"$STATE/n$n/pid")"; then
				if grep -qs 'Address already in use' "$STATE/n$n/logs/server.log" "$STATE/n$n/kafka.out"; then
					RETRY=1
					return 0
				fi
				fail "node $n exited during start"
			fi
			port_free "${ports[n]}" || up=$((up + 1))
		done
		if ((up == NODES)) &&
			timeout 60 bash "$KAFKA_DIR/tool.sh" BrokerApiVersionsCommand --bootstrap-server "$brokers" \
				>"$STATE/api-versions.out" 2>/dev/null &&
			(($(grep -c '(id: ' "$STATE/api-versions.out") == NODES)) &&
			timeout 60 bash "$KAFKA_DIR/tool.sh" FeatureCommand --bootstrap-server "$brokers" describe \
				>"$STATE/features.out" 2>/dev/null; then
			return 0
		fi
		sleep 1
	done
	fail "cluster not ready after ${TIMEOUT}s"
}

export JAVA
for attempt in 1 2 3; do
	start_once
	[[ $RETRY == 0 ]] && break
	log "port taken while starting (attempt $attempt), retrying with other ports"
done
[[ $RETRY == 0 ]] || fail "could not bind free ports"

level=$(awk '$1 == "Feature:" && $2 == "transaction.version" {
	for (i = 3; i <= NF; i++) if ($i == "FinalizedVersionLevel:") print $(i + 1) }' "$STATE/features.out")
[[ ${level:-0} == "$TV" ]] || fail "finalized transaction.version is ${level:-unset}, want $TV: $(cat "$STATE/features.out")"
log "cluster $NAME ready: $NODES brokers, $(grep -h 'transaction.version' "$STATE/features.out" | tr -s '\t ' ' ')"

{
	echo "KAFKA_BROKERS=$(<"$STATE/brokers")"
	echo "KAFKA_CLUSTER_STATE=$STATE"
} | write_atomic "$STATE/up.env"
trap - EXIT
cat "$STATE/up.env"
