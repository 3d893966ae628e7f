package output

import (
	"errors"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
)

// FuzzInputFormat feeds untrusted bodies through the output's record mapping
// (toRecords) with its real limits (max_message_bytes, the Arrow decoder it
// builds) under each input_format, marked as a kafka_native Arrow message or
// not. A body is unpacked into rows only under input_format arrow or for a
// marked message under auto; any other body is exactly one record holding it.
// Whatever the bytes, the mapping never panics, a message either gives
// records within max_message_bytes or fails alone with ErrCannotWrite, and
// nothing else.
func FuzzInputFormat(f *testing.F) {
	good, err := kafkaarrow.NewEncoder().AppendIPC(nil, []*kgo.Record{
		{Key: []byte("k"), Value: []byte("v"), Partition: 1, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}},
		{Value: make([]byte, 700)},
	})
	if err != nil {
		f.Fatal(err)
	}
	for _, format := range []uint8{0, 1, 2} {
		for _, marked := range []bool{false, true} {
			f.Add(good, marked, format)
			f.Add(good[:len(good)-24], marked, format)
			f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0}, marked, format)
			f.Add([]byte("plain"), marked, format)
		}
	}
	outs := map[uint8]*output{}
	for i, format := range []string{keoInputFormatAuto, keoInputFormatMessage, keoInputFormatArrow} {
		outs[uint8(i)] = newUnconnected(f, newResources(), `
seed_brokers: [ 127.0.0.1:1 ]
topic: out
transactional_id: fuzz
state_cache: state
max_message_bytes: 600
input_format: `+format+`
`)
	}
	f.Fuzz(func(t *testing.T, body []byte, marked bool, format uint8) {
		o := outs[format%3]
		m := service.NewMessage(body)
		if marked {
			m = handover.MarkArrow(m)
		}
		w := o.toRecords(service.MessageBatch{m})
		defer w.release()
		unpack := o.conf.inputFormat == keoInputFormatArrow || (o.conf.inputFormat == keoInputFormatAuto && marked)
		if e, failed := w.failed[0]; failed {
			if !errors.Is(e, ErrCannotWrite) || len(w.recs) != 0 {
				t.Fatalf("failed with %v and %d records, want ErrCannotWrite alone", e, len(w.recs))
			}
			if !unpack && len(body) <= o.conf.maxMessageBytes {
				t.Fatalf("a body written as bytes failed: %v", e)
			}
			return
		}
		for _, r := range w.recs {
			if recordSize(r) > o.conf.maxMessageBytes {
				t.Fatalf("record of %d bytes over max_message_bytes %d", recordSize(r), o.conf.maxMessageBytes)
			}
		}
		if !unpack && (len(w.recs) != 1 || string(w.recs[0].Value) != string(body) || w.recs[0].Key != nil || len(w.recs[0].Headers) != 0) {
			t.Fatalf("a body not to unpack gave %d records", len(w.recs))
		}
	})
}
