package output

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// Bad configuration is rejected at construction with a message naming the
// field.
func TestConfigErrors(t *testing.T) {
	const base = `
seed_brokers: [ localhost:9092 ]
topic: out
transactional_id: app
state_cache: state
`
	for _, tc := range []struct {
		name, yaml, field string
	}{
		{"missing transactional_id", "seed_brokers: [ localhost:9092 ]\ntopic: out\nstate_cache: state\n", "transactional_id"},
		{"empty transactional_id", strings.Replace(base, "transactional_id: app", "transactional_id: \"\"", 1), "transactional_id"},
		{"unknown cache", strings.Replace(base, "state_cache: state", "state_cache: nope", 1), "state_cache"},
		{"interval not below timeout", base + "transaction_timeout: 10s\nepoch: { interval: 9s }\n", "epoch.interval"},
		{"pool of one", base + "producer_pool_size: 1\n", "producer_pool_size"},
		{"manual without partition", base + "partitioner: manual\n", "partition"},
		{"partition without manual", base + "partition: \"1\"\n", "partition"},
		{"sasl without password", base + "sasl: { mechanism: PLAIN, username: u }\n", "sasl.password"},
		{"sasl unknown mechanism", base + "sasl: { mechanism: KERBEROS }\n", "sasl.mechanism"},
		{"no brokers", strings.Replace(base, "[ localhost:9092 ]", "[]", 1), "seed_brokers"},
		{"buffer below message size", base + "max_buffered_bytes: 10\n", "max_buffered_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := Spec().ParseYAML(tc.yaml, nil)
			if err == nil {
				_, err = newOutputFromParsed(pc, newResources())
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// The cross-field rules are lint rules too, so `connect-eos lint` reports
// them before anything runs.
func TestLintRules(t *testing.T) {
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"interval too close to timeout", "transaction_timeout: 10s\nepoch: { interval: 9s }\n", "fields epoch.interval, commit_timeout and transaction_timeout"},
		{"pool of one", "producer_pool_size: 1\n", "field producer_pool_size"},
		{"manual without partition", "partitioner: manual\n", "field partition"},
		{"sasl", "sasl: { mechanism: PLAIN }\n", "sasl.username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := service.NewStreamBuilder()
			err := sb.AddOutputYAML(`
kafka_eos:
  seed_brokers: [ localhost:9092 ]
  topic: out
  transactional_id: app
  state_cache: state
` + indent(tc.extra))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("lint: %v, want %q", err, tc.want)
			}
		})
	}
	// And a good config lints clean.
	sb := service.NewStreamBuilder()
	if err := sb.AddOutputYAML("kafka_eos:\n  seed_brokers: [ localhost:9092 ]\n  topic: out\n  transactional_id: app\n  state_cache: state\n"); err != nil {
		t.Fatal(err)
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// The registered component runs in a stream: a generate input, a memory
// cache as state_cache, every record visible to read_committed readers.
func TestStreamBuilder(t *testing.T) {
	c := newCluster(t)
	sb := service.NewStreamBuilder()
	if err := sb.SetYAML(`
input:
  generate:
    count: 40
    interval: ""
    mapping: 'root = "msg-" + counter().string()'
output:
  kafka_eos:
    seed_brokers: [ ` + c.ListenAddrs()[0] + ` ]
    topic: out
    transactional_id: stream
    state_cache: state
    epoch: { interval: 20ms }
    batching: { count: 8 }
`); err != nil {
		t.Fatal(err)
	}
	if err := sb.AddCacheYAML("label: state\nmemory: {}\n"); err != nil {
		t.Fatal(err)
	}
	if err := sb.SetLoggerYAML("level: warn"); err != nil {
		t.Fatal(err)
	}
	s, err := sb.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := len(readCommitted(t, c.ListenAddrs(), testTopic)); got != 40 {
		t.Fatalf("visible %d, want 40", got)
	}
}

// An authentication or authorization failure is fatal at Connect (Benthos
// would otherwise retry it forever). kfake answers bad SASL credentials by
// closing the connection (EOF), unlike Kafka's SASL_AUTHENTICATION_FAILED, so
// the classification is tested on the error itself.
func TestAuthFailureFatal(t *testing.T) {
	restore := fatal.SetHandler(func(error) {})
	defer restore()
	o := &output{conf: &config{transactionalID: "app"}}
	for _, e := range []error{kerr.SaslAuthenticationFailed, kerr.TransactionalIDAuthorizationFailed, kerr.TopicAuthorizationFailed} {
		err := o.classifyConnectErr(fmt.Errorf("init producer id: %w", e))
		var fe *fatal.Error
		if !errors.As(err, &fe) || !errors.Is(err, e) || !strings.Contains(err.Error(), `"app"`) {
			t.Errorf("%v: got %v, want fatal naming the id", e, err)
		}
	}
	if err := o.classifyConnectErr(kerr.CoordinatorNotAvailable); errors.As(err, new(*fatal.Error)) {
		t.Error("a retriable error was made fatal")
	}
	if o.classifyConnectErr(nil) != nil {
		t.Error("nil")
	}
	// A real SASL connection works end to end.
	c := newCluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "secret"))
	ok := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "sasl: { mechanism: PLAIN, username: admin, password: secret }\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A fresh client's first transaction can be aborted under it by
	// franz-go (the epoch is then nacked, as Benthos would replay it).
	writeReplaying(ctx, t, ok, batchOf("sasl", 1))
}

// A record larger than max_message_bytes fails alone with its topic and
// size, before anything is produced; its batch-mate is written (it is
// acknowledged).
func TestRecordTooLarge(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "max_message_bytes: 600\n"))
	b := batchOf("small", 2)
	b[1].SetBytes(make([]byte, 1000))
	err := o.WriteBatch(context.Background(), b)
	for attempt := 1; errors.Is(err, errCommitAborted) && attempt < 5; attempt++ {
		// A fresh slot's first transaction, ended with an abort by
		// franz-go (see writeReplaying): nothing was acked, and Benthos
		// sends the batch again.
		v0, _ := b[0].AsBytes()
		if n := counts(t, c.ListenAddrs())[string(v0)]; n != 0 {
			t.Fatalf("the aborted epoch's message is visible %d times", n)
		}
		t.Logf("nacked, replaying: %v", err)
		err = o.WriteBatch(context.Background(), b)
	}
	var re *RecordError
	if !errors.As(err, &re) || re.Topic != testTopic || re.Size < 1000 || !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("%v, want a RecordError naming the topic and size", err)
	}
	var be *service.BatchError
	if !errors.As(err, &be) || be.IndexedErrors() != 1 {
		t.Fatalf("%v, want message 1 alone blamed", err)
	}
	if bl := blamed(b, err); bl[0] != nil || bl[1] == nil {
		t.Fatalf("blamed %v, want message 1 alone", bl)
	}
	ackedMustBeVisible(t, b, err, counts(t, c.ListenAddrs()))
}

// max_buffered_bytes is the output's budget, shared by its slots: each slot
// client gets its share, and never less than one record of
// max_message_bytes.
func TestBufferedBytesSharedBySlots(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		extra string
		want  int64
	}{
		{"max_buffered_bytes: 8000000\nproducer_pool_size: 2\n", 4000000},
		{"max_buffered_bytes: 9000000\nproducer_pool_size: 3\n", 3000000},
		// 2 MiB over 4 slots is below max_message_bytes (1 MiB default).
		{"max_buffered_bytes: 2097152\nproducer_pool_size: 4\n", 1 << 20},
	} {
		o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "buf", tc.extra))
		var sum int64
		for _, s := range o.slots {
			v, ok := s.cl.OptValue(kgo.MaxBufferedBytes).(int64)
			if !ok || v != tc.want {
				t.Fatalf("%q: slot %d MaxBufferedBytes %v, want %d", tc.extra, s.n, s.cl.OptValue(kgo.MaxBufferedBytes), tc.want)
			}
			sum += v
		}
		t.Logf("%q: %d slots x %d = %d bytes", tc.extra, len(o.slots), tc.want, sum)
	}
}
