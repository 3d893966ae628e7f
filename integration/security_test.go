package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// exitFatal is the exit code of connect-eos after a fatal component error
// (cmd/connect-eos/main.go).
const exitFatal = 3

// TestSecurity runs the exactly-once copy (kafka_native -> kafka_eos with the
// kafka_state cache) through the connect-eos binary against the SASL_SSL
// listener of up.sh: that it works with SCRAM and PLAIN, that each class of
// security failure stops the binary with exit code 3 and a message naming what
// is missing (with nothing written), and that no secret shows up in any log
// line, error or `connect-eos echo` output.
func TestSecurity(t *testing.T) {
	s := kafkatest.SecureBroker(t)
	h := &secHarness{s: s, bin: kafkatest.Binary(t), token: unsecuredJWT(s.Allowed.Name)}
	h.badCert, h.badKey = selfSignedClientCert(t)
	t.Run("Fatal", func(t *testing.T) { h.fatalRuns(t, fatalCases(h)) })

	t.Run("AllowedUserACLs", func(t *testing.T) { testAllowedUserACLs(t, h) })
	t.Run("Copy", func(t *testing.T) {
		// The allowed user with the prefixed ACLs up.sh grants.
		t.Run("SCRAM-SHA-512", func(t *testing.T) {
			t.Parallel()
			h.copyRun(t, secConn{user: s.Allowed, mech: "SCRAM-SHA-512"}, nil)
		})
		// The denied user with exactly copyACLs on this run's names: the set
		// each Fatal/ACL case removes one entry of is enough on its own.
		t.Run("PLAIN", func(t *testing.T) {
			t.Parallel()
			h.copyRun(t, secConn{user: s.Denied, mech: "PLAIN"}, func(n secNames) []secACL { return copyACLs(n) })
		})
		t.Run("SCRAM-SHA-256", func(t *testing.T) {
			t.Parallel()
			h.copyRun(t, secConn{user: s.Allowed, mech: "SCRAM-SHA-256"}, nil)
		})
		// A static token: up.sh's listener validates OAUTHBEARER with Kafka's
		// unsecured validator, so an unsigned JWT with sub=alice is alice.
		t.Run("OAUTHBEARER", func(t *testing.T) {
			t.Parallel()
			h.copyRun(t, secConn{user: s.Allowed, mech: "OAUTHBEARER", token: h.token}, nil)
		})
		// mTLS on up.sh's SSL listener: no SASL, the client certificate
		// (CN=alice) is the identity, with alice's ACLs.
		t.Run("mTLS", func(t *testing.T) {
			t.Parallel()
			h.copyRun(t, secConn{user: s.Allowed, mech: "none", brokers: s.MTLSBrokers, certFile: s.ClientCertFile, keyFile: s.ClientKeyFile}, nil)
		})
	})
	t.Run("Mirror", func(t *testing.T) { testMirror(t, h) })
	t.Run("EchoRedacts", func(t *testing.T) { testEchoRedacts(t, h) })
	t.Run("NoSecretInLogs", func(t *testing.T) { h.checkNoSecrets(t) })
}

// secHarness runs connect-eos and keeps every line it printed, for the
// secrets check at the end.
type secHarness struct {
	s   *kafkatest.Secure
	bin string
	// token is an unsigned JWT for the allowed user (OAUTHBEARER).
	token string
	// badCert and badKey are a self-signed client certificate the
	// listener cannot verify.
	badCert, badKey string

	mu   sync.Mutex
	logs []secLog
}

type secLog struct {
	test string
	out  []byte
}

// secConn is how one component connects.
type secConn struct {
	// brokers overrides the SASL_SSL listener (the mTLS one).
	brokers string
	user    kafkatest.User
	mech    string // none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
	// token for OAUTHBEARER.
	token string
	// noCA leaves tls.root_cas_file out: the system roots do not know the
	// throwaway CA.
	noCA bool
	// certFile and keyFile, if set, are a client certificate (mTLS).
	certFile, keyFile string
}

// secNames are the resources of one run.
type secNames struct {
	base, in, out, state, group, txn string
}

func (h *secHarness) names(t *testing.T, suffix string) secNames {
	base := h.s.Name(t, suffix)
	return secNames{
		base:  base,
		in:    base + "-in",
		out:   base + "-out",
		state: base + "-state",
		group: base + "-g",
		txn:   base + "-txn",
	}
}

// secACL is one ACL entry: an operation on a resource, allowed (or denied)
// to a principal.
type secACL struct {
	res    string // topic, group, transactional-id
	name   string
	prefix bool
	op     kadm.ACLOperation
	deny   bool
}

func (a secACL) String() string {
	p, d := "literal", "allow"
	if a.prefix {
		p = "prefixed"
	}
	if a.deny {
		d = "deny"
	}
	return fmt.Sprintf("%s %s %s %q %s", d, a.op, a.res, a.name, p)
}

// copyACLs is the least the exactly-once copy needs, resource by resource
// (Kafka lets Read and Write imply Describe): Read on the input topic, Write on
// the output topic, Read, Write, DescribeConfigs and Create on the state topic
// (the cache checks that it is compacted, and creates it if missing), Read on
// the consumer group, and Write on the output's transactional ids
// (transactional_id plus -0, -1, ... for the slots: a prefix). No cluster ACL.
// The PLAIN copy proves it is enough; each Fatal case takes one part away.
// docs/security.md lists it.
func copyACLs(n secNames) []secACL {
	return []secACL{
		{res: "topic", name: n.in, op: kadm.OpRead},
		{res: "topic", name: n.out, op: kadm.OpWrite},
		{res: "topic", name: n.state, op: kadm.OpRead},
		{res: "topic", name: n.state, op: kadm.OpWrite},
		{res: "topic", name: n.state, op: kadm.OpDescribeConfigs},
		{res: "topic", name: n.state, op: kadm.OpCreate},
		{res: "group", name: n.group, op: kadm.OpRead},
		{res: "transactional-id", name: n.txn, prefix: true, op: kadm.OpWrite},
	}
}

// replace returns acls with the allow entry for res/name/op swapped for with
// (nothing: removed).
func replace(acls []secACL, res, name string, op kadm.ACLOperation, with ...secACL) []secACL {
	var out []secACL
	found := false
	for _, a := range acls {
		if a.res == res && a.name == name && a.op == op && !a.deny {
			found = true
			out = append(out, with...)
			continue
		}
		out = append(out, a)
	}
	if !found {
		panic(fmt.Sprintf("no ACL %s %s %s to replace", op, res, name))
	}
	return out
}

// grant creates acls for user as the super user, and deletes them when t ends.
func (h *secHarness) grant(t *testing.T, user string, acls []secACL) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := h.s.AdminClient(t)
	builder := func(a secACL) *kadm.ACLBuilder {
		b := kadm.NewACLs().Operations(a.op)
		if a.deny {
			b = b.Deny("User:" + user).DenyHosts("*")
		} else {
			b = b.Allow("User:" + user).AllowHosts("*")
		}
		switch a.res {
		case "topic":
			b = b.Topics(a.name)
		case "group":
			b = b.Groups(a.name)
		case "transactional-id":
			b = b.TransactionalIDs(a.name)
		default:
			t.Fatalf("unknown resource %s", a.res)
		}
		if a.prefix {
			return b.ResourcePatternType(kadm.ACLPatternPrefixed)
		}
		return b.ResourcePatternType(kadm.ACLPatternLiteral)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, a := range acls {
			if _, err := adm.DeleteACLs(ctx, builder(a)); err != nil {
				t.Logf("delete ACL %s: %v", a, err)
			}
		}
	})
	for _, a := range acls {
		res, err := adm.CreateACLs(ctx, builder(a))
		require.NoError(t, err, "create ACL %s", a)
		for _, r := range res {
			require.NoError(t, r.Err, "create ACL %s", a)
		}
	}
}

const secRecords = 300

// setup creates the input and output topics (3 partitions each) and fills the
// input (setupInput).
func (h *secHarness) setup(t *testing.T, n secNames) []string {
	t.Helper()
	h.s.CreateTopic(t, n.out, 3)
	return h.setupInput(t, n)
}

// setupInput creates the input topic (3 partitions), fills it with
// secRecords records (record i in partition i%3) and deletes the state topic
// the cache creates and the group when t ends. It returns the values in the
// order written.
func (h *secHarness) setupInput(t *testing.T, n secNames) []string {
	t.Helper()
	h.s.CreateTopic(t, n.in, 3)
	adm := h.s.AdminClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopic(ctx, n.state)
		_, _ = adm.DeleteGroup(ctx, n.group)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := h.s.Client(t, h.s.Admin, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var values []string
	var recs []*kgo.Record
	for i := range secRecords {
		v := fmt.Sprintf("%s-v%03d", n.base, i)
		values = append(values, v)
		recs = append(recs, &kgo.Record{Topic: n.in, Partition: int32(i % 3), Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(v)})
	}
	require.NoError(t, p.ProduceSync(ctx, recs...).FirstErr())
	return values
}

// config renders the copy pipeline. Secrets are inline (not ${ENV}) so that
// both the logs check and the echo check see real secrets in the config.
func (h *secHarness) config(n secNames, in, out, cache secConn) string {
	return fmt.Sprintf(`http: { enabled: false }
logger: { level: TRACE, format: logfmt }
input:
  kafka_native:
%s    topics: [ %q ]
    consumer_group: %q
    start_offset: earliest
    stop_offset: latest
output:
  kafka_eos:
%s    topic: %q
    partitioner: manual
    partition: '${! metadata("kafka_partition") }'
    key: '${! metadata("kafka_key") }'
    transactional_id: %q
    state_cache: eos_state
    epoch: { interval: 100ms }
cache_resources:
  - label: eos_state
    kafka_state:
  %s      topic: %q
`, h.conn(in), n.in, n.group, h.conn(out), n.out, n.txn, indentConn(h.conn(cache)), n.state)
}

// conn renders the connection fields of one component (at the indentation of
// a component's fields).
func (h *secHarness) conn(c secConn) string {
	var b strings.Builder
	brokers := h.s.Brokers
	if c.brokers != "" {
		brokers = c.brokers
	}
	fmt.Fprintf(&b, "    seed_brokers: [ %q ]\n", brokers)
	b.WriteString("    tls:\n      enabled: true\n")
	if !c.noCA {
		fmt.Fprintf(&b, "      root_cas_file: %q\n", h.s.CAFile)
	}
	if c.certFile != "" {
		fmt.Fprintf(&b, "      client_certs: [ { cert_file: %q, key_file: %q } ]\n", c.certFile, c.keyFile)
	}
	switch c.mech {
	case "none":
	case "OAUTHBEARER":
		fmt.Fprintf(&b, "    sasl: { mechanism: OAUTHBEARER, token: %q }\n", c.token)
	default:
		fmt.Fprintf(&b, "    sasl: { mechanism: %s, username: %q, password: %q }\n", c.mech, c.user.Name, c.user.Password)
	}
	return b.String()
}

// indentConn moves conn's fields two more spaces in, for a cache resource.
func indentConn(s string) string { return strings.ReplaceAll(s, "\n    ", "\n      ") }

// secRun is one run of the binary.
type secRun struct {
	code int // exit code; -1 if it was killed at the deadline
	out  string
	took time.Duration
	err  error // the binary could not be run at all
}

// run runs `connect-eos run path` with a deadline, and keeps its output for
// the secrets check. It may be called from any goroutine.
func (h *secHarness) run(test, path string, deadline time.Duration) secRun {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, "run", path)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	r := secRun{out: out.String(), took: time.Since(start)}
	h.mu.Lock()
	h.logs = append(h.logs, secLog{test: test, out: bytes.Clone(out.Bytes())})
	h.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.code = -1
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.err = err
	}
	return r
}

// writeConfig writes conf into t's temporary dir.
func writeConfig(t *testing.T, conf string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pipeline.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	return path
}

// copyRun copies secRecords records through the pipeline connected as c and
// checks that a read_committed reader sees every record exactly once, with
// the group's offsets at the ends. acls, if set, are granted to c.user first.
func (h *secHarness) copyRun(t *testing.T, c secConn, acls func(secNames) []secACL) {
	n := h.names(t, "r")
	if acls != nil {
		h.grant(t, c.user.Name, acls(n))
	}
	want := h.setup(t, n)
	r := h.run(t.Name(), writeConfig(t, h.config(n, c, c, c)), 2*time.Minute)
	require.NoError(t, r.err)
	require.Equal(t, 0, r.code, "exit code after %v (-1: killed at the deadline); output:\n%s", r.took, tail(r.out, 40))
	t.Logf("copy as %s with %s (client certificate: %v): exit 0 after %v", c.user.Name, c.mech, c.certFile != "", r.took.Round(time.Millisecond))

	got := h.readCommitted(t, n.out)
	counts := map[string]int{}
	for _, v := range got {
		counts[v]++
	}
	var missing, dup []string
	for _, v := range want {
		switch counts[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			dup = append(dup, v)
		}
	}
	assert.Empty(t, missing, "missing records")
	assert.Empty(t, dup, "duplicated records")
	assert.Len(t, got, len(want), "records in the output topic")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := h.s.AdminClient(t)
	offs, err := adm.FetchOffsets(ctx, n.group)
	require.NoError(t, err)
	for p := int32(0); p < 3; p++ {
		o, ok := offs.Lookup(n.in, p)
		require.True(t, ok, "committed offset of %s:%d", n.in, p)
		assert.Equal(t, int64(secRecords/3), o.At, "committed offset of %s:%d", n.in, p)
	}
}

// readCommitted returns the values of topic as a read_committed reader sees
// them, reading every partition up to its last stable offset on positions
// (kafkatest.ReadCommitted), through the secured listener.
func (h *secHarness) readCommitted(t *testing.T, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs, err := kafkatest.ReadCommitted(ctx, h.s.Client(t, h.s.Admin), topic)
	require.NoError(t, err)
	var values []string
	for p := int32(0); int(p) < len(recs); p++ {
		for _, r := range recs[p] {
			values = append(values, string(r.Value))
		}
	}
	return values
}

// endOffsets returns the sum of the end offsets of topic: 0 means nothing was
// ever written to it (not even an aborted transaction or a marker), or that it
// does not exist (a mirror's target that was not created).
func (h *secHarness) endOffsets(t *testing.T, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := h.s.AdminClient(t).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	var sum int64
	ends.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		require.NoError(t, o.Err)
		sum += o.Offset
	})
	return sum
}

// fatalCase is one security failure: who connects how, which ACLs are granted,
// and what the fatal error must say.
type fatalCase struct {
	name string
	// conn says how the input, the output and the cache connect.
	conn func(s *kafkatest.Secure) (in, out, cache secConn)
	// acls are granted to the denied user; nil grants nothing.
	acls func(n secNames) []secACL
	// want are substrings of the fatal error line ("connect-eos: exit code
	// 3 after a fatal error: fatal: ..."): the error and the resource it is
	// about.
	want func(n secNames) []string
	// mirror runs the cross-cluster mirror (mirrorSetup, mirrorConfig)
	// instead of the copy.
	mirror bool
	// gap, if set, is a known gap in a component, described in
	// docs/security.md and the session report: when the run breaks any
	// expectation (exit 3 within the deadline, a message naming what is
	// missing, nothing written) the case is skipped with this text and
	// what was observed, instead of failing. A case without gap fails.
	gap string
}

func fatalCases(h *secHarness) []fatalCase {
	s := h.s
	all := func(c secConn) func(*kafkatest.Secure) (secConn, secConn, secConn) {
		return func(*kafkatest.Secure) (secConn, secConn, secConn) { return c, c, c }
	}
	ok := secConn{user: s.Allowed, mech: "SCRAM-SHA-512"}
	denied := all(secConn{user: s.Denied, mech: "SCRAM-SHA-512"})
	wrongPass := kafkatest.User{Name: s.Allowed.Name, Password: s.Allowed.Password + "-wrong"}
	in := func(n secNames) string { return n.in }
	out := func(n secNames) string { return n.out }
	state := func(n secNames) string { return n.state }
	group := func(n secNames) string { return n.group }
	txn := func(n secNames) string { return n.txn }
	// swap takes the allow ACL op on a resource away and puts with in its
	// place (e.g. Describe, so that the resource stays visible).
	swap := func(res string, name func(secNames) string, op kadm.ACLOperation, with ...kadm.ACLOperation) func(secNames) []secACL {
		return func(n secNames) []secACL {
			var w []secACL
			for _, o := range with {
				w = append(w, secACL{res: res, name: name(n), prefix: res == "transactional-id", op: o})
			}
			return replace(copyACLs(n), res, name(n), op, w...)
		}
	}
	named := func(code string, name func(secNames) string) func(secNames) []string {
		return func(n secNames) []string { return []string{code, name(n)} }
	}
	return []fatalCase{
		{
			name: "WrongPassword",
			conn: all(secConn{user: wrongPass, mech: "SCRAM-SHA-512"}),
			want: func(secNames) []string { return []string{"SASL_AUTHENTICATION_FAILED", "SCRAM-SHA-512"} },
		},
		{
			name: "WrongPasswordOutputOnly",
			conn: func(s *kafkatest.Secure) (secConn, secConn, secConn) {
				return ok, secConn{user: wrongPass, mech: "SCRAM-SHA-512"}, ok
			},
			want: func(n secNames) []string { return []string{"kafka_eos", n.txn, "SASL_AUTHENTICATION_FAILED"} },
		},
		{
			name: "WrongPasswordCacheOnly",
			conn: func(s *kafkatest.Secure) (secConn, secConn, secConn) {
				return ok, ok, secConn{user: wrongPass, mech: "PLAIN"}
			},
			want: func(n secNames) []string { return []string{"kafka_state", n.state, "SASL_AUTHENTICATION_FAILED"} },
		},
		{
			name: "UntrustedCertificate",
			conn: all(secConn{user: s.Allowed, mech: "SCRAM-SHA-512", noCA: true}),
			want: func(secNames) []string { return []string{"x509: certificate signed by unknown authority"} },
		},
		{
			name: "InvalidToken",
			conn: all(secConn{mech: "OAUTHBEARER", token: "not-a-jwt-" + s.Allowed.Password}),
			want: func(secNames) []string { return []string{"SASL_AUTHENTICATION_FAILED", "invalid_token"} },
		},
		{
			name: "UntrustedClientCertificate",
			conn: all(secConn{user: s.Allowed, mech: "none", brokers: s.MTLSBrokers, certFile: h.badCert, keyFile: h.badKey}),
			want: func(secNames) []string { return []string{"tls"} },
		},
		{
			name: "NoACLs",
			conn: denied,
			want: named("TOPIC_AUTHORIZATION_FAILED", in),
		},
		{
			name: "MissingTopicRead", // Describe only on the input topic
			conn: denied,
			acls: swap("topic", in, kadm.OpRead, kadm.OpDescribe),
			want: named("TOPIC_AUTHORIZATION_FAILED", in),
		},
		{
			name: "MissingTopicWrite", // Describe only on the output topic
			conn: denied,
			acls: swap("topic", out, kadm.OpWrite, kadm.OpDescribe),
			want: named("TOPIC_AUTHORIZATION_FAILED", out),
		},
		{
			name: "MissingStateTopicWrite",
			conn: denied,
			acls: swap("topic", state, kadm.OpWrite),
			want: named("TOPIC_AUTHORIZATION_FAILED", state),
		},
		{
			name: "MissingStateTopicDescribeConfigs",
			conn: denied,
			acls: swap("topic", state, kadm.OpDescribeConfigs),
			want: named("TOPIC_AUTHORIZATION_FAILED", state),
		},
		{
			name: "MissingGroupRead", // no ACL on the group at all
			conn: denied,
			acls: swap("group", group, kadm.OpRead),
			want: named("GROUP_AUTHORIZATION_FAILED", group),
		},
		{
			name: "GroupDescribeWithoutRead",
			conn: denied,
			acls: swap("group", group, kadm.OpRead, kadm.OpDescribe),
			want: named("GROUP_AUTHORIZATION_FAILED", group),
		},
		{
			name: "MissingTransactionalIDWrite", // Describe only on the transactional ids
			conn: denied,
			acls: swap("transactional-id", txn, kadm.OpWrite, kadm.OpDescribe),
			want: named("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", txn),
		},
		{
			// Write implies Describe, so only an explicit DENY takes
			// Describe away from a user who may write.
			name: "DeniedTransactionalIDDescribe",
			conn: denied,
			acls: func(n secNames) []secACL {
				return append(copyACLs(n), secACL{res: "transactional-id", name: n.txn, prefix: true, op: kadm.OpDescribe, deny: true})
			},
			want: named("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", txn),
		},
	}
}

// fatalDeadline bounds a run that should stop on its own. A fatal error stops
// the binary within about 16 s (the graceful shutdown waits up to 15 s for a
// component still retrying its Connect); a run still going at the deadline
// retries forever.
const fatalDeadline = 45 * time.Second

// fatalRuns prepares every case, runs them all at once (the binaries mostly
// wait: running them one or two at a time would take minutes), then checks
// each in its own subtest.
func (h *secHarness) fatalRuns(t *testing.T, cases []fatalCase) {
	names := make([]secNames, len(cases))
	paths := make([]string, len(cases))
	for i, c := range cases {
		n := h.names(t, c.name)
		names[i] = n
		if c.acls != nil {
			h.grant(t, h.s.Denied.Name, c.acls(n))
		}
		in, out, cache := c.conn(h.s)
		if c.mirror {
			h.mirrorSetup(t, n)
			paths[i] = writeConfig(t, h.mirrorConfig(n, in, out, cache))
		} else {
			h.setup(t, n)
			paths[i] = writeConfig(t, h.config(n, in, out, cache))
		}
	}
	runs := make([]secRun, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = h.run(t.Name()+"/"+c.name, paths[i], fatalDeadline)
		}()
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) { h.checkFatal(t, c, names[i], runs[i]) })
	}
}

func (h *secHarness) checkFatal(t *testing.T, c fatalCase, n secNames, r secRun) {
	require.NoError(t, r.err)
	line := fatalLine(r.out)
	retries := strings.Count(r.out, "level=error msg=\"Failed to connect")
	t.Logf("exit %d after %v, %d failed Connect attempts logged; fatal line: %s", r.code, r.took.Round(time.Millisecond), retries, line)

	var problems []string
	// Whatever happened, nothing reached the output topic: no record, not
	// even an aborted transaction.
	if written := h.endOffsets(t, n.out); written != 0 {
		problems = append(problems, fmt.Sprintf("%d offsets written to the output topic", written))
	}
	switch {
	case r.code == -1:
		problems = append(problems, fmt.Sprintf("still running at the %v deadline (%d failed Connect attempts logged; last error: %s)", fatalDeadline, retries, lastError(r.out)))
	case r.code != exitFatal:
		problems = append(problems, fmt.Sprintf("exit code %d, want %d", r.code, exitFatal))
	case line == "":
		problems = append(problems, "no `connect-eos: exit code 3 after a fatal error:` line")
	default:
		for _, w := range c.want(n) {
			if !strings.Contains(line, w) {
				problems = append(problems, fmt.Sprintf("the fatal error does not name %q", w))
			}
		}
	}
	if len(problems) == 0 {
		return
	}
	if c.gap != "" {
		t.Skipf("known gap: %s. Observed: %s", c.gap, strings.Join(problems, "; "))
	}
	t.Errorf("%s\nlast lines:\n%s", strings.Join(problems, "\n"), tail(r.out, 30))
}

// lastError returns the message of the last error-level log line of out.
func lastError(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "level=error") {
			if _, m, ok := strings.Cut(lines[i], "msg="); ok {
				return m
			}
			return lines[i]
		}
	}
	return "none"
}

// fatalLine returns the line connect-eos prints when it exits after a
// component raised a fatal error.
func fatalLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "connect-eos: exit code 3 after a fatal error: ") {
			return l
		}
	}
	return ""
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testAllowedUserACLs checks that up.sh gave the allowed user the prefixed
// version of copyACLs and nothing else, and the denied user nothing.
func testAllowedUserACLs(t *testing.T, h *secHarness) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := h.s.AdminClient(t)
	describe := func(user string) []string {
		res, err := adm.DescribeACLs(ctx, kadm.NewACLs().
			Allow("User:"+user).AllowHosts().
			AnyResource().
			ResourcePatternType(kadm.ACLPatternAny).
			Operations(kadm.OpAny))
		require.NoError(t, err)
		var got []string
		for _, r := range res {
			require.NoError(t, r.Err)
			for _, d := range r.Described {
				got = append(got, fmt.Sprintf("%s %s %s %s", d.Type, d.Name, d.Pattern, d.Operation))
			}
		}
		sort.Strings(got)
		return got
	}
	p := h.s.ACLPrefix
	// copyACLs on the prefix: the same operations, for any name starting with it.
	want := []string{
		"GROUP " + p + " PREFIXED READ",
		"TOPIC " + p + " PREFIXED CREATE",
		"TOPIC " + p + " PREFIXED DESCRIBE_CONFIGS",
		"TOPIC " + p + " PREFIXED READ",
		"TOPIC " + p + " PREFIXED WRITE",
		"TRANSACTIONAL_ID " + p + " PREFIXED WRITE",
	}
	assert.Equal(t, want, describe(h.s.Allowed.Name), "ACLs of the allowed user")
	// Tests (of this package and of input/, which share the broker and run
	// at the same time) grant the denied user LITERAL ACLs on their own
	// names; up.sh grants only PREFIXED ones, and none to the denied user.
	var prefixed []string
	for _, a := range describe(h.s.Denied.Name) {
		if strings.Contains(a, " PREFIXED ") {
			prefixed = append(prefixed, a)
		}
	}
	assert.Empty(t, prefixed, "PREFIXED ACLs of the denied user")
}

// testEchoRedacts checks that `connect-eos echo` prints no secret of a config
// holding them inline: SASL password, OAUTHBEARER token, a client key and its
// password (and keeps the output of `connect-eos lint` for the secrets check).
func testEchoRedacts(t *testing.T, h *secHarness) {
	n := h.names(t, "r")
	conf := h.config(n, secConn{user: h.s.Allowed, mech: "SCRAM-SHA-512"},
		secConn{mech: "OAUTHBEARER", token: "tok-" + h.s.Admin.Password},
		secConn{user: h.s.Denied, mech: "PLAIN"})
	conf += fmt.Sprintf(`
  - label: mtls_example
    kafka_state:
      seed_brokers: [ %q ]
      topic: unused
      tls:
        enabled: true
        client_certs:
          - cert: "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----"
            key: %q
            password: %q
`, h.s.Brokers, secFakeKey, "keypass-"+h.s.Admin.Password)
	path := filepath.Join(t.TempDir(), "echo.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, h.bin, "echo", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	h.mu.Lock()
	h.logs = append(h.logs, secLog{test: t.Name(), out: out})
	h.mu.Unlock()
	s := string(out)
	// The non-secret fields are echoed, so the check below is not vacuous.
	assert.Contains(t, s, h.s.Allowed.Name)
	assert.Contains(t, s, "OAUTHBEARER")
	for name, secret := range h.secrets() {
		assert.NotContains(t, s, secret, "echo printed the %s", name)
	}
	// Two passwords, a token, a client key and its password.
	assert.Equal(t, 5, strings.Count(s, "!!!SECRET_SCRUBBED!!!"), "redacted fields")

	// lint passes the config (and prints nothing) but would show values in
	// its messages: its output joins the logs the secrets check reads.
	lint, err := exec.CommandContext(ctx, h.bin, "lint", path).CombinedOutput()
	assert.NoError(t, err, "lint: %s", lint)
	h.mu.Lock()
	h.logs = append(h.logs, secLog{test: t.Name() + "/lint", out: lint})
	h.mu.Unlock()
	t.Logf("echo output (redacted):\n%s", s)
}

// secFakeKey is a syntactically plausible private key block used only to see
// that it is redacted; no TLS is set up with it.
const secFakeKey = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIFakeKeyMaterialForTheRedactionTestOnly0123456789abcdefghij\n-----END EC PRIVATE KEY-----"

// secrets returns every secret the configs of this test held.
func (h *secHarness) secrets() map[string]string {
	s := h.s
	m := map[string]string{
		"admin password":            s.Admin.Password,
		"allowed user's password":   s.Allowed.Password,
		"denied user's password":    s.Denied.Password,
		"client key":                "FakeKeyMaterialForTheRedactionTestOnly",
		"client key password":       "keypass-" + s.Admin.Password,
		"OAUTHBEARER token (echo)":  "tok-" + s.Admin.Password,
		"invalid token (runs)":      "not-a-jwt-" + s.Allowed.Password,
		"wrong password (the runs)": s.Allowed.Password + "-wrong",
	}
	m["OAUTHBEARER token (runs)"] = h.token
	m["OAUTHBEARER token claims (runs)"] = strings.Split(h.token, ".")[1]
	for name, f := range map[string]string{
		"broker private key":             filepath.Join(filepath.Dir(s.CAFile), "broker.key"),
		"client private key":             s.ClientKeyFile,
		"untrusted client's private key": h.badKey,
	} {
		if b := pemBody(f); b != "" {
			m[name] = b
		}
	}
	return m
}

// checkNoSecrets greps every line every run printed (TRACE logs, errors, the
// fatal line) for every secret.
func (h *secHarness) checkNoSecrets(t *testing.T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.logs, "no run logged anything")
	lines := 0
	for _, l := range h.logs {
		for i, line := range strings.Split(string(l.out), "\n") {
			lines++
			for name, secret := range h.secrets() {
				if strings.Contains(line, secret) {
					t.Errorf("%s: line %d holds the %s: %s", l.test, i+1, name, line)
				}
			}
		}
	}
	t.Logf("checked %d lines of %d runs for %d secrets", lines, len(h.logs), len(h.secrets()))
}

// unsecuredJWT returns an unsigned JWT (alg none) naming sub, valid for an
// hour: what Kafka's unsecured OAUTHBEARER validator accepts.
func unsecuredJWT(sub string) string {
	enc := base64.RawURLEncoding
	now := time.Now().Unix()
	return enc.EncodeToString([]byte(`{"alg":"none"}`)) + "." +
		enc.EncodeToString(fmt.Appendf(nil, `{"sub":%q,"iat":%d,"exp":%d}`, sub, now, now+3600)) + "."
}

// selfSignedClientCert writes a self-signed client certificate and its key
// (which no CA of the broker signed) and returns the two file names.
func selfSignedClientCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "alice"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "untrusted.pem"), filepath.Join(dir, "untrusted.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

// pemBody returns the first base64 line of the PEM file path, "" if none.
func pemBody(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if len(l) > 20 && !strings.HasPrefix(l, "-----") {
			return l
		}
	}
	return ""
}
