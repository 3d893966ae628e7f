package output

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompressionDefault: the output's batches are snappy-compressed unless
// compression says otherwise (the default chosen by measurement,
// docs/benchmarks.md); compression: none sends them uncompressed, and
// another codec is that codec.
func TestCompressionDefault(t *testing.T) {
	for _, tc := range []struct {
		extra string
		want  uint8 // the codec in the batch attributes: 0 none, 2 snappy
	}{{"", 2}, {"compression: none\n", 0}, {"compression: zstd\n", 4}} {
		c := newCluster(t)
		o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "codec", tc.extra))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// Values that compress even alone (franz-go sends a batch
		// uncompressed when compressing does not make it smaller).
		b := batchOf("order", 100)
		for i, m := range b {
			m.SetBytes([]byte(strings.Repeat(fmt.Sprintf(`{"order":%d,"status":"paid"}`, i), 8)))
		}
		require.NoError(t, o.WriteBatch(ctx, b))
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(testTopic),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		// The codec of each record's batch, by record (a record's
		// attributes are its batch's).
		codecs := map[uint8]int{}
		read := 0
		for read < 100 && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				codecs[r.Attrs.CompressionType()]++
				read++
			})
		}
		cl.Close()
		cancel()
		require.Equal(t, map[uint8]int{tc.want: 100}, codecs, "codecs of the records read back, with %q", tc.extra)
	}
}
