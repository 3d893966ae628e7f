package statecache

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
)

func TestSpecParses(t *testing.T) {
	conf, err := Spec().ParseYAML(`
seed_brokers: [ "a:9092,b:9092" ]
topic: state
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCacheFromParsed(conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if c.cfg.Topic != "state" || c.cfg.Partitions != 1 || c.cfg.ReplicationFactor != -1 {
		t.Fatalf("config %+v, want topic state, 1 partition, replication factor -1", c.cfg)
	}
}

func TestSpecRejects(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"no topic", `seed_brokers: [ "a:9092" ]`, "topic"},
		{"no brokers", `topic: x`, "seed_brokers"},
		{"zero partitions", "seed_brokers: [ \"a:9092\" ]\ntopic: x\npartitions: 0", "partitions"},
		{"zero replication", "seed_brokers: [ \"a:9092\" ]\ntopic: x\nreplication_factor: 0", "replication_factor"},
		{"bad sasl", "seed_brokers: [ \"a:9092\" ]\ntopic: x\nsasl: { mechanism: PLAIN }", "sasl.username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			// The linter sees what parsing alone does not (lint rules).
			linter := service.GlobalEnvironment().NewComponentConfigLinter()
			lints, lerr := linter.LintCacheYAML([]byte("kafka_state:\n  " + strings.ReplaceAll(tc.yaml, "\n", "\n  ")))
			if lerr != nil {
				err = lerr
			} else if len(lints) > 0 {
				err = errors.New(lints[0].Error())
			} else {
				var conf *service.ParsedConfig
				if conf, err = Spec().ParseYAML(tc.yaml, nil); err == nil {
					_, err = newCacheFromParsed(conf, nil)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestResourceYAMLInStream runs a stream with resources/kafka_state.yaml: the
// cache processor writes through the resource, the output finds the
// *Cache through Lookup, and a new cache reads back what the stream wrote.
func TestResourceYAMLInStream(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	t.Setenv("KAFKA_BROKERS", strings.Join(b.brokers, ","))
	t.Setenv("KAFKA_STATE_TOPIC", topic)
	resources, err := os.ReadFile("../resources/kafka_state.yaml")
	if err != nil {
		t.Fatal(err)
	}

	env := service.NewEnvironment()
	var (
		mu       sync.Mutex
		looked   *Cache
		found    bool
		memFound bool
	)
	err = env.RegisterBatchOutput("statecache_probe", service.NewConfigSpec(),
		func(_ *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			mu.Lock()
			looked, found = Lookup(context.Background(), mgr, "eos_state")
			_, memFound = Lookup(context.Background(), mgr, "mem")
			mu.Unlock()
			return dropOutput{}, service.BatchPolicy{}, 1, nil
		})
	if err != nil {
		t.Fatal(err)
	}

	sb := env.NewStreamBuilder()
	if err := sb.AddResourcesYAML(string(resources)); err != nil {
		t.Fatal(err)
	}
	if err := sb.AddCacheYAML(`label: mem
memory: {}`); err != nil {
		t.Fatal(err)
	}
	// count() is process-wide: name the counter after the topic, unique
	// per run.
	if err := sb.AddInputYAML(`generate: { count: 3, interval: "", mapping: 'root = "v" + count("` + topic + `").string()' }`); err != nil {
		t.Fatal(err)
	}
	if err := sb.AddProcessorYAML(`cache: { resource: eos_state, operator: set, key: 'k${! content() }', value: '${! content() }' }`); err != nil {
		t.Fatal(err)
	}
	if err := sb.AddOutputYAML(`statecache_probe: {}`); err != nil {
		t.Fatal(err)
	}
	if err := sb.SetLoggerYAML(`level: warn`); err != nil {
		t.Fatal(err)
	}
	stream, err := sb.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.Run(ctx); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if !found || looked.Topic() != topic {
		t.Fatalf("Lookup(eos_state) = %v, %v; want the kafka_state cache on %s", looked, found, topic)
	}
	if memFound {
		t.Fatal("Lookup of a memory cache returned a kafka_state cache")
	}
	r := b.newCache(t, topic)
	for _, v := range []string{"v1", "v2", "v3"} {
		wantValue(t, r, "k"+v, v)
	}
	if p := b.topicConfig(t, topic, "cleanup.policy"); p != "compact" {
		t.Fatalf("the stream's topic has cleanup.policy=%q", p)
	}
}

type dropOutput struct{}

func (dropOutput) Connect(context.Context) error                          { return nil }
func (dropOutput) WriteBatch(context.Context, service.MessageBatch) error { return nil }
func (dropOutput) Close(context.Context) error                            { return nil }

// TestSpecExamplesLint builds every example of the spec as a stream's
// resources, with linting on, so the docs never show a config that fails.
func TestSpecExamplesLint(t *testing.T) {
	var view *service.ConfigView
	service.GlobalEnvironment().WalkCaches(func(name string, v *service.ConfigView) {
		if name == "kafka_state" {
			view = v
		}
	})
	if view == nil {
		t.Fatal("kafka_state is not registered")
	}
	data, err := view.TemplateData()
	if err != nil {
		t.Fatal(err)
	}
	if len(data.Examples) == 0 {
		t.Fatal("no examples")
	}
	for _, ex := range data.Examples {
		t.Run(ex.Title, func(t *testing.T) {
			sb := service.NewStreamBuilder()
			sb.SetEnvVarLookupFunc(func(string) (string, bool) { return "", false })
			if err := sb.AddResourcesYAML(ex.Config); err != nil {
				t.Fatalf("example %q does not lint: %v", ex.Title, err)
			}
		})
	}
}
