// Package pgauth builds the binary's relay.DatabaseConfig.BeforeConnect
// hook from its flags: a password file re-read at every connection, or a
// fresh RDS IAM token (package rdsiam). It lives under cmd/ so that the
// libraries never import the AWS SDK.
package pgauth

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/secretfile"
)

// Hook is relay.DatabaseConfig.BeforeConnect's type: it sets the
// credentials of one connection on that connection's configuration.
type Hook = func(ctx context.Context, cfg *pgconn.Config) error

// Modes of --database-auth.
const (
	// AuthPassword is the default: the URL's password, or
	// --database-password-file's.
	AuthPassword = "password"
	// AuthRDSIAM signs an RDS IAM authentication token for every
	// connection and uses it as the password.
	AuthRDSIAM = "aws-rds-iam"
)

// Options are the flags that choose how the binary authenticates to
// PostgreSQL.
type Options struct {
	// Auth is --database-auth: AuthPassword ("" means it) or AuthRDSIAM.
	Auth string
	// PasswordFile is --database-password-file: a file holding the
	// password, read at every connection.
	PasswordFile string
	// AWSRegion is --database-aws-region, for AuthRDSIAM; empty takes
	// the AWS SDK's (AWS_REGION, the shared config's profile).
	AWSRegion string
}

// RDSIAM builds the AuthRDSIAM hook for region (empty: the AWS SDK's
// default). It is a variable so the binary can be built without the AWS
// SDK (see rdsiam.go and nords.go).
var RDSIAM func(ctx context.Context, region string) (Hook, error)

// Build returns the hook o describes for the connection string url, nil
// when the URL's own password is all there is. Its errors name the flags
// and say how to fix them.
func (o Options) Build(ctx context.Context, url string) (Hook, error) {
	urlPassword := redact.Password(url) != ""
	switch o.Auth {
	case "", AuthPassword:
		if o.PasswordFile == "" {
			return nil, nil
		}
		if urlPassword {
			return nil, errors.New("--database-password-file and a password in --database-url: keep one (the file, to rotate the password without a restart)")
		}
		if _, err := ReadPasswordFile(o.PasswordFile); err != nil {
			return nil, fmt.Errorf("--database-password-file: %w", err)
		}
		return PasswordFile(o.PasswordFile), nil
	case AuthRDSIAM:
		var errs []error
		if o.PasswordFile != "" {
			errs = append(errs, errors.New("--database-auth aws-rds-iam and --database-password-file: the IAM token is the password, drop the file"))
		}
		if urlPassword {
			errs = append(errs, errors.New("--database-auth aws-rds-iam and a password in --database-url: the IAM token is the password, drop it from the URL"))
		}
		if url != "" {
			if cfg, err := pgconn.ParseConfig(url); err == nil {
				if err := CheckRDSIAM(cfg); err != nil {
					errs = append(errs, fmt.Errorf("--database-auth aws-rds-iam: %w", err))
				}
			}
		}
		if RDSIAM == nil {
			errs = append(errs, errors.New("--database-auth aws-rds-iam: this binary was built with -tags nordsiam, without the AWS SDK: use a build without that tag (see docs/credentials.md)"))
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		h, err := RDSIAM(ctx, o.AWSRegion)
		if err != nil {
			return nil, fmt.Errorf("--database-auth aws-rds-iam: %w", err)
		}
		return h, nil
	default:
		return nil, fmt.Errorf("--database-auth %q: use %s (the default) or %s", o.Auth, AuthPassword, AuthRDSIAM)
	}
}

// PasswordFile returns a hook that reads the password from path at every
// connection: a Kubernetes secret mounted as a file is replaced in place
// when it rotates, and the next connection (a reconnect after the server
// closed the old one) picks it up without a restart.
func PasswordFile(path string) Hook {
	return func(_ context.Context, cfg *pgconn.Config) error {
		pw, err := ReadPasswordFile(path)
		if err != nil {
			return fmt.Errorf("database password file: %w", err)
		}
		cfg.Password = pw
		return nil
	}
}

// ReadPasswordFile reads a password file by the rules of every secret
// file (internal/secretfile): its content without trailing line endings,
// at most 64 KiB, never empty.
func ReadPasswordFile(path string) (string, error) {
	pw, err := secretfile.Read(path)
	if err != nil {
		return "", fmt.Errorf("read the password: %w", err)
	}
	return pw, nil
}

// CheckRDSIAM refuses a connection configuration an RDS IAM token cannot
// authenticate: RDS accepts IAM tokens only over TLS, so every attempt
// (the sslmode=prefer/allow fallbacks too) must use TLS; and a token is
// signed for one host:port, so every host must be the same.
func CheckRDSIAM(cfg *pgconn.Config) error {
	if cfg.User == "" {
		return errors.New("the URL names no user: the token is signed for the database user in the URL")
	}
	if cfg.TLSConfig == nil {
		return errors.New("RDS IAM authentication requires TLS: use sslmode=verify-full&sslrootcert=/path/to/rds-ca-bundle.pem (or sslmode=require) in --database-url")
	}
	for _, f := range cfg.Fallbacks {
		if f.TLSConfig == nil {
			return errors.New("RDS IAM authentication requires TLS on every attempt: use sslmode=verify-full (or require), not prefer or allow, in --database-url")
		}
		if f.Host != cfg.Host || f.Port != cfg.Port {
			return fmt.Errorf("a token is signed for one host, and --database-url names several (%s:%d, %s:%d): name the one endpoint", cfg.Host, cfg.Port, f.Host, f.Port)
		}
	}
	return nil
}
