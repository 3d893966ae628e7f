#!/usr/bin/env bash
# down.sh stops a broker started by up.sh, or a cluster started by
# up-cluster.sh (every node), and removes its state dir.
#
#   down.sh [--name NAME]   stop one broker (default name tv2, as up.sh)
#   down.sh --tv N          same as --name tvN
#   down.sh --all           stop every broker THIS checkout's up.sh started
#
# --all is safe on a shared machine: every checkout (and every user) puts its
# state dirs under the same KAFKA_STATE_ROOT, so it stops only the dirs that
# belong to this user and whose "checkout" file names this checkout's
# integration/kafka (written by up.sh since that file exists); every other
# broker it finds there is listed on stderr as left running. Stop one of those
# by its name (--name), knowing whose it is.
#
# Only the process recorded in the state dir is signalled, and only if it still is
# that broker (its command line names the dir's server.properties): SIGTERM, up
# to 30 s for a clean shutdown, then SIGKILL.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=tv2
ALL=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--name) NAME=${2:?--name needs a value} && shift 2 ;;
	--tv) NAME=tv${2:?--tv needs a value} && shift 2 ;;
	--all) ALL=1 && shift ;;
	*) die "unknown argument $1 (usage: down.sh [--name NAME | --tv N | --all])" ;;
	esac
done

if [[ $ALL == 1 ]]; then
	others=()
	for dir in "$KAFKA_STATE_PREFIX"*; do
		[[ -d $dir && (-f $dir/server.properties || -f $dir/cluster) ]] || continue
		if from_this_checkout "$dir"; then
			if [[ -f $dir/cluster ]]; then
				stop_cluster "$dir"
			else
				stop_broker "$dir"
			fi
		else
			others+=("${dir#"$KAFKA_STATE_PREFIX"}")
		fi
	done
	if ((${#others[@]} > 0)); then
		log "left running, not started by this checkout ($KAFKA_CHECKOUT) or not by you: ${others[*]}"
		log "(down.sh --name NAME stops one of them: only if you know it is yours)"
	fi
	exit 0
fi
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "bad --name $NAME"
dir=$(state_dir "$NAME")
[[ -d $dir ]] || {
	log "no broker named $NAME ($dir does not exist)"
	exit 0
}
if [[ -f $dir/cluster ]]; then
	stop_cluster "$dir"
else
	stop_broker "$dir"
fi
