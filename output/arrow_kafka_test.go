package output

import (
	"fmt"
	"testing"
	"time"
)

// The Arrow copy path on Apache Kafka (skipped without KAFKA_BROKERS_TV0/2):
// kafka_native format arrow -> kafka_eos input_format arrow.

func TestArrowKafkaCopyRoundTrip(t *testing.T) {
	for _, k2k := range []bool{false, true} {
		t.Run(fmt.Sprintf("k2k=%v", k2k), func(t *testing.T) {
			forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
				fillEdgeInput(t, e.brokers, e.in, 3, 60)
				runStream(t, ordered(arrowCopyYAML(e, txnID, k2k, "")), 120*time.Second)
				if n := checkArrowCopy(t, e); n != 3*60 {
					t.Fatalf("%d records copied, want %d", n, 3*60)
				}
			})
		})
	}
}

func TestArrowKafkaK2KStopMidCopyAndRestart(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		arrowStopMidCopyAndRestart(t, e, txnID)
	})
}
