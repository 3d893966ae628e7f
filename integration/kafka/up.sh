#!/usr/bin/env bash
# up.sh starts a single-node Apache Kafka (KRaft, broker+controller) on 127.0.0.1
# for integration tests, and prints one line, KAFKA_BROKERS=127.0.0.1:PORT, on
# stdout (everything else goes to stderr), so a Makefile can eval it.
#
#   up.sh [--tv 0|2] [--name NAME]
#
#   --tv    the finalized transaction.version the cluster is formatted with:
#           0 = classic transactions, 2 = KIP-890 (epoch bump on every EndTxn).
#           Default 2.
#   --name  names the broker (state dir ${TMPDIR:-/tmp}/connect-eos-kafka-NAME);
#           default tv<N>. If that broker already runs, its address is printed again.
#
# Stop it with down.sh --name NAME (or down.sh --all). See lib.sh for the knobs
# (KAFKA_VERSION, cache dir); KAFKA_HEAP (default -Xmx512m -Xms128m) and
# KAFKA_START_TIMEOUT (seconds, default 90) tune the broker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TV=2
NAME=
while [[ $# -gt 0 ]]; do
	case $1 in
	--tv) TV=${2:?--tv needs 0 or 2} && shift 2 ;;
	--name) NAME=${2:?--name needs a value} && shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2 && exit 0 ;;
	*) die "unknown argument $1 (usage: up.sh [--tv 0|2] [--name NAME])" ;;
	esac
done
[[ $TV == 0 || $TV == 2 ]] || die "--tv must be 0 or 2, not $TV"
NAME=${NAME:-tv$TV}
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "--name may hold only letters, digits, '.', '_' and '-'"
STATE=$(state_dir "$NAME")
TIMEOUT=${KAFKA_START_TIMEOUT:-90}

ensure_libs

# Idempotent: a broker already running under this name is reused as it is.
if [[ -n $(owned_pid "$STATE") && -f $STATE/brokers ]]; then
	log "broker $NAME already running (pid $(owned_pid "$STATE"))"
	echo "KAFKA_BROKERS=$(<"$STATE/brokers")"
	exit 0
fi
rm -rf "$STATE"

# port_free: nothing accepts connections on 127.0.0.1:$1. Ports come from below
# Linux's ephemeral range (32768+) so outgoing connections do not take them.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12000))
		if [[ " $* " != *" $p "* ]] && port_free "$p"; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

PID=
# On any failure: show why, kill the broker this run started, leave nothing behind.
fail() {
	trap - EXIT
	log "error: $*"
	for f in server.log kafka.out; do
		[[ -s $STATE/$f ]] && log "--- last lines of $STATE/$f:" && tail -n 40 "$STATE/$f" >&2
	done
	if [[ -n $PID ]]; then
		kill -KILL "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$STATE"
	exit 1
}
set -o errtrace # the ERR trap below also fires inside functions
failed_at=
trap 'failed_at=$LINENO' ERR
trap 'fail "up.sh ${failed_at:+failed at line }${failed_at:-interrupted}"' EXIT
trap 'exit 1' INT TERM HUP # run the EXIT trap on signals too

# start_once writes the config, formats storage and starts the JVM with fresh
# ports. Sets RETRY=1 if a port was taken between picking and binding.
start_once() {
	RETRY=0
	rm -rf "$STATE"
	mkdir -p "$STATE/data" "$STATE/logs"
	local port cport
	port=$(pick_port)
	cport=$(pick_port "$port")

	# Listeners. The SASL_SSL listener (security issue) goes here: pick a third
	# port, append SASL_SSL://127.0.0.1:$sport to listeners and advertised,
	# SASL_SSL:SASL_SSL to protocol_map, its ssl.* / sasl.* / listener.name.sasl_ssl.*
	# settings to extra (SCRAM users: StorageTool format --add-scram), and print a KAFKA_BROKERS_SASL_SSL= line next to KAFKA_BROKERS= below.
	local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
	local advertised="PLAINTEXT://127.0.0.1:$port"
	local protocol_map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	local extra=""

	cat >"$STATE/server.properties" <<-EOF
		# Written by integration/kafka/up.sh --tv $TV --name $NAME (Kafka $KAFKA_VERSION)
		process.roles=broker,controller
		node.id=1
		controller.quorum.bootstrap.servers=127.0.0.1:$cport
		controller.listener.names=CONTROLLER
		inter.broker.listener.name=PLAINTEXT
		listeners=$listeners
		advertised.listeners=$advertised
		listener.security.protocol.map=$protocol_map
		log.dirs=$STATE/data

		# Single node: every internal topic has one replica.
		offsets.topic.replication.factor=1
		transaction.state.log.replication.factor=1
		transaction.state.log.min.isr=1
		share.coordinator.state.topic.replication.factor=1
		share.coordinator.state.topic.min.isr=1
		# Fewer internal partitions than the default 50: faster first use on small machines.
		offsets.topic.num.partitions=10
		transaction.state.log.num.partitions=10

		# Tests create their topics explicitly (with the partition count they need).
		auto.create.topics.enable=false
		num.partitions=1
		group.initial.rebalance.delay.ms=0

		# Check for timed-out transactions and expired transactional ids every second
		# (defaults 10 s and 1 h), so transaction timeout tests are quick.
		transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
		transaction.remove.expired.transaction.cleanup.interval.ms=1000
		$extra
	EOF

	local id
	id=$(kafka_java kafka.tools.StorageTool random-uuid)
	kafka_java kafka.tools.StorageTool format --standalone -t "$id" -c "$STATE/server.properties" \
		--feature "transaction.version=$TV" >"$STATE/format.out" 2>&1 ||
		fail "formatting storage failed: $(cat "$STATE/format.out")"

	# shellcheck disable=SC2086 # KAFKA_HEAP holds several JVM flags
	nohup "$JAVA" ${KAFKA_HEAP:--Xmx512m -Xms128m} -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dkafka.logs.dir="$STATE/logs" \
		-Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-broker.properties" \
		-cp "$KAFKA_LIBS/*" kafka.Kafka "$STATE/server.properties" \
		</dev/null >"$STATE/kafka.out" 2>&1 &
	PID=$!
	echo "$PID" >"$STATE/pid"
	echo "127.0.0.1:$port" >"$STATE/brokers"
	ln -sf logs/server.log "$STATE/server.log"
	log "started broker $NAME pid $PID on 127.0.0.1:$port (controller $cport), transaction.version=$TV, Kafka $KAFKA_VERSION"

	# Ready = the broker answers Metadata and DescribeFeatures (FeatureCommand does
	# both). Wait for the port first: each tool run costs a JVM start.
	local deadline=$((SECONDS + TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! alive "$PID"; then
			if grep -qs 'Address already in use' "$STATE/server.log" "$STATE/kafka.out"; then
				RETRY=1
				return 0
			fi
			fail "broker exited during start"
		fi
		if ! port_free "$port" &&
			timeout $((deadline - SECONDS < 30 ? deadline - SECONDS + 1 : 30)) bash "$KAFKA_DIR/tool.sh" \
				FeatureCommand --bootstrap-server "127.0.0.1:$port" describe >"$STATE/features.out" 2>/dev/null; then
			return 0
		fi
		sleep 0.5
	done
	fail "broker not ready after ${TIMEOUT}s"
}

export JAVA # tool.sh reuses it
for attempt in 1 2 3; do
	start_once
	[[ $RETRY == 0 ]] && break
	log "port taken while starting (attempt $attempt), retrying with other ports"
	wait "$PID" 2>/dev/null || true
	PID=
done
[[ $RETRY == 0 ]] || fail "could not bind free ports"

# The cluster must run the transaction version asked for. FeatureCommand prints
# "Feature: transaction.version ... FinalizedVersionLevel: N ...".
level=$(awk '$1 == "Feature:" && $2 == "transaction.version" {
	for (i = 3; i <= NF; i++) if ($i == "FinalizedVersionLevel:") print $(i + 1) }' "$STATE/features.out")
[[ ${level:-0} == "$TV" ]] || fail "finalized transaction.version is ${level:-unset}, want $TV: $(cat "$STATE/features.out")"
log "broker $NAME ready: $(grep -h 'transaction.version' "$STATE/features.out" | tr -s '\t ' ' ')"

trap - EXIT
echo "KAFKA_BROKERS=$(<"$STATE/brokers")"
