package kafkaconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// remoteAlert mimics crypto/tls's unexported alert type as it reaches us
// inside a *net.OpError when the broker rejects our certificate.
type remoteAlert string

func (a remoteAlert) Error() string { return string(a) }

func TestIsCertificateError(t *testing.T) {
	yes := []error{
		fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}),
		fmt.Errorf("dial: %w", x509.HostnameError{Host: "b"}),
		fmt.Errorf("dial: %w", &tls.CertificateVerificationError{Err: errors.New("x")}),
		fmt.Errorf("dial: %w", tls.AlertError(116)),
		fmt.Errorf("unable to dial: %w", &net.OpError{Op: "remote error", Err: remoteAlert("tls: certificate required")}),
		&net.OpError{Op: "remote error", Err: remoteAlert("tls: bad certificate")},
		&net.OpError{Op: "remote error", Err: remoteAlert("tls: unknown certificate authority")},
	}
	for _, err := range yes {
		require.True(t, IsCertificateError(err), "%v", err)
	}
	no := []error{
		nil,
		errors.New("tls: certificate required"), // not from the peer
		&net.OpError{Op: "dial", Err: errors.New("connection refused")},
		&net.OpError{Op: "remote error", Err: remoteAlert("tls: handshake failure")},
		fmt.Errorf("x: %w", tls.AlertError(40)),
	}
	for _, err := range no {
		require.False(t, IsCertificateError(err), "%v", err)
	}
}
