package output

import (
	"context"
	"testing"
	"time"
)

// TestRecordTimestampIsHandOverTime: a record without a timestamp of its own
// carries the time the output handed its batch to the producer, one reading
// of the clock per batch, not one per record (franz-go's default reads the
// clock for every record it is given). The clock is the test's here, so a
// timestamp franz-go took itself would differ from it.
func TestRecordTimestampIsHandOverTime(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), baseYAML(brokers, "ts-handover", ""))
	// Five seconds before the real clock: within the delivery timeout
	// (franz-go counts it from the record's timestamp), and never what
	// franz-go would read itself.
	var given []time.Time
	o.hooks = &testHooks{handOverTime: func() time.Time {
		given = append(given, time.Now().Add(-5*time.Second).Truncate(time.Millisecond))
		return given[len(given)-1]
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range []string{"a", "b"} {
		if err := o.WriteBatch(ctx, batchOf(p, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if len(given) != 2 {
		t.Fatalf("the clock was read %d times for two batches, want 2", len(given))
	}
	recs := readCommittedRecords(t, brokers, testTopic, 10*time.Second, time.Minute)
	if len(recs) != 1000 {
		t.Fatalf("%d records visible, want 1000", len(recs))
	}
	for _, r := range recs {
		want := given[0]
		if r.Value[0] == 'b' {
			want = given[1]
		}
		if !r.Timestamp.Equal(want) {
			t.Fatalf("record %s: timestamp %v, want its batch's hand-over time %v", r.Value, r.Timestamp, want)
		}
	}
}
