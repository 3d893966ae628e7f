package input

import (
	"strings"
	"testing"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// TestScenariosKafka runs every scenario against Apache Kafka, once per
// broker configured (transaction.version 0 and 2; see integration/kafkatest).
// The marker, abort and LSO behaviour is proven here: kfake is not the judge
// of it.
func TestScenariosKafka(t *testing.T) {
	for _, tv := range []int{0, 2} {
		t.Run(kafkatest.EnvVar(tv), func(t *testing.T) {
			brokers := strings.Split(kafkatest.Brokers(t, tv), ",")
			for _, s := range scenarios {
				t.Run(s.name, func(t *testing.T) { s.fn(t, newEnv(t, kafkatest.EnvVar(tv), brokers)) })
			}
		})
	}
}
