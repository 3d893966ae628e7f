package input

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// newSASLEnv starts kfake with SASL and ACLs: "admin" is a superuser, the
// extra options add users.
func newSASLEnv(t *testing.T, opts ...kfake.Opt) *env {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e := newEnv(t, "kfake-sasl", c.ListenAddrs(), kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism()))
	e.fake = c
	return e
}

func saslConf(user, pass string) string {
	return fmt.Sprintf("sasl: { mechanism: PLAIN, username: %s, password: %s }\n", user, pass)
}

// kfake closes the connection on bad credentials, which a client cannot tell
// from a broker going away; Apache Kafka answers SASL_AUTHENTICATION_FAILED.
// The test injects Kafka's answer.
func TestBadPasswordIsFatal(t *testing.T) {
	e := newSASLEnv(t)
	topic := e.topic(t, 1)
	e.fake.ControlKey(kmsg.SASLAuthenticate.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.SASLAuthenticateRequest)
		if string(req.SASLAuthBytes) != "\x00admin\x00wrong" {
			e.fake.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: Invalid username or password"
		resp.ErrorMessage = &msg
		e.fake.KeepControl()
		return resp, nil, true
	})
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nstop_offset: latest\n", topic)+saslConf("admin", "wrong"))
	err := h.connect()
	requireFatal(t, h, err, kerr.SaslAuthenticationFailed)
	assert.Contains(t, err.Error(), "SASL_AUTHENTICATION_FAILED")
}

func TestDeniedTopicACLIsFatal(t *testing.T) {
	e := newSASLEnv(t, kfake.User("PLAIN", "reader", "pw"))
	topic := e.topic(t, 1)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nstop_offset: latest\n", topic)+saslConf("reader", "pw"))
	err := h.connect()
	requireFatal(t, h, err, kerr.TopicAuthorizationFailed)
	assert.Contains(t, err.Error(), topic, "the error names the topic")
}

// Describe allowed (metadata and offset listings pass the preflight), Read
// denied: the fetch fails with TOPIC_AUTHORIZATION_FAILED and the fetch loop
// stops the stream at the first one.
func TestDeniedReadACLIsFatalFromTheFetchLoop(t *testing.T) {
	e := newSASLEnv(t, kfake.User("PLAIN", "reader", "pw",
		kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "t-", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationDescribe, Allow: true},
	))
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 3)...)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nstop_offset: latest\n", topic)+saslConf("reader", "pw"))
	if err := h.connect(); err != nil {
		// kfake may refuse the listing already: fatal either way.
		t.Logf("refused at connect: %v", err)
		requireFatal(t, h, err, kerr.TopicAuthorizationFailed)
		return
	}
	_, err := h.readUntilEnd(readTimeout)
	requireFatal(t, h, err, kerr.TopicAuthorizationFailed)
}

func TestDeniedGroupACLIsFatal(t *testing.T) {
	e := newSASLEnv(t, kfake.User("PLAIN", "reader", "pw",
		kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "t-", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationAll, Allow: true},
	))
	topic := e.topic(t, 1)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: g\nstop_offset: latest\n", topic)+saslConf("reader", "pw"))
	err := h.connect()
	requireFatal(t, h, err, kerr.GroupAuthorizationFailed)
}

func TestBrokerUnreachableAtStartIsRetried(t *testing.T) {
	e := &env{brokers: []string{"127.0.0.1:1"}}
	h := e.newInput(t, "topics: [ t ]\nconnect_timeout: 300ms\n")
	for range 2 {
		err := h.connectOnce()
		require.Error(t, err)
		var fe *fatal.Error
		assert.False(t, errors.As(err, &fe), "an unreachable broker is not fatal: %v", err)
	}
	assert.NoError(t, fatal.Err())
}

// failCommits makes kfake answer OffsetCommit with code while fail is set.
func failCommits(c *kfake.Cluster, fail *atomic.Bool, code int16, calls *atomic.Int64) {
	c.ControlKey(kmsg.OffsetCommit.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		calls.Add(1)
		if !fail.Load() {
			return nil, nil, false
		}
		req := kreq.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			st.TopicID = rt.TopicID // OffsetCommit v10+ names topics by ID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

func TestFailingCommitDoesNotFailThePipeline(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 4)...)
	var fail atomic.Bool
	var calls atomic.Int64
	fail.Store(true)
	failCommits(e.fake, &fail, kerr.RequestTimedOut.Code, &calls)
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\ncommit_period: 20ms\n", topic, group))
	h.mustConnect()
	assert.Equal(t, strs(vals("a", 4)), values(h.readN(4, readTimeout)))
	wait(t, 10*time.Second, func() bool { return calls.Load() >= 3 })
	e.produce(t, topic, 0, []byte("more"))
	assert.Equal(t, []string{"more"}, values(h.readN(1, readTimeout)), "reading goes on while commits fail")
	assert.Equal(t, int64(-1), e.committed(t, group, topic, 0))
	fail.Store(false)
	wait(t, 10*time.Second, func() bool { return e.committed(t, group, topic, 0) == 5 })
	assert.NoError(t, fatal.Err())
}

func TestFinalCommitPermanentErrorIsFatal(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	var fail atomic.Bool
	var calls atomic.Int64
	failCommits(e.fake, &fail, kerr.GroupAuthorizationFailed.Code, &calls)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\n", topic, uniq(t, "g")))
	h.mustConnect()
	fail.Store(true) // the ACL is taken away after the start
	gs, err := h.readUntilEnd(readTimeout)
	assert.Len(t, gs, 2)
	var ce *CommitError
	require.ErrorAs(t, err, &ce)
	requireFatal(t, h, err, kerr.GroupAuthorizationFailed)
}

// The final commit retries a retriable error and the run then ends cleanly.
func TestFinalCommitRetriesTransientErrors(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	var fail atomic.Bool
	var calls atomic.Int64
	fail.Store(true)
	failCommits(e.fake, &fail, kerr.RequestTimedOut.Code, &calls)
	go func() {
		for calls.Load() < 3 {
			time.Sleep(10 * time.Millisecond)
		}
		fail.Store(false)
	}()
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\ncommit_period: 1h\n", topic, group))
	h.mustConnect()
	assert.Len(t, h.readAll(readTimeout), 2)
	assert.Equal(t, int64(2), e.committed(t, group, topic, 0))
}

// A stop (SIGTERM) while the final commit of a bounded read retries is the
// operator's stop, not a failure. Benthos closes the input (the auto-replay
// wrapper cancels the context of the ReadBatch in flight first): nothing is
// raised as fatal (the binary would exit 3 otherwise).
func TestStopDuringFinalCommitIsNotFatal(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	var fail atomic.Bool
	var calls atomic.Int64
	fail.Store(true)
	failCommits(e.fake, &fail, kerr.RequestTimedOut.Code, &calls)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\ncommit_period: 1h\n", topic, uniq(t, "g")))
	h.mustConnect()
	base := calls.Load() // the preflight's commit check
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		defer cancel()
		for {
			_, ack, err := h.in.ReadBatch(ctx)
			if err != nil {
				errc <- err
				return
			}
			_ = ack(ctx, nil)
		}
	}()
	wait(t, readTimeout, func() bool { return calls.Load() >= base+2 }) // the final commit retries
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.in.Close(ctx))
	var err error
	select {
	case err = <-errc:
	case <-time.After(readTimeout):
		t.Fatal("ReadBatch did not return after Close")
	}
	var fe *fatal.Error
	assert.False(t, errors.As(err, &fe), "raised as fatal: %v", err)
	select {
	case err := <-h.fatal:
		t.Fatalf("the fatal handler was called: %v", err)
	default:
	}
}

// Close returns promptly even while Connect waits (here for an open
// transaction below the high watermark) and the Connect ends with it.
func TestCloseDuringConnect(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 1)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("open", 1)...)
	t.Cleanup(func() { x.end(false) })
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nstop_offset: latest\nstop_at_high_watermark: true\nhigh_watermark_wait_timeout: 1m\n", topic))
	errc := make(chan error, 1)
	go func() { errc <- h.connectOnce() }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	require.NoError(t, h.in.Close(t.Context()))
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Connect did not end after Close")
	}
	// Promptly: well before the 1m wait it interrupts, however loaded the
	// machine.
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.NoError(t, fatal.Err())
}

// Describe on the group lets OffsetFetch pass, but committing needs Read: the
// preflight fails first instead of the final commit of a finished run.
func TestGroupWithoutReadACLIsFatalAtStart(t *testing.T) {
	e := newSASLEnv(t, kfake.User("PLAIN", "reader", "pw",
		kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "t-", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationAll, Allow: true},
		kfake.ACL{Resource: kmsg.ACLResourceTypeGroup, Name: "g", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true},
	))
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	// kfake leaves DescribeGroups' authorized operations out; answer as
	// Kafka does for a client with Describe only (KIP-430 bitfield).
	e.fake.ControlKey(kmsg.DescribeGroups.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.fake.KeepControl()
		req := kreq.(*kmsg.DescribeGroupsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group = g
			rg.State = "Dead"
			rg.AuthorizedOperations = 1 << int(kmsg.ACLOperationDescribe)
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: g\nstop_offset: latest\n", topic)+saslConf("reader", "pw"))
	err := h.connect()
	requireFatal(t, h, err, kerr.GroupAuthorizationFailed)
	assert.Contains(t, err.Error(), "group g")
	assert.Contains(t, err.Error(), "Read ACL")
}

// selfSignedTLS returns a server TLS config with a certificate no client
// trusts.
func selfSignedTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kfake"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

func TestUntrustedBrokerCertificateIsFatal(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(selfSignedTLS(t)))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e := &env{brokers: c.ListenAddrs()}
	h := e.newInput(t, "topics: [ t ]\ntls: { enabled: true }\nconnect_timeout: 5s\n")
	err = h.connect()
	requireFatal(t, h, err, nil)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
}

// A new group (nothing to describe) whose commits are refused fails at start:
// the preflight commits one offset the group would get anyway.
func TestCommitAccessCheckedAtStart(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	var fail atomic.Bool
	var calls atomic.Int64
	fail.Store(true)
	failCommits(e.fake, &fail, kerr.GroupAuthorizationFailed.Code, &calls)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\n", topic, uniq(t, "g")))
	err := h.connect()
	requireFatal(t, h, err, kerr.GroupAuthorizationFailed)
	assert.Contains(t, err.Error(), "Read ACL")
}
