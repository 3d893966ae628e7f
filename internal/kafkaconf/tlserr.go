package kafkaconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
)

// IsCertificateError reports whether err is a TLS handshake that failed on
// certificates, ours or the broker's: an untrusted or expired broker
// certificate, a host name mismatch, or a client certificate the broker
// rejected or did not get. No retry can fix one of these, so components treat
// them as fatal (a broker that is down is a dial error, not this).
//
// A rejection by the broker arrives as an alert the peer sent. Go reports such
// an alert as *net.OpError{Op: "remote error"} wrapping an unexported type,
// not as tls.AlertError (which wraps only alerts Go sends itself), so the
// alert is recognised by its text.
func IsCertificateError(err error) bool {
	if err == nil {
		return false
	}
	var (
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
		op        *net.OpError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &host) || errors.As(err, &invalid) || errors.As(err, &verify) {
		return true
	}
	if errors.As(err, &alert) {
		switch alert {
		case 42, 43, 44, 45, 46, 48, 49, 116: // bad, unsupported, revoked, expired, unknown certificate; unknown CA; access denied; certificate required
			return true
		}
	}
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		msg := op.Err.Error()
		for _, a := range certificateAlerts {
			if strings.HasSuffix(msg, a) {
				return true
			}
		}
	}
	return false
}

// certificateAlerts are the texts crypto/tls gives the certificate alerts.
var certificateAlerts = []string{
	"tls: bad certificate",
	"tls: unsupported certificate",
	"tls: revoked certificate",
	"tls: expired certificate",
	"tls: unknown certificate",
	"tls: unknown certificate authority",
	"tls: access denied",
	"tls: certificate required",
}
