package input

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

func init() {
	readCommittedJudge = consoleConsumer
}

// consoleConsumer reads topic from the beginning with Kafka's own
// ConsoleConsumer under read_committed. It knows its end: a position reader
// (kafkatest.ReadCommitted) first counts the records up to the last stable
// offsets, and the ConsoleConsumer must print exactly that many, the same
// (offset, value) pairs; one that stops short fails as a judge that did not
// reach the end (its idle timeout only ends a stuck run).
func consoleConsumer(t *testing.T, e *env, topic string) map[int32][]judged {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := kafkatest.Client(t, strings.Join(e.brokers, ","))
	// Open transactions (a scenario's tail) stay open: wait only briefly
	// for the markers of ended ones.
	ends, err := kafkatest.SettledEnds(ctx, cl, topic, 3*time.Second)
	require.NoError(t, err)
	byPos, err := kafkatest.ReadCommittedTo(ctx, cl, topic, ends)
	require.NoError(t, err)
	n := 0
	for _, rs := range byPos {
		n += len(rs)
	}
	require.NotZero(t, n, "the position reader found no committed record in %s", topic)
	console, err := kafkatest.ConsoleRead(ctx, strings.Join(e.brokers, ","), topic, n, time.Minute)
	require.NoError(t, err)
	out := map[int32][]judged{}
	for p, rs := range console {
		for i, r := range rs {
			require.Less(t, i, len(byPos[p]), "partition %d: the ConsoleConsumer read more than the position reader", p)
			want := byPos[p][i]
			value := "null"
			if want.Value != nil {
				value = string(want.Value)
			}
			require.Equal(t, judged{offset: want.Offset, value: value}, judged{offset: r.Offset, value: r.Value},
				"partition %d record %d: the two judges differ", p, i)
			out[p] = append(out[p], judged{offset: r.Offset, value: r.Value})
		}
	}
	return out
}
