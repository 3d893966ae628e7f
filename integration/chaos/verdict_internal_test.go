package chaos

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// The final judge's checks fail on bad data: a judge handed a topic with a
// duplicate, a missing record, a record never input, a wrong key, a wrong
// partition or a changed order says so (and says nothing of a good one).
func TestJudgeOutputFailsOnBadData(t *testing.T) {
	input := map[int32][]int{0: {0, 2, 4, 6, 8}, 1: {1, 3, 5, 7, 9}}
	// good2to3 is the output a correct 2to3 copy writes: key = value,
	// partition = murmur2(key) mod 3, in input order.
	good2to3 := func() map[int32][]outRecord {
		out := map[int32][]outRecord{}
		for v := range 10 {
			k := []byte(strconv.Itoa(v))
			p := kafkatest.JavaPartition(k, 3)
			out[p] = append(out[p], outRecord{offset: int64(len(out[p])), key: k, value: k})
		}
		return out
	}
	good1to1 := func() map[int32][]outRecord {
		out := map[int32][]outRecord{}
		for p, vs := range input {
			for o, v := range vs {
				out[p] = append(out[p], outRecord{offset: int64(o), value: []byte(strconv.Itoa(v))})
			}
		}
		return out
	}
	// first returns the partition and index of the record holding value v.
	first := func(out map[int32][]outRecord, v int) (int32, int) {
		for p, rs := range out {
			for i, r := range rs {
				if string(r.value) == strconv.Itoa(v) {
					return p, i
				}
			}
		}
		t.Fatalf("value %d not in the output", v)
		return 0, 0
	}

	for _, tc := range []struct {
		name, mode, variant string
		bad                 func(out map[int32][]outRecord)
		good                func() map[int32][]outRecord
		want                string // "" for no failure
	}{
		{"good 2to3", "k2k", "2to3", func(map[int32][]outRecord) {}, good2to3, ""},
		{"good 1to1", "k2k", "1to1", func(map[int32][]outRecord) {}, good1to1, ""},
		{"missing", "k2k", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 7)
			out[p] = append(out[p][:i:i], out[p][i+1:]...)
		}, good2to3, "LOSS: 1 of 10"},
		{"duplicate", "k2k", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 3)
			out[p] = append(out[p], out[p][i])
		}, good2to3, "DUPLICATES in exactly-once mode k2k: 1"},
		{"duplicate under dedupe", "dedupe", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 3)
			out[p] = append(out[p], out[p][i])
		}, good2to3, "DUPLICATES in exactly-once mode dedupe: 1"},
		{"duplicate in plain mode is counted, not failed", "plain", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 3)
			out[p] = append(out[p], out[p][i])
		}, good2to3, ""},
		{"never input", "plain", "2to3", func(out map[int32][]outRecord) {
			out[0] = append(out[0], outRecord{offset: 99, key: []byte("x"), value: []byte("x")})
		}, good2to3, "1 output records hold values that were never input"},
		{"wrong key", "k2k", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 4)
			out[p][i].key = []byte("5")
		}, good2to3, "WRONG KEY on 1 output records"},
		{"null key", "k2k", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 4)
			out[p][i].key = nil
		}, good2to3, "WRONG KEY on 1 output records"},
		{"wrong partition", "k2k", "2to3", func(out map[int32][]outRecord) {
			p, i := first(out, 4)
			r := out[p][i]
			out[p] = append(out[p][:i:i], out[p][i+1:]...)
			q := (p + 1) % 3
			out[q] = append(out[q], r)
		}, good2to3, "WRONG PARTITION for 1 output records"},
		{"a key in 1to1", "k2k", "1to1", func(out map[int32][]outRecord) {
			out[1][2].key = []byte("5")
		}, good1to1, "WRONG KEY on 1 output records"},
		{"partition not kept in 1to1", "k2k", "1to1-arrow", func(out map[int32][]outRecord) {
			out[1] = append(out[1], out[0][4])
			out[0] = out[0][:4]
		}, good1to1, "WRONG PARTITION for 1 output records"},
		{"order in 1to1", "k2k", "1to1", func(out map[int32][]outRecord) {
			out[0][1].value, out[0][2].value = out[0][2].value, out[0][1].value
		}, good1to1, "ORDER: partition 0"},
		{"a plain replay keeps the order of first copies", "plain", "1to1", func(out map[int32][]outRecord) {
			out[0] = append(out[0], out[0][3:]...)
		}, good1to1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.good()
			tc.bad(out)
			v := judgeOutput(input, out, tc.mode, tc.variant, map[bool]int32{true: 3, false: 2}[strings.HasPrefix(tc.variant, "2to3")])
			got := strings.Join(v.failures, "\n")
			if tc.want == "" {
				if got != "" {
					t.Fatalf("failures on good data:\n%s", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("failures:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}

// The second judges' comparison fails on any difference of offset, key or
// value, and on a short read.
func TestSameRecords(t *testing.T) {
	final := []outRecord{{0, []byte("1"), []byte("1")}, {2, nil, []byte("2")}}
	ok := []kafkatest.ConsoleRecord{{Offset: 0, Key: "1", Value: "1"}, {Offset: 2, Key: "null", Value: "2"}}
	if d := sameRecords(final, ok); d != "" {
		t.Fatal(d)
	}
	for name, other := range map[string][]kafkatest.ConsoleRecord{
		"short":  ok[:1],
		"offset": {ok[0], {Offset: 3, Key: "null", Value: "2"}},
		"key":    {ok[0], {Offset: 2, Key: "2", Value: "2"}},
		"value":  {{Offset: 0, Key: "1", Value: "7"}, ok[1]},
	} {
		if d := sameRecords(final, other); d == "" {
			t.Errorf("%s: no difference found", name)
		}
	}
}

// The whole final judge, reader and verdict, on a topic: a kfake topic
// written as a correct 2to3 copy passes, and the same topic with a
// duplicate, a missing record, a wrong key or a record in the wrong
// partition fails with the matching verdict.
func TestFinalJudgeOnATopic(t *testing.T) {
	input := map[int32][]int{0: {0, 2, 4, 6, 8}, 1: {1, 3, 5, 7, 9}}
	type rec struct {
		p    int32
		k, v string
	}
	good := func() []rec {
		var rs []rec
		for v := range 10 {
			s := strconv.Itoa(v)
			rs = append(rs, rec{kafkatest.JavaPartition([]byte(s), 3), s, s})
		}
		return rs
	}
	for _, tc := range []struct {
		name string
		edit func([]rec) []rec
		want string
	}{
		{"good", func(rs []rec) []rec { return rs }, ""},
		{"duplicate", func(rs []rec) []rec { return append(rs, rs[3]) }, "DUPLICATES in exactly-once mode k2k: 1"},
		{"missing", func(rs []rec) []rec { return append(rs[:6:6], rs[7:]...) }, "LOSS: 1 of 10"},
		{"wrong key", func(rs []rec) []rec { rs[2].k = "x"; return rs }, "WRONG KEY on 1"},
		{"wrong partition", func(rs []rec) []rec { rs[4].p = (rs[4].p + 1) % 3; return rs }, "WRONG PARTITION for 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("out"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, r := range tc.edit(good()) {
				if err := cl.ProduceSync(ctx, &kgo.Record{Partition: r.p, Key: []byte(r.k), Value: []byte(r.v)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			byPart, err := kafkatest.ReadCommitted(ctx, cl, "out")
			if err != nil {
				t.Fatal(err)
			}
			out := map[int32][]outRecord{}
			for p, rs := range byPart {
				for _, r := range rs {
					out[p] = append(out[p], outRecord{offset: r.Offset, key: r.Key, value: r.Value})
				}
			}
			got := strings.Join(judgeOutput(input, out, "k2k", "2to3", 3).failures, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("failures:\n%s\nwant %q", got, tc.want)
			}
		})
	}
}

// TestAddTailToAnEmptyHeadPartition: a head all in partition 0 (fill
// reports no partition 1) still gets partition 1's tail in the input the
// judges compare with; without it the tail's values read as never input.
func TestAddTailToAnEmptyHeadPartition(t *testing.T) {
	input := map[int32][]int{0: {0, 1, 2}}
	addTail(input, map[int32][]int{0: {3, 5}, 1: {4, 6}})
	if want := map[int32][]int{0: {0, 1, 2, 3, 5}, 1: {4, 6}}; !reflect.DeepEqual(input, want) {
		t.Fatalf("input %v, want %v", input, want)
	}
}
