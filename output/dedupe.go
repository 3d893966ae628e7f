package output

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/txnstate"
)

// Dedupe mode (the `dedupe` block; txnstate.DedupeState holds the logic).
//
// Where the positions live, per transactional_id prefix P:
//
//	P/slot/<n>   the PREPARE record of an epoch carries the highest position
//	             per key it wrote (txnstate.Record.Positions): the epoch's
//	             positions commit or not with its transaction, decided by
//	             recovery like its records.
//	P/positions  every committed position (txnstate.EncodePositions),
//	             rewritten after each committed epoch, before its slot
//	             carries another epoch (whose PREPARE overwrites the slot's
//	             record).
//
// At start, after recovery resolved the in-doubt epochs, the committed
// positions are P/positions max-merged with the positions of every slot
// record in state COMMITTED (a crash between COMMITTED and the P/positions
// write loses nothing).

// ErrAwaitingReplay is wrapped by the error of a batch nacked because it
// reached the output before the replay of an aborted epoch's positions of the
// same key (Benthos replays it after them).
var ErrAwaitingReplay = txnstate.ErrAwaitingReplay

func (s *stateStore) positionsKey() string { return s.prefix + "/positions" }

func (s *stateStore) readPositions(ctx context.Context) (map[string]int64, error) {
	v, ok, err := s.get(ctx, s.positionsKey())
	if err != nil || !ok {
		return map[string]int64{}, err
	}
	pos, err := txnstate.DecodePositions(v)
	if err != nil {
		return nil, fmt.Errorf("state cache %q: key %s: %w", s.cache, s.positionsKey(), err)
	}
	return pos, nil
}

func (s *stateStore) writePositions(ctx context.Context, pos map[string]int64) error {
	b, err := txnstate.EncodePositions(pos)
	if err != nil {
		return err
	}
	return s.set(ctx, s.positionsKey(), b)
}

// dedupeKeys computes every message's key and position. A message whose key
// cannot be computed or whose position is not an integer fails with an error
// naming the message and the value; the other messages of the batch fail too
// (a BatchError acknowledges the messages it does not name, and these were
// not written).
func (o *output) dedupeKeys(batch service.MessageBatch) ([]txnstate.KeyPos, error) {
	d := o.conf.dedupe
	keyX := batch.InterpolationExecutor(d.key)
	posX := batch.InterpolationExecutor(d.position)
	kps := make([]txnstate.KeyPos, len(batch))
	bad := map[int]error{}
	for i := range batch {
		k, err := keyX.TryString(i)
		if err != nil {
			bad[i] = fmt.Errorf("field %s.%s: message %d: %w", keoFieldDedupe, keoFieldDedupeKey, i, err)
			continue
		}
		ps, err := posX.TryString(i)
		if err != nil {
			bad[i] = fmt.Errorf("field %s.%s: message %d: %w", keoFieldDedupe, keoFieldDedupePosition, i, err)
			continue
		}
		p, err := strconv.ParseInt(strings.TrimSpace(ps), 10, 64)
		if err != nil {
			bad[i] = fmt.Errorf("field %s.%s: message %d (key %q): position %q is not an integer", keoFieldDedupe, keoFieldDedupePosition, i, k, ps)
			continue
		}
		kps[i] = txnstate.KeyPos{Key: k, Position: p}
	}
	if len(bad) == 0 {
		return kps, nil
	}
	var first error
	for i := range batch {
		if e, ok := bad[i]; ok {
			first = e
			break
		}
	}
	berr := service.NewBatchError(batch, first)
	for i := range batch {
		if e, ok := bad[i]; ok {
			berr = berr.Failed(i, e)
		} else {
			berr = berr.Failed(i, fmt.Errorf("not written: another message of its batch failed: %w", first))
		}
	}
	return nil, berr
}

// dedupePlanLocked decides which messages of a batch are replays. All
// dropped: nothing to write.
func (o *output) dedupePlanLocked(kps []txnstate.KeyPos) ([]bool, error) {
	drop, err := o.dd.Plan(kps, time.Now())
	if err != nil {
		if errors.Is(err, txnstate.ErrAwaitingReplay) {
			o.m.dedupeOutOfOrder()
			o.log.Debugf("kafka_eos: %v; batch nacked to be replayed after it", err)
		}
		return nil, err
	}
	return drop, nil
}

// oweLocked makes the positions of a dedupe batch nacked before it joined an
// epoch (err) owed until its replay (txnstate.DedupeState.Owe): Benthos may
// hand the output batches it read ahead before that replay, and one of them,
// admitted and committed, would make the replay look like a duplicate. Not for
// ErrTooManyKeys: that batch cannot join until keys are freed, and owing it
// would hold its key's later batches too.
func (o *output) oweLocked(kps []txnstate.KeyPos, err error) {
	if o.dd == nil || errors.Is(err, txnstate.ErrTooManyKeys) {
		return
	}
	o.dd.Owe(kps, time.Now())
}

// epochKeyPos returns the kept messages' keys and positions of an epoch.
func (ep *epoch) keyPos() []txnstate.KeyPos {
	var out []txnstate.KeyPos
	for _, b := range ep.batches {
		out = append(out, b.kps...)
	}
	return out
}

// loadPositions reads the committed positions at start, after recovery: the
// positions value max-merged with every slot record in state COMMITTED.
func (o *output) loadPositions(ctx context.Context) error {
	pos, err := o.store.readPositions(ctx)
	if err != nil {
		return err
	}
	hw, err := o.store.slotsHighWater(ctx)
	if err != nil {
		return err
	}
	merged := 0
	for n := 0; n < max(hw, o.conf.poolSize); n++ {
		r, ok, err := o.store.readSlot(ctx, n)
		if err != nil {
			return err
		}
		if !ok || r.State != txnstate.Committed {
			continue
		}
		for _, p := range r.Positions {
			if c, ok := pos[p.Key]; !ok || p.Position > c {
				pos[p.Key] = p.Position
				merged++
			}
		}
	}
	d := txnstate.NewDedupeState(o.conf.dedupe.maxKeys)
	d.Load(pos)
	o.dd = d
	o.log.Infof("kafka_eos: dedupe: %d keys with committed positions loaded for %q (%d from slot records)", len(pos), o.conf.transactionalID, merged)
	return nil
}

// savePositions writes the committed positions before the slot that carried
// the epoch is released (its next PREPARE overwrites the epoch's record),
// retried until it lands or the output stops.
func (o *output) savePositions(ctx context.Context) bool {
	o.mu.Lock()
	pos := o.dd.Committed()
	o.mu.Unlock()
	backoff := 100 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
		err := o.store.writePositions(wctx, pos)
		cancel()
		if err == nil {
			return true
		}
		o.log.Warnf("kafka_eos: writing the committed dedupe positions: %v", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
