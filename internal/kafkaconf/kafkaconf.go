// Package kafkaconf holds the one definition of the Kafka connection fields
// (seed_brokers, client_id, tls, sasl) shared by every component of this
// project: the kafka_eos output, the kafka_native input and the kafka_state
// cache. A component adds Fields() to its spec and turns the parsed config into
// franz-go client options with FromParsed, so a connection behaves the same
// way, and is documented the same way, wherever it is configured. Compression
// maps a codec name to its producer option for the kafka_eos output and the
// benchmark's plain producer alike.
package kafkaconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Field names of the shared connection block.
const (
	FieldSeedBrokers    = "seed_brokers"
	FieldClientID       = "client_id"
	FieldTLS            = "tls"
	FieldSASL           = "sasl"
	FieldSASLMechanism  = "mechanism"
	FieldSASLUser       = "username"
	FieldSASLPassword   = "password"
	FieldSASLToken      = "token"
	FieldSASLExtensions = "extensions"
	FieldMetadataMaxAge = "metadata_max_age"
)

// SASL mechanisms accepted in sasl.mechanism.
const (
	MechanismNone        = "none"
	MechanismPlain       = "PLAIN"
	MechanismScram256    = "SCRAM-SHA-256"
	MechanismScram512    = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
)

// DefaultClientID is the client.id sent to the brokers unless overridden; it
// shows up in broker request logs and quotas.
const DefaultClientID = "connect-eos"

// saslLint rejects combinations that can never authenticate, at lint time, so
// that `connect-eos lint` catches them before a broker is contacted.
const saslLint = `
let m = this.mechanism | "none"
root = match {
  ($m == "PLAIN" || $m.has_prefix("SCRAM")) && (this.username | "") == "" => [ "sasl.username is required for mechanism %v".format($m) ],
  ($m == "PLAIN" || $m.has_prefix("SCRAM")) && (this.password | "") == "" => [ "sasl.password is required for mechanism %v".format($m) ],
  $m == "OAUTHBEARER" && (this.token | "") == "" => [ "sasl.token is required for mechanism OAUTHBEARER" ],
  $m == "none" && ((this.username | "") != "" || (this.password | "") != "" || (this.token | "") != "") => [ "sasl credentials are set but sasl.mechanism is none" ],
  $m != "OAUTHBEARER" && (this.extensions | {}).length() > 0 => [ "sasl.extensions are sent with mechanism OAUTHBEARER only, and sasl.mechanism is %v".format($m) ],
  _ => [],
}
`

// Fields returns the connection fields, in the order they appear in every
// component's docs.
func Fields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringListField(FieldSeedBrokers).
			Description("Addresses of Kafka brokers to bootstrap from (`host:port`). Entries may hold several comma-separated addresses.").
			Example([]string{"localhost:9092"}).
			Example([]string{"broker-1:9092", "broker-2:9092"}),
		service.NewStringField(FieldClientID).
			Description("The client.id sent with every request; brokers use it in request logs and quotas.").
			Default(DefaultClientID).
			Advanced(),
		service.NewTLSToggledField(FieldTLS),
		service.NewDurationField(FieldMetadataMaxAge).
			Description("How old the client's cached metadata (partitions, leaders) may get before it is refreshed. Default 5m, the Java client's (Redpanda Connect's kafka_franz and redpanda components use 1m).").
			Default("5m").
			Advanced(),
		service.NewObjectField(FieldSASL,
			EnumField(FieldSASL+"."+FieldSASLMechanism, MechanismNone, MechanismPlain, MechanismScram256, MechanismScram512, MechanismOAuthBearer).
				Description("The SASL mechanism. `none` disables SASL. PLAIN sends the password in clear text: use it only with `tls.enabled: true`.").
				Default(MechanismNone),
			service.NewStringField(FieldSASLUser).
				Description("The user name for PLAIN and SCRAM.").
				Default(""),
			service.NewStringField(FieldSASLPassword).
				Description("The password for PLAIN and SCRAM. Never logged; `connect-eos echo` redacts it.").
				Default("").
				Secret(),
			service.NewStringField(FieldSASLToken).
				Description("A static bearer token for OAUTHBEARER. Never logged; `connect-eos echo` redacts it.").
				Default("").
				Secret(),
			service.NewStringMapField(FieldSASLExtensions).
				Description("Key/value pairs sent with an OAUTHBEARER authentication (SASL extensions, KIP-342), as some brokers and proxies require (a logical cluster or pool id, for instance). OAUTHBEARER only. Default none.").
				Example(map[string]any{"logicalCluster": "lkc-123"}).
				Optional(),
		).
			Description("SASL authentication. The default is no authentication.").
			Advanced().
			LintRule(saslLint),
	}
}

// Conn is a parsed connection block.
type Conn struct {
	SeedBrokers []string
	ClientID    string
	TLS         *tls.Config // nil when TLS is disabled
	SASL        sasl.Mechanism
	// SASLMechanism is the configured mechanism name, for logs (never the
	// credentials).
	SASLMechanism string
	// MetadataMaxAge is how old cached metadata may get.
	MetadataMaxAge time.Duration
}

// FromParsed reads the connection fields from a component's parsed config. The
// errors name the offending field, so a bad config reads as such rather than as
// a connection failure later.
func FromParsed(conf *service.ParsedConfig) (*Conn, error) {
	c := &Conn{}
	brokers, err := conf.FieldStringList(FieldSeedBrokers)
	if err != nil {
		return nil, err
	}
	for _, b := range brokers {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				c.SeedBrokers = append(c.SeedBrokers, s)
			}
		}
	}
	if len(c.SeedBrokers) == 0 {
		return nil, fmt.Errorf("field %s: at least one broker address is required", FieldSeedBrokers)
	}
	if c.ClientID, err = conf.FieldString(FieldClientID); err != nil {
		return nil, err
	}
	tlsConf, tlsOn, err := conf.FieldTLSToggled(FieldTLS)
	if err != nil {
		return nil, fmt.Errorf("field %s: %w", FieldTLS, err)
	}
	if tlsOn {
		c.TLS = tlsConf
	}
	if c.SASL, c.SASLMechanism, err = saslFromParsed(conf.Namespace(FieldSASL)); err != nil {
		return nil, err
	}
	if c.MetadataMaxAge, err = conf.FieldDuration(FieldMetadataMaxAge); err != nil {
		return nil, fmt.Errorf("field %s: %w", FieldMetadataMaxAge, err)
	}
	if c.MetadataMaxAge <= 0 {
		return nil, fmt.Errorf("field %s: must be positive, got %v", FieldMetadataMaxAge, c.MetadataMaxAge)
	}
	return c, nil
}

func saslFromParsed(conf *service.ParsedConfig) (sasl.Mechanism, string, error) {
	mech, err := conf.FieldString(FieldSASLMechanism)
	if err != nil {
		return nil, "", err
	}
	user, _ := conf.FieldString(FieldSASLUser)
	pass, _ := conf.FieldString(FieldSASLPassword)
	token, _ := conf.FieldString(FieldSASLToken)
	var ext map[string]string
	if conf.Contains(FieldSASLExtensions) {
		var err error
		if ext, err = conf.FieldStringMap(FieldSASLExtensions); err != nil {
			return nil, "", fmt.Errorf("field sasl.%s: %w", FieldSASLExtensions, err)
		}
	}
	if len(ext) > 0 && mech != MechanismOAuthBearer {
		return nil, "", fmt.Errorf("field sasl.%s: extensions are sent with sasl.mechanism OAUTHBEARER only, not %s", FieldSASLExtensions, mech)
	}
	need := func(v, field string) error {
		if v == "" {
			return fmt.Errorf("field sasl.%s is required for sasl.mechanism %s", field, mech)
		}
		return nil
	}
	switch mech {
	case MechanismNone, "":
		if user != "" || pass != "" || token != "" {
			return nil, "", errors.New("field sasl: credentials are set but sasl.mechanism is none")
		}
		return nil, MechanismNone, nil
	case MechanismPlain, MechanismScram256, MechanismScram512:
		if err := errors.Join(need(user, FieldSASLUser), need(pass, FieldSASLPassword)); err != nil {
			return nil, "", err
		}
		switch mech {
		case MechanismPlain:
			return plain.Auth{User: user, Pass: pass}.AsMechanism(), mech, nil
		case MechanismScram256:
			return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), mech, nil
		default:
			return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), mech, nil
		}
	case MechanismOAuthBearer:
		if err := need(token, FieldSASLToken); err != nil {
			return nil, "", err
		}
		return oauth.Auth{Token: token, Extensions: ext}.AsMechanism(), mech, nil
	default:
		return nil, "", fmt.Errorf("field sasl.mechanism: unknown mechanism %q (want one of none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)", mech)
	}
}

// Warnings lists settings that work but weaken security, for the component to
// log at construction: certificate verification switched off, and a PLAIN
// password or an OAUTHBEARER token sent without TLS. Benthos lint rules can only report errors, so
// these are warnings in the log rather than lint failures.
func (c *Conn) Warnings() []string {
	var w []string
	if c.TLS != nil && c.TLS.InsecureSkipVerify {
		w = append(w, "tls.skip_cert_verify is true: the brokers' certificates are not verified, so a man in the middle can read and change the traffic")
	}
	if c.SASLMechanism == MechanismPlain && c.TLS == nil {
		w = append(w, "sasl.mechanism PLAIN without tls.enabled: the password is sent in clear text")
	}
	if c.SASLMechanism == MechanismOAuthBearer && c.TLS == nil {
		w = append(w, "sasl.mechanism OAUTHBEARER without tls.enabled: the token is sent in clear text, and whoever reads it can use it until it expires")
	}
	return w
}

// LogWarnings logs Warnings at WARN level with the component's logger.
func (c *Conn) LogWarnings(log *service.Logger) {
	for _, w := range c.Warnings() {
		log.Warn(w)
	}
}

// Opts returns the franz-go options that connect a client as configured. Each
// component appends its own options (transactions, consumer settings) to them.
func (c *Conn) Opts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.SeedBrokers...),
		kgo.ClientID(c.ClientID),
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	if c.MetadataMaxAge > 0 {
		opts = append(opts, kgo.MetadataMaxAge(c.MetadataMaxAge))
	}
	return opts
}
