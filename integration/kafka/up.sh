#!/usr/bin/env bash
# up.sh starts a single-node Apache Kafka (KRaft, broker+controller) on 127.0.0.1
# for integration tests, and prints KAFKA_BROKERS=127.0.0.1:PORT (and the lines
# of the secured listener below) on stdout (everything else goes to stderr), so
# a Makefile can eval it.
#
#   up.sh [--tv 0|2] [--name NAME] [--no-sasl-ssl]
#
#   --tv    the finalized transaction.version the cluster is formatted with:
#           0 = classic transactions, 2 = KIP-890 (epoch bump on every EndTxn).
#           Default 2.
#   --name  names the broker (state dir ${TMPDIR:-/tmp}/connect-eos-kafka-NAME);
#           default tv<N>. If that broker already runs, its lines are printed again.
#   --no-sasl-ssl  only the PLAINTEXT listener (no TLS material, no authorizer).
#
# Secured listener (on by default; integration/security_test.go, docs/security.md):
# a second client listener SASL_SSL on another free port, with a throwaway CA and
# broker certificate made with openssl in $STATE/tls (ca.pem for clients, a PKCS12
# keystore broker.p12 for the broker), SASL mechanisms PLAIN, SCRAM-SHA-256 and
# SCRAM-SHA-512, and three users with random passwords (the same password for
# every mechanism; SCRAM credentials made at format time, PLAIN ones in the
# listener's JAAS config), plus OAUTHBEARER with Kafka's unsecured validator
# (an unsigned JWT whose sub claim names the user: test only):
#   admin  super user
#   alice  allowed: the ACLs below on the prefix "sec-" (topics, groups, transactional ids)
#   bob    authenticates, has no ACL (tests grant him all but one, see security_test.go)
# A third listener, SSL on a third port, is mTLS: it requires a client certificate
# signed by the CA and maps its CN to the user (up.sh makes one for alice).
# The StandardAuthorizer is on, with super.users admin and ANONYMOUS: the
# PLAINTEXT listener (and inter-broker/controller traffic, also PLAINTEXT)
# authenticate nobody, so they act as ANONYMOUS and every other test runs as
# before. The extra stdout lines (after KAFKA_BROKERS=), also kept in
# $STATE/security.env:
#   KAFKA_SASL_SSL_BROKERS=127.0.0.1:PORT2
#   KAFKA_SSL_BROKERS=127.0.0.1:PORT3      (mTLS listener)
#   KAFKA_CA_FILE=$STATE/tls/ca.pem
#   KAFKA_CLIENT_CERT_FILE=$STATE/tls/client.pem   (CN=alice, signed by the CA)
#   KAFKA_CLIENT_KEY_FILE=$STATE/tls/client.key
#   KAFKA_SASL_ADMIN=admin:PASSWORD
#   KAFKA_SASL_ALLOWED=alice:PASSWORD
#   KAFKA_SASL_DENIED=bob:PASSWORD
#   KAFKA_SASL_ACL_PREFIX=sec-
# alice's ACLs (AclCommand at start, all PREFIXED on "sec-"; the least the
# exactly-once copy with the kafka_state cache needs, see docs/security.md):
# topic Read, Write, Create, DescribeConfigs; group Read; transactional-id Write
# (Read and Write imply Describe).
#
# Stop it with down.sh --name NAME (or down.sh --all: every broker this
# checkout started). State files (pid, brokers, security.env, up.env with the
# lines printed) are written atomically; "checkout" names the scripts dir that
# started the broker. See lib.sh for the knobs
# (KAFKA_VERSION, cache dir); KAFKA_HEAP (default -Xmx512m -Xms128m) and
# KAFKA_START_TIMEOUT (seconds, default 90) tune the broker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TV=2
NAME=
SECURE=1
while [[ $# -gt 0 ]]; do
	case $1 in
	--tv) TV=${2:?--tv needs 0 or 2} && shift 2 ;;
	--name) NAME=${2:?--name needs a value} && shift 2 ;;
	--no-sasl-ssl) SECURE=0 && shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2 && exit 0 ;;
	*) die "unknown argument $1 (usage: up.sh [--tv 0|2] [--name NAME] [--no-sasl-ssl])" ;;
	esac
done
[[ $TV == 0 || $TV == 2 ]] || die "--tv must be 0 or 2, not $TV"
NAME=${NAME:-tv$TV}
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "--name may hold only letters, digits, '.', '_' and '-'"
STATE=$(state_dir "$NAME")
TIMEOUT=${KAFKA_START_TIMEOUT:-90}

ensure_libs

# One up.sh at a time per name: a second run waits for the first (the lock,
# next to the state dir, is dropped when this script exits; the broker does
# not inherit it) and then reuses its broker.
mkdir -p "$KAFKA_STATE_ROOT"
if command -v flock >/dev/null; then
	exec 9>"$STATE.lock"
	flock -w "$TIMEOUT" 9 || die "another up.sh --name $NAME still holds $STATE.lock after ${TIMEOUT}s"
fi
# Idempotent: a broker already running under this name is reused as it is,
# with the lines of $STATE/up.env, which the run that started it writes at once
# (write_atomic) when the broker is ready.
if [[ -n $(owned_pid "$STATE") ]]; then
	if [[ -f $STATE/up.env ]]; then
		log "broker $NAME already running (pid $(owned_pid "$STATE"))"
		cat "$STATE/up.env"
		exit 0
	fi
	if [[ -f $STATE/brokers && ! -f $STATE/checkout ]]; then
		# Started by an up.sh older than up.env.
		log "broker $NAME already running (pid $(owned_pid "$STATE"))"
		echo "KAFKA_BROKERS=$(<"$STATE/brokers")"
		[[ ! -f $STATE/security.env ]] || cat "$STATE/security.env"
		exit 0
	fi
	die "broker $NAME runs (pid $(owned_pid "$STATE")) but the up.sh that started it did not finish; stop it with down.sh --name $NAME"
fi
rm -rf "$STATE"

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

# The secured listener's users, with passwords made once per up.sh run.
declare -A PASSWORDS
KS_PASSWORD=
ACL_PREFIX=sec-
if [[ $SECURE == 1 ]]; then
	command -v openssl >/dev/null || apt_install openssl
	for u in admin alice bob; do
		PASSWORDS[$u]=$(openssl rand -hex 16)
	done
	KS_PASSWORD=$(openssl rand -hex 16)
fi

# make_tls writes a throwaway CA and a broker certificate for 127.0.0.1 and
# localhost into $STATE/tls: ca.pem (the CA clients trust), broker.p12 (the
# broker's key and chain, PKCS12, password KS_PASSWORD). EC P-256 keys, valid
# 30 days; openssl only, so it costs no JVM start.
make_tls() {
	local d=$STATE/tls
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
		-keyout "$d/ca.key" -out "$d/ca.pem" -subj "/CN=connect-eos throwaway test CA" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
		>"$d/openssl.out" 2>&1
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$d/broker.key" -out "$d/broker.csr" -subj "/CN=localhost" >>"$d/openssl.out" 2>&1
	printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=critical,CA:FALSE' \
		'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' >"$d/broker.ext"
	openssl x509 -req -in "$d/broker.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 30 -extfile "$d/broker.ext" -out "$d/broker.pem" >>"$d/openssl.out" 2>&1
	# A client certificate (CN=alice) for the mTLS listener SSL, which
	# requires one signed by the CA and maps CN=alice to User:alice.
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$d/client.key" -out "$d/client.csr" -subj "/CN=alice" >>"$d/openssl.out" 2>&1
	printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
		'extendedKeyUsage=clientAuth' >"$d/client.ext"
	openssl x509 -req -in "$d/client.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 30 -extfile "$d/client.ext" -out "$d/client.pem" >>"$d/openssl.out" 2>&1
	openssl pkcs12 -export -in "$d/broker.pem" -inkey "$d/broker.key" -certfile "$d/ca.pem" \
		-name broker -out "$d/broker.p12" -passout "pass:$KS_PASSWORD" >>"$d/openssl.out" 2>&1
	rm -f "$d"/*.csr "$d"/*.ext "$d/ca.srl"
	chmod 600 "$d"/*.key "$d/broker.p12"
}

# secure_properties prints the server.properties lines of the SASL_SSL listener
# and the authorizer.
secure_properties() {
	local jaas='org.apache.kafka.common.security.plain.PlainLoginModule required' u
	for u in admin alice bob; do
		jaas+=" user_$u=\"${PASSWORDS[$u]}\""
	done
	cat <<-EOF
		# SASL_SSL listener (up.sh without --no-sasl-ssl): TLS with a throwaway CA,
		# SASL PLAIN and SCRAM; inter-broker and controller traffic stay PLAINTEXT.
		listener.name.sasl_ssl.ssl.keystore.type=PKCS12
		listener.name.sasl_ssl.ssl.keystore.location=$STATE/tls/broker.p12
		listener.name.sasl_ssl.ssl.keystore.password=$KS_PASSWORD
		listener.name.sasl_ssl.ssl.key.password=$KS_PASSWORD
		listener.name.sasl_ssl.ssl.client.auth=none
		listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
		listener.name.sasl_ssl.plain.sasl.jaas.config=$jaas;
		listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
		listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
		# OAUTHBEARER with Kafka's UNSECURED validator: any unsigned JWT (alg none)
		# with a sub claim and a future exp is accepted as User:<sub>. A test
		# stand-in for an identity provider; never use it in production.
		listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
		listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
		# SSL listener: mTLS, the client certificate is the identity (CN=alice
		# is User:alice).
		listener.name.ssl.ssl.keystore.type=PKCS12
		listener.name.ssl.ssl.keystore.location=$STATE/tls/broker.p12
		listener.name.ssl.ssl.keystore.password=$KS_PASSWORD
		listener.name.ssl.ssl.key.password=$KS_PASSWORD
		listener.name.ssl.ssl.client.auth=required
		listener.name.ssl.ssl.truststore.type=PEM
		listener.name.ssl.ssl.truststore.location=$STATE/tls/ca.pem
		ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
		# ACLs are enforced. PLAINTEXT connections are ANONYMOUS: a super user, so
		# every test on the PLAINTEXT listener runs as without an authorizer.
		authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
		super.users=User:admin;User:ANONYMOUS
		allow.everyone.if.no.acl.found=false
	EOF
}

# grant_acls gives alice the ACLs of the exactly-once copy on everything named
# with ACL_PREFIX (three AclCommand runs at once, over PLAINTEXT as ANONYMOUS).
grant_acls() {
	local bs=$1 pids=() p rc=0
	local common=(--bootstrap-server "$bs" --add --force --allow-principal User:alice --resource-pattern-type prefixed)
	bash "$KAFKA_DIR/tool.sh" AclCommand "${common[@]}" --topic "$ACL_PREFIX" \
		--operation Read --operation Write --operation Create --operation DescribeConfigs \
		>"$STATE/acl-topic.out" 2>&1 &
	pids+=($!)
	bash "$KAFKA_DIR/tool.sh" AclCommand "${common[@]}" --group "$ACL_PREFIX" \
		--operation Read >"$STATE/acl-group.out" 2>&1 &
	pids+=($!)
	bash "$KAFKA_DIR/tool.sh" AclCommand "${common[@]}" --transactional-id "$ACL_PREFIX" \
		--operation Write >"$STATE/acl-txn.out" 2>&1 &
	pids+=($!)
	for p in "${pids[@]}"; do
		wait "$p" || rc=1
	done
	[[ $rc == 0 ]] || fail "AclCommand failed: $(cat "$STATE"/acl-*.out)"
}

# start_once writes the config, formats storage and starts the JVM with fresh
# ports. Sets RETRY=1 if a port was taken between picking and binding.
start_once() {
	RETRY=0
	rm -rf "$STATE"
	mkdir -p "$STATE/data" "$STATE/logs"
	echo "$KAFKA_CHECKOUT" | write_atomic "$STATE/checkout"
	local port cport
	port=$(pick_port)
	cport=$(pick_port "$port")

	local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
	local advertised="PLAINTEXT://127.0.0.1:$port"
	local protocol_map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	local extra="" scram=()
	SPORT= MPORT=
	if [[ $SECURE == 1 ]]; then
		SPORT=$(pick_port "$port" "$cport")
		MPORT=$(pick_port "$port" "$cport" "$SPORT")
		listeners+=",SASL_SSL://127.0.0.1:$SPORT,SSL://127.0.0.1:$MPORT"
		advertised+=",SASL_SSL://127.0.0.1:$SPORT,SSL://127.0.0.1:$MPORT"
		protocol_map+=",SASL_SSL:SASL_SSL,SSL:SSL"
		make_tls
		extra=$(secure_properties)
		local u
		for u in admin alice bob; do
			scram+=(--add-scram "SCRAM-SHA-256=[name=$u,password=${PASSWORDS[$u]}]"
				--add-scram "SCRAM-SHA-512=[name=$u,password=${PASSWORDS[$u]}]")
		done
	fi

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
		# Check retention every 2 seconds (default 5 minutes), so that a test of
		# what retention deletes is quick.
		log.retention.check.interval.ms=2000
		$extra
	EOF

	local id
	id=$(kafka_java kafka.tools.StorageTool random-uuid)
	kafka_java kafka.tools.StorageTool format --standalone -t "$id" -c "$STATE/server.properties" \
		--feature "transaction.version=$TV" "${scram[@]}" >"$STATE/format.out" 2>&1 ||
		fail "formatting storage failed: $(cat "$STATE/format.out")"

	launch_broker "$STATE" "${KAFKA_HEAP:--Xmx512m -Xms128m}"
	PID=$!
	echo "127.0.0.1:$port" | write_atomic "$STATE/brokers"
	[[ -z $SPORT ]] || echo "127.0.0.1:$SPORT" | write_atomic "$STATE/brokers-sasl-ssl"
	[[ -z $MPORT ]] || echo "127.0.0.1:$MPORT" | write_atomic "$STATE/brokers-ssl"
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

if [[ $SECURE == 1 ]]; then
	grant_acls "$(<"$STATE/brokers")"
	write_atomic "$STATE/security.env" 600 <<-EOF
		KAFKA_SASL_SSL_BROKERS=$(<"$STATE/brokers-sasl-ssl")
		KAFKA_SSL_BROKERS=$(<"$STATE/brokers-ssl")
		KAFKA_CA_FILE=$STATE/tls/ca.pem
		KAFKA_CLIENT_CERT_FILE=$STATE/tls/client.pem
		KAFKA_CLIENT_KEY_FILE=$STATE/tls/client.key
		KAFKA_SASL_ADMIN=admin:${PASSWORDS[admin]}
		KAFKA_SASL_ALLOWED=alice:${PASSWORDS[alice]}
		KAFKA_SASL_DENIED=bob:${PASSWORDS[bob]}
		KAFKA_SASL_ACL_PREFIX=$ACL_PREFIX
	EOF
	log "SASL_SSL listener on $(<"$STATE/brokers-sasl-ssl"), mTLS listener on $(<"$STATE/brokers-ssl") (CA $STATE/tls/ca.pem, users admin, alice, bob)"
fi

# The lines printed, also for a later up.sh of this name (above): written at
# once, 600 as they hold the passwords.
{
	echo "KAFKA_BROKERS=$(<"$STATE/brokers")"
	[[ ! -f $STATE/security.env ]] || cat "$STATE/security.env"
} | write_atomic "$STATE/up.env" 600
trap - EXIT
cat "$STATE/up.env"
