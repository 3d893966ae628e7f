package output

import (
	"slices"
	"testing"

	"github.com/connect-eos/connect-eos/handover"
)

// The metadata of an offset held at unacknowledged messages reads back as
// written, and what does not hold together (another writer's metadata, a
// list not starting at the offset, out of order or past the reach) is not
// taken for it.
func TestHeldMetaRoundTrip(t *testing.T) {
	m := heldMeta{from: 5, through: 40, unacked: []int64{5, 9, 30}}
	got, ok := parseHeldMeta(m.String(), 5)
	if !ok || got.from != 5 || got.through != 40 || !slices.Equal(got.unacked, m.unacked) {
		t.Fatalf("%q read back as %+v %v", m.String(), got, ok)
	}
	for _, c := range []struct {
		s  string
		at int64
	}{
		{"", 5},
		{"some consumer's metadata", 5},
		{m.String(), 6}, // the offset moved since
		{heldMetaPrefix + " through=40 unacked=5,30,9", 5},     // out of order
		{heldMetaPrefix + " through=20 unacked=5,30", 5},       // past the reach
		{heldMetaPrefix + " through=5 unacked=5", 5},           // no reach
		{heldMetaPrefix + " through=40 unacked=", 5},           // empty
		{heldMetaPrefix + " through=40 unacked=5,x", 5},        // not a number
		{heldMetaPrefix + " through=40 unacked=5 trailing", 5}, // not a number
	} {
		if h, ok := parseHeldMeta(c.s, c.at); ok {
			t.Errorf("%q at %d read as %+v", c.s, c.at, h)
		}
	}
	// covers: every record of [off, off+n) written, none unacknowledged.
	for _, c := range []struct {
		off, n int64
		want   bool
	}{{5, 1, false}, {6, 1, true}, {6, 3, true}, {6, 4, false}, {31, 9, true}, {39, 2, false}, {4, 1, false}} {
		if got := m.covers(c.off, c.n); got != c.want {
			t.Errorf("covers(%d, %d) = %v, want %v", c.off, c.n, got, c.want)
		}
	}
}

// More unacknowledged messages in a partition than the metadata names: the
// offset is held at the first, and the metadata's reach stops at the first
// one not named (the records past it would be written again after a crash,
// never lost).
func TestHeldMetaListBounded(t *testing.T) {
	k := newK2K("g")
	tp := topicPartition{k2kIn, 0}
	k.base[tp] = 0
	for i := range int64(maxHeldListed + 6) {
		k.unacked[tp] = append(k.unacked[tp], 10+2*i)
	}
	offs, err := k.plan([]handover.Span{{Topic: k2kIn, Partition: 0, From: 0, To: 1000, Generation: -1}}, nil)
	if err != nil || len(offs) != 1 {
		t.Fatalf("plan: %v %v", offs, err)
	}
	h, ok := parseHeldMeta(offs[0].metadata, offs[0].Offset)
	wantThrough := int64(10 + 2*maxHeldListed)
	if !ok || offs[0].Offset != 10 || h.through != wantThrough || len(h.unacked) != maxHeldListed || offs[0].through != wantThrough {
		t.Fatalf("planned %+v (metadata %q: %+v), want held at 10, reach %d, %d named", offs[0], offs[0].metadata, h, wantThrough, maxHeldListed)
	}
	if n := len(offs[0].metadata); n > 4096 {
		t.Fatalf("metadata of %d bytes, past Kafka's default offset.metadata.max.bytes", n)
	}
}
