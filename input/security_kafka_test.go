package input

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// secureKafka is the SASL_SSL listener of a broker started by
// integration/kafka/up.sh (its variables in the environment).
type secureKafka struct {
	brokers, caFile, prefix string
	admin, allowed, denied  [2]string // name, password
}

func secureFromEnv(t *testing.T) *secureKafka {
	t.Helper()
	get := func(n string) string { return strings.TrimSpace(os.Getenv(n)) }
	user := func(n string) [2]string {
		name, pass, _ := strings.Cut(get(n), ":")
		return [2]string{name, pass}
	}
	s := &secureKafka{
		brokers: get(kafkatest.EnvSASLSSLBrokers), caFile: get(kafkatest.EnvCAFile), prefix: get(kafkatest.EnvSASLACLPrefix),
		admin: user(kafkatest.EnvSASLAdmin), allowed: user(kafkatest.EnvSASLAllowed), denied: user(kafkatest.EnvSASLDenied),
	}
	if s.brokers == "" || s.caFile == "" || s.admin[1] == "" || s.allowed[1] == "" || s.denied[1] == "" {
		msg := fmt.Sprintf("no SASL_SSL broker: set the variables integration/kafka/up.sh prints (%s, ...)", kafkatest.EnvSASLSSLBrokers)
		if os.Getenv(kafkatest.RequireEnv) != "" {
			t.Fatal(msg) // CI: a broken secure listener fails, never skips
		}
		t.Skip(msg)
	}
	return s
}

// adminEnv is an env on the secured listener as the super user.
func (s *secureKafka) adminEnv(t *testing.T) *env {
	t.Helper()
	pem, err := os.ReadFile(s.caFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	return newEnv(t, "kafka-sasl-ssl", []string{s.brokers},
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(scram.Auth{User: s.admin[0], Pass: s.admin[1]}.AsSha512Mechanism()))
}

func (s *secureKafka) conf(user [2]string, pass string, withCA bool) string {
	ca := ""
	if withCA {
		ca = fmt.Sprintf(", root_cas_file: %q", s.caFile)
	}
	return fmt.Sprintf("tls: { enabled: true%s }\nsasl: { mechanism: SCRAM-SHA-512, username: %s, password: %q }\nconnect_timeout: 10s\n", ca, user[0], pass)
}

// secTopic creates a topic under the allowed user's ACL prefix.
func (s *secureKafka) secTopic(t *testing.T, e *env, partitions int32) string {
	t.Helper()
	name := s.prefix + uniq(t, "in")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := e.adm.CreateTopic(ctx, partitions, 1, nil, name)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	wait(t, 20*time.Second, func() bool {
		l, err := e.adm.ListEndOffsets(ctx, name)
		return err == nil && l.Error() == nil
	})
	return name
}

// The fatal error classes against Apache Kafka's SASL_SSL listener (the
// StandardAuthorizer on): each stops the input at Connect with a message
// naming the cause, and the allowed user reads and commits over SASL_SSL.
func TestSecurityKafka(t *testing.T) {
	s := secureFromEnv(t)
	e := s.adminEnv(t)

	t.Run("AllowedUserBoundedRead", func(t *testing.T) {
		topic := s.secTopic(t, e, 2)
		e.produce(t, topic, 0, vals("a", 3)...)
		group := s.prefix + uniq(t, "g")
		h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\n", topic, group)+s.conf(s.allowed, s.allowed[1], true))
		h.mustConnect()
		assert.Equal(t, strs(vals("a", 3)), values(h.readAll(readTimeout)))
		assert.Equal(t, int64(3), e.committed(t, group, topic, 0))
	})
	t.Run("WrongPassword", func(t *testing.T) {
		h := e.newInput(t, "topics: [ x ]\n"+s.conf(s.allowed, s.allowed[1]+"-wrong", true))
		err := h.connect()
		requireFatal(t, h, err, kerr.SaslAuthenticationFailed)
	})
	t.Run("UntrustedCertificate", func(t *testing.T) {
		h := e.newInput(t, "topics: [ x ]\n"+s.conf(s.allowed, s.allowed[1], false))
		err := h.connect()
		requireFatal(t, h, err, nil)
		assert.Contains(t, err.Error(), "certificate signed by unknown authority")
	})
	t.Run("NoTopicACL", func(t *testing.T) {
		topic := s.secTopic(t, e, 1)
		h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\n", topic)+s.conf(s.denied, s.denied[1], true))
		err := h.connect()
		requireFatal(t, h, err, kerr.TopicAuthorizationFailed)
		assert.Contains(t, err.Error(), topic)
	})
	t.Run("GroupDescribeOnly", func(t *testing.T) {
		topic := s.secTopic(t, e, 1)
		e.produce(t, topic, 0, vals("a", 2)...)
		group := uniq(t, "bob-g")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		principal := "User:" + s.denied[0]
		topicACL := kadm.NewACLs().Allow(principal).AllowHosts("*").
			Topics(topic).Operations(kadm.OpRead, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral)
		groupACL := kadm.NewACLs().Allow(principal).AllowHosts("*").
			Groups(group).Operations(kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral)
		_, err := e.adm.CreateACLs(ctx, topicACL)
		require.NoError(t, err)
		_, err = e.adm.CreateACLs(ctx, groupACL)
		require.NoError(t, err)
		t.Cleanup(func() { // the broker is shared with other packages' tests
			dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer dcancel()
			_, _ = e.adm.DeleteACLs(dctx, topicACL)
			_, _ = e.adm.DeleteACLs(dctx, groupACL)
		})
		h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\n", topic, group)+s.conf(s.denied, s.denied[1], true))
		wait(t, 10*time.Second, func() bool { // ACLs propagate asynchronously
			err := h.connectOnce()
			if err == nil {
				t.Fatal("connected without the Read ACL on the group")
			}
			return strings.Contains(err.Error(), "Read ACL")
		})
		select {
		case <-h.fatal:
		case <-time.After(10 * time.Second):
			t.Fatal("not fatal")
		}
	})
}
