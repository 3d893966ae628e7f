package chaos

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// outRecord is one output record as the final judge read it.
type outRecord struct {
	offset int64
	key    []byte // nil: a null key
	value  []byte
}

// verdict is what the final judge says of an output read to its end.
type verdict struct {
	total, distinct           int
	missing, dups, extra      int
	wrongKey, wrongPart       int
	missingEx, dupEx, extraEx []string
	// seen counts the copies of each input value (index: the value).
	seen []int
	// failures are the verdicts against the data, one line each: loss,
	// duplicates where exactly-once is promised, records that were never
	// input, wrong keys, wrong partitions, order.
	failures []string
}

// judgeOutput checks an output against the input it was copied from:
//   - every input value is there (missing: a loss), once in the
//     exactly-once modes (k2k, dedupe; plain mode counts its duplicates);
//   - nothing else is there;
//   - each record carries the key the config gives it and sits in the
//     partition the partitioner must choose: 2to3 variants key by the value
//     (key: content()) under the murmur2 partitioner, so the partition is
//     Java's toPositive(murmur2(key)) mod partitions (written out in
//     kafkatest, not franz-go's); 1to1 variants keep the input's null key and
//     its partition;
//   - 1to1 variants keep each input partition's order (plain mode: the
//     first copy of each value).
//
// input holds each input partition's values in offset order; out each
// output partition's records in offset order.
func judgeOutput(input map[int32][]int, out map[int32][]outRecord, mode, variant string, outParts int32) verdict {
	n := 0
	inPart := map[int]int32{}
	for p, vs := range input {
		n += len(vs)
		for _, v := range vs {
			inPart[v] = p
		}
	}
	v := verdict{seen: make([]int, n)}
	var wrongKey, wrongPart []string
	parts := make([]int32, 0, len(out))
	for p := range out {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		for _, r := range out[p] {
			v.total++
			val, err := strconv.Atoi(string(r.value))
			if err != nil || val < 0 || val >= n {
				v.extra++
				if len(v.extraEx) < 5 {
					v.extraEx = append(v.extraEx, fmt.Sprintf("%q at %d/%d", r.value, p, r.offset))
				}
				continue
			}
			v.seen[val]++
			if p < 0 || p >= outParts {
				wrongPart = append(wrongPart, fmt.Sprintf("value %d in partition %d of a %d-partition topic", val, p, outParts))
				continue
			}
			switch {
			case strings.HasPrefix(variant, "2to3"):
				if want := []byte(string(r.value)); !bytes.Equal(r.key, want) {
					wrongKey = append(wrongKey, fmt.Sprintf("value %d at %d/%d has key %s, want %q", val, p, r.offset, keyString(r.key), want))
				} else if want := kafkatest.JavaPartition(r.key, outParts); p != want {
					wrongPart = append(wrongPart, fmt.Sprintf("key %q at %d/%d, murmur2 gives partition %d", r.key, p, r.offset, want))
				}
			case strings.HasPrefix(variant, "1to1"):
				if r.key != nil {
					wrongKey = append(wrongKey, fmt.Sprintf("value %d at %d/%d has key %s, want the input's null key", val, p, r.offset, keyString(r.key)))
				}
				if want := inPart[val]; p != want {
					wrongPart = append(wrongPart, fmt.Sprintf("value %d at %d/%d came from input partition %d", val, p, r.offset, want))
				}
			}
		}
	}
	for val, c := range v.seen {
		switch {
		case c == 0:
			v.missing++
			if len(v.missingEx) < 10 {
				v.missingEx = append(v.missingEx, fmt.Sprintf("%d (input partition %d)", val, inPart[val]))
			}
		default:
			v.distinct++
			if c > 1 {
				v.dups += c - 1
				if len(v.dupEx) < 10 {
					v.dupEx = append(v.dupEx, fmt.Sprintf("%d (input partition %d, %d copies)", val, inPart[val], c))
				}
			}
		}
	}
	if v.missing > 0 {
		v.failures = append(v.failures, fmt.Sprintf("LOSS: %d of %d input records are missing from the output, e.g. values %v", v.missing, n, v.missingEx))
	}
	if v.dups > 0 && mode != "plain" {
		v.failures = append(v.failures, fmt.Sprintf("DUPLICATES in exactly-once mode %s: %d, e.g. values %v", mode, v.dups, v.dupEx))
	}
	if v.extra > 0 {
		v.failures = append(v.failures, fmt.Sprintf("%d output records hold values that were never input, e.g. %v", v.extra, v.extraEx))
	}
	v.wrongKey, v.wrongPart = len(wrongKey), len(wrongPart)
	if len(wrongKey) > 0 {
		v.failures = append(v.failures, fmt.Sprintf("WRONG KEY on %d output records, e.g. %v", len(wrongKey), wrongKey[:min(5, len(wrongKey))]))
	}
	if len(wrongPart) > 0 {
		v.failures = append(v.failures, fmt.Sprintf("WRONG PARTITION for %d output records, e.g. %v", len(wrongPart), wrongPart[:min(5, len(wrongPart))]))
	}
	if strings.HasPrefix(variant, "1to1") {
		for p := range int32(len(input)) {
			var got []int
			firsts := map[int]bool{}
			for _, r := range out[p] {
				val, err := strconv.Atoi(string(r.value))
				if err != nil {
					continue
				}
				if mode == "plain" {
					if firsts[val] {
						continue
					}
					firsts[val] = true
				}
				got = append(got, val)
			}
			if !slices.Equal(got, input[p]) {
				v.failures = append(v.failures, fmt.Sprintf("ORDER: partition %d of the output differs from the input's: %s", p, firstDiff(input[p], got)))
			}
		}
	}
	return v
}

func keyString(k []byte) string {
	if k == nil {
		return "null"
	}
	return strconv.Quote(string(k))
}

// sameRecords compares what a second judge read with the final judge's
// records, per offset (a judge that read an offset twice, after a broker
// bounce, is compacted first by the caller). It returns "" when they agree.
func sameRecords(final []outRecord, other []kafkatest.ConsoleRecord) string {
	for i := range min(len(final), len(other)) {
		f, o := final[i], other[i]
		if f.offset != o.Offset || keyString(f.key) != consoleKey(o.Key) || string(f.value) != o.Value {
			return fmt.Sprintf("at index %d: final judge offset %d key %s value %q, the other offset %d key %s value %q",
				i, f.offset, keyString(f.key), f.value, o.Offset, consoleKey(o.Key), o.Value)
		}
	}
	if len(final) != len(other) {
		return fmt.Sprintf("the final judge read %d records, the other %d", len(final), len(other))
	}
	return ""
}

// consoleKey turns a key as the ConsoleConsumer prints it into keyString's
// form ("null" for a null key; the key "null" itself cannot be told apart,
// and no run writes it).
func consoleKey(k string) string {
	if k == "null" {
		return "null"
	}
	return strconv.Quote(k)
}

// missedChaos lists the planned rounds that did not land: a SIGKILL that
// found no running copier, a bounce, SIGTERM or zombie round that did not
// run, a zombie that was not fenced (exit 3) because it never wrote again.
// A run with any of them did not test what it says, and fails.
func missedChaos(plan []event, st stats) []string {
	want := map[event]int{}
	for _, e := range plan {
		want[e]++
	}
	fenced := 0
	for _, code := range st.zombieExits {
		if code == 3 {
			fenced++
		}
	}
	var out []string
	for _, c := range []struct {
		what      string
		want, got int
	}{
		{"SIGKILLs of a running copier", want[evKill], st.kills},
		{"SIGTERMs", want[evTerm], st.sigterms},
		{"broker kill -9 bounces", want[evBrokerHard], st.brokerHard},
		{"clean broker bounces", want[evBrokerClean], st.brokerClean},
		{"zombie rounds", want[evZombie], st.zombies},
		{"zombies fenced (exit 3 after writing again)", want[evZombie], fenced},
	} {
		if c.got < c.want {
			out = append(out, fmt.Sprintf("planned %d %s, %d happened", c.want, c.what, c.got))
		}
	}
	return append(out, st.cl.missed(want)...)
}
