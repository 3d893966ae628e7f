package txnstate

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func kps(key string, pos ...int64) []KeyPos {
	out := make([]KeyPos, len(pos))
	for i, p := range pos {
		out[i] = KeyPos{key, p}
	}
	return out
}

func TestDedupePlan(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewDedupeState(0)
	d.Load(map[string]int64{"a": 5})
	drop, err := d.Plan(append(kps("a", 4, 5, 6, 6, 7), kps("b", 0)...), now)
	if err != nil {
		t.Fatal(err)
	}
	// At or below committed, and an equal position later in the batch.
	if want := []bool{true, true, false, true, false, false}; !reflect.DeepEqual(drop, want) {
		t.Fatalf("drop %v, want %v", drop, want)
	}
	// Plan changes nothing until Admit.
	if drop, _ := d.Plan(kps("a", 6), now); drop[0] {
		t.Fatal("Plan changed the admitted positions")
	}
	msgs := append(kps("a", 4, 5, 6, 6, 7), kps("b", 0)...)
	d.Admit(msgs, drop)
	if drop, _ := d.Plan(kps("a", 7, 8), now); !drop[0] || drop[1] {
		t.Fatalf("in-flight positions not a replay: %v", drop)
	}
	if got := EpochPositions([]KeyPos{{"a", 6}, {"b", 0}, {"a", 7}}); !reflect.DeepEqual(got, []DedupePosition{{"a", 7}, {"b", 0}}) {
		t.Fatalf("EpochPositions %v", got)
	}
}

func TestDedupeAbortOwes(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewDedupeState(0)
	d.Load(map[string]int64{"a": 5})
	first := kps("a", 6, 7)
	drop, _ := d.Plan(first, now)
	d.Admit(first, drop)
	second := kps("a", 8)
	drop, _ = d.Plan(second, now)
	d.Admit(second, drop)
	// Both epochs abort (the second cascades).
	d.Abort(append(first, second...), now)
	if d.Owed() != 3 {
		t.Fatalf("owed %d", d.Owed())
	}
	// A new position above an owed one must wait for the replay.
	if _, err := d.Plan(kps("a", 9), now); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("got %v, want ErrAwaitingReplay", err)
	}
	// The second batch's replay before the first's: still out of order.
	if _, err := d.Plan(second, now); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("got %v, want ErrAwaitingReplay", err)
	}
	// Other keys are not held.
	if _, err := d.Plan(kps("b", 1), now); err != nil {
		t.Fatal(err)
	}
	// The replays in order, merged into one batch: all new.
	all := kps("a", 6, 7, 8, 9)
	drop, err := d.Plan(all, now)
	if err != nil || drop[0] || drop[3] {
		t.Fatalf("replay: %v %v", drop, err)
	}
	d.Admit(all, drop)
	if d.Owed() != 0 {
		t.Fatalf("owed after replay %d", d.Owed())
	}
	d.Commit(EpochPositions(all))
	if p, _ := d.CommittedOf("a"); p != 9 {
		t.Fatalf("committed %d", p)
	}
	// Owed positions expire (a replay that never comes back).
	d.Abort(kps("a", 10), now)
	if _, err := d.Plan(kps("a", 11), now.Add(OwedExpiry)); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	// Committed positions only advance.
	d.Commit([]DedupePosition{{"a", 3}})
	if p, _ := d.CommittedOf("a"); p != 9 {
		t.Fatalf("committed moved back to %d", p)
	}
}

// A batch nacked while an aborted epoch's replay is awaited is owed too: the
// sequence of the chaos suite's dedupe loss (Benthos replayed the aborted
// epoch's batch, then the batch after the nacked one, then the nacked one).
func TestDedupeNackedBatchOwed(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewDedupeState(0)
	d.Load(map[string]int64{"a": 5})
	aborted := kps("a", 6, 7)
	drop, _ := d.Plan(aborted, now)
	d.Admit(aborted, drop)
	d.Abort(aborted, now)
	nacked := kps("a", 8, 9)
	if _, err := d.Plan(nacked, now); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("batch above the aborted positions: %v, want ErrAwaitingReplay", err)
	}
	d.Owe(nacked, now)
	if d.Owed() != 4 {
		t.Fatalf("owed %d, want 4 (the aborted epoch's 2 and the nacked batch's 2)", d.Owed())
	}
	drop, err := d.Plan(aborted, now)
	if err != nil || drop[0] || drop[1] {
		t.Fatalf("replay of the aborted epoch: %v %v", drop, err)
	}
	d.Admit(aborted, drop)
	d.Commit(EpochPositions(aborted))
	// The batch read after the nacked one, replayed before it: it must
	// wait, or the nacked batch's replay would be dropped as a duplicate.
	later := kps("a", 10, 11)
	if _, err := d.Plan(later, now); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("batch above a nacked batch's positions before its replay: %v, want ErrAwaitingReplay", err)
	}
	d.Owe(later, now)
	for _, b := range [][]KeyPos{nacked, later} {
		drop, err := d.Plan(b, now)
		if err != nil || drop[0] || drop[1] {
			t.Fatalf("replay of %v: %v %v", b, drop, err)
		}
		d.Admit(b, drop)
		d.Commit(EpochPositions(b))
	}
	if d.Owed() != 0 {
		t.Fatalf("owed after the replays %d", d.Owed())
	}
	// Positions at or below the admitted ones (replays, or held by a live
	// epoch) are not owed: their replay is dropped or the epoch's abort
	// owes them.
	d.Owe(kps("a", 10, 11), now)
	if d.Owed() != 0 {
		t.Fatalf("owed %d after owing committed positions", d.Owed())
	}
}

func TestDedupeMaxKeysBound(t *testing.T) {
	d := NewDedupeState(2)
	if _, err := d.Plan([]KeyPos{{"a", 1}, {"b", 1}, {"a", 2}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Plan([]KeyPos{{"a", 1}, {"b", 1}, {"c", 1}}, time.Now()); !errors.Is(err, ErrTooManyKeys) {
		t.Fatalf("got %v", err)
	}
}

func TestPositionsEncoding(t *testing.T) {
	b, err := EncodePositions(map[string]int64{"b": 2, "a": -1})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"format":1,"positions":{"a":-1,"b":2}}` {
		t.Fatalf("encoded %s", b)
	}
	got, err := DecodePositions(b)
	if err != nil || !reflect.DeepEqual(got, map[string]int64{"a": -1, "b": 2}) {
		t.Fatalf("decoded %v %v", got, err)
	}
	for _, bad := range []string{`{"format":2,"positions":{}}`, `{"format":1,"positions":{},"x":1}`, `nope`} {
		if _, err := DecodePositions([]byte(bad)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// Renew restarts the expiry at the nack: positions owed since an abort that
// took longer than OwedExpiry to nack still hold their key's later batches.
func TestDedupeRenewAtNack(t *testing.T) {
	start := time.Unix(1000, 0)
	d := NewDedupeState(0)
	d.Load(map[string]int64{"a": 5})
	ep := kps("a", 6, 7)
	drop, _ := d.Plan(ep, start)
	d.Admit(ep, drop)
	d.Abort(ep, start)
	nack := start.Add(OwedExpiry + time.Minute) // the abort waited for the cache
	d.Renew(ep, nack)
	if _, err := d.Plan(kps("a", 8), nack.Add(time.Second)); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("after the nack: %v, want ErrAwaitingReplay", err)
	}
	if _, err := d.Plan(kps("a", 8), nack.Add(OwedExpiry)); err != nil {
		t.Fatalf("OwedExpiry after the nack: %v, want the owed positions forgotten", err)
	}
}
