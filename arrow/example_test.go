package kafkaarrow_test

import (
	"fmt"
	"time"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The input's side: one fetched partition batch becomes one Benthos message
// body; the output's side: the body becomes records to produce, their keys,
// values and header values pointing into the body.
func Example() {
	fetched := []*kgo.Record{
		{Topic: "orders", Partition: 2, Offset: 40, Timestamp: time.UnixMilli(1700000000000), Key: []byte("a"), Value: []byte("v1")},
		{Topic: "orders", Partition: 2, Offset: 41, Timestamp: time.UnixMilli(1700000000001), Key: nil, Value: nil, // tombstone, null key
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "h", Value: nil}}},
	}

	enc := kafkaarrow.NewEncoder() // one per reader loop
	body, err := enc.AppendIPC(nil, fetched)
	if err != nil {
		panic(err)
	}

	batches, err := kafkaarrow.NewDecoder().Decode(body)
	if err != nil {
		panic(err) // wraps ErrSchema, ErrCorrupt or ErrTooLarge
	}
	defer kafkaarrow.ReleaseAll(batches) // after every promise has run
	for _, b := range batches {
		for _, r := range b.ProduceRecords(nil, kafkaarrow.ProduceOptions{Topic: "orders-mirror", Partition: true}) {
			fmt.Printf("%s[%d] key=%q (null %v) value=%q (tombstone %v) headers=%d\n",
				r.Topic, r.Partition, r.Key, r.Key == nil, r.Value, r.Value == nil, len(r.Headers))
		}
		// Source positions, e.g. for Kafka-to-Kafka exactly-once.
		fmt.Println("source:", b.Topic(0), b.Partition(0), b.Offset(0), "to", b.Offset(b.Len()-1))
	}
	// Output:
	// orders-mirror[2] key="a" (null false) value="v1" (tombstone false) headers=0
	// orders-mirror[2] key="" (null true) value="" (tombstone true) headers=2
	// source: orders 2 40 to 41
}
