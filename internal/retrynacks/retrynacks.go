// Package retrynacks replays the rejected messages of a batch input, as
// Benthos' service.AutoRetryNacksBatched does, without losing any.
//
// AutoRetryNacksBatched keeps a rejected batch and replays it; when the
// rejection is a service.BatchError naming the failed messages, it keeps only
// those. It finds a failed message by its index in the batch as first read,
// and takes that index in the batch it keeps. Once a batch was narrowed, the
// two differ: a second BatchError on the narrowed batch keeps the wrong
// messages and drops others, and when the replay is acknowledged the input
// acknowledges the whole batch as first read, the dropped messages with it,
// though they never reached an output (acknowledged but never written). A
// dead-letter route makes this ordinary: it takes an unwritable message (the
// first narrowing) and rejects the others, which the output may reject again
// as a BatchError (the route rejects them one by one).
//
// Wrap stamps every message read with its index in its batch and, when a
// replayed batch that was narrowed is rejected with a BatchError, hands the
// replay list a plain error instead: the narrowed batch is replayed whole.
// Messages that were written in that attempt come back as replays, which the
// output drops (dedupe positions, Kafka-to-Kafka offsets) or writes again (plain
// mode, at least once): a duplicate instead of a loss.
package retrynacks

import (
	"context"
	"errors"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Wrap returns in wrapped in service.AutoRetryNacksBatched, with rejected
// messages of a narrowed replay never dropped (see the package comment).
func Wrap(in service.BatchInput) service.BatchInput {
	return &narrowSafe{BatchInput: service.AutoRetryNacksBatched(&stamp{BatchInput: in})}
}

type indexKey struct{}

// stamp records each message's index in the batch as read, in its context
// (carried by every copy Benthos makes of it).
type stamp struct{ service.BatchInput }

func (s *stamp) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	b, ack, err := s.BatchInput.ReadBatch(ctx)
	s.stampBatch(b)
	return b, ack, err
}

func (s *stamp) stampBatch(b service.MessageBatch) {
	for i, m := range b {
		b[i] = m.WithContext(context.WithValue(m.Context(), indexKey{}, i))
	}
}

// narrowSafe turns the BatchError of a narrowed replay into a plain error.
type narrowSafe struct{ service.BatchInput }

func (n *narrowSafe) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	b, ack, err := n.BatchInput.ReadBatch(ctx)
	if err != nil || !narrowed(b) {
		return b, ack, err
	}
	return b, func(ctx context.Context, err error) error {
		var berr *service.BatchError
		if errors.As(err, &berr) && berr.IndexedErrors() > 0 {
			err = &replayWhole{msg: err.Error()}
		}
		return ack(ctx, err)
	}, nil
}

// narrowed reports whether b is a replay that lost messages of the batch as
// read: a message's index differs from its index when read.
func narrowed(b service.MessageBatch) bool {
	for i, m := range b {
		if j, ok := m.Context().Value(indexKey{}).(int); ok && j != i {
			return true
		}
	}
	return false
}

// replayWhole is a rejection of a narrowed replay: its BatchError's text,
// without the BatchError (the whole batch is replayed).
type replayWhole struct{ msg string }

func (e *replayWhole) Error() string { return e.msg }
