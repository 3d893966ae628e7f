package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// member is one connect-eos process of a group, its output kept.
type member struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (m *member) Write(b []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.Write(b)
}

func (m *member) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

func startMember(t *testing.T, conf string) *member {
	t.Helper()
	m := &member{cmd: exec.Command(kafkatest.Binary(t), "run", conf), done: make(chan struct{})}
	m.cmd.Stdout, m.cmd.Stderr = m, m
	require.NoError(t, m.cmd.Start())
	go func() { _ = m.cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		<-m.done
	})
	return m
}

// waitCount waits until the member printed s at least n times.
func (m *member) waitCount(t *testing.T, s string, n int) {
	t.Helper()
	kafkatest.Wait(t, 2*time.Minute, func() bool { return strings.Count(m.output(), s) >= n })
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, m.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-m.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the member did not stop")
	}
}

// TestStaticMembership: with instance_id (static membership, KIP-345) a
// member restarted within session_timeout gets its partitions back without a
// rebalance: the other member of the group sees no revoke and no new
// assignment. Without it (the control) the same restart moves partitions to
// the other member and back. Apache Kafka, transaction version 2 broker.
func TestStaticMembership(t *testing.T) {
	for _, static := range []bool{true, false} {
		t.Run(map[bool]string{true: "static", false: "dynamic"}[static], func(t *testing.T) {
			brokers := kafkatest.Brokers(t, 2)
			topic := kafkatest.Topic(t, brokers, 4)
			group := "ops-static-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			conf := func(name string) string {
				id := ""
				if static {
					id = "    instance_id: " + name + "\n"
				}
				f := filepath.Join(t.TempDir(), name+".yaml")
				require.NoError(t, os.WriteFile(f, fmt.Appendf(nil, `
http: { enabled: false }
input:
  kafka_native:
    seed_brokers: [ %s ]
    topics: [ %s ]
    consumer_group: %s
    group_membership: true
    start_offset: committed
    reset_offset: earliest
    session_timeout: 30s
    heartbeat_interval: 1s
%soutput:
  drop: {}
`, brokers, topic, group, id), 0o644))
				return f
			}
			// The leader first (a rejoining static leader is not what
			// this test is about), then the member that restarts.
			leader := startMember(t, conf("leader"))
			leader.waitCount(t, "Assigned ", 1)
			restarting := startMember(t, conf("restarting"))
			restarting.waitCount(t, "Assigned ", 1)
			leader.waitCount(t, "Revoked ", 1) // cooperative: the leader gave some up
			time.Sleep(3 * time.Second)        // the group settles
			before := leader.output()

			restarting.stop(t)
			again := startMember(t, conf("restarting"))
			again.waitCount(t, "Assigned ", 1)
			time.Sleep(5 * time.Second) // a rebalance, if any, reaches the leader
			after := strings.TrimPrefix(leader.output(), before)
			moved := strings.Contains(after, "Assigned ") || strings.Contains(after, "Revoked ")
			if static {
				require.False(t, moved, "the leader saw a rebalance:\n%s", after)
			} else {
				require.True(t, moved, "the control: a dynamic member's restart should move partitions:\n%s", after)
			}
		})
	}
}
