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
