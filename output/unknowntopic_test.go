package output

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestUnknownTopicClock: unknown-topic failures become fatal once they have
// lasted the grace period since the last committed epoch; other failures
// neither start nor stop the clock, and a commit resets it.
func TestUnknownTopicClock(t *testing.T) {
	var c unknownTopicClock
	t0 := time.Unix(1000, 0)
	unknown := &RecordError{Topic: "t", Partition: 0, Size: 1, Err: kerr.UnknownTopicOrPartition}
	later := fmt.Errorf("epoch 2 before it aborted: %w", unknown)
	grace := 30 * time.Second

	require.NoError(t, c.observe(kerr.MessageTooLarge, t0, grace))
	require.NoError(t, c.observe(unknown, t0, grace))
	require.NoError(t, c.observe(later, t0.Add(29*time.Second), grace))
	err := c.observe(later, t0.Add(31*time.Second), grace)
	require.ErrorContains(t, err, `topic "t"`)
	require.ErrorContains(t, err, "for longer than unknown_topic_grace_period 30s")

	c.reset()
	require.NoError(t, c.observe(unknown, t0.Add(40*time.Second), grace), "a commit ended the outage")
	require.Error(t, c.observe(unknown, t0.Add(71*time.Second), grace))
}
