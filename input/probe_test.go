package input

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The probe's request load: one round probes every idle partition in one
// Fetch per leader (not three requests per partition), lists no offsets
// unless a fetch found a deletion, and leaves paused partitions alone (the
// consumer does not fetch them: there is nothing to learn until they resume).
func TestProbeRoundLoad(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 10)
	stops := make([]string, 10)
	for p := range int32(10) {
		e.produce(t, topic, p, []byte("x"))
		stops[p] = fmt.Sprintf("%q: 5", fmt.Sprintf("%s:%d", topic, p))
	}
	var (
		mu        sync.Mutex
		counting  bool
		fetches   [][]int32 // the partitions of each probe fetch
		listings  int
		listStart = map[int32]bool{}
	)
	e.fake.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.fake.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis != 0 { // the consumer's own fetches wait
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		if counting {
			var ps []int32
			for _, rt := range req.Topics {
				for _, rp := range rt.Partitions {
					ps = append(ps, rp.Partition)
				}
			}
			fetches = append(fetches, ps)
		}
		return nil, nil, false
	})
	e.fake.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.fake.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if counting {
			listings++
			for _, rt := range kreq.(*kmsg.ListOffsetsRequest).Topics {
				for _, rp := range rt.Partitions {
					listStart[rp.Partition] = true
				}
			}
		}
		return nil, nil, false
	})
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: specific
stop_offsets: { %s }
max_buffered_bytes_per_partition: 1
idle_probe_interval: 100ms
`, topic, strings.Join(stops, ", ")))
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	// One batch per partition; partition 0's stays unacknowledged, so it
	// stays paused. The others wait below their stops for records.
	seen := map[int32]bool{}
	for len(seen) < 10 {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		g := toGot(b)
		seen[g[0].Partition] = true
		if g[0].Partition != 0 {
			require.NoError(t, ack(ctx, nil))
		}
	}
	wait(t, 10*time.Second, func() bool {
		for _, s := range h.raw.conn.tr.snapshots() {
			if s.Partition != 0 && (s.paused || s.position != 1) {
				return false
			}
		}
		return h.raw.conn.tr.snapshots()[0].paused
	})
	mu.Lock()
	counting = true
	mu.Unlock()
	wait(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fetches) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	probes := 0
	for _, ps := range fetches {
		assert.NotContains(t, ps, int32(0), "the paused partition is not probed")
		probes += len(ps)
	}
	assert.GreaterOrEqual(t, probes, 4*len(fetches), "partitions probed per fetch: %v", fetches)
	assert.Zero(t, listings, "no offsets listed while the probes find no deletion (partitions %v)", listStart)
}
