// Package hint recognises failures that no retry can cure - TLS and
// authentication problems of PostgreSQL or Kafka, missing privileges - and
// says how to fix them. The relay stops on them instead of reconnecting
// forever, and the binary prints the fix beside the error. The fixes name
// what the user changes by its relay.Config path (Database.URL), and what
// inside Kafka.TLS (a *tls.Config) or Kafka.SASL (a sasl.Mechanism) by a
// path below it: Kafka.TLS.RootCAs, Kafka.SASL.Username. The binary names
// its flags (cmd/outbox-relay/internal/config/flagtext.go).
package hint

import (
	"crypto/x509"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/poison"
)

// With appends how to fix a connection failure that retrying cannot
// cure (TLS and authentication problems of PostgreSQL or Kafka, missing
// privileges) and marks it poison.Permanent: the one way the module says
// "don't retry". Other errors are returned as they are.
func With(err error) error {
	if err == nil {
		return nil
	}
	var he *hintError
	if errors.As(err, &he) {
		return err
	}
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	h := ""
	if errors.As(err, &ce) || errors.As(err, &pe) {
		h = pgHint(err)
	} else {
		h = kafkaHint(kafkaconn.Classify(err))
	}
	if h == "" {
		return err
	}
	return poison.Permanent(&hintError{err, h})
}

// hintError is an error with the fix for it.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "; fix: " + e.hint }
func (e *hintError) Unwrap() error { return e.err }

func kafkaHint(f kafkaconn.Failure) string {
	switch f {
	case kafkaconn.FailureUnknownAuthority:
		return "the broker's certificate is not signed by a trusted CA: set Kafka.TLS.RootCAs to the PEM CA bundle that signed it"
	case kafkaconn.FailureHostname:
		return "the broker's certificate does not name the address the relay dialled: set Kafka.TLS.ServerName to a name in the certificate, or fix the broker's certificate / advertised.listeners"
	case kafkaconn.FailureCertificateInvalid:
		return "the broker's certificate is expired, not yet valid (check clocks) or not usable for TLS: renew it"
	case kafkaconn.FailureNotTLS:
		return "the Kafka listener does not speak TLS: use the broker's SSL/SASL_SSL port, or drop Kafka.TLS for a PLAINTEXT listener"
	case kafkaconn.FailureNeedsTLS:
		return "the Kafka listener expects TLS: set Kafka.TLS (and Kafka.TLS.RootCAs unless the system roots trust the broker)"
	case kafkaconn.FailureRejected:
		return "the broker rejected the TLS handshake, usually the client certificate: set Kafka.TLS.Certificates to a certificate signed by a CA in the broker's ssl.truststore"
	case kafkaconn.FailureSASLAuthentication:
		return "check Kafka.SASL.Username and its password (Kafka.SASL.Password), and that Kafka.SASL.Mechanism matches the broker's credentials (SCRAM credentials exist per mechanism)"
	case kafkaconn.FailureSASLToken:
		return "the OAuth token endpoint refused the client: check Kafka.SASL.OAuth.ClientID, its secret (Kafka.SASL.OAuth.ClientSecret) and Kafka.SASL.OAuth.Scope"
	case kafkaconn.FailureSASLTokenRedirect:
		return "the OAuth token endpoint redirects, and a redirect is never followed (it would resend the client secret): set Kafka.SASL.OAuth.TokenEndpoint to the https URL it redirects to"
	case kafkaconn.FailureSASLMechanism:
		return "the listener does not enable this SASL mechanism: set Kafka.SASL.Mechanism to one in the broker's sasl.enabled.mechanisms"
	}
	return ""
}

// pgHint recognises PostgreSQL connection failures that need a change of
// configuration.
func pgHint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "3D000":
			return "the database in Database.URL does not exist: correct its name, or create it and run `outbox-relay migrate`"
		case pe.Code == "28P01":
			return "the password for this user is wrong: correct it in Database.URL, or in what supplies it at each connect (Database.BeforeConnect: a password file not yet updated after a rotation, an IAM token the role may not use)"
		case pe.Code == "28000" && strings.Contains(pe.Message, "no encryption"):
			return "the server accepts this user only over SSL (hostssl in pg_hba.conf): add sslmode=verify-full&sslrootcert=/path/to/ca.pem to Database.URL"
		case pe.Code == "28000":
			return "pg_hba.conf has no entry for this user, host and database: add one, or connect as a user that has one"
		case pe.Code == "42501" && strings.Contains(pe.Message, "replication"):
			return "the role lacks the REPLICATION attribute: run `outbox-relay migrate --grant-role ROLE` as an admin, or ALTER ROLE ... REPLICATION"
		case pe.Code == "42501":
			return "the role lacks a privilege the relay needs: run `outbox-relay migrate --grant-role ROLE` as an admin (README: least-privilege role)"
		}
		return ""
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	msg := err.Error()
	switch {
	case errors.As(err, &ua):
		return "the PostgreSQL server's certificate is not signed by a trusted CA: set sslrootcert=/path/to/ca.pem in Database.URL"
	case errors.As(err, &he):
		return "the PostgreSQL server's certificate does not name the host in Database.URL: connect by a name the certificate carries, or use sslmode=verify-ca"
	case errors.As(err, &ci):
		return "the PostgreSQL server's certificate is expired or not yet valid: renew it (or check clocks)"
	case strings.Contains(msg, "server refused TLS connection"):
		return "the PostgreSQL server has SSL off: set ssl = on on the server, or lower sslmode in Database.URL"
	case strings.Contains(msg, "remote error: tls:"):
		return "the PostgreSQL server rejected the TLS handshake (client certificate?): check sslcert and sslkey in Database.URL"
	}
	return ""
}
