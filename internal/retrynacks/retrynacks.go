// Package retrynacks replays the rejected messages of a batch input, as
// Benthos' service.AutoRetryNacksBatched does, without losing any, in the
// order they were read, and after a short growing wait.
//
// Wrap keeps a rejected batch and replays it until it is acknowledged; when
// the rejection is a service.BatchError naming failed messages, the replay
// holds only those (it narrows the batch), found by an index taken of the
// batch each time it is handed out: the narrowing keeps every failed message
// and no other, however often a batch is narrowed. A message a dead-letter
// route took is not replayed (it would come back to the output as sent back,
// which stops the output), and a rejected one is never dropped. The input's
// acknowledgement of a batch is called once, when a replay of it (or the
// batch itself) is acknowledged.
//
// It replaces Benthos' list for three faults of it (benthos v4.76.0):
//   - A BatchError over a narrowed replay is mapped by each message's index in
//     the batch as first read, taken in the replay: the wrong messages are
//     kept, one is dropped and then acknowledged with its batch, never
//     written.
//   - Rejected batches are replayed in the order they were rejected. An epoch
//     aborted behind a dead-letter route rejects its batches through the route,
//     shuffled; output batching then merged scattered replays, of which one
//     continued its partition's run in a Kafka-to-Kafka copy, the rest were
//     rejected again, and the copy crawled. Wrap replays the rejected batches
//     in the order they were read (per partition, source order): a rejected
//     batch waits for every rejected one read before it, whatever its own
//     wait. (Handing out whichever was due first, the batches past an aborted
//     epoch, rejected once or twice, went out ahead of the batch before them,
//     which waited longer, were rejected as out of order, and waited longer
//     in turn: every batch came to wait the cap, and a Kafka-to-Kafka copy
//     filled its partition's gap about once a second.)
//   - From a batch's third replay on, the list sleeps a backoff meant to start
//     at a millisecond that starts at half a second (set after the backoff was
//     reset), with its lock held, acknowledgements included. Wrap waits
//     replayDelay (a millisecond, doubling, at most maxReplayDelay) per batch
//     without holding anything: other batches, new reads and
//     acknowledgements go on meanwhile.
//
// A rejected batch that is due is handed out before a new read; a new read is
// handed out while the rejected batches wait. A batch rejected over and over
// (no output takes it) thus holds the replays of the batches read after it
// for up to maxReplayDelay each time, not new reads. A batch acknowledged the
// first time costs a copy of the batch and a tag per message (see tagged).
package retrynacks

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// maxReplayDelay caps the wait before a replay of a batch rejected over and
// over (a message no output takes is retried once a second).
const maxReplayDelay = time.Second

// replayDelay is the wait before the replay that follows the n-th rejection
// of a batch (n from 1): a millisecond, doubled each time, at most
// maxReplayDelay. The first wait also lets the rejections of an epoch's
// batches, arriving together, be replayed in the order read.
func replayDelay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 11 { // 1ms << 10 is past the cap
		return maxReplayDelay
	}
	return min(time.Millisecond<<(n-1), maxReplayDelay)
}

// Wrap returns in with every rejected message replayed, narrowed to the
// messages a batch error names, in the order read, with backoff (see the
// package comment).
func Wrap(in service.BatchInput) service.BatchInput {
	readCtx, readDone := context.WithCancel(context.Background())
	return &list{in: in, wake: make(chan struct{}), readCtx: readCtx, readDone: readDone}
}

// list is the replay list: the batches rejected and waiting, a read done
// and not handed out, and a count of the batches handed out and not yet
// acknowledged or rejected.
type list struct {
	in service.BatchInput

	mu sync.Mutex
	// wake is closed and replaced whenever a batch is rejected or
	// acknowledged, or a read ends.
	wake chan struct{}
	// seq numbers the batches in the order read.
	seq uint64
	// waiting holds the rejected batches, by seq.
	waiting []*pending
	// out counts the batches handed out and not yet acknowledged or
	// rejected.
	out int
	// read is a read done and not handed out yet; reading: a read runs.
	read    *readResult
	reading bool
	// ended: the input returned service.ErrEndOfInput; only the rejected
	// batches are handed out, then ErrEndOfInput.
	ended bool

	readCtx  context.Context // reads outlive a ReadBatch call; cancelled by Close
	readDone func()
}

// pending is a batch read from the input: the messages still to write (as
// read, without any index), the input's acknowledgement, and when it was
// rejected, how often and when it is due again.
type pending struct {
	seq      uint64
	msgs     service.MessageBatch
	ack      service.AckFunc
	rejected int
	due      time.Time
}

type readResult struct {
	b   service.MessageBatch
	ack service.AckFunc
	err error
}

func (l *list) Connect(ctx context.Context) error {
	err := l.in.Connect(ctx)
	if errors.Is(err, service.ErrEndOfInput) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.out > 0 || len(l.waiting) > 0 {
			// Ended, with batches to replay: they are read.
			l.ended = true
			return nil
		}
	}
	return err
}

func (l *list) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	for {
		l.mu.Lock()
		now := time.Now()
		if p := l.dueLocked(now); p != nil {
			l.out++
			l.mu.Unlock()
			return l.handOut(p)
		}
		if r := l.read; r != nil {
			l.read = nil
			if r.err == nil {
				p := &pending{seq: l.seq, msgs: r.b, ack: r.ack}
				l.seq++
				l.out++
				l.mu.Unlock()
				return l.handOut(p)
			}
			if errors.Is(r.err, service.ErrEndOfInput) {
				l.ended = true
				l.mu.Unlock()
				continue
			}
			l.mu.Unlock()
			return nil, nil, r.err
		}
		if l.ended && l.out == 0 && len(l.waiting) == 0 {
			l.mu.Unlock()
			return nil, nil, service.ErrEndOfInput
		}
		if !l.ended && !l.reading {
			l.reading = true
			go l.readOne()
		}
		wake := l.wake
		var timer *time.Timer
		var timeout <-chan time.Time
		if len(l.waiting) > 0 {
			timer = time.NewTimer(l.waiting[0].due.Sub(now))
			timeout = timer.C
		}
		l.mu.Unlock()
		select {
		case <-wake:
		case <-timeout:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
}

// dueLocked removes and returns the first batch read of the rejected ones
// when it is due at now, or nil: the others wait for it, whatever their own
// waits (the replays go out in the order read).
func (l *list) dueLocked(now time.Time) *pending {
	if len(l.waiting) == 0 || l.waiting[0].due.After(now) {
		return nil
	}
	p := l.waiting[0]
	l.waiting = l.waiting[1:]
	return p
}

// readOne reads a batch from the input for the next ReadBatch.
func (l *list) readOne() {
	b, ack, err := l.in.ReadBatch(l.readCtx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reading = false
	l.read = &readResult{b: b, ack: ack, err: err}
	l.wakeLocked()
}

func (l *list) wakeLocked() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// handOut returns a copy of p's messages, tagged, with an acknowledgement
// that acknowledges the input's batch or keeps p for a replay of the
// messages the rejection names.
func (l *list) handOut(p *pending) (service.MessageBatch, service.AckFunc, error) {
	b, g := tagged(p.msgs)
	var once sync.Once
	return b, func(ctx context.Context, err error) (out error) {
		once.Do(func() {
			if err == nil {
				l.mu.Lock()
				l.out--
				l.wakeLocked()
				l.mu.Unlock()
				out = p.ack(ctx, nil)
				return
			}
			p.msgs = narrow(p.msgs, g, err)
			p.rejected++
			p.due = time.Now().Add(replayDelay(p.rejected))
			l.mu.Lock()
			defer l.mu.Unlock()
			l.out--
			i := len(l.waiting)
			for i > 0 && l.waiting[i-1].seq > p.seq {
				i--
			}
			l.waiting = append(l.waiting, nil)
			copy(l.waiting[i+1:], l.waiting[i:])
			l.waiting[i] = p
			l.wakeLocked()
		})
		return out
	}, nil
}

// A handout tags each message it hands out with its index in the batch
// handed out, in the message's context (which every copy of the message
// shares and the pipeline carries to the output), so that a batch error over
// whatever the pipeline made of the batch names the messages of the batch
// that failed. This is what service.MessageBatch.Index does, whose sort
// group and copy of the batch for the indexer cost four more allocations per
// message than the tag: a message handed out costs its copy (three) and the
// tag (its context and the copy that carries it, three).

// tagKey is the context key of a message's tag.
type tagKey struct{}

// group is one handout; its address tells its tags from any other's (it has
// a size: zero-size allocations may share an address).
type group struct{ n int }

// tag is a message's index in the batch of handout g; prev is the tag the
// message carried before, if it went through another list (nested inputs),
// which a lookup by that list's group still finds, as with Benthos' sort
// groups.
type tag struct {
	g    *group
	i    int
	prev *tag
}

// tagged returns a copy of msgs, each message tagged with its index under a
// new group, and the group.
func tagged(msgs service.MessageBatch) (service.MessageBatch, *group) {
	g := &group{n: len(msgs)}
	tags := make([]tag, len(msgs))
	b := make(service.MessageBatch, len(msgs))
	for i, m := range msgs {
		ctx := m.Context()
		prev, _ := ctx.Value(tagKey{}).(*tag)
		tags[i] = tag{g: g, i: i, prev: prev}
		// WithContext shares the message's data; Copy gives the
		// message handed out its own (copied on write), so that
		// nothing the pipeline does to it reaches the kept one.
		b[i] = m.WithContext(context.WithValue(ctx, tagKey{}, &tags[i])).Copy()
	}
	return b, g
}

// indexIn returns the index of m in the batch of handout g, or -1 if m was
// not handed out in it.
func indexIn(m *service.Message, g *group) int {
	t, _ := m.Context().Value(tagKey{}).(*tag)
	for ; t != nil; t = t.prev {
		if t.g == g {
			return t.i
		}
	}
	return -1
}

// narrow returns the messages of msgs that err names as failed, in their
// order, each once, when err is a service.BatchError naming any of them by
// the tags of handout g (a copy of msgs; the batch error may be over
// whatever the pipeline made of it: an output batch holding other batches'
// messages, in another order, some twice); otherwise msgs, replayed whole.
func narrow(msgs service.MessageBatch, g *group, err error) service.MessageBatch {
	var berr *service.BatchError
	if !errors.As(err, &berr) || berr.IndexedErrors() == 0 {
		return msgs
	}
	failed := make([]bool, len(msgs))
	some := false
	// WalkMessages is deprecated for the indexes it passes (those of the
	// errored batch); only the messages' tags are read here.
	berr.WalkMessages(func(_ int, m *service.Message, e error) bool {
		if i := indexIn(m, g); e != nil && i >= 0 && i < len(msgs) {
			failed[i] = true
			some = true
		}
		return true
	})
	if !some {
		return msgs
	}
	kept := make(service.MessageBatch, 0, len(msgs))
	for i, m := range msgs {
		if failed[i] {
			kept = append(kept, m)
		}
	}
	return kept
}

func (l *list) Close(ctx context.Context) error {
	l.readDone()
	return l.in.Close(ctx)
}
