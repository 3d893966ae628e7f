package txnstate

import (
	"errors"
	"testing"
)

func TestPositionRecordRoundTrip(t *testing.T) {
	for _, r := range []PositionRecord{
		{Topic: "orders", Partition: 3, Writer: "mirror-a", Kind: PositionPos, Next: 42, Slots: 2, Generation: 7},
		{Topic: "o.r-d_e", Partition: 0, Writer: "with/slash/in-id", Kind: PositionClaim, Next: -1, Slots: 4, Generation: -1},
		{Topic: "t", Partition: 2147483647, Writer: "w", Kind: PositionRelease, Next: 9, Slots: 2, By: "other"},
	} {
		got, err := ParsePositionRecord(r.Key(), r.Value())
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got != r {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestParsePositionRecordRejects(t *testing.T) {
	good := PositionRecord{Topic: "t", Partition: 1, Writer: "w", Kind: PositionPos, Next: 1, Slots: 2}
	for name, kv := range map[string][2]string{
		"no partition":   {"t", string(good.Value())},
		"no writer":      {"t/1/", string(good.Value())},
		"bad partition":  {"t/x/w", string(good.Value())},
		"negative":       {"t/-1/w", string(good.Value())},
		"empty topic":    {"/1/w", string(good.Value())},
		"not json":       {"t/1/w", "{"},
		"unknown format": {"t/1/w", `{"format":2,"kind":"pos","next":1}`},
		"unknown kind":   {"t/1/w", `{"format":1,"kind":"lease","next":1}`},
	} {
		if _, err := ParsePositionRecord([]byte(kv[0]), []byte(kv[1])); !errors.Is(err, ErrPositionRecord) {
			t.Errorf("%s: %v, want ErrPositionRecord", name, err)
		}
	}
}

// TestPositionsFold: the position of a partition is the largest Next of every
// writer's latest record; holders are the other writers whose latest word is
// not a release; what a writer left held is every partition where its latest
// word is a claim or a pos.
func TestPositionsFold(t *testing.T) {
	sp := SourcePartition{"t", 0}
	var p Positions
	if _, ok := p.Next(sp); ok {
		t.Fatal("empty: no position")
	}
	rec := func(w string, k PositionKind, next int64) PositionRecord {
		return PositionRecord{Topic: "t", Partition: 0, Writer: w, Kind: k, Next: next, Slots: 2}
	}
	p.Apply(rec("a", PositionClaim, -1))
	if _, ok := p.Next(sp); ok {
		t.Fatal("a claim without a position gives none")
	}
	if h := p.Holders(sp, "b"); len(h) != 1 || h[0].Writer != "a" {
		t.Fatalf("holders %v, want a", h)
	}
	if h := p.Holders(sp, "a"); len(h) != 0 {
		t.Fatalf("a is not its own holder: %v", h)
	}
	p.Apply(rec("a", PositionPos, 10))
	p.Apply(rec("a", PositionPos, 25))
	p.Apply(rec("a", PositionRelease, 25))
	if h := p.Holders(sp, "b"); len(h) != 0 {
		t.Fatalf("released: holders %v", h)
	}
	p.Apply(rec("b", PositionClaim, 25))
	p.Apply(rec("b", PositionPos, 40))
	if n, ok := p.Next(sp); !ok || n != 40 {
		t.Fatalf("next %d %v, want 40", n, ok)
	}
	// A fence-release written by c on b's behalf.
	fr := rec("b", PositionRelease, 40)
	fr.By = "c"
	p.Apply(fr)
	p.Apply(rec("c", PositionClaim, 40))
	if h := p.Holders(sp, "a"); len(h) != 1 || h[0].Writer != "c" {
		t.Fatalf("holders %v, want c", h)
	}
	if n := p.WriterNext(sp, "a"); n != 25 {
		t.Fatalf("a's next %d, want 25", n)
	}
	p.Apply(PositionRecord{Topic: "u", Partition: 1, Writer: "c", Kind: PositionPos, Next: 3, Slots: 2})
	held := p.Held("c")
	if len(held) != 2 || held[0].Topic != "t" || held[1].Topic != "u" {
		t.Fatalf("held by c: %v", held)
	}
	if len(p.Held("b")) != 0 {
		t.Fatal("b released everything")
	}
	if p.Len() != 4 {
		t.Fatalf("len %d, want 4", p.Len())
	}
}

// TestPositionsLatestHeld: a position held at a record a dead-letter route
// has not taken keeps its Next while what was copied past it grows; of
// several records with the largest Next, the newest gives the partition its
// position (with its Held), whatever the writers' names.
func TestPositionsLatestHeld(t *testing.T) {
	sp := SourcePartition{Topic: "t", Partition: 0}
	var p Positions
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "b", Kind: PositionPos, Next: 4})
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "b", Kind: PositionPos, Next: 10, Held: "through 20"})
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "b", Kind: PositionRelease, Next: 10, Held: "through 20"})
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "a", Kind: PositionClaim, Next: 10, Held: "through 20"})
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "a", Kind: PositionPos, Next: 10, Held: "through 25"})
	r, ok := p.Latest(sp)
	if !ok || r.Writer != "a" || r.Next != 10 || r.Held != "through 25" {
		t.Fatalf("latest %+v %v, want a's pos at 10 held through 25", r, ok)
	}
	if n, ok := p.Next(sp); !ok || n != 10 {
		t.Fatalf("next %d %v, want 10", n, ok)
	}
	c := p.Clone()
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "b", Kind: PositionClaim, Next: 10})
	if r, _ := p.Latest(sp); r.Writer != "b" || r.Held != "" {
		t.Fatalf("latest %+v, want b's newer claim", r)
	}
	if r, _ := c.Latest(sp); r.Writer != "a" || r.Held != "through 25" {
		t.Fatalf("the clone's latest %+v changed with the original", r)
	}
	p.Apply(PositionRecord{Topic: "t", Partition: 0, Writer: "a", Kind: PositionPos, Next: 30})
	if r, _ := p.Latest(sp); r.Writer != "a" || r.Next != 30 || r.Held != "" {
		t.Fatalf("latest %+v, want a's pos at 30", r)
	}
	back, err := ParsePositionRecord(PositionRecord{Topic: "t", Partition: 0, Writer: "a", Kind: PositionPos, Next: 10, Held: "through 25"}.Key(), PositionRecord{Topic: "t", Partition: 0, Writer: "a", Kind: PositionPos, Next: 10, Held: "through 25"}.Value())
	if err != nil || back.Held != "through 25" {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if p.Len() != 2 {
		t.Fatalf("len %d, want 2", p.Len())
	}
}
