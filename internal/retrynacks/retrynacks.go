// Package retrynacks replays the rejected messages of a batch input, as
// Benthos' service.AutoRetryNacksBatched does, without losing any.
//
// AutoRetryNacksBatched keeps a rejected batch and replays it; when the
// rejection is a service.BatchError naming the failed messages, it keeps only
// those (it narrows the batch). It finds a failed message by its index in the
// batch as first read, and takes that index in the batch it keeps. Once a
// batch was narrowed, the two differ: a second BatchError on the narrowed
// batch keeps the wrong messages and drops others, and when the replay is
// acknowledged the input acknowledges the whole batch as first read, the
// dropped messages with it, though they never reached an output (acknowledged
// but never written). A dead-letter route makes this ordinary: it takes an
// unwritable message (the first narrowing) and rejects the others, which the
// output may reject again as a BatchError (it refused the replay whole, or a
// second unwritable message of the batch was taken by the route this time).
//
// Wrap remembers each rejected batch as first handed out (its messages carry
// the replay list's index of them), indexes every replay it hands out, and
// hands the replay list a BatchError on a replay that names, by their index as
// first handed out, exactly the messages of that replay that failed: the
// narrowing keeps every failed message and no other, however often a batch is
// narrowed. A message a route took is not replayed (it would come back to the
// output as sent back, which stops the output), and a rejected one is never
// dropped. A batch acknowledged the first time costs nothing more.
package retrynacks

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Wrap returns in wrapped in service.AutoRetryNacksBatched, with every
// rejected message of a narrowed replay replayed and no other (see the
// package comment).
func Wrap(in service.BatchInput) service.BatchInput {
	return &narrowSafe{BatchInput: service.AutoRetryNacksBatched(in), rejected: map[context.Context]*origin{}}
}

// narrowSafe maps the BatchError of every replay it hands out to the
// messages of that replay, for the replay list.
type narrowSafe struct {
	service.BatchInput

	mu sync.Mutex
	// rejected finds the batch a replay is of: the context of each message
	// of a rejected batch, as first handed out (the list's copies of a
	// message share it), until a replay of it is acknowledged.
	rejected map[context.Context]*origin
}

// origin is a rejected batch as the replay list first handed it out: the
// context of its message i carries the list's tag of index i, which is what
// a BatchError handed to the list must name.
type origin struct {
	first []context.Context
}

func (n *narrowSafe) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	b, ack, err := n.BatchInput.ReadBatch(ctx)
	if err != nil || len(b) == 0 {
		return b, ack, err
	}
	o := n.originOf(b[0])
	if o == nil {
		// Handed out the first time (whole, in the order read): the
		// list maps its BatchError right.
		return b, func(ctx context.Context, err error) error {
			if err != nil {
				// Before the list has it for a replay.
				n.remember(b)
			}
			return ack(ctx, err)
		}, nil
	}
	// A replay: index it as handed out, so that a BatchError over whatever
	// the pipeline made of it names its messages by their index here.
	ix := b.Index()
	size := len(b)
	return b, func(ctx context.Context, err error) error {
		if err == nil {
			n.forget(o)
		}
		return ack(ctx, o.remap(ix, size, err))
	}, nil
}

func (n *narrowSafe) originOf(m *service.Message) *origin {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.rejected) == 0 {
		return nil
	}
	c := m.Context()
	if !keyable(c) {
		return nil
	}
	return n.rejected[c]
}

// remember records b, rejected the first time it was handed out.
func (n *narrowSafe) remember(b service.MessageBatch) {
	o := &origin{first: make([]context.Context, len(b))}
	for i, m := range b {
		o.first[i] = m.Context()
		if !keyable(o.first[i]) {
			// Not found again: its replays are the list's alone.
			return
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range o.first {
		n.rejected[c] = o
	}
}

func (n *narrowSafe) forget(o *origin) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range o.first {
		delete(n.rejected, c)
	}
}

// keyable reports whether c can be a map key (the list tags every message
// with context.WithValue, a pointer).
func keyable(c context.Context) bool {
	return c != nil && reflect.TypeOf(c).Comparable()
}

// remap returns err for the replay list: a BatchError is replaced by one over
// the batch as first handed out whose failed indexes are the indexes, in the
// replay handed out (size messages, indexed by ix), of its failed messages;
// the list takes its index i in the batch it keeps, which is that replay. Any
// other error, or a BatchError naming none of these messages (the list then
// replays the batch whole), is returned as it is.
func (o *origin) remap(ix *service.Indexer, size int, err error) error {
	var berr *service.BatchError
	if err == nil || !errors.As(err, &berr) || berr.IndexedErrors() == 0 {
		return err
	}
	failed := map[int]error{}
	berr.WalkMessagesIndexedBy(ix, func(i int, _ *service.Message, e error) bool {
		if e != nil && i >= 0 && i < size {
			if _, ok := failed[i]; !ok {
				failed[i] = e
			}
		}
		return true
	})
	if len(failed) == 0 {
		return err
	}
	first := make(service.MessageBatch, len(o.first))
	for i, c := range o.first {
		first[i] = service.NewMessage(nil).WithContext(c)
	}
	out := service.NewBatchError(first, errors.New(err.Error()))
	for i, e := range failed {
		out = out.Failed(i, e)
	}
	return out
}
