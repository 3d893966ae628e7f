#!/usr/bin/env bash
# node.sh stops, kills and restarts one node of a cluster started by
# up-cluster.sh, by index (1-based), on its own data and ports: for the chaos
# suite and for trying failover by hand.
#
#   node.sh [--name NAME] kill N      SIGKILL (kill -9) node N, wait until it is gone
#   node.sh [--name NAME] stop N      SIGTERM (a controlled shutdown), SIGKILL after 60 s
#   node.sh [--name NAME] start N     start node N again if it is down; wait until it listens
#   node.sh [--name NAME] restart N   stop, then start
#   node.sh [--name NAME] bounce N    kill -9, then start
#   node.sh [--name NAME] status      one line per node: index, pid or "down", address
#
# NAME defaults to cluster-tv2 (up-cluster.sh's default). Only the process
# recorded in the node's pid file is signalled, and only if it still is that
# node (lib.sh's owned_pid).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=cluster-tv2
if [[ ${1:-} == --name ]]; then
	NAME=${2:?--name needs a value}
	shift 2
fi
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "bad --name $NAME"
STATE=$(state_dir "$NAME")
[[ -f $STATE/cluster ]] || die "no cluster named $NAME ($STATE/cluster does not exist)"
NODES=$(<"$STATE/cluster")
CMD=${1:?usage: node.sh [--name NAME] kill|stop|start|restart|bounce N | status}

node_dir() {
	local n=${1:?node index}
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= NODES)) || die "node index must be 1..$NODES, not $n"
	echo "$STATE/n$n"
}

wait_gone() { # pid seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		alive "$1" || return 0
		sleep 0.1
	done
	! alive "$1"
}

signal_node() { # dir hard
	local dir=$1 hard=$2 pid
	pid=$(owned_pid "$dir")
	if [[ -z $pid ]]; then
		log "node ${dir##*/n} of $NAME is already down"
		return 0
	fi
	if [[ $hard == 1 ]]; then
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "node ${dir##*/n} (pid $pid) still runs 10 s after SIGKILL"
		log "node ${dir##*/n} of $NAME killed (pid $pid)"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" 60; then
		log "node ${dir##*/n} (pid $pid) ignored SIGTERM for 60 s, sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "node ${dir##*/n} (pid $pid) still runs after SIGKILL"
	fi
	log "node ${dir##*/n} of $NAME stopped (pid $pid)"
}

start_node() { # dir
	local dir=$1 addr port i
	if [[ -n $(owned_pid "$dir") ]]; then
		log "node ${dir##*/n} of $NAME already runs (pid $(owned_pid "$dir"))"
		return 0
	fi
	ensure_java
	addr=$(<"$dir/broker")
	port=${addr##*:}
	# The old process's port may linger a moment after a kill -9.
	for ((i = 0; i < 100; i++)); do
		port_free "$port" && break
		sleep 0.1
	done
	printf '\n=== node.sh: started again at %s ===\n' "$(date -u +%FT%TZ)" >>"$dir/kafka.out"
	launch_broker "$dir" "$(<"$dir/heap")"
	local pid=$!
	for ((i = 0; i < 1200; i++)); do
		alive "$pid" || die "node ${dir##*/n} exited during start (see $dir/logs/server.log)"
		if ! port_free "$port"; then
			log "node ${dir##*/n} of $NAME started (pid $pid) on $addr"
			return 0
		fi
		sleep 0.1
	done
	die "node ${dir##*/n} does not listen on $addr after 120 s"
}

case $CMD in
kill) signal_node "$(node_dir "${2:-}")" 1 ;;
stop) signal_node "$(node_dir "${2:-}")" 0 ;;
start) start_node "$(node_dir "${2:-}")" ;;
restart)
	d=$(node_dir "${2:-}")
	signal_node "$d" 0
	start_node "$d"
	;;
bounce)
	d=$(node_dir "${2:-}")
	signal_node "$d" 1
	start_node "$d"
	;;
status)
	for ((n = 1; n <= NODES; n++)); do
		pid=$(owned_pid "$STATE/n$n")
		echo "$n ${pid:-down} $(<"$STATE/n$n/broker")"
	done
	;;
*) die "unknown command $CMD (kill, stop, start, restart, bounce, status)" ;;
esac
