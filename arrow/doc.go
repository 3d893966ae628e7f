// Package kafkaarrow is a codec between Kafka records (franz-go *kgo.Record)
// and Arrow record batches (github.com/apache/arrow-go/v18), so that a whole
// fetch can travel through a Benthos pipeline as one message instead of one
// message (with its own metadata map) per record.
//
// The package imports no Benthos. The input (kafka_native, format: arrow)
// encodes each fetched partition batch:
//
//	enc := kafkaarrow.NewEncoder()             // one per reader loop; not safe for concurrent use
//	body, err := enc.AppendIPC(nil, p.Records) // Arrow IPC stream bytes, one Benthos message
//
// and the output (kafka_eos) turns the message back into records to produce
// inside the epoch's transaction, without a heap copy per record:
//
//	batches, err := kafkaarrow.NewDecoder().Decode(body) // validated; an error, never a panic
//	defer kafkaarrow.ReleaseAll(batches)                  // only after every produce promise ran
//	for _, b := range batches {
//		recs := b.ProduceRecords(nil, kafkaarrow.ProduceOptions{Topic: "mirror", Partition: true})
//		// kgo.Client.Produce(ctx, r, promise) for each r
//	}
//
// # Format
//
// See [Schema] for the columns. Three distinctions that Benthos message
// metadata cannot express are kept apart:
//
//   - a null key (Record.Key == nil) and an empty key (non-nil, zero length);
//   - a tombstone (null value, Record.Value == nil) and an empty value;
//   - headers keep their order and their duplicate keys, and a header value
//     may be null (distinct from empty).
//
// Record fields that are not carried: Attrs (timestamp type, compression),
// ProducerID, ProducerEpoch, LeaderEpoch and Context. A record without headers
// decodes with Headers == nil.
//
// # Lifetimes
//
// A [Batch] returned by [Decoder.Decode] aliases the input bytes (the IPC body
// is not copied), and every []byte the Batch hands out (Key, Value, header
// values, and the records of [Batch.ProduceRecords]) aliases the Batch's
// buffers. Those slices are valid until the Batch is released and as long as
// the input bytes are not modified; they must not be written to. Strings
// (topics, header keys) are always Go-owned copies, interned per batch, so
// they stay valid after Release. [Batch.Records] deep-copies when records
// must outlive the Batch.
package kafkaarrow
