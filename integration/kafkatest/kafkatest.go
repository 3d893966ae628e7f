// Package kafkatest connects integration tests to the real Apache Kafka brokers
// that integration/kafka/up.sh starts.
//
// Kafka's transaction protocol differs by the cluster's finalized
// transaction.version: 0 is the classic protocol, 2 is KIP-890 (the epoch is
// bumped on every EndTxn). One broker cannot serve both, so the tests get one
// broker per version, each named by an environment variable (see EnvVar).
// kfake covers most behaviour in unit tests; these brokers are the judge for what
// kfake gets wrong (error codes, timing, coordinator states).
//
// Tests skip, with a message saying how to start the broker, when a variable is
// unset, so `go test ./...` works on a machine without Java. Set
// KAFKATEST_REQUIRE=1 (CI) to turn those skips into failures, so a broken broker
// start cannot pass as a green run.
package kafkatest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RequireEnv names the variable that makes a missing broker fail the test
// instead of skipping it.
const RequireEnv = "KAFKATEST_REQUIRE"

// transactionVersions are the versions the Makefile starts brokers for. Version
// 1 exists but only changes the client side of KIP-890 part 1, so it adds no
// broker behaviour worth a third broker.
var transactionVersions = []int{0, 2}

// EnvVar returns the variable holding the bootstrap address of the broker
// formatted with transaction.version=tv, e.g. KAFKA_BROKERS_TV2.
func EnvVar(tv int) string { return fmt.Sprintf("KAFKA_BROKERS_TV%d", tv) }

// Brokers returns the bootstrap address (host:port, possibly comma separated)
// of the broker formatted with transaction.version=tv. It skips t (or fails it
// under KAFKATEST_REQUIRE) when that broker is not configured.
func Brokers(t testing.TB, tv int) string {
	t.Helper()
	name := EnvVar(tv)
	addr := strings.TrimSpace(os.Getenv(name))
	if addr == "" {
		msg := fmt.Sprintf("%s is not set, so there is no Apache Kafka broker with transaction.version=%d: "+
			"`make test` starts one, or run "+
			"`export %s=$(bash integration/kafka/up.sh --tv %d | sed -n 's/^KAFKA_BROKERS=//p')` "+
			"(stop it with `bash integration/kafka/down.sh --tv %d`)", name, tv, name, tv, tv)
		if os.Getenv(RequireEnv) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return addr
}

// Versions lists, in ascending order, the transaction versions that have a
// broker configured, for tests that run once per available broker.
func Versions() []int {
	var vs []int
	for _, tv := range transactionVersions {
		if strings.TrimSpace(os.Getenv(EnvVar(tv))) != "" {
			vs = append(vs, tv)
		}
	}
	return vs
}

// Client returns a franz-go client for brokers, closed when t ends. Extra
// options come after the seeds, so they can override anything.
func Client(t testing.TB, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: new client for %s: %v", brokers, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns a kadm client for brokers, closed when t ends.
func Admin(t testing.TB, brokers string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(Client(t, brokers))
}

var topicSeq atomic.Int64

// Topic creates a topic with the given number of partitions (and the broker's
// default replication factor: 1 on up.sh's broker, 3 on up-cluster.sh's) and
// returns its name, which is unique and derived from the test's name so a
// leftover topic points at its test. The broker does not auto-create topics, so
// every test makes its own. Topic waits until each partition has a leader
// (CreateTopics returns before the broker serves the new partitions), and
// deletes the topic when t ends.
func Topic(t testing.TB, brokers string, partitions int32) string {
	t.Helper()
	name := topicName(t.Name())
	adm := Admin(t, brokers)

	createTopic(t, adm, name, partitions)
	return name
}

// topicName turns a test name into a legal, unique Kafka topic name
// ([a-zA-Z0-9._-], at most 249 bytes).
func topicName(test string) string {
	var b strings.Builder
	for _, r := range test {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	base := b.String()
	if len(base) > 150 {
		base = base[:150]
	}
	return fmt.Sprintf("t-%s-%s-%d", base, strconv.FormatInt(time.Now().UnixNano(), 36), topicSeq.Add(1))
}

// Wait polls cond until it returns true and fails t if that takes longer than
// timeout. Brokers change state asynchronously (leaders, coordinators, timed
// out transactions), so tests wait for an outcome instead of sleeping.
func Wait(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for sleep := 10 * time.Millisecond; ; sleep = min(2*sleep, 250*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kafkatest: condition not met within %v", timeout)
		}
		time.Sleep(sleep)
	}
}

// ToolCmd returns a command that runs one of Kafka's own tools through
// integration/kafka/tool.sh (e.g. class "TransactionsCommand",
// "consumer.ConsoleConsumer", "ProducerPerformance"), so a test can have Kafka's
// Java client judge what our code wrote. The tool replaces the shell, so
// cancelling ctx kills the JVM itself.
func ToolCmd(ctx context.Context, class string, args ...string) (*exec.Cmd, error) {
	script, err := toolScript()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{script, class}, args...)...)
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// toolScript finds integration/kafka/tool.sh above the working directory (go
// test runs in the package's directory, anywhere below the repository root).
func toolScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "integration", "kafka", "tool.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kafkatest: integration/kafka/tool.sh not found above the working directory")
		}
		dir = parent
	}
}

// createTopic creates name with adm, waits until every partition has a leader
// and deletes the topic when t ends.
//
// The topic keeps its records whatever their timestamps (retention.ms -1).
// Tests write records with fixed timestamps years in the past (a mirror copies
// its source records' timestamps), and with the broker's default retention
// (7 days) such records are deleted at the broker's next retention check
// (every 5 minutes): Kafka rolls a segment when a record's timestamp is older
// than segment.ms, so a transaction's old records sit in a segment of their own
// below its marker, and the whole segment goes. The judges then see records
// missing that were written and committed.
func createTopic(t testing.TB, adm *kadm.Client, name string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, -1, map[string]*string{"retention.ms": kadm.StringPtr("-1")}, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, name); err != nil {
			t.Logf("kafkatest: delete topic %s: %v", name, err)
		}
	})

	Wait(t, 20*time.Second, func() bool {
		m, err := adm.Metadata(ctx, name)
		if err != nil {
			return false
		}
		td, ok := m.Topics[name]
		if !ok || td.Err != nil || len(td.Partitions) != int(partitions) {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
}
