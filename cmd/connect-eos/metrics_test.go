package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// TestAlertMetricsFromStart: the counters an operator alerts on exist at 0
// from the start (an alert on their increase would miss the first event of
// a series that appears at 1), and the time of the last committed epoch is
// a gauge (the output's start before the first commit) that a commit moves
// on, on the binary's /metrics.
func TestAlertMetricsFromStart(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	addr := freeAddr(t)
	start := time.Now().Unix()
	p := startBin(t, "run", writeConfig(t, fmt.Sprintf(`
http: { address: %s }
metrics: { prometheus: {} }
input:
  kafka_native:
    seed_brokers: [ %[2]q ]
    topics: [ in ]
    consumer_group: g
output:
  kafka_eos:
    seed_brokers: [ %[2]q ]
    topic: out
    transactional_id: alerts
    consumer_group: g
    state_cache: state
cache_resources:
  - label: state
    kafka_state: { seed_brokers: [ %[2]q ], topic: state }
`, addr, cluster.ListenAddrs()[0])))
	p.waitOutput(t, "Input type kafka_native is now active")
	want := []string{
		`kafka_eos_epochs_aborted\{[^}]*\} 0`,
		`kafka_eos_fenced\{[^}]*\} 0`,
		`kafka_native_commits_failed\{[^}]*\} 0`,
	}
	for _, o := range []string{"resumed", "found_committed", "found_aborted", "aborted", "forced_committed", "forced_aborted"} {
		want = append(want, `kafka_eos_in_doubt_resolved\{[^}]*outcome="`+o+`"[^}]*\} 0`)
	}
	var body string
	kafkatest.Wait(t, time.Minute, func() bool {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		body = string(b)
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(body) {
				return false
			}
		}
		return true
	})
	m := regexp.MustCompile(`(?m)^kafka_eos_last_commit_timestamp_seconds\{[^}]*\} (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "kafka_eos_last_commit_timestamp_seconds:\n%s", body)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, int64(v), start-1, "the output's start, before the first commit")

	// A record in a later second: its epoch's commit moves the gauge on.
	for time.Now().Unix() <= int64(v) {
		time.Sleep(50 * time.Millisecond)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: "in", Value: []byte("x")}).FirstErr())
	kafkatest.Wait(t, time.Minute, func() bool {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		m := regexp.MustCompile(`(?m)^kafka_eos_last_commit_timestamp_seconds\{[^}]*\} (\S+)$`).FindSubmatch(b)
		if m == nil {
			return false
		}
		after, err := strconv.ParseFloat(string(m[1]), 64)
		body = string(b)
		return err == nil && after > v
	})

	// Every metric docs/operations.md names is served (the per-partition
	// ones once the input publishes its partitions, every commit_period),
	// and the data-loss counter is there at 0 before any loss.
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	names := map[string]bool{}
	for _, n := range regexp.MustCompile(`kafka_(?:eos|native)_[a-z_]+`).FindAllString(string(doc), -1) {
		names[n] = true
	}
	require.NotEmpty(t, names)
	var missing []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		missing = nil
		if res, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			body = string(b)
		}
		for n := range names {
			if !regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(body) {
				missing = append(missing, n)
			}
		}
		if !regexp.MustCompile(`(?m)^kafka_native_data_loss_records\{[^}]*\} 0$`).MatchString(body) {
			missing = append(missing, "kafka_native_data_loss_records at 0")
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not on /metrics: %v\n%s", missing, body)
		}
	}
}
