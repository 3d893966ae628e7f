package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
)

// Input record i of a plan: its value starts with its identity "r<i>:", then
// filler up to a size drawn from the seed and i; the oversized ones are
// twice the output's max_message_bytes. Its key is "k<i mod Keys>", so keys
// repeat across batches and epochs; in the Kafka-to-Kafka modes it lives in
// partition (i mod Keys) mod InPartitions, so that a key stays in one
// partition as a key partitioner would keep it.

func recordKey(p Plan, i int) string { return "k" + strconv.Itoa(i%p.Keys) }

func recordPartition(p Plan, i int) int32 { return int32((i % p.Keys) % int(p.InPartitions)) }

func recordSize(p Plan, i int) int {
	if slices.Contains(p.Oversized, i) {
		return 2 * MaxMessageBytes
	}
	span := p.ValueMax - p.ValueMin + 1
	h := uint64(i)*0x9e3779b97f4a7c15 ^ p.Seed
	h ^= h >> 29
	return p.ValueMin + int(h%uint64(span))
}

func recordValue(p Plan, i int) []byte {
	v := fmt.Appendf(nil, "r%d:", i)
	for n := recordSize(p, i); len(v) < n; {
		v = append(v, byte('a'+len(v)%26))
	}
	return v
}

// recordID is the identity at the start of a value ("r12" of "r12:abc"), or
// the whole value when it has none.
func recordID(v []byte) string {
	if i := bytes.IndexByte(v, ':'); i > 0 {
		return string(v[:i])
	}
	return string(v)
}

// recordIndex is i of "r<i>", -1 for anything else (the aborted input
// records are "x<j>").
func recordIndex(id string) int {
	if len(id) < 2 || id[0] != 'r' {
		return -1
	}
	n, err := strconv.Atoi(id[1:])
	if err != nil {
		return -1
	}
	return n
}
