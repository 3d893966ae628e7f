package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// positionsTopic is the mirror's positions topic of a run, on the target.
func (n secNames) positionsTopic() string { return n.base + "-pos" }

// mirrorSourceACLs is the least a mirror needs on the source cluster: Read on
// the source topic, DescribeConfigs on it (create_topics gives the target the
// source topic's configs) and Read on the consumer group (the input commits
// the group's offsets after the copy, for lag tools). docs/security.md lists
// it.
func mirrorSourceACLs(n secNames) []secACL {
	return []secACL{
		{res: "topic", name: n.in, op: kadm.OpRead},
		{res: "topic", name: n.in, op: kadm.OpDescribeConfigs},
		{res: "group", name: n.group, op: kadm.OpRead},
	}
}

// mirrorTargetACLs is the least a mirror needs on the target cluster: Write
// and Create on the target topic (create_topics), Read, Write,
// DescribeConfigs and Create on the positions topic (the output creates it
// compacted, checks that it is, and reads it back when it takes a partition
// over), the state topic's four as in the copy, and Write on the
// transactional ids. No group ACL on the target: the group lives on the
// source. docs/security.md lists it.
func mirrorTargetACLs(n secNames) []secACL {
	var acls []secACL
	for _, op := range []kadm.ACLOperation{kadm.OpRead, kadm.OpWrite, kadm.OpDescribeConfigs, kadm.OpCreate} {
		acls = append(acls,
			secACL{res: "topic", name: n.positionsTopic(), op: op},
			secACL{res: "topic", name: n.state, op: op})
	}
	return append(acls,
		secACL{res: "topic", name: n.out, op: kadm.OpWrite},
		secACL{res: "topic", name: n.out, op: kadm.OpCreate},
		secACL{res: "transactional-id", name: n.txn, prefix: true, op: kadm.OpWrite},
	)
}

// mirrorACLs is both sets: the tests run source and target on one broker,
// under one user.
func mirrorACLs(n secNames) []secACL {
	return append(mirrorSourceACLs(n), mirrorTargetACLs(n)...)
}

// mirrorSetup fills the source topic as setup does, but leaves the target
// topic to the mirror's create_topics; the topics the mirror creates are
// deleted when t ends. It returns the source's values by partition.
func (h *secHarness) mirrorSetup(t *testing.T, n secNames) map[int32][]string {
	t.Helper()
	values := h.setupInput(t, n)
	adm := h.s.AdminClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, n.out, n.positionsTopic())
	})
	byPart := map[int32][]string{}
	for i, v := range values {
		byPart[int32(i%3)] = append(byPart[int32(i%3)], v)
	}
	return byPart
}

// mirrorConfig renders a mirror of n.in to n.out with create_topics, the
// source and the target being the one broker of the test.
func (h *secHarness) mirrorConfig(n secNames, in, out, cache secConn) string {
	return fmt.Sprintf(`http: { enabled: false }
logger: { level: TRACE, format: logfmt }
input:
  kafka_native:
%s    topics: [ %q ]
    consumer_group: %q
    start_offset: committed
    reset_offset: earliest
    stop_offset: latest
pipeline:
  threads: 1
output:
  kafka_eos:
%s    transactional_id: %q
    consumer_group: %q
    state_cache: eos_state
    epoch: { interval: 100ms }
    mirror:
      positions_topic: %q
      topics: { %q: %q }
      create_topics: true
cache_resources:
  - label: eos_state
    kafka_state:
  %s      topic: %q
`, h.conn(in), n.in, n.group, h.conn(out), n.txn, n.group, n.positionsTopic(), n.in, n.out, indentConn(h.conn(cache)), n.state)
}

// testMirror runs the cross-cluster mirror (source and target on the one
// secured broker, as the user the tests grant ACLs to): with exactly
// mirrorACLs it copies every record once, into its partition, in order; each
// Fatal case takes away one ACL only the mirror needs and must stop the binary
// naming it, with nothing written to the target.
func testMirror(t *testing.T, h *secHarness) {
	t.Run("LeastACLs", func(t *testing.T) {
		t.Parallel()
		n := h.names(t, "m")
		h.grant(t, h.s.Denied.Name, mirrorACLs(n))
		h.mirrorCopy(t, n, h.mirrorSetup(t, n))
	})
	// With the target and the positions topic created beforehand, the
	// mirror needs no Create on them, and no DescribeConfigs on the source
	// (create_topics creates nothing).
	t.Run("PrecreatedTopics", func(t *testing.T) {
		t.Parallel()
		n := h.names(t, "p")
		acls := replace(mirrorACLs(n), "topic", n.out, kadm.OpCreate)
		acls = replace(acls, "topic", n.positionsTopic(), kadm.OpCreate)
		acls = replace(acls, "topic", n.in, kadm.OpDescribeConfigs)
		h.grant(t, h.s.Denied.Name, acls)
		want := h.mirrorSetup(t, n)
		h.s.CreateTopic(t, n.out, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		compact := "compact"
		resp, err := h.s.AdminClient(t).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, n.positionsTopic())
		if err == nil {
			err = resp.Err
		}
		require.NoError(t, err, "creating the positions topic")
		h.mirrorCopy(t, n, want)
	})
	t.Run("Fatal", func(t *testing.T) {
		t.Parallel()
		h.fatalRuns(t, mirrorFatalCases(h))
	})
}

// mirrorCopy runs the mirror of n as the denied user and checks that the
// target holds want, partition by partition, in order.
func (h *secHarness) mirrorCopy(t *testing.T, n secNames, want map[int32][]string) {
	t.Helper()
	c := secConn{user: h.s.Denied, mech: "SCRAM-SHA-512"}
	r := h.run(t.Name(), writeConfig(t, h.mirrorConfig(n, c, c, c)), 2*time.Minute)
	require.NoError(t, r.err)
	require.Equal(t, 0, r.code, "exit code after %v (-1: killed at the deadline); output:\n%s", r.took, tail(r.out, 40))
	t.Logf("mirror as %s: exit 0 after %v", c.user.Name, r.took.Round(time.Millisecond))
	assert.Equal(t, want, h.readCommittedParts(t, n.out), "the target's records by partition, in order")
}

// mirrorFatalCases is one case per entry of mirrorACLs: the mirror with every
// entry but that one must stop (exit 3) with an error naming the refusal and
// the resource, writing nothing to the target. That every entry is needed is
// what makes mirrorACLs the least set.
func mirrorFatalCases(h *secHarness) []fatalCase {
	denied := func(*kafkatest.Secure) (secConn, secConn, secConn) {
		c := secConn{user: h.s.Denied, mech: "SCRAM-SHA-512"}
		return c, c, c
	}
	// The roles of a run's names, by a placeholder run.
	p := secNames{base: "b", in: "b-in", out: "b-out", state: "b-state", group: "b-g", txn: "b-txn"}
	roles := map[string]func(secNames) string{
		p.in:               func(n secNames) string { return n.in },
		p.out:              func(n secNames) string { return n.out },
		p.state:            func(n secNames) string { return n.state },
		p.group:            func(n secNames) string { return n.group },
		p.txn:              func(n secNames) string { return n.txn },
		p.positionsTopic(): func(n secNames) string { return n.positionsTopic() },
	}
	roleNames := map[string]string{p.in: "Source", p.out: "Target", p.state: "State", p.group: "Group", p.txn: "TransactionalID", p.positionsTopic(): "Positions"}
	codes := map[string]string{"topic": "TOPIC_AUTHORIZATION_FAILED", "group": "GROUP_AUTHORIZATION_FAILED", "transactional-id": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
	var cases []fatalCase
	for i, a := range mirrorACLs(p) {
		name := roles[a.name]
		var op strings.Builder // DESCRIBE_CONFIGS: DescribeConfigs
		for _, w := range strings.Split(a.op.String(), "_") {
			op.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
		cases = append(cases, fatalCase{
			name:   "Missing" + roleNames[a.name] + op.String(),
			mirror: true,
			conn:   denied,
			acls: func(n secNames) []secACL {
				acls := mirrorACLs(n)
				return append(acls[:i:i], acls[i+1:]...)
			},
			want: func(n secNames) []string { return []string{codes[a.res], name(n)} },
		})
	}
	return cases
}

// readCommittedParts returns the values of topic by partition, in offset
// order, as a read_committed reader sees them.
func (h *secHarness) readCommittedParts(t *testing.T, topic string) map[int32][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs, err := kafkatest.ReadCommitted(ctx, h.s.Client(t, h.s.Admin), topic)
	require.NoError(t, err)
	got := map[int32][]string{}
	for p, rs := range recs {
		for _, r := range rs {
			got[p] = append(got[p], string(r.Value))
		}
	}
	return got
}
