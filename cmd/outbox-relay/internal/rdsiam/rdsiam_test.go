package rdsiam

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5/pgconn"
)

// The token is a presigned rds-db:connect URL for the connection's host,
// port and user, signed offline with static credentials.
func TestHookSetsTokenAsPassword(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://relay@db.abc.eu-west-1.rds.amazonaws.com:5433/app?sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")
	if err := Hook("eu-west-1", creds)(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	tok := cfg.Password
	if strings.HasPrefix(tok, "https://") {
		t.Fatalf("token %q carries a scheme", tok)
	}
	u, err := url.Parse("https://" + tok)
	if err != nil {
		t.Fatalf("token is no URL: %v", err)
	}
	if u.Host != "db.abc.eu-west-1.rds.amazonaws.com:5433" {
		t.Errorf("host %q, want the URL's host:port", u.Host)
	}
	q := u.Query()
	for k, want := range map[string]string{"Action": "connect", "DBUser": "relay", "X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Expires": "900"} {
		if got := q.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if q.Get("X-Amz-Signature") == "" {
		t.Error("no X-Amz-Signature")
	}
	if c := q.Get("X-Amz-Credential"); !strings.HasPrefix(c, "AKIDEXAMPLE/") || !strings.Contains(c, "/eu-west-1/rds-db/aws4_request") {
		t.Errorf("X-Amz-Credential %q: want the key id, region and service rds-db", c)
	}
}

func TestNewNeedsRegion(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_PROFILE", "")
	if _, err := New(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "--database-aws-region") {
		t.Fatalf("err = %v, want one naming --database-aws-region", err)
	}
	if _, err := New(context.Background(), "us-east-1"); err != nil {
		t.Fatalf("with a region: %v", err)
	}
}
