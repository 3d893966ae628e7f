package output

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// Mirror mode on Apache Kafka (skipped without KAFKA_BROKERS_TV0/2): the two
// shared brokers are two clusters; each test runs A=tv0 -> B=tv2 and A=tv2 ->
// B=tv0, so that the positions commit under both transaction versions.
func forEachMirrorKafka(t *testing.T, parts int32, fn func(t *testing.T, e mirrorEnv)) {
	for _, dir := range [][2]int{{0, 2}, {2, 0}} {
		t.Run(fmt.Sprintf("tv%d-to-tv%d", dir[0], dir[1]), func(t *testing.T) {
			fn(t, kafkaMirrorEnv(t, dir[0], dir[1], parts))
		})
	}
}

func kafkaMirrorEnv(t *testing.T, from, to int, parts int32) mirrorEnv {
	a, b := kafkatest.Brokers(t, from), kafkatest.Brokers(t, to)
	// Groups, transactional ids and topics outlive the test on a real
	// broker.
	stamp := time.Now().UnixNano()
	return mirrorEnv{
		a: strings.Split(a, ","), b: strings.Split(b, ","),
		src: kafkatest.Topic(t, a, parts), dst: kafkatest.Topic(t, b, parts),
		group:     fmt.Sprintf("mirror-%d", stamp),
		positions: fmt.Sprintf("mirror-positions-%d", stamp),
		id:        fmt.Sprintf("mirror-%d-", stamp),
	}
}

func TestMirrorKafkaCopyAndResume(t *testing.T) {
	forEachMirrorKafka(t, 3, testMirrorCopyAndResume)
}

func TestMirrorKafkaArrow(t *testing.T) {
	forEachMirrorKafka(t, 2, testMirrorArrow)
}

func TestMirrorKafkaCrash(t *testing.T) {
	for _, dir := range [][2]int{{0, 2}, {2, 0}} {
		t.Run(fmt.Sprintf("tv%d-to-tv%d", dir[0], dir[1]), func(t *testing.T) {
			testMirrorCrash(t, func(t *testing.T) mirrorEnv { return kafkaMirrorEnv(t, dir[0], dir[1], 3) })
		})
	}
}

func TestMirrorKafkaMembersRebalance(t *testing.T) {
	forEachMirrorKafka(t, 4, testMirrorMembersRebalance)
}

func TestMirrorKafkaMembersKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	forEachMirrorKafka(t, 4, testMirrorMembersKillNine)
}

// createdFromSource sets configs on e's source topic on Apache Kafka, points
// e at a target topic that does not exist yet, and claims the source's three
// partitions with a create_topics output, handing it the source's configs as
// the input describes them: the target is created then. It returns the
// output and e as changed.
func createdFromSource(ctx context.Context, t *testing.T, e mirrorEnv, configs ...kadm.AlterConfig) (*output, mirrorEnv) {
	t.Helper()
	src := kafkatest.Admin(t, strings.Join(e.a, ","))
	alt, err := src.AlterTopicConfigs(ctx, configs, e.src)
	if err == nil {
		err = alt[0].Err
	}
	if err != nil {
		t.Fatalf("setting the source's configs: %v", err)
	}
	e.dst += "-created" // no such topic on B
	dst := kafkatest.Admin(t, strings.Join(e.b, ","))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = dst.DeleteTopic(ctx, e.dst)
	})
	o := mirrorCreatingOutput(t, e, e.id+"x")
	claimCreating(ctx, t, o, e, handover.TopicConfigsSet(src))
	return o, e
}

func topicConfig(k, v string) kadm.AlterConfig {
	return kadm.AlterConfig{Name: k, Value: kadm.StringPtr(v)}
}

// TestMirrorKafkaCreateTopicsLikeSource: on Apache Kafka, both ways between
// the transaction versions, create_topics gives a missing target the
// source's partition count and the configs set on the source topic, as the
// input describes them, but not the timestamp type (LogAppendTime would
// replace the copied timestamps).
func TestMirrorKafkaCreateTopicsLikeSource(t *testing.T) {
	forEachMirrorKafka(t, 3, func(t *testing.T, e mirrorEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
		defer cancel()
		_, e = createdFromSource(ctx, t, e,
			topicConfig("cleanup.policy", "compact"), topicConfig("max.message.bytes", "2000000"), topicConfig("message.timestamp.type", "LogAppendTime"))
		got, parts := targetConfigsSet(t, e.b, e.dst)
		want := map[string]string{"retention.ms": "-1", "cleanup.policy": "compact", "max.message.bytes": "2000000"}
		if fmt.Sprint(got) != fmt.Sprint(want) || parts != 3 {
			t.Fatalf("created %s with %d partitions and configs %v, want 3 and %v", e.dst, parts, got, want)
		}
	})
}

// TestMirrorKafkaRetentionCountsFromCopiedTimestamps: records keep their
// source timestamps, and the target's time retention counts from them. The
// source topic keeps records an hour and rolls segments hourly (configs that
// create_topics copies); of a partition's copied records, those two hours old
// go at the target's next retention check although they were copied and
// committed (Kafka rolls a segment before appending to one whose first record
// is older than segment.ms, so they sit in a segment of their own), and the
// recent ones stay. On Apache Kafka only: kfake has no retention.
func TestMirrorKafkaRetentionCountsFromCopiedTimestamps(t *testing.T) {
	forEachMirrorKafka(t, 3, func(t *testing.T, e mirrorEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
		defer cancel()
		o, e := createdFromSource(ctx, t, e, topicConfig("retention.ms", "3600000"), topicConfig("segment.ms", "3600000"))
		o.StartAt(map[string]map[int32]int64{e.src: {0: 0}})
		old := sourceBatch(e, 0, 0, 3)
		recent := sourceBatch(e, 0, 3, 2)
		for i, b := range []service.MessageBatch{old, recent} {
			ts := time.Now().Add(-2 * time.Hour)
			if i == 1 {
				ts = time.Now()
			}
			for _, m := range b {
				r, _ := handover.RecordOf(m)
				r.Timestamp = ts
			}
			writeReplaying(ctx, t, o, b)
		}
		want := []string{"v-0-3", "v-0-4"}
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.b...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		wait(t, mirrorDeadline, "the records two hours old deleted by the target's retention", func() bool {
			recs, err := kafkatest.ReadCommitted(ctx, cl, e.dst)
			if errors.Is(err, kerr.OffsetOutOfRange) {
				// The retention this waits for deleted the old
				// segment while the read was in it: read again.
				t.Logf("the log start moved during the read, reading again: %v", err)
				return false
			}
			if err != nil {
				t.Fatalf("read_committed reader of %s: %v", e.dst, err)
			}
			var got []string
			for _, p := range slices.Sorted(maps.Keys(recs)) {
				for _, r := range recs[p] {
					got = append(got, string(r.Value))
				}
			}
			return slices.Equal(got, want)
		})
	})
}
