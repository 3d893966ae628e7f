package output

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// Kafka-to-Kafka mode on Apache Kafka (skipped without KAFKA_BROKERS_TV0/2):
// kafka_native (consumer group, bounded) -> kafka_eos (same group).

func forEachK2KKafka(t *testing.T, fn func(t *testing.T, e k2kTopics, txnID string)) {
	for _, tv := range []int{0, 2} {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			b := kafkatest.Brokers(t, tv)
			e := k2kTopics{
				brokers: strings.Split(b, ","),
				in:      kafkatest.Topic(t, b, 3),
				out:     kafkatest.Topic(t, b, 3),
			}
			// Groups and transactional ids outlive the test on a real broker.
			stamp := time.Now().UnixNano()
			e.grp = fmt.Sprintf("k2k-%d", stamp)
			fn(t, e, fmt.Sprintf("k2k-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), stamp))
		})
	}
}

func TestK2KKafkaCopyFiltered(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		const n = 2100
		fillInput(t, e.brokers, e.in, n)
		runStream(t, copyYAMLFor(e, txnID, true, ""), 120*time.Second)
		checkCopyOf(t, e, n, func(i int) bool { return i%7 != 0 && (i/15)%3 != 1 })
	})
}

func TestK2KKafkaStopMidCopyAndRestart(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		stopMidCopyAndRestart(t, e, txnID, 1000)
	})
}

// TestK2KKafkaKillNineNoCommittedStarts: TestK2KKillNineNoCommittedStarts on
// Apache Kafka: nothing committed at first, batches out of order, no hand-over
// while copying, three SIGKILLs: every committed epoch carried its offsets,
// and the copy is exactly-once.
func TestK2KKafkaKillNineNoCommittedStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		killNineCopy(t, e, txnID, txnID+"-state", killNineOpts{noHandOver: true})
	})
}

// TestK2KKafkaGroupMembershipRebalance: TestK2KGroupMembershipRebalance on
// Apache Kafka (cooperative-sticky rebalances, KIP-447 generation checks).
func TestK2KKafkaGroupMembershipRebalance(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		membershipRebalance(t, e, txnID, 2000)
	})
}

func TestK2KKafkaRestampAfterRebalance(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		restampAfterRebalance(t, e, txnID)
	})
}

// TestK2KKafkaCommitReportedButAborted: TestK2KCommitReportedButAborted on
// Apache Kafka (TV2 failed before the commit check asked the broker).
func TestK2KKafkaCommitReportedButAborted(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		testK2KCommitReportedButAborted(t, e, txnID)
	})
}
