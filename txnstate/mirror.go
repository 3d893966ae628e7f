package txnstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Mirror mode: a copy from one cluster to another keeps, for every source
// partition, the next offset to copy in a compacted topic on the target
// cluster (the positions topic), written inside the epoch's transaction: a
// position is visible to a read_committed reader exactly when the records it
// covers are. Several processes (writers, one per transactional_id) share the
// source partitions; a partition moves between them, and its positions with
// it. Each record is keyed by source partition and writer, so compaction
// keeps every writer's latest word on every partition:
//
//   - claim: the writer is about to copy the partition (written, and read
//     back, before its first record of it is written);
//   - pos: an epoch of the writer committed records of the partition up to
//     Next (excluded);
//   - release: the writer will not write the partition again unless it
//     claims it anew: written by the writer itself once every epoch holding
//     the partition's records finished (a revoke; at a restart, for what its
//     previous run left claimed), or by another writer that fenced it.
//
// A writer whose latest word on a partition is a claim or a pos may still
// commit records of it: before another writer copies the partition, it
// fences such writers (InitProducerID on their transactional ids), so that
// none of their transactions can commit afterwards, then reads the positions.
// The partition's position is the largest Next of all its records: every
// position was committed with the records below it, and owners follow each
// other, each starting where the positions said.

// PositionKind is the kind of a positions record.
type PositionKind string

const (
	PositionClaim   PositionKind = "claim"
	PositionPos     PositionKind = "pos"
	PositionRelease PositionKind = "release"
)

// PositionRecord is one record of the positions topic.
type PositionRecord struct {
	Topic     string `json:"-"`
	Partition int32  `json:"-"`
	// Writer is the transactional_id (the slot prefix) of the writer the
	// record speaks for.
	Writer string       `json:"-"`
	Kind   PositionKind `json:"kind"`
	// Next is the next source offset to copy, -1 if the writer knows none
	// (a claim of a partition nothing was committed for).
	Next int64 `json:"next"`
	// Slots is the writer's producer_pool_size: its slots are
	// <Writer>-0 .. <Writer>-<Slots-1>, the transactional ids to fence.
	Slots int `json:"slots"`
	// Generation is the source group's generation the writer claimed the
	// partition in (-1 without group membership); informational.
	Generation int32 `json:"gen"`
	// By names the writer that wrote a release on Writer's behalf after
	// fencing it ("" if Writer wrote it).
	By string `json:"by,omitempty"`
	// Held, when set, says that Next is held at a source record a
	// dead-letter route has not taken yet, and which records past it were
	// copied already (the output's encoding, opaque here): the
	// partition's next owner reads from Next, hands that record to its
	// route again and does not copy the others twice. Claims and releases
	// carry it on with their position.
	Held string `json:"held,omitempty"`
}

// positionsFormat is the format of a positions record's value.
const positionsFormat = 1

type positionValue struct {
	Format int `json:"format"`
	PositionRecord
}

// Key returns the record's key: "<topic>/<partition>/<writer>". A topic name
// has no '/', so the writer is whatever follows the second one.
func (r PositionRecord) Key() []byte {
	return []byte(r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + r.Writer)
}

// Value returns the record's value (JSON).
func (r PositionRecord) Value() []byte {
	b, _ := json.Marshal(positionValue{Format: positionsFormat, PositionRecord: r})
	return b
}

// ErrPositionRecord is wrapped by the error of a positions record that does
// not parse.
var ErrPositionRecord = errors.New("txnstate: malformed positions record")

// ParsePositionRecord parses a record of the positions topic.
func ParsePositionRecord(key, value []byte) (PositionRecord, error) {
	k := string(key)
	t, rest, ok := strings.Cut(k, "/")
	if !ok || t == "" {
		return PositionRecord{}, fmt.Errorf("%w: key %q", ErrPositionRecord, k)
	}
	ps, w, ok := strings.Cut(rest, "/")
	p, err := strconv.ParseInt(ps, 10, 32)
	if !ok || err != nil || p < 0 || w == "" {
		return PositionRecord{}, fmt.Errorf("%w: key %q", ErrPositionRecord, k)
	}
	var v positionValue
	if err := json.Unmarshal(value, &v); err != nil {
		return PositionRecord{}, fmt.Errorf("%w: key %q: %v", ErrPositionRecord, k, err)
	}
	if v.Format != positionsFormat {
		return PositionRecord{}, fmt.Errorf("%w: key %q: format %d, this version reads %d", ErrPositionRecord, k, v.Format, positionsFormat)
	}
	switch v.Kind {
	case PositionClaim, PositionPos, PositionRelease:
	default:
		return PositionRecord{}, fmt.Errorf("%w: key %q: kind %q", ErrPositionRecord, k, v.Kind)
	}
	r := v.PositionRecord
	r.Topic, r.Partition, r.Writer = t, int32(p), w
	return r, nil
}

// SourcePartition names a partition of the source cluster.
type SourcePartition struct {
	Topic     string
	Partition int32
}

// Positions is what the positions topic says, folded in offset order: every
// writer's latest record per partition. The zero value is empty and usable.
type Positions struct {
	latest map[SourcePartition]map[string]PositionRecord
	// applied numbers the records of latest in the order they were
	// applied (the topic's order): a larger number is a newer record.
	applied map[SourcePartition]map[string]uint64
	n       uint64
}

// Apply folds the next record (in the topic's order).
func (p *Positions) Apply(r PositionRecord) {
	if p.latest == nil {
		p.latest = map[SourcePartition]map[string]PositionRecord{}
	}
	sp := SourcePartition{r.Topic, r.Partition}
	if p.latest[sp] == nil {
		p.latest[sp] = map[string]PositionRecord{}
	}
	p.latest[sp][r.Writer] = r
	if p.applied == nil {
		p.applied = map[SourcePartition]map[string]uint64{}
	}
	if p.applied[sp] == nil {
		p.applied[sp] = map[string]uint64{}
	}
	p.n++
	p.applied[sp][r.Writer] = p.n
}

// Next returns the position of the partition: the largest Next of every
// writer's latest record, and whether there is one.
func (p *Positions) Next(sp SourcePartition) (int64, bool) {
	r, ok := p.Latest(sp)
	if !ok {
		return -1, false
	}
	return r.Next, true
}

// Latest returns the record that gives the partition its position: of every
// writer's latest record with a position, the one with the largest Next, and
// among several with that Next the newest (applied last). Every record was
// committed with what it says, and the newest with that Next knows the most
// of what was copied past it (Held: a position held at a record a dead-letter
// route has not taken, claimed with what the previous holder said and
// extended since). It reports false if no record has a position.
func (p *Positions) Latest(sp SourcePartition) (PositionRecord, bool) {
	var (
		best PositionRecord
		at   uint64
		ok   bool
	)
	for w, r := range p.latest[sp] {
		if r.Next < 0 {
			continue
		}
		n := p.applied[sp][w]
		if !ok || r.Next > best.Next || (r.Next == best.Next && n > at) {
			best, at, ok = r, n, true
		}
	}
	return best, ok
}

// WriterNext returns the largest Next the writer's latest record of the
// partition holds (-1 if none).
func (p *Positions) WriterNext(sp SourcePartition, writer string) int64 {
	if r, ok := p.latest[sp][writer]; ok {
		return r.Next
	}
	return -1
}

// Holders returns the latest record of every writer other than self whose
// latest word on the partition is a claim or a pos: the writers that may
// still commit records of it, sorted by writer.
func (p *Positions) Holders(sp SourcePartition, self string) []PositionRecord {
	var out []PositionRecord
	for w, r := range p.latest[sp] {
		if w != self && r.Kind != PositionRelease {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b PositionRecord) int { return strings.Compare(a.Writer, b.Writer) })
	return out
}

// Held returns the latest record of every partition on which writer's latest
// word is a claim or a pos (what it left claimed), sorted.
func (p *Positions) Held(writer string) []PositionRecord {
	var out []PositionRecord
	for _, ws := range p.latest {
		if r, ok := ws[writer]; ok && r.Kind != PositionRelease {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b PositionRecord) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Len returns how many (partition, writer) records are held.
func (p *Positions) Len() int {
	n := 0
	for _, ws := range p.latest {
		n += len(ws)
	}
	return n
}

// Clone returns a copy that later Apply calls on either do not change.
func (p *Positions) Clone() Positions {
	out := Positions{latest: make(map[SourcePartition]map[string]PositionRecord, len(p.latest)), applied: make(map[SourcePartition]map[string]uint64, len(p.applied)), n: p.n}
	for sp, ws := range p.latest {
		out.latest[sp] = maps.Clone(ws)
	}
	for sp, ws := range p.applied {
		out.applied[sp] = maps.Clone(ws)
	}
	return out
}
