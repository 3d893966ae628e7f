package output

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// unknownTopicClock measures how long the output's records have gone to a
// topic or partition the brokers do not know. Each such record aborts its
// epoch and Benthos replays the batch, so without a bound a missing topic is
// retried forever (while a kafka_native input with the same problem stops
// after its unknown_topic_grace_period). It measures one outage, from the
// first such failure after the last committed epoch: a committed epoch ends
// it. (Failures of one outage can be 20s apart and more: a failing epoch
// takes a few metadata refreshes to fail, and Benthos backs off before each
// replay.)
type unknownTopicClock struct {
	mu    sync.Mutex
	first time.Time // zero: no outage
}

// observe records cause, an epoch's abort cause, at now. It returns an error
// for the fatal-stop path once unknown-topic errors have lasted grace.
func (c *unknownTopicClock) observe(cause error, now time.Time, grace time.Duration) error {
	if !errors.Is(cause, kerr.UnknownTopicOrPartition) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() {
		c.first = now
	}
	if now.Sub(c.first) < grace {
		return nil
	}
	return fmt.Errorf("%w (for longer than %s %v: does the topic exist?)", cause, keoFieldUnknownTopicGrace, grace)
}

// reset ends an outage: an epoch committed.
func (c *unknownTopicClock) reset() {
	c.mu.Lock()
	c.first = time.Time{}
	c.mu.Unlock()
}
