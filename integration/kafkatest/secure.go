package kafkatest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Variables printed by integration/kafka/up.sh for its SASL_SSL listener (on
// unless --no-sasl-ssl). scripts/test.sh exports the ones of its tv2 broker.
const (
	EnvSASLSSLBrokers = "KAFKA_SASL_SSL_BROKERS" // host:port of the SASL_SSL listener
	EnvSSLBrokers     = "KAFKA_SSL_BROKERS"      // host:port of the mTLS listener (SSL, client certificate required)
	EnvCAFile         = "KAFKA_CA_FILE"          // PEM file of the throwaway CA that signed the broker certificate
	EnvClientCertFile = "KAFKA_CLIENT_CERT_FILE" // PEM client certificate (CN=alice) signed by that CA, for mTLS
	EnvClientKeyFile  = "KAFKA_CLIENT_KEY_FILE"  // its PEM private key
	EnvSASLAdmin      = "KAFKA_SASL_ADMIN"       // name:password of a super user
	EnvSASLAllowed    = "KAFKA_SASL_ALLOWED"     // name:password of the user with ACLs on ACLPrefix
	EnvSASLDenied     = "KAFKA_SASL_DENIED"      // name:password of a user with no ACL
	EnvSASLACLPrefix  = "KAFKA_SASL_ACL_PREFIX"  // the prefix of the allowed user's ACLs
)

// User is a SASL user of the secured listener. The same password works for
// PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
type User struct{ Name, Password string }

// Secure describes the SASL_SSL listener of a broker started by up.sh.
type Secure struct {
	Brokers string // bootstrap address of the SASL_SSL listener
	CAFile  string // PEM CA the clients must trust
	// MTLSBrokers is the mTLS listener (SSL): it requires a client
	// certificate signed by the CA and takes the user from its CN.
	MTLSBrokers string
	// ClientCertFile and ClientKeyFile are a client certificate for the
	// allowed user (CN=alice) signed by the CA.
	ClientCertFile, ClientKeyFile string
	Admin                         User // super user
	Allowed                       User // has the ACLs of the exactly-once copy on ACLPrefix (topics, groups, transactional ids)
	Denied                        User // authenticates, has no ACL of its own
	// ACLPrefix prefixes every topic, group and transactional id the
	// allowed user may use.
	ACLPrefix string
}

// SecureBroker returns the SASL_SSL listener from the environment. It skips t
// (or fails it under KAFKATEST_REQUIRE) when a variable is missing.
func SecureBroker(t testing.TB) *Secure {
	t.Helper()
	get := func(name string) string { return strings.TrimSpace(os.Getenv(name)) }
	var missing []string
	for _, n := range []string{EnvSASLSSLBrokers, EnvSSLBrokers, EnvCAFile, EnvClientCertFile, EnvClientKeyFile, EnvSASLAdmin, EnvSASLAllowed, EnvSASLDenied, EnvSASLACLPrefix} {
		if get(n) == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("%s not set, so there is no broker with a SASL_SSL listener: `make test` starts one, or run "+
			"`set -a; eval \"$(bash integration/kafka/up.sh --tv 2 --name sec)\"; set +a` "+
			"(up.sh prints these variables unless --no-sasl-ssl; stop it with `bash integration/kafka/down.sh --name sec`)",
			strings.Join(missing, ", "))
		if os.Getenv(RequireEnv) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	user := func(name string) User {
		n, p, ok := strings.Cut(get(name), ":")
		if !ok || n == "" || p == "" {
			t.Fatalf("kafkatest: %s must be name:password", name)
		}
		return User{Name: n, Password: p}
	}
	s := &Secure{
		Brokers:        get(EnvSASLSSLBrokers),
		CAFile:         get(EnvCAFile),
		MTLSBrokers:    get(EnvSSLBrokers),
		ClientCertFile: get(EnvClientCertFile),
		ClientKeyFile:  get(EnvClientKeyFile),
		Admin:          user(EnvSASLAdmin),
		Allowed:        user(EnvSASLAllowed),
		Denied:         user(EnvSASLDenied),
		ACLPrefix:      get(EnvSASLACLPrefix),
	}
	for name, f := range map[string]string{EnvCAFile: s.CAFile, EnvClientCertFile: s.ClientCertFile, EnvClientKeyFile: s.ClientKeyFile} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("kafkatest: %s: %v", name, err)
		}
	}
	return s
}

// TLS returns a client TLS config trusting the listener's CA.
func (s *Secure) TLS(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatalf("kafkatest: read CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("kafkatest: no certificate in %s", s.CAFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// Mechanism returns the franz-go SASL mechanism named as in the components'
// sasl.mechanism field (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) for u.
func Mechanism(t testing.TB, name string, u User) sasl.Mechanism {
	t.Helper()
	switch name {
	case "PLAIN":
		return plain.Auth{User: u.Name, Pass: u.Password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: u.Name, Pass: u.Password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism()
	}
	t.Fatalf("kafkatest: unknown SASL mechanism %q", name)
	return nil
}

// Client returns a franz-go client on the SASL_SSL listener, authenticated as
// u with SCRAM-SHA-512, closed when t ends. Extra options come last.
func (s *Secure) Client(t testing.TB, u User, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return Client(t, s.Brokers, append([]kgo.Opt{
		kgo.DialTLSConfig(s.TLS(t)),
		kgo.SASL(Mechanism(t, "SCRAM-SHA-512", u)),
	}, opts...)...)
}

// AdminClient returns a kadm client on the SASL_SSL listener as the super user.
func (s *Secure) AdminClient(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(s.Client(t, s.Admin))
}

// Name returns a unique name for t starting with the allowed user's ACL
// prefix, for topics, groups and transactional ids.
func (s *Secure) Name(t testing.TB, suffix string) string {
	return s.ACLPrefix + strings.TrimPrefix(topicName(t.Name()+"-"+suffix), "t-")
}

// Topic creates a topic named with Name (as the super user, over SASL_SSL),
// waits for its leaders and deletes it when t ends.
func (s *Secure) Topic(t testing.TB, suffix string, partitions int32) string {
	t.Helper()
	name := s.Name(t, suffix)
	s.CreateTopic(t, name, partitions)
	return name
}

// CreateTopic creates the topic name (as the super user, over SASL_SSL), waits
// for its leaders and deletes it when t ends.
func (s *Secure) CreateTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	createTopic(t, s.AdminClient(t), name, partitions)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// BinEnv names the variable holding a built connect-eos binary
// (scripts/test.sh builds bin/connect-eos and exports it).
const BinEnv = "CONNECT_EOS_BIN"

// Binary returns the connect-eos binary: $CONNECT_EOS_BIN, or one built once
// per test process with `go build ./cmd/connect-eos` into a temporary dir.
func Binary(t testing.TB) string {
	t.Helper()
	if p := strings.TrimSpace(os.Getenv(BinEnv)); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("kafkatest: %s: %v", BinEnv, err)
		}
		return p
	}
	binOnce.Do(func() {
		script, err := toolScript()
		if err != nil {
			binErr = err
			return
		}
		root := filepath.Dir(filepath.Dir(filepath.Dir(script)))
		dir, err := os.MkdirTemp("", "connect-eos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "connect-eos")
		cmd := exec.Command("go", "build", "-buildvcs=auto", "-o", binPath, "./cmd/connect-eos")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/connect-eos: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("kafkatest: %v", binErr)
	}
	return binPath
}
