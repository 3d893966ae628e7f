package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	// The memory cache of the test pipelines.
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	_ "github.com/connect-eos/connect-eos/plugin"
)

// TestHostileHeaders writes, into a real topic, a record whose headers are
// named like kafka_native's metadata (kafka_offset: 1000000, kafka_partition:
// 1 and the other four) and copies the topic twice with kafka_eos: with the
// output spec's dedupe example (keyed on kafka_partition, position
// kafka_offset), and partitioned by kafka_partition. Both copies hold every
// record, in its own partition and order: the hostile record is copied like
// the others and does not make the later records of its partition look like
// replays, nor choose its target partition.
func TestHostileHeaders(t *testing.T) {
	for _, tv := range []int{0, 2} {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			brokers := kafkatest.Brokers(t, tv)
			in := kafkatest.Topic(t, brokers, 2)
			want := produceWithHostile(t, brokers, in)

			dedupe := kafkatest.Topic(t, brokers, 1)
			runCopy(t, fmt.Sprintf(`
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[2]s ]
    start_offset: earliest
    stop_offset: latest
pipeline:
  threads: 1
output:
  kafka_eos:
    seed_brokers: [ %[1]s ]
    topic: %[3]s
    transactional_id: %[3]s
    state_cache: eos_state
    max_in_flight: 1
    epoch: { interval: 50ms }
    dedupe:
      key: ${! meta("kafka_partition") }
      position: ${! meta("kafka_offset") }
`, brokers, in, dedupe))
			got := readCopy(t, brokers, dedupe)
			var all []string
			for _, vs := range got {
				all = append(all, vs...)
			}
			var wantAll []string
			for _, vs := range want {
				wantAll = append(wantAll, vs...)
			}
			assert.ElementsMatch(t, wantAll, all, "the dedupe copy keyed on kafka_offset holds every record once")
			// The copy keeps each source partition's order.
			for p, vs := range want {
				var sub []string
				for _, v := range all {
					if strings.HasPrefix(v, fmt.Sprintf("p%d-", p)) {
						sub = append(sub, v)
					}
				}
				assert.Equal(t, vs, sub, "source partition %d in order", p)
			}

			byPartition := kafkatest.Topic(t, brokers, 2)
			runCopy(t, fmt.Sprintf(`
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[2]s ]
    start_offset: earliest
    stop_offset: latest
output:
  kafka_eos:
    seed_brokers: [ %[1]s ]
    topic: %[3]s
    partitioner: manual
    partition: ${! meta("kafka_partition") }
    transactional_id: %[3]s
    state_cache: eos_state
    epoch: { interval: 50ms }
`, brokers, in, byPartition))
			assert.Equal(t, want, readCopy(t, brokers, byPartition), "the copy partitioned by kafka_partition keeps every record in its source partition, in order")
		})
	}
}

// produceWithHostile writes 10 records to partition 0 (the fourth with the
// hostile headers) and 5 to partition 1, and returns the values by partition.
func produceWithHostile(t *testing.T, brokers, topic string) map[int32][]string {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := map[int32][]string{}
	var recs []*kgo.Record
	for p, n := range map[int32]int{0: 10, 1: 5} {
		for i := range n {
			v := fmt.Sprintf("p%d-%d", p, i)
			r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}
			if p == 0 && i == 3 {
				r.Headers = []kgo.RecordHeader{
					{Key: "kafka_offset", Value: []byte("1000000")},
					{Key: "kafka_partition", Value: []byte("1")},
					{Key: "kafka_topic", Value: []byte("elsewhere")},
					{Key: "kafka_key", Value: []byte("forged")},
					{Key: "kafka_timestamp_ms", Value: []byte("0")},
					{Key: "kafka_tombstone_message", Value: []byte("true")},
				}
			}
			recs = append(recs, r)
			want[p] = append(want[p], v)
		}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	return want
}

// runCopy runs a bounded copy stream (with a memory state cache) to its end.
func runCopy(t *testing.T, yaml string) {
	t.Helper()
	sb := service.NewStreamBuilder()
	require.NoError(t, sb.SetYAML(yaml+`
logger: { level: warn }
cache_resources:
  - label: eos_state
    memory: {}
`))
	s, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Run(ctx))
}

// readCopy reads topic read_committed to its last stable offsets, on
// positions (kafkatest.ReadCommitted), and returns the values by partition,
// in offset order.
func readCopy(t *testing.T, brokers, topic string) map[int32][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs, err := kafkatest.ReadCommitted(ctx, kafkatest.Client(t, brokers), topic)
	require.NoError(t, err)
	out := map[int32][]string{}
	for p, rs := range recs {
		for _, r := range rs {
			out[p] = append(out[p], string(r.Value))
		}
	}
	return out
}
