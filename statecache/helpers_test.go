package statecache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// backend is a cluster the suite runs against: kfake in-process, or a real
// broker (kafka_test.go). kfake is nil for a real broker.
type backend struct {
	brokers []string
	kfake   *kfake.Cluster
}

// newKfake starts a one-broker kfake cluster, closed at the end of the test.
// Topics are created explicitly by the tests: kfake's auto-created topics
// get 10 partitions.
func newKfake(t testing.TB) *backend {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &backend{brokers: c.ListenAddrs(), kfake: c}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var nonTopicChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// topicName is unique per test and run, so the suite can share a real broker.
func topicName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "statecache-" + strings.Trim(nonTopicChars.ReplaceAllString(t.Name(), "-"), "-") + "-" + hex.EncodeToString(b[:])
}

// client is a plain franz-go client for the test's own reads and writes.
func (b *backend) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (b *backend) admin(t testing.TB) *kadm.Client {
	return kadm.NewClient(b.client(t))
}

// createTopic creates topic with one partition and configs (key, value pairs).
func (b *backend) createTopic(t testing.TB, topic string, partitions int32, configs ...string) {
	t.Helper()
	m := make(map[string]*string)
	for i := 0; i+1 < len(configs); i += 2 {
		m[configs[i]] = &configs[i+1]
	}
	if _, err := b.admin(t).CreateTopic(testCtx(t), partitions, -1, m, topic); err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
	b.deleteTopicAtEnd(t, topic)
}

// topicConfig returns the broker's value of key for topic.
func (b *backend) topicConfig(t testing.TB, topic, key string) string {
	t.Helper()
	rcs, err := b.admin(t).DescribeTopicConfigs(testCtx(t), topic)
	if err != nil || len(rcs) != 1 || rcs[0].Err != nil {
		t.Fatalf("describing configs of %s: %v %v", topic, err, rcs)
	}
	for _, c := range rcs[0].Configs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// newCache returns a cache on topic, closed at the end of the test.
func (b *backend) newCache(t testing.TB, topic string, mod ...func(*Config)) *Cache {
	t.Helper()
	cfg := Config{Opts: []kgo.Opt{kgo.SeedBrokers(b.brokers...)}, Topic: topic}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func mustSet(t testing.TB, c *Cache, key, value string) {
	t.Helper()
	if err := c.Set(testCtx(t), key, []byte(value), nil); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func wantValue(t testing.TB, c *Cache, key, want string) {
	t.Helper()
	got, err := c.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v, want %q", key, err, want)
	}
	if string(got) != want {
		t.Fatalf("Get(%q) = %q, want %q", key, got, want)
	}
}

// wait polls cond until it holds, failing t after d.
func wait(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
