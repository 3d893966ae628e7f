package statecache

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
)

// fenceSep joins a key and the fence token of a write made with WithFence in
// its record key: the key, fenceSep, then the token as 16 lowercase hex
// digits. A record key without fenceSep is the key itself, with token 0.
//
// Each token of a key has a record key of its own because compaction keeps
// the last record of each record key by offset: with one record key per key,
// a replaced owner's late write, lower token but later offset, would be the
// record compaction keeps, and every reader after that would take its value.
const fenceSep = "\x00kafka_state/fence/"

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
//     owner that replaced it, before or after compaction: each token of a key
//     is stored under a record key of its own (the key, a NUL byte,
//     "kafka_state/fence/" and the token in 16 hex digits).
//   - A write whose token is lower than the highest token this process has
//     seen for the key (read from the topic, or written by itself) fails with
//     a *FencedError (ErrFenced) and writes nothing. A replaced owner that
//     has not read the newer token yet is not stopped here; its write lands
//     and loses at read.
//   - A write that wins deletes (with tombstones) the records of lower tokens
//     of the key this process has read, so that a key keeps one record per
//     owner only until its next owner writes it.
//   - A delete with a token keeps the token in memory: a later write with a
//     lower token stays fenced in this process, and loses at read while the
//     tombstone is in the topic. Compaction removes the tombstone after
//     delete.retention.ms; a lower-token record written after the delete is
//     the key's value from then on.
//
// Tokens are chosen by the caller: they must grow with every change of owner
// of a key (a generation or an epoch), and a process must keep writing a key
// with the same token while it owns it.
func WithFence(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, fenceCtxKey{}, token)
}

// FenceOf returns the token WithFence put in ctx, 0 without one: another
// cache (a wrapper, a test double) can honour the same fencing.
func FenceOf(ctx context.Context) uint64 { return fenceOf(ctx) }

// fenceOf returns the token of ctx, 0 without one.
func fenceOf(ctx context.Context) uint64 {
	t, _ := ctx.Value(fenceCtxKey{}).(uint64)
	return t
}

// recordKey returns the record key of key written with token.
func recordKey(key string, token uint64) []byte {
	if token == 0 {
		return []byte(key)
	}
	return fmt.Appendf(nil, "%s%s%016x", key, fenceSep, token)
}

// parseRecordKey splits a record key into the key and its fence token. A
// fence suffix that is not 16 hex digits of a non-zero token is an error:
// some other writer put it there, and guessing its token could let the
// wrong value win.
func parseRecordKey(rk []byte) (string, uint64, error) {
	i := bytes.Index(rk, []byte(fenceSep))
	if i < 0 {
		return string(rk), 0, nil
	}
	hex := rk[i+len(fenceSep):]
	token, err := strconv.ParseUint(string(hex), 16, 64)
	if len(hex) != 16 || err != nil || token == 0 {
		return "", 0, fmt.Errorf("record key %q has a fence suffix %q that is not 16 hex digits of a non-zero token; it was not written by kafka_state", rk, hex)
	}
	return string(rk[:i]), token, nil
}

type latestCtxKey struct{}

// WithLatest returns a context under which Get first reads the topic to its
// current end offsets (Refresh), instead of answering from what this process
// read before: for a reader that must see every write another process had
// acknowledged by now (the kafka_eos output, once it has fenced the instance
// it replaced, reads the records that instance wrote after its first read).
// Reached through any wrapper that passes the context on, as WithFence is.
func WithLatest(ctx context.Context) context.Context {
	return context.WithValue(ctx, latestCtxKey{}, true)
}

// LatestOf reports whether WithLatest marked ctx: another cache that answers
// from a copy can honour it.
func LatestOf(ctx context.Context) bool { return latestOf(ctx) }

func latestOf(ctx context.Context) bool {
	v, _ := ctx.Value(latestCtxKey{}).(bool)
	return v
}
