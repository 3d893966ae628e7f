package handover

import (
	"context"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type nopTakeover struct{ name string }

func (nopTakeover) Ready(context.Context) error { return nil }
func (nopTakeover) CommitOffsets(context.Context, map[string]map[int32]int64) error {
	return nil
}
func (nopTakeover) StartAt(map[string]map[int32]int64)          {}
func (nopTakeover) Member(GroupState)                           {}
func (nopTakeover) Revoked(context.Context, map[string][]int32) {}

// TestRegisterRelease: one takeover per group; a released group takes a new
// one; releasing someone else's takeover does nothing.
func TestRegisterRelease(t *testing.T) {
	res := service.MockResources()
	a, b := &nopTakeover{"a"}, &nopTakeover{"b"}
	_, ok := Lookup(res, "g")
	assert.False(t, ok)
	require.NoError(t, RegisterCommitTakeover(res, "g", a))
	require.Error(t, RegisterCommitTakeover(res, "g", b), "one takeover per group")
	require.NoError(t, RegisterCommitTakeover(res, "other", b), "groups are independent")
	ReleaseCommitTakeover(res, "g", b) // not g's: nothing happens
	got, ok := Lookup(res, "g")
	require.True(t, ok)
	assert.Same(t, a, got)
	ReleaseCommitTakeover(res, "g", a)
	_, ok = Lookup(res, "g")
	assert.False(t, ok, "released")
	require.NoError(t, RegisterCommitTakeover(res, "g", b), "a released group takes a new takeover")
	got, _ = Lookup(res, "g")
	assert.Same(t, b, got)
}

// TestSpanTravelsInContext: WithSpan stamps every message; a message built
// from scratch carries none.
func TestSpanTravelsInContext(t *testing.T) {
	b := service.MessageBatch{service.NewMessage([]byte("a")), service.NewMessage([]byte("b"))}
	s := Span{Topic: "t", Partition: 3, From: 10, To: 20, Generation: -1}
	WithSpan(b, s)
	for _, m := range b {
		got, ok := SpanOf(m)
		require.True(t, ok)
		assert.Equal(t, s, got)
		c := m.Copy()
		got, ok = SpanOf(c)
		assert.True(t, ok, "a copy keeps the span")
		assert.Equal(t, s, got)
	}
	_, ok := SpanOf(service.NewMessage(nil))
	assert.False(t, ok)
}

// TestSpanSlot: messages made in a slot's context have no span until the
// slot is set, then its span, as do their copies and the messages made from
// them with another context on top; WithSpan over such a message wins.
func TestSpanSlot(t *testing.T) {
	ctx, slot := WithSpanSlot(context.Background())
	b := service.MessageBatch{service.NewMessageWithContext(ctx, []byte("a")), service.NewMessageWithContext(ctx, []byte("b"))}
	for _, m := range b {
		_, ok := SpanOf(m)
		assert.False(t, ok, "no span before Set")
	}
	s := Span{Topic: "t", Partition: 3, From: 10, To: 20, Generation: 7, MemberID: "m", Assignment: 2}
	slot.Set(s)
	for _, m := range b {
		got, ok := SpanOf(m)
		require.True(t, ok)
		assert.Equal(t, s, got)
		got, ok = SpanOf(m.Copy())
		require.True(t, ok, "a copy keeps the span")
		assert.Equal(t, s, got)
		on := m.WithContext(context.WithValue(m.Context(), struct{ k int }{1}, "v"))
		got, ok = SpanOf(on)
		require.True(t, ok, "a context on top keeps the span")
		assert.Equal(t, s, got)
	}
	other := Span{Topic: "t", Partition: 3, From: 20, To: 30, Generation: -1}
	WithSpan(b[:1], other)
	got, _ := SpanOf(b[0])
	assert.Equal(t, other, got, "WithSpan over a slot")
	got, _ = SpanOf(b[1])
	assert.Equal(t, s, got)
}

// TestArrowMark: only MarkArrow marks a message; copies keep the mark.
func TestArrowMark(t *testing.T) {
	m := service.NewMessage([]byte("\xff\xff\xff\xff looks like Arrow"))
	assert.False(t, IsArrow(m))
	m = MarkArrow(m)
	assert.True(t, IsArrow(m))
	assert.True(t, IsArrow(m.Copy()))
	assert.False(t, IsArrow(service.NewMessage([]byte("x"))))
}

// HolderOf finds the Holder set on a batch's slot from any message made in
// its context, an Arrow mark on top included, with or without a span; a
// message of no slot has none.
func TestHolderOf(t *testing.T) {
	ctx, slot := WithSpanSlot(context.Background())
	var held int64
	slot.SetHolder(func(n int64) { held += n })
	msg := MarkArrow(service.NewMessageWithContext(ctx, []byte("x")))
	h := HolderOf(msg.Context())
	require.NotNil(t, h)
	h(12)
	assert.Equal(t, int64(12), held)
	_, ok := SpanOf(msg)
	assert.False(t, ok, "a slot without a span")

	assert.Nil(t, HolderOf(service.NewMessage(nil).Context()))
	ctx2, _ := WithSpanSlot(context.Background())
	assert.Nil(t, HolderOf(ctx2), "a slot whose holder was not set")
}
