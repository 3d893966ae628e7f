package output

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/statecache"
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
// At start, after recovery resolved the in-doubt epochs and every slot was
// initialised (afterFence resolved what a previous owner still running
// prepared meanwhile), the committed positions are P/positions max-merged
// with the positions of every slot record in state COMMITTED (a crash
// between COMMITTED and the P/positions write loses nothing).

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

func (s *stateStore) writePositions(ctx context.Context, pos map[string]int64, fence uint64) error {
	b, err := txnstate.EncodePositions(pos)
	if err != nil {
		return err
	}
	return s.set(ctx, s.positionsKey(), b, fence)
}

// dedupeMode is the dedupe mode's side of the write path (see mode): a
// message at or below its key's committed or admitted position is a replay,
// acknowledged and dropped; an aborted epoch's positions roll back to the
// committed ones and are owed until replayed; the epoch's positions commit
// in its PREPARE record. Its decisions are txnstate.DedupeState (o.dd,
// guarded by o.mu).
type dedupeMode struct{ o *output }

func (m *dedupeMode) connect(ctx context.Context) error { return m.o.loadPositions(ctx) }

// read computes every message's key and position (into w.pos). A message
// whose key cannot be computed or whose position is not an integer cannot be
// written; as its key is unknown, the rest of its batch is held back too. A
// message that cannot be written otherwise holds back the later messages of
// its key (writing them would commit the key's position past it).
func (m *dedupeMode) read(w *write) {
	d := m.o.conf.dedupe
	keyX := w.batch.InterpolationExecutor(d.key)
	posX := w.batch.InterpolationExecutor(d.position)
	w.pos = make([]txnstate.KeyPos, len(w.batch))
	bad := -1
	for i := range w.batch {
		k, err := keyX.TryString(i)
		if err != nil {
			w.fail(i, &MessageError{Source: msgSource(w.batch, i), Field: keoFieldDedupe + "." + keoFieldDedupeKey, Err: err})
			bad = i
			continue
		}
		ps, err := posX.TryString(i)
		if err != nil {
			w.fail(i, &MessageError{Source: msgSource(w.batch, i), Field: keoFieldDedupe + "." + keoFieldDedupePosition, Err: fmt.Errorf("key %q: %w", k, err)})
			bad = i
			continue
		}
		p, err := strconv.ParseInt(strings.TrimSpace(ps), 10, 64)
		if err != nil {
			w.fail(i, &MessageError{Source: msgSource(w.batch, i), Field: keoFieldDedupe + "." + keoFieldDedupePosition, Err: fmt.Errorf("key %q: position %q is not an integer", k, ps)})
			bad = i
			continue
		}
		w.pos[i] = txnstate.KeyPos{Key: k, Position: p}
	}
	cut := map[string]int64{}
	if bad < 0 {
		for i := range w.batch {
			if !w.unwritten(i) {
				continue
			}
			kp := w.pos[i]
			if c, ok := cut[kp.Key]; !ok || kp.Position < c {
				cut[kp.Key] = kp.Position
			}
		}
	}
	held := false
	for i := range w.batch {
		if w.unwritten(i) {
			continue
		}
		if bad >= 0 {
			w.fail(i, fmt.Errorf("%w (%s; %s has no dedupe key or position)", errHeldBack, msgSource(w.batch, i), msgSource(w.batch, bad)))
			held = true
		} else if c, ok := cut[w.pos[i].Key]; ok && w.pos[i].Position >= c {
			w.fail(i, fmt.Errorf("%w (%s; key %q is cut at position %d)", errHeldBack, msgSource(w.batch, i), w.pos[i].Key, c))
			held = true
		}
	}
	if held {
		w.dropRecords(nil)
	}
}

// toWrite returns the indexes and the keys and positions of the messages of
// w still to write.
func (m *dedupeMode) toWrite(w *write) ([]int, []txnstate.KeyPos) {
	var idx []int
	var kps []txnstate.KeyPos
	for i := range w.batch {
		if !w.unwritten(i) {
			idx = append(idx, i)
			kps = append(kps, w.pos[i])
		}
	}
	return idx, kps
}

// skip acknowledges a batch of replays only without opening an epoch; the
// decision is made again in admit, once joined (the positions may move while
// joinLocked waits for a slot).
func (m *dedupeMode) skip(w *write) (bool, error) {
	o := m.o
	if o.dd == nil {
		return false, service.ErrNotConnected
	}
	_, kps := m.toWrite(w)
	drop, err := m.plan(kps)
	if err != nil {
		return false, err
	}
	for _, d := range drop {
		if !d {
			return false, nil
		}
	}
	o.m.dedupeDropped(len(drop))
	o.log.Debugf("kafka_eos: dedupe: a batch of %d replays dropped (key %q positions %d..%d)", len(drop), kps[0].Key, kps[0].Position, kps[len(kps)-1].Position)
	return true, nil
}

// admit drops the replays of the batch and admits its other positions into
// the epoch; the positions of messages held back are owed until replayed.
func (m *dedupeMode) admit(_ context.Context, w *write, ep *epoch) (*epoch, error) {
	o := m.o
	idx, kps := m.toWrite(w)
	drop, err := m.plan(kps)
	if err != nil {
		return nil, err
	}
	o.dd.Admit(kps, drop)
	dropped := map[int]bool{}
	for j, d := range drop {
		if d {
			dropped[idx[j]] = true
		} else {
			w.keep = append(w.keep, kps[j])
		}
	}
	if len(dropped) > 0 {
		w.dropRecords(func(i int) bool { return dropped[i] })
		o.m.dedupeDropped(len(dropped))
		o.log.Debugf("kafka_eos: dedupe: %d of %d messages dropped as replays, epoch %d", len(dropped), len(drop), ep.n)
	}
	if n := len(w.keep); n > 0 {
		o.log.Debugf("kafka_eos: dedupe: epoch %d takes key %q positions %d..%d (%d messages)", ep.n, w.keep[0].Key, w.keep[0].Position, w.keep[n-1].Position, n)
	}
	if owed := m.replayed(w, false); len(owed) > 0 {
		o.dd.Owe(owed, time.Now())
	}
	return ep, nil
}

// replayed returns the keys and positions of the messages of w that the
// input will replay, not written now: held back ones, and with all every
// other one too; not the ones that can never be written (a
// dead-letter output may take them: owing them would hold their key until
// OwedExpiry).
func (m *dedupeMode) replayed(w *write, all bool) []txnstate.KeyPos {
	var out []txnstate.KeyPos
	for i := range w.batch {
		e, failed := w.failed[i]
		var me *MessageError
		switch {
		case failed && errors.As(e, &me):
		case failed, all:
			out = append(out, w.pos[i])
		}
	}
	return out
}

// unjoined: the batch leaves without joining an epoch (all failed, or
// replays only): its held-back messages are owed until replayed.
func (m *dedupeMode) unjoined(w *write) {
	if m.o.dd == nil {
		return
	}
	if owed := m.replayed(w, false); len(owed) > 0 {
		m.o.dd.Owe(owed, time.Now())
	}
}

// plan decides which messages of kps are replays. A new key beyond
// dedupe.max_keys stops the output (see tooManyKeys). Called with o.mu held.
func (m *dedupeMode) plan(kps []txnstate.KeyPos) ([]bool, error) {
	o := m.o
	drop, err := o.dd.Plan(kps, time.Now())
	if err != nil {
		if errors.Is(err, txnstate.ErrAwaitingReplay) {
			o.m.dedupeOutOfOrder()
			o.log.Debugf("kafka_eos: %v; batch nacked to be replayed after it", err)
		}
		var tm *txnstate.TooManyKeysError
		if errors.As(err, &tm) {
			return nil, m.tooManyKeys(tm)
		}
		return nil, err
	}
	return drop, nil
}

// tooManyKeys stops the output when a new key would exceed dedupe.max_keys.
// Nacking the batch would replay it for ever (keys are never freed: a key
// forgotten would have its replays written again, I4), a silent stall;
// routing it away would drop the key's messages until a restart with a
// higher bound. So the pipeline stops, naming the field, its value and what
// to raise it to. Called with o.mu held.
func (m *dedupeMode) tooManyKeys(tm *txnstate.TooManyKeysError) error {
	o := m.o
	err := fmt.Errorf("kafka_eos: dedupe: key %q would be key %d, above %s.%s %d (keys are never forgotten: a forgotten key's replays would be written again): raise %s.%s to at least %d, keeping the committed positions of every key (about the key's length plus 25 bytes per key) within one value of the state cache, or key on fewer values: %w",
		tm.Key, tm.Keys, keoFieldDedupe, keoFieldDedupeMaxKeys, tm.Max, keoFieldDedupe, keoFieldDedupeMaxKeys, tm.Keys, txnstate.ErrTooManyKeys)
	o.log.Errorf("%v", err)
	return o.stopLocked(err, true)
}

// refused makes the positions of a batch nacked before it joined an epoch
// owed until its replay (txnstate.DedupeState.Owe): Benthos may hand the
// output batches it read ahead before that replay, and one of them, admitted
// and committed, would make the replay look like a duplicate. Not for
// ErrTooManyKeys: that batch cannot join until keys are freed, and owing it
// would hold its key's later batches too.
func (m *dedupeMode) refused(w *write, err error) {
	o := m.o
	if o.dd == nil || errors.Is(err, txnstate.ErrTooManyKeys) {
		return
	}
	o.dd.Owe(m.replayed(w, true), time.Now())
}

// prepare puts the epoch's positions (per key, the highest written) into its
// PREPARE record: they commit or not with its transaction.
func (m *dedupeMode) prepare(_ context.Context, ep *epoch, rec *txnstate.Record) error {
	m.o.mu.Lock()
	rec.Positions = txnstate.EpochPositions(ep.keyPos())
	m.o.mu.Unlock()
	return nil
}

func (m *dedupeMode) committed(ep *epoch, rec txnstate.Record) {
	o := m.o
	o.mu.Lock()
	o.dd.Commit(rec.Positions)
	o.mu.Unlock()
	o.log.Debugf("kafka_eos: dedupe: epoch %d committed positions %v", ep.n, rec.Positions)
}

// settled writes the committed positions before the slot carries another
// epoch (whose PREPARE overwrites this one's record).
func (m *dedupeMode) settled(ctx context.Context, rec txnstate.Record) bool {
	return len(rec.Positions) == 0 || m.o.savePositions(ctx)
}

// aborting: every live epoch from n on aborts: their positions fall back to
// the committed ones and are owed until replayed.
func (m *dedupeMode) aborting(n uint64, live []*epoch) {
	o := m.o
	var kps []txnstate.KeyPos
	for _, ep := range live {
		if ep.n >= n {
			kps = append(kps, ep.keyPos()...)
		}
	}
	o.dd.Abort(kps, time.Now())
	o.log.Debugf("kafka_eos: dedupe: epochs from %d abort: %d positions owed until replayed, admitted positions back to the committed ones", n, o.dd.Owed())
}

// nacked: the replay comes after the nack, so the owed positions expire
// counted from now, not from aborting (the ABORTED write before the nack may
// have waited minutes for the cache).
func (m *dedupeMode) nacked(ep *epoch) { m.o.dd.Renew(ep.keyPos(), time.Now()) }

// stopped: the epochs released never commit; their positions go back to the
// committed ones (an epoch past its EndTxn keeps them until the committer
// knows).
func (m *dedupeMode) stopped(released []*epoch) {
	o := m.o
	if o.dd == nil {
		return
	}
	var kps []txnstate.KeyPos
	for _, ep := range released {
		kps = append(kps, ep.keyPos()...)
	}
	o.dd.Abort(kps, time.Now())
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
// positions value max-merged with every slot record in state COMMITTED, and
// writes the result back if a slot record added to it.
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
	if merged > 0 {
		// The slot records merged here are overwritten by the next
		// PREPARE on their slot, which may come before this instance
		// commits an epoch (and so writes the positions): write them
		// now, under this instance's token.
		if err := o.store.writePositions(ctx, pos, o.startFence); err != nil {
			return err
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
		err := o.store.writePositions(wctx, pos, o.ownerFence())
		cancel()
		if err == nil {
			return true
		}
		if errors.Is(err, statecache.ErrFenced) {
			o.stop(&FencedError{TransactionalID: o.conf.transactionalID, Err: err}, true)
			return false
		}
		if o.stateRefused("the committed dedupe positions", err) {
			return false
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
