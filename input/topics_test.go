package input

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Topic entries as users write them: several topics in one entry separated
// by commas, a partition, or a range of partitions.
func TestParseTopicEntries(t *testing.T) {
	pc, err := Spec().ParseYAML("seed_brokers: [ x:1 ]\ntopics: [ 'b, c', 'a:2', 'a:4-6', 'd:0,e' ]", nil)
	require.NoError(t, err)
	c, err := configFromParsed(pc)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, c.topicOrder)
	assert.True(t, c.topics["b"].all)
	assert.True(t, c.topics["c"].all)
	assert.True(t, c.topics["e"].all)
	assert.Equal(t, map[int32]bool{2: true, 4: true, 5: true, 6: true}, c.topics["a"].partitions)
	assert.Equal(t, map[int32]bool{0: true}, c.topics["d"].partitions)
	for _, bad := range []string{"a:3-1", "a:-1", "a:1-", "a:x-2"} {
		pc, err := Spec().ParseYAML(fmt.Sprintf("seed_brokers: [ x:1 ]\ntopics: [ '%s' ]", bad), nil)
		require.NoError(t, err)
		_, err = configFromParsed(pc)
		assert.Error(t, err, bad)
	}
	// With regexp_topics an entry is one expression (commas included),
	// matched against whole topic names.
	pc, err = Spec().ParseYAML("seed_brokers: [ x:1 ]\nregexp_topics: true\ntopics: [ 'orders-[0-9]{1,2}' ]", nil)
	require.NoError(t, err)
	c, err = configFromParsed(pc)
	require.NoError(t, err)
	require.Len(t, c.patterns, 1)
	assert.True(t, c.matches("orders-12"))
	assert.False(t, c.matches("orders-123"))
	assert.False(t, c.matches("x-orders-1"))
}

// readByTopic reads to the end and returns the partitions read, by topic.
func readByTopic(t *testing.T, h *harness) map[string][]int32 {
	t.Helper()
	out := map[string][]int32{}
	seen := map[string]bool{}
	for _, g := range h.readAll(readTimeout) {
		k := fmt.Sprintf("%s/%d", g.Topic, g.Partition)
		if !seen[k] {
			seen[k] = true
			out[g.Topic] = append(out[g.Topic], g.Partition)
		}
	}
	return out
}

// A comma list in one entry and a partition range read those topics and
// partitions.
func scenarioTopicListsAsWritten(t *testing.T, e *env) {
	a, b, c := e.topic(t, 1), e.topic(t, 1), e.topic(t, 4)
	e.produce(t, a, 0, []byte("a"))
	e.produce(t, b, 0, []byte("b"))
	for p := range int32(4) {
		e.produce(t, c, p, []byte("c"))
	}
	h := e.newInput(t, fmt.Sprintf("topics: [ '%s, %s', '%s:1-2' ]\nstop_offset: latest\n", a, b, c))
	h.mustConnect()
	got := readByTopic(t, h)
	assert.Equal(t, []int32{0}, got[a])
	assert.Equal(t, []int32{0}, got[b])
	assert.ElementsMatch(t, []int32{1, 2}, got[c])
}

// regexp_topics reads every topic whose whole name matches; a bounded read
// takes the topics and partitions listed at start only.
func scenarioRegexpTopics(t *testing.T, e *env) {
	x1, x2, other := e.topic(t, 1), e.topic(t, 2), e.topic(t, 1)
	// The test's topic names share a prefix; match x1 and x2 by name.
	pattern := regexp.QuoteMeta(x1) + "|" + regexp.QuoteMeta(x2)
	e.produce(t, x1, 0, []byte("x1"))
	e.produce(t, x2, 1, []byte("x2"))
	e.produce(t, other, 0, []byte("other"))
	h := e.newInput(t, fmt.Sprintf("topics: [ '%s' ]\nregexp_topics: true\nstop_offset: latest\npartition_discovery_interval: 100ms\n", pattern))
	h.mustConnect()
	got := readByTopic(t, h)
	assert.Equal(t, map[string][]int32{x1: {0}, x2: {1}}, got)
}

// In an unbounded read, partitions added to a topic read whole and topics
// created later that match the pattern are picked up (Flink's partition
// discovery), from their start; a bounded read never picks them up.
func scenarioPartitionDiscovery(t *testing.T, e *env) {
	base := uniq(t, "d")
	first := e.namedTopic(t, base+"-1", 1)
	e.produce(t, first, 0, []byte("first"))
	h := e.newInput(t, fmt.Sprintf("topics: [ '%s-.*' ]\nregexp_topics: true\npartition_discovery_interval: 200ms\n", regexp.QuoteMeta(base)))
	h.mustConnect()
	assert.Equal(t, []string{"first"}, values(h.readN(1, readTimeout)))

	second := e.namedTopic(t, base+"-2", 1)
	e.produce(t, second, 0, []byte("second"))
	got := h.readN(1, readTimeout)
	assert.Equal(t, []string{"second"}, values(got), "a new matching topic is read from its start")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.adm.CreatePartitions(ctx, 1, first)
	require.NoError(t, err)
	wait(t, 20*time.Second, func() bool {
		l, err := e.adm.ListEndOffsets(ctx, first)
		_, ok := l.Lookup(first, 1)
		return err == nil && ok
	})
	// A new client: the env's producer holds metadata of one partition.
	fresh := newEnv(t, e.name, e.brokers)
	fresh.produce(t, first, 1, []byte("added"))
	got = h.readN(1, readTimeout)
	assert.Equal(t, []string{"added"}, values(got), "a partition added to a read topic is read from its start")
	assert.Equal(t, int32(1), got[0].Partition)
}

// A bounded read with a pattern ignores topics created after its start.
func scenarioNoDiscoveryWhenBounded(t *testing.T, e *env) {
	base := uniq(t, "d")
	first := e.namedTopic(t, base+"-1", 1)
	e.produce(t, first, 0, vals("a", 2)...)
	h := e.newInput(t, fmt.Sprintf("topics: [ '%s-.*' ]\nregexp_topics: true\npartition_discovery_interval: 100ms\nstop_offset: specific\nstop_offsets: { '%s:0': 3 }\n", regexp.QuoteMeta(base), first))
	h.mustConnect()
	assert.Equal(t, []string{"a0", "a1"}, values(h.readN(2, readTimeout)))
	later := e.namedTopic(t, base+"-2", 1)
	e.produce(t, later, 0, []byte("later"))
	time.Sleep(500 * time.Millisecond) // several discovery intervals
	e.produce(t, first, 0, []byte("a2"))
	rest := h.readAll(readTimeout)
	assert.Equal(t, []string{"a2"}, values(rest))
}

// namedTopic creates a topic with the given name.
func (e *env) namedTopic(t testing.TB, name string, partitions int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := e.adm.CreateTopic(ctx, partitions, 1, nil, name)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	wait(t, 20*time.Second, func() bool {
		l, err := e.adm.ListEndOffsets(ctx, name)
		if err != nil || l.Error() != nil {
			return false
		}
		n := 0
		l.Each(func(kadm.ListedOffset) { n++ })
		return n == int(partitions)
	})
	return name
}

// With group_membership, regexp_topics subscribes the group to the matching
// topics (whole names only, as a direct read).
func scenarioGroupRegexpTopics(t *testing.T, e *env) {
	base := uniq(t, "r")
	a := e.namedTopic(t, base+"-a", 1)
	b := e.namedTopic(t, base+"-b", 2)
	notMatched := e.namedTopic(t, base+"-a-x", 1)
	e.produce(t, a, 0, []byte("a"))
	e.produce(t, b, 1, []byte("b"))
	e.produce(t, notMatched, 0, []byte("x"))
	h := e.newInput(t, fmt.Sprintf(`
topics: [ '%s-[ab]' ]
regexp_topics: true
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
session_timeout: 6s
heartbeat_interval: 1s
`, regexp.QuoteMeta(base), uniq(t, "g")))
	h.mustConnect()
	assert.ElementsMatch(t, []string{"a", "b"}, values(h.readN(2, readTimeout)))
	var assigned []string
	for _, s := range h.raw.conn.tr.snapshots() {
		assigned = append(assigned, s.tp.String())
	}
	assert.ElementsMatch(t, []string{a + ":0", b + ":0", b + ":1"}, assigned, "the group assigns the whole-name matches only")
}
