package txnstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Dedupe mode (invariant I4). Every message carries a key and a position that
// increases strictly per key in the order the input delivers it (a Kafka
// partition and its offset, a file and its line number, a sequence). An epoch
// records, per key, the highest position it wrote; those positions go into the
// epoch's PREPARE record and so commit or not with its transaction, decided by
// recovery exactly like its records. A message at or below its key's
// committed position, or at or below a position already in a live (not
// aborted) epoch, is a replay: it is acknowledged and dropped.
//
// DedupeState holds the positions of one output. It is not safe for concurrent use.
type DedupeState struct {
	maxKeys int
	// expiry is how long owed positions wait for their replay
	// (OwedExpiry; SetOwedExpiry for tests).
	expiry time.Duration
	// committed: per key, the highest position of a committed epoch.
	committed map[string]int64
	// admitted: per key, the highest position in a committed or live epoch.
	admitted map[string]int64
	// owed: positions of aborted epochs' messages and of batches nacked
	// before they joined an epoch, which the input will replay. Until a key's owed positions are
	// replayed, a message of that key above the lowest of them cannot be
	// admitted: it would make the replay look like a duplicate. Benthos
	// replays nacked batches from a retry list, possibly after batches read
	// ahead, so this ordering is not given.
	owed map[string]*owedKey
}

type owedKey struct {
	pos   []int64 // sorted, unique
	since time.Time
}

// KeyPos is one message's dedupe key and position.
type KeyPos struct {
	Key      string
	Position int64
}

// Sentinel errors of DedupeState.Plan.
var (
	// ErrAwaitingReplay: the batch holds a message above a position an
	// aborted epoch owes; the batch must be nacked and replayed after the
	// owed one.
	ErrAwaitingReplay = errors.New("txnstate: dedupe: a position of an aborted epoch must be replayed first")
	// ErrTooManyKeys: a new key would exceed the key bound.
	ErrTooManyKeys = errors.New("txnstate: dedupe: too many keys")
)

// TooManyKeysError is Plan's ErrTooManyKeys: Key would be key number Keys,
// above the bound Max. Keys are never forgotten (a forgotten key's replays
// would be written again), so no later batch frees one in a steady state.
type TooManyKeysError struct {
	Key       string
	Keys, Max int
}

func (e *TooManyKeysError) Error() string {
	return fmt.Sprintf("%v: key %q would be key %d, above the bound of %d", ErrTooManyKeys, e.Key, e.Keys, e.Max)
}

func (e *TooManyKeysError) Unwrap() error { return ErrTooManyKeys }

// OwedExpiry is how long an aborted epoch's positions wait for their replay
// before they are forgotten (with ErrAwaitingReplay's batches then admitted).
// Benthos retries a nacked batch within about a second (backoff capped at
// 1s); a replay that never comes back (a processor that drops the message on
// the second run) would otherwise hold its key forever.
const OwedExpiry = 2 * time.Minute

// NewDedupeState returns an empty DedupeState bounded to maxKeys keys (0: unbounded).
func NewDedupeState(maxKeys int) *DedupeState {
	return &DedupeState{maxKeys: maxKeys, expiry: OwedExpiry, committed: map[string]int64{}, admitted: map[string]int64{}, owed: map[string]*owedKey{}}
}

// SetOwedExpiry replaces OwedExpiry for this state (tests).
func (d *DedupeState) SetOwedExpiry(x time.Duration) { d.expiry = x }

// Load merges committed positions (from the state cache at start) with max.
func (d *DedupeState) Load(pos map[string]int64) {
	for k, p := range pos {
		if c, ok := d.committed[k]; !ok || p > c {
			d.committed[k] = p
		}
		if a, ok := d.admitted[k]; !ok || p > a {
			d.admitted[k] = p
		}
	}
}

// Keys is the number of keys with a committed or admitted position.
func (d *DedupeState) Keys() int { return len(d.admitted) }

// Committed returns a copy of the committed positions.
func (d *DedupeState) Committed() map[string]int64 {
	out := make(map[string]int64, len(d.committed))
	for k, p := range d.committed {
		out[k] = p
	}
	return out
}

// CommittedOf returns the committed position of key.
func (d *DedupeState) CommittedOf(key string) (int64, bool) {
	p, ok := d.committed[key]
	return p, ok
}

// Plan decides, for every message of one batch in order, whether it is a
// replay (drop[i] true) or new. A message is a replay when its position is at
// or below the highest of its key committed, admitted to a live epoch, or
// earlier in the batch. It changes nothing: Admit applies the plan once the
// batch joined an epoch. Errors: ErrAwaitingReplay (nack the batch; checked
// against owed positions, see DedupeState), ErrTooManyKeys.
func (d *DedupeState) Plan(msgs []KeyPos, now time.Time) (drop []bool, err error) {
	drop = make([]bool, len(msgs))
	high := map[string]int64{}
	consumed := map[string]int{} // per key, owed positions replayed in this batch
	newKeys := 0
	for i, m := range msgs {
		h, ok := high[m.Key]
		if !ok {
			h, ok = d.admitted[m.Key]
			if !ok {
				h = -1 << 63
				newKeys++
				if d.maxKeys > 0 && len(d.admitted)+newKeys > d.maxKeys {
					return nil, &TooManyKeysError{Key: m.Key, Keys: len(d.admitted) + newKeys, Max: d.maxKeys}
				}
			}
			high[m.Key] = h
		}
		if m.Position <= h {
			drop[i] = true
			continue
		}
		if ow := d.owed[m.Key]; ow != nil && now.Sub(ow.since) < d.expiry {
			// Every owed position below this one must be replayed
			// first (earlier in this batch). Owed positions are
			// sorted, so the ones replayed form a prefix.
			c := consumed[m.Key]
			if c < len(ow.pos) && ow.pos[c] < m.Position {
				return nil, fmt.Errorf("%w: key %q position %d arrived before the replay of position %d", ErrAwaitingReplay, m.Key, m.Position, ow.pos[c])
			}
			if c < len(ow.pos) && ow.pos[c] == m.Position {
				consumed[m.Key] = c + 1
			}
		}
		high[m.Key] = m.Position
	}
	return drop, nil
}

// Admit applies a plan: the kept messages' positions are in a live epoch.
func (d *DedupeState) Admit(msgs []KeyPos, drop []bool) {
	for i, m := range msgs {
		if drop[i] {
			continue
		}
		if a, ok := d.admitted[m.Key]; !ok || m.Position > a {
			d.admitted[m.Key] = m.Position
		}
		if ow := d.owed[m.Key]; ow != nil {
			if j, in := slices.BinarySearch(ow.pos, m.Position); in {
				ow.pos = slices.Delete(ow.pos, j, j+1)
			}
			if len(ow.pos) == 0 {
				delete(d.owed, m.Key)
			}
		}
	}
}

// EpochPositions returns, per key, the highest position among msgs (the kept
// messages of one epoch), sorted by key: what its PREPARE record carries.
func EpochPositions(msgs []KeyPos) []DedupePosition {
	m := map[string]int64{}
	for _, kp := range msgs {
		if p, ok := m[kp.Key]; !ok || kp.Position > p {
			m[kp.Key] = kp.Position
		}
	}
	out := make([]DedupePosition, 0, len(m))
	for k, p := range m {
		out = append(out, DedupePosition{Key: k, Position: p})
	}
	slices.SortFunc(out, func(a, b DedupePosition) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Commit records an epoch's positions as committed (its EndTxn succeeded, or
// recovery found it committed). Positions never move backwards.
func (d *DedupeState) Commit(pos []DedupePosition) {
	for _, p := range pos {
		if c, ok := d.committed[p.Key]; !ok || p.Position > c {
			d.committed[p.Key] = p.Position
		}
		if a, ok := d.admitted[p.Key]; !ok || p.Position > a {
			d.admitted[p.Key] = p.Position
		}
		if ow := d.owed[p.Key]; ow != nil {
			ow.pos = slices.DeleteFunc(ow.pos, func(x int64) bool { return x <= p.Position })
			if len(ow.pos) == 0 {
				delete(d.owed, p.Key)
			}
		}
	}
}

// Abort rolls back the positions of aborted epochs: msgs are the kept
// messages of every epoch that aborts (each epoch from the first failed one
// on, invariant I5), whose batches are nacked and will be replayed. Admitted
// positions fall back to the committed ones, and msgs' positions are owed.
func (d *DedupeState) Abort(msgs []KeyPos, now time.Time) {
	d.admitted = make(map[string]int64, len(d.committed))
	for k, p := range d.committed {
		d.admitted[k] = p
	}
	d.owe(msgs, d.committed, now)
}

// Renew restarts the expiry of the owed positions of msgs' keys at now: an
// aborted epoch's positions are owed from the moment its batches are nacked
// (the replay can only come after), not from the abort's start, which can
// precede the nack by as long as the state cache takes to record the abort.
func (d *DedupeState) Renew(msgs []KeyPos, now time.Time) {
	for _, m := range msgs {
		if ow := d.owed[m.Key]; ow != nil {
			ow.since = now
		}
	}
}

// Owe records the positions of a batch nacked before it joined an epoch
// (ErrAwaitingReplay, or the output could not take it): the input replays
// it, possibly after batches it read ahead. Its positions above the admitted
// ones are owed like an aborted epoch's, so a later batch of the key waits
// for the replay (ErrAwaitingReplay) instead of being admitted and making the
// replay look like a duplicate: without this, a batch nacked while waiting
// for an aborted epoch's replay was lost when the batch after it was
// replayed first (seen in the chaos suite's dedupe run: the aborted epoch's
// replay committed, then the next-but-one batch, and the nacked batch's
// replay was dropped as at or below the committed position).
func (d *DedupeState) Owe(msgs []KeyPos, now time.Time) {
	d.owe(msgs, d.admitted, now)
}

// owe adds msgs' positions above floor (per key) to the owed ones and
// forgets owed positions past OwedExpiry.
func (d *DedupeState) owe(msgs []KeyPos, floor map[string]int64, now time.Time) {
	for _, m := range msgs {
		if f, ok := floor[m.Key]; ok && m.Position <= f {
			continue
		}
		ow := d.owed[m.Key]
		if ow == nil {
			ow = &owedKey{}
			d.owed[m.Key] = ow
		}
		ow.since = now
		if j, in := slices.BinarySearch(ow.pos, m.Position); !in {
			ow.pos = slices.Insert(ow.pos, j, m.Position)
		}
	}
	for k, ow := range d.owed {
		if now.Sub(ow.since) >= d.expiry {
			delete(d.owed, k)
		}
	}
}

// Owed is the number of positions waiting for their replay.
func (d *DedupeState) Owed() int {
	n := 0
	for _, ow := range d.owed {
		n += len(ow.pos)
	}
	return n
}

// PositionsFormatVersion is the encoding version of the committed-positions
// value (EncodePositions).
const PositionsFormatVersion = 1

// positionsValue is the committed-positions value of one transactional_id in
// the state cache: {"format":1,"positions":{"<key>":<position>,...}}. Keys
// are sorted by encoding/json, so equal maps encode to equal bytes. About
// len(key) + 6 + digits bytes per key.
type positionsValue struct {
	Format    int              `json:"format"`
	Positions map[string]int64 `json:"positions"`
}

// EncodePositions encodes committed positions.
func EncodePositions(pos map[string]int64) ([]byte, error) {
	if pos == nil {
		pos = map[string]int64{}
	}
	return json.Marshal(positionsValue{Format: PositionsFormatVersion, Positions: pos})
}

// DecodePositions decodes committed positions; a newer format is refused.
func DecodePositions(b []byte) (map[string]int64, error) {
	var v positionsValue
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: positions: %v", ErrBadRecord, err)
	}
	if v.Format < 1 || v.Format > PositionsFormatVersion {
		return nil, fmt.Errorf("%w: positions format %d not in 1..%d", ErrBadRecord, v.Format, PositionsFormatVersion)
	}
	if v.Positions == nil {
		v.Positions = map[string]int64{}
	}
	return v.Positions, nil
}
