package kafkaarrow

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Golden streams in testdata/:
//
//   - v1-edge.arrows: edgeRecords() as written by this package at format
//     version 1. It must keep decoding after any change to the encoder.
//   - pyarrow-26-reencoded-edge.arrows: v1-edge.arrows read and written
//     again by pyarrow 26.0.1 (which validated it with Table.validate(full=True)).
//   - pyarrow-26-plain.arrows: a table built in pyarrow from scratch: plain
//     string topic, nullable flags, no format version, other column order.
func TestGolden(t *testing.T) {
	plain := []*kgo.Record{
		{Topic: "py", Partition: 0, Offset: 10, Timestamp: timeMilli(1700000000000), Value: []byte("v0")},
		{Topic: "py", Partition: 1, Offset: 11, Timestamp: timeMilli(1700000000001), Key: []byte{},
			Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "a"}}},
		{Topic: "py", Partition: 2, Offset: 12, Timestamp: timeMilli(1700000000002), Key: []byte("k2"), Value: []byte{}},
	}
	for file, want := range map[string][]*kgo.Record{
		"v1-edge.arrows":                   edgeRecords(),
		"pyarrow-26-reencoded-edge.arrows": edgeRecords(),
		"pyarrow-26-plain.arrows":          plain,
	} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := NewDecoder().DecodeRecords(b)
			if err != nil {
				t.Fatal(err)
			}
			requireSameRecords(t, want, got)
		})
	}
}
