package kafkaconf

import (
	"context"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, yaml string) (*Conn, error) {
	t.Helper()
	spec := service.NewConfigSpec().Fields(Fields()...)
	pc, err := spec.ParseYAML(yaml, nil)
	require.NoError(t, err)
	return FromParsed(pc)
}

func TestFromParsed(t *testing.T) {
	c, err := parse(t, `seed_brokers: [ "a:9092,b:9092", " c:9092 " ]`)
	require.NoError(t, err)
	require.Equal(t, []string{"a:9092", "b:9092", "c:9092"}, c.SeedBrokers)
	require.Equal(t, DefaultClientID, c.ClientID)
	require.Nil(t, c.TLS)
	require.Nil(t, c.SASL)
	require.Len(t, c.Opts(), 3) // seed brokers, client id, metadata max age

	c, err = parse(t, `
seed_brokers: [ a:9093 ]
tls: { enabled: true }
sasl: { mechanism: SCRAM-SHA-512, username: u, password: p }
`)
	require.NoError(t, err)
	require.NotNil(t, c.TLS)
	require.Equal(t, "SCRAM-SHA-512", c.SASL.Name())
	require.Len(t, c.Opts(), 5)

	c, err = parse(t, `{ seed_brokers: [ a:1 ], sasl: { mechanism: OAUTHBEARER, token: tok } }`)
	require.NoError(t, err)
	require.Equal(t, "OAUTHBEARER", c.SASL.Name())
	_, first, err := c.SASL.Authenticate(context.Background(), "a:1")
	require.NoError(t, err)
	require.Equal(t, "n,,\x01auth=Bearer tok\x01\x01", string(first))
}

// TestSASLExtensions: sasl.extensions (Redpanda Connect's field, written in
// its list form there) go with the OAUTHBEARER client's first message, and
// are refused with any other mechanism.
func TestSASLExtensions(t *testing.T) {
	c, err := parse(t, `{ seed_brokers: [ a:1 ], sasl: { mechanism: OAUTHBEARER, token: tok, extensions: { logicalCluster: lkc-1 } } }`)
	require.NoError(t, err)
	_, first, err := c.SASL.Authenticate(context.Background(), "a:1")
	require.NoError(t, err)
	require.Equal(t, "n,,\x01auth=Bearer tok\x01logicalCluster=lkc-1\x01\x01", string(first))

	_, err = parse(t, `{ seed_brokers: [ a:1 ], sasl: { mechanism: SCRAM-SHA-256, username: u, password: p, extensions: { a: b } } }`)
	require.ErrorContains(t, err, "field sasl.extensions: extensions are sent with sasl.mechanism OAUTHBEARER only, not SCRAM-SHA-256")
}

func TestFromParsedErrorsNameTheField(t *testing.T) {
	for yaml, want := range map[string]string{
		`seed_brokers: [ "," ]`: "field seed_brokers",
		`{ seed_brokers: [ a:1 ], sasl: { mechanism: PLAIN, username: u } }`:         "field sasl.password is required for sasl.mechanism PLAIN",
		`{ seed_brokers: [ a:1 ], sasl: { mechanism: SCRAM-SHA-256, password: p } }`: "field sasl.username is required",
		`{ seed_brokers: [ a:1 ], sasl: { mechanism: OAUTHBEARER } }`:                "field sasl.token is required",
		`{ seed_brokers: [ a:1 ], sasl: { password: p } }`:                           "sasl.mechanism is none",
	} {
		_, err := parse(t, yaml)
		require.ErrorContains(t, err, want, yaml)
	}
}

// TestLintRejectsIncompleteSASL checks the field lint rule through a real
// Benthos linter, as `connect-eos lint` would run it.
func TestLintRejectsIncompleteSASL(t *testing.T) {
	env := service.NewEnvironment()
	spec := service.NewConfigSpec().Fields(Fields()...)
	require.NoError(t, env.RegisterBatchOutput("kafkaconf_under_test", spec,
		func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			return nil, service.BatchPolicy{}, 1, nil
		}))
	for yaml, want := range map[string]string{
		"sasl: { mechanism: SCRAM-SHA-512, username: u }":                            "sasl.password is required for mechanism SCRAM-SHA-512",
		"sasl: { mechanism: PLAIN, password: p }":                                    "sasl.username is required for mechanism PLAIN",
		"sasl: { mechanism: OAUTHBEARER }":                                           "sasl.token is required",
		"sasl: { username: u }":                                                      "sasl.mechanism is none",
		"sasl: { mechanism: PLAIN, username: u, password: p, extensions: { a: b } }": "sasl.extensions are sent with mechanism OAUTHBEARER only, and sasl.mechanism is PLAIN",
	} {
		sb := env.NewStreamBuilder()
		err := sb.AddOutputYAML("kafkaconf_under_test:\n  seed_brokers: [ a:1 ]\n  " + yaml)
		require.ErrorContains(t, err, want, yaml)
	}
	sb := env.NewStreamBuilder()
	require.NoError(t, sb.AddOutputYAML("kafkaconf_under_test:\n  seed_brokers: [ a:1 ]\n  sasl: { mechanism: PLAIN, username: u, password: p }"))
	sb = env.NewStreamBuilder()
	require.NoError(t, sb.AddOutputYAML("kafkaconf_under_test:\n  seed_brokers: [ a:1 ]\n  sasl: { mechanism: OAUTHBEARER, token: t, extensions: { a: b } }"))
}

func TestWarnings(t *testing.T) {
	c, err := parse(t, `{ seed_brokers: [ a:1 ], tls: { enabled: true, skip_cert_verify: true } }`)
	require.NoError(t, err)
	require.Len(t, c.Warnings(), 1)
	require.Contains(t, c.Warnings()[0], "tls.skip_cert_verify")

	c, err = parse(t, `{ seed_brokers: [ a:1 ], sasl: { mechanism: PLAIN, username: u, password: p } }`)
	require.NoError(t, err)
	require.Len(t, c.Warnings(), 1)
	require.Contains(t, c.Warnings()[0], "clear text")
	require.NotContains(t, c.Warnings()[0], "p ", "a warning never carries the password")

	c, err = parse(t, `{ seed_brokers: [ a:1 ], tls: { enabled: true }, sasl: { mechanism: PLAIN, username: u, password: p } }`)
	require.NoError(t, err)
	require.Empty(t, c.Warnings())
}
