package txnstate

import (
	"errors"
	"reflect"
	"testing"
)

func TestRuns(t *testing.T) {
	type span struct{ from, to int64 }
	for _, tc := range []struct {
		name      string
		committed int64 // -1: none
		spans     []span
		want      int64 // -1: nothing to commit
	}{
		{"in order", 10, []span{{10, 15}, {15, 20}}, 20},
		{"out of order", 10, []span{{15, 20}, {10, 15}}, 20},
		{"gap holds the run", 10, []span{{10, 15}, {20, 25}}, 15},
		{"first span missing", 10, []span{{15, 20}, {20, 25}}, -1},
		{"replayed below committed", 10, []span{{5, 10}}, -1},
		{"same span twice", 10, []span{{10, 15}, {10, 15}}, 15},
		{"straddles committed", 12, []span{{10, 15}}, 15},
		{"nothing committed yet", -1, []span{{7, 9}, {9, 12}}, 12},
		{"nothing committed, gap", -1, []span{{7, 9}, {10, 12}}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Runs
			if tc.committed >= 0 {
				r.SetCommitted("t", 0, tc.committed)
			}
			for _, s := range tc.spans {
				if err := r.Add("t", 0, s.from, s.to); err != nil {
					t.Fatal(err)
				}
			}
			got := r.Next()
			if tc.want < 0 {
				if len(got) != 0 {
					t.Fatalf("Next = %v, want nothing", got)
				}
				return
			}
			if want := []SourceOffset{{Topic: "t", Partition: 0, Offset: tc.want}}; !reflect.DeepEqual(got, want) {
				t.Fatalf("Next = %v, want %v", got, want)
			}
		})
	}
}

func TestRunsNeverBackwards(t *testing.T) {
	var r Runs
	r.SetCommitted("t", 1, 20)
	r.SetCommitted("t", 1, 10) // an older commit reported late
	if err := r.Add("t", 1, 20, 30); err != nil {
		t.Fatal(err)
	}
	if got := r.Next(); len(got) != 1 || got[0].Offset != 30 {
		t.Fatalf("Next = %v", got)
	}
	r.SetCommitted("t", 1, 30)
	if r.Held() != 0 || len(r.Next()) != 0 {
		t.Fatalf("committed spans still held: %d", r.Held())
	}
}

func TestRunsRejectsOverlap(t *testing.T) {
	var r Runs
	if err := r.Add("t", 0, 10, 20); err != nil {
		t.Fatal(err)
	}
	for _, s := range [][2]int64{{10, 15}, {15, 25}, {5, 11}, {3, 3}, {-1, 2}} {
		if err := r.Add("t", 0, s[0], s[1]); !errors.Is(err, ErrSpan) {
			t.Errorf("Add(%v) = %v, want ErrSpan", s, err)
		}
	}
	// Other partitions are independent.
	if err := r.Add("t", 1, 10, 15); err != nil {
		t.Fatal(err)
	}
	if got := r.Next(); len(got) != 2 {
		t.Fatalf("Next = %v", got)
	}
}
