# Shared by up.sh, down.sh and tool.sh; source it, do not run it.
#
# Knobs (environment):
#   KAFKA_VERSION     Apache Kafka release to resolve from Maven Central (default below).
#   KAFKA_CACHE_DIR   where resolved jars live (default ${XDG_CACHE_HOME:-$HOME/.cache}/connect-eos).
#   KAFKA_STATE_ROOT  parent of the per-broker state dirs (default ${TMPDIR:-/tmp}).
#   JAVA              java binary to use (default: java on PATH, installed with apt-get if missing).

KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}
KAFKA_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# This checkout's scripts dir, symlinks resolved: up.sh writes it into a
# broker's state dir (file "checkout"), and down.sh --all stops only the
# brokers whose state dir names this checkout (others' brokers on a shared
# machine share KAFKA_STATE_ROOT).
KAFKA_CHECKOUT=$(cd "$KAFKA_DIR" && pwd -P)
KAFKA_CACHE_DIR=${KAFKA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/connect-eos}
KAFKA_LIBS=$KAFKA_CACHE_DIR/kafka-$KAFKA_VERSION/libs
KAFKA_STATE_ROOT=${KAFKA_STATE_ROOT:-${TMPDIR:-/tmp}}
# Every state dir starts with this prefix; down.sh --all looks there (and then
# at each dir's "checkout" file).
KAFKA_STATE_PREFIX=$KAFKA_STATE_ROOT/connect-eos-kafka-

log() { echo "kafka: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

state_dir() { echo "$KAFKA_STATE_PREFIX$1"; }

# write_atomic FILE [MODE] writes stdin to FILE through a temporary file in the
# same dir and a rename (MODE, default 644, set before the rename; the temporary
# file is 600 from the start), so a reader (another up.sh reusing the broker,
# down.sh, the chaos suite) sees no file or the whole file, never a part.
write_atomic() {
	local f=$1 mode=${2:-644} tmp
	tmp=$(mktemp "$f.tmp.XXXXXX") || return 1
	if ! { cat >"$tmp" && chmod "$mode" "$tmp" && mv -f "$tmp" "$f"; }; then
		rm -f "$tmp"
		return 1
	fi
}

# from_this_checkout reports whether the broker of state dir $1 was started by
# this checkout's up.sh (and this user): its "checkout" file names
# KAFKA_CHECKOUT. Dirs of up.sh runs older than that file never match.
from_this_checkout() {
	[[ -O $1 && -f $1/checkout && $(<"$1/checkout") == "$KAFKA_CHECKOUT" ]]
}

# apt_install installs Debian packages; CI machines may start without Java or Maven.
apt_install() {
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null || die "need root or sudo to apt-get install $*"
		sudo=(sudo)
	fi
	command -v apt-get >/dev/null || die "no apt-get; install $* yourself"
	log "installing $* with apt-get"
	"${sudo[@]}" apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >&2
}

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

java_major() { "$1" -XshowSettings:properties -version 2>&1 | awk '/java.specification.version/ {print $3}'; }

# ensure_java sets JAVA to a Java 17+ binary (Kafka 4 brokers refuse older ones).
ensure_java() {
	JAVA=${JAVA:-java}
	if command -v "$JAVA" >/dev/null && [[ $(java_major "$JAVA") -ge 17 ]]; then
		return
	fi
	apt_install openjdk-17-jre-headless
	JAVA=$(ls -d /usr/lib/jvm/java-17-openjdk-*/bin/java 2>/dev/null | head -n 1)
	[[ -x $JAVA ]] || die "no Java 17 after apt-get install"
}

# ensure_libs resolves the broker and tool jars once into KAFKA_LIBS. The copy goes
# to a temporary dir and is renamed into place, so a half-finished resolve is never
# mistaken for a cached one; a lock lets two up.sh runs start at the same time.
ensure_libs() {
	ensure_java
	[[ -f $KAFKA_LIBS/.complete ]] && return
	mkdir -p "$KAFKA_CACHE_DIR"
	(
		if command -v flock >/dev/null; then
			exec 9>"$KAFKA_CACHE_DIR/.lock"
			flock 9
		fi
		[[ -f $KAFKA_LIBS/.complete ]] && exit 0
		command -v mvn >/dev/null || apt_install maven
		local tmp
		tmp=$(mktemp -d "$KAFKA_CACHE_DIR/resolve.XXXXXX")
		log "resolving Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_LIBS"
		if ! JAVA_HOME=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v "$JAVA")")")")} \
			mvn -B -q -Dstyle.color=never -f "$KAFKA_DIR/pom.xml" \
			-Dkafka.version="$KAFKA_VERSION" \
			dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/libs" \
			>"$tmp/mvn.log" 2>&1; then
			cat "$tmp/mvn.log" >&2
			rm -rf "$tmp"
			die "mvn could not resolve Kafka $KAFKA_VERSION"
		fi
		touch "$tmp/libs/.complete"
		mkdir -p "$(dirname "$KAFKA_LIBS")"
		rm -rf "$KAFKA_LIBS"
		mv "$tmp/libs" "$KAFKA_LIBS"
		rm -rf "$tmp"
	)
}

# kafka_java runs a Kafka main class on the cached classpath. Tools log to stderr
# only, so their stdout stays clean for data (ConsoleConsumer) and results.
kafka_java() {
	"$JAVA" ${KAFKA_TOOL_HEAP:--Xmx256m} -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-tools.properties" \
		-cp "$KAFKA_LIBS/*" "$@"
}

# launch_broker DIR HEAP starts the broker of state dir DIR in the background
# (its server.properties, logs in DIR/logs, stdout and stderr appended to
# DIR/kafka.out) with the JVM flags HEAP, and records its PID in DIR/pid.
# The caller's fd 9 (up.sh's lock) is not inherited. $! is the new broker.
launch_broker() {
	local dir=$1 heap=$2
	# shellcheck disable=SC2086 # heap holds several JVM flags
	nohup "$JAVA" $heap -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dkafka.logs.dir="$dir/logs" \
		-Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-broker.properties" \
		-cp "$KAFKA_LIBS/*" kafka.Kafka "$dir/server.properties" \
		</dev/null >>"$dir/kafka.out" 2>&1 9>&- &
	echo "$!" | write_atomic "$dir/pid"
}

# owned_pid prints the broker PID recorded in state dir $1 if that process is alive
# and is the broker started with that dir's server.properties (guards against a
# recycled PID); prints nothing otherwise.
owned_pid() {
	local dir=$1 pid cmd
	[[ -f $dir/pid ]] || return 0
	pid=$(<"$dir/pid")
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	if [[ -r /proc/$pid/cmdline ]]; then
		cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
	else
		cmd=$(ps -o args= -p "$pid" 2>/dev/null) || return 0
	fi
	[[ $cmd == *"$dir/server.properties"* ]] && echo "$pid"
	return 0
}

# alive reports whether pid $1 runs (a zombie left for a reaper counts as gone).
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	[[ -r /proc/$1/stat ]] || return 0
	[[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# stop_broker stops the broker of state dir $1 (SIGTERM, up to 30 s for a clean
# shutdown, then SIGKILL) and removes the dir (and up.sh's lock file beside it).
stop_broker() {
	local dir=$1 pid i
	pid=$(owned_pid "$dir")
	if [[ -n $pid ]]; then
		log "stopping broker pid $pid ($dir)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 300; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			log "pid $pid ignored SIGTERM for 30 s, sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 100; i++)); do
				alive "$pid" || break
				sleep 0.1
			done
		fi
	fi
	rm -rf "$dir"
	# up.sh's lock for this name, unless an up.sh holds it right now.
	if [[ -f $dir.lock ]] && command -v flock >/dev/null; then
		(flock -n 9 && rm -f "$dir.lock") 9<"$dir.lock" 2>/dev/null || true
	fi
}

# stop_cluster stops every node of the cluster state dir $1 (up-cluster.sh) at
# once, as stop_broker does one broker, and removes the dir and its lock.
stop_cluster() {
	local dir=$1 d pids=()
	for d in "$dir"/n*; do
		[[ -d $d ]] || continue
		stop_broker "$d" &
		pids+=($!)
	done
	((${#pids[@]} == 0)) || wait "${pids[@]}" || true
	rm -rf "$dir"
	if [[ -f $dir.lock ]] && command -v flock >/dev/null; then
		(flock -n 9 && rm -f "$dir.lock") 9<"$dir.lock" 2>/dev/null || true
	fi
}
