package kafkaconf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOAuthBearerWithoutTLSWarns: a bearer token sent without TLS is as
// readable as a PLAIN password, and gets the same kind of warning; with TLS
// there is none.
func TestOAuthBearerWithoutTLSWarns(t *testing.T) {
	c, err := parse(t, "seed_brokers: [ b:9092 ]\nsasl: { mechanism: OAUTHBEARER, token: t0k }\n")
	require.NoError(t, err)
	require.Contains(t, c.Warnings(), "sasl.mechanism OAUTHBEARER without tls.enabled: the token is sent in clear text, and whoever reads it can use it until it expires")
	c, err = parse(t, "seed_brokers: [ b:9092 ]\ntls: { enabled: true }\nsasl: { mechanism: OAUTHBEARER, token: t0k }\n")
	require.NoError(t, err)
	require.Empty(t, c.Warnings())
}
