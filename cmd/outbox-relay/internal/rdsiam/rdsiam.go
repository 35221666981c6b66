// Package rdsiam signs Amazon RDS IAM authentication tokens, the
// passwords of `--database-auth aws-rds-iam`. It is the only package that
// imports the AWS SDK, and only the binary imports it: the libraries stay
// free of it (a library user plugs a token in through
// relay.DatabaseConfig.BeforeConnect).
package rdsiam

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5/pgconn"
)

// New loads the AWS configuration (credentials from the environment, the
// shared config and credentials files, web identity - EKS IRSA or Pod
// Identity - or the instance role, as the AWS SDK finds them) and
// returns a hook that signs a fresh token for every connection. A token is
// valid for 15 minutes but checked only when a connection signs in, so a
// new one per connect never expires on a long-lived connection. region
// empty takes the SDK's (AWS_REGION, the profile's region).
func New(ctx context.Context, region string) (func(context.Context, *pgconn.Config) error, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	ac, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load the AWS configuration: %w", err)
	}
	if ac.Region == "" {
		return nil, errors.New("no AWS region: set --database-aws-region or AWS_REGION (the RDS instance's region)")
	}
	return Hook(ac.Region, ac.Credentials), nil
}

// Hook returns the hook that signs a token for each connection with creds
// in region, for the host, port and user of the connection's
// configuration, and sets it as the password.
func Hook(region string, creds aws.CredentialsProvider) func(context.Context, *pgconn.Config) error {
	return func(ctx context.Context, cfg *pgconn.Config) error {
		tok, err := Token(ctx, cfg, region, creds)
		if err != nil {
			return err
		}
		cfg.Password = tok
		return nil
	}
}

// Token signs the RDS IAM token for cfg's host, port and user: a
// presigned rds-db:connect URL without its scheme, which RDS accepts as
// the password (over TLS only).
func Token(ctx context.Context, cfg *pgconn.Config, region string, creds aws.CredentialsProvider) (string, error) {
	endpoint := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	tok, err := auth.BuildAuthToken(ctx, endpoint, region, cfg.User, creds)
	if err != nil {
		return "", fmt.Errorf("sign the RDS IAM token for %s@%s: %w", cfg.User, endpoint, err)
	}
	return tok, nil
}
