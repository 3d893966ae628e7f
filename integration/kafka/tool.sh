#!/usr/bin/env bash
# tool.sh runs one of Apache Kafka's own tools on the jars up.sh resolved, so tests
# and benchmarks can use Kafka itself as an independent judge.
#
#   tool.sh CLASS [args...]
#
# CLASS is a full main class (kafka.tools.StorageTool, org.apache.kafka.tools.
# TopicCommand) or a name under org.apache.kafka.tools: ProducerPerformance,
# ConsumerPerformance, VerifiableProducer, VerifiableConsumer, TransactionsCommand,
# FeatureCommand, TopicCommand, GetOffsetShell, consumer.ConsoleConsumer,
# TransactionalMessageCopier, ...  Examples:
#
#   tool.sh TransactionsCommand --bootstrap-server "$KAFKA_BROKERS_TV2" list
#   tool.sh consumer.ConsoleConsumer --bootstrap-server "$KAFKA_BROKERS_TV2" \
#       --topic t --from-beginning --isolation-level read_committed --timeout-ms 5000
#
# Logs go to stderr (WARN; KAFKA_TOOL_LOG_LEVEL changes it), stdout is the tool's
# own. KAFKA_TOOL_HEAP sets the JVM flags (default -Xmx256m). The JVM replaces this
# shell (exec), so signals sent to this process reach the tool.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -ge 1 ]] || die "usage: tool.sh CLASS [args...]"
class=$1
shift
case $class in
kafka.* | org.* | joptsimple.*) ;;
*) class=org.apache.kafka.tools.$class ;;
esac

ensure_libs
# shellcheck disable=SC2086 # KAFKA_TOOL_HEAP holds several JVM flags
exec "$JAVA" ${KAFKA_TOOL_HEAP:--Xmx256m} -Djava.awt.headless=true \
	-Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-tools.properties" \
	-cp "$KAFKA_LIBS/*" "$class" "$@"
