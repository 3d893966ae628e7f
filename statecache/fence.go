package statecache

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fenceHeader is the record header carrying the fence token of a write made
// with WithFence: 8 bytes, big-endian. A record without it has token 0.
const fenceHeader = "kafka_state.fence"

type fenceCtxKey struct{}

// WithFence returns a context under which Set, Add and Delete write token
// with the record, for the owner of a key to fence off the writes of an owner
// it replaced (a process that stalled, was declared dead and wakes up).
//
// Token rules, per key:
//   - At read (the first load and every Refresh), the record with the highest
//     token wins, whatever its offset; among records of equal token (a record
//     written without WithFence has token 0), the later one wins. A replaced
//     owner's late write with a lower token never hides the value of the
//     owner that replaced it.
//   - A write whose token is lower than the highest token this process has
//     seen for the key (read from the topic, or written by itself) fails with
//     a *FencedError (ErrFenced) and writes nothing. A replaced owner that
//     has not read the newer token yet is not stopped here; its write lands
//     and loses at read.
//   - A delete with a token keeps the token in memory: a later write with a
//     lower token stays fenced, and loses at read while the tombstone is in
//     the topic (delete.retention.ms after compaction reaches it).
//
// Tokens are chosen by the caller: they must grow with every change of owner
// of a key (a generation or an epoch), and a process must keep writing a key
// with the same token while it owns it.
//
// Compaction keeps the last record of each key by offset, not by token: once
// the segment holding the winning record is compacted, a later lower-token
// record of the key is the only one left, until the owner writes the key
// again (its next write is again the last record).
func WithFence(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, fenceCtxKey{}, token)
}

// fenceOf returns the token of ctx, 0 without one.
func fenceOf(ctx context.Context) uint64 {
	t, _ := ctx.Value(fenceCtxKey{}).(uint64)
	return t
}

// fenceHeaders returns the headers of a write with token, none for token 0
// (such a record reads as token 0 either way).
func fenceHeaders(token uint64) []kgo.RecordHeader {
	if token == 0 {
		return nil
	}
	return []kgo.RecordHeader{{Key: fenceHeader, Value: binary.BigEndian.AppendUint64(nil, token)}}
}

// tokenOf returns the fence token of r: the last fence header, 0 without
// one. A fence header that is not 8 bytes is an error: some other writer
// put it there, and guessing its token could let the wrong value win.
func tokenOf(r *kgo.Record) (uint64, error) {
	var token uint64
	for _, h := range r.Headers {
		if h.Key != fenceHeader {
			continue
		}
		if len(h.Value) != 8 {
			return 0, fmt.Errorf("kafka_state: topic %q partition %d offset %d: header %s is %d bytes, want 8 (a big-endian fence token); the record was not written by kafka_state", r.Topic, r.Partition, r.Offset, fenceHeader, len(h.Value))
		}
		token = binary.BigEndian.Uint64(h.Value)
	}
	return token, nil
}
