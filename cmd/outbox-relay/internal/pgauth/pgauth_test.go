package pgauth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestPasswordFileIsReadAtEveryConnect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "password")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hook := PasswordFile(path)
	connect := func() (string, error) {
		cfg, err := pgconn.ParseConfig("postgres://relay@db/app")
		if err != nil {
			t.Fatal(err)
		}
		err = hook(context.Background(), cfg)
		return cfg.Password, err
	}
	for _, c := range []struct{ file, want string }{
		{"first\n", "first"},
		{"second", "second"},
		{"third\r\n", "third"},
		{"two newlines\n\n", "two newlines"}, // the rule of every secret file (internal/secretfile)
		{" spaces kept ", " spaces kept "},
	} {
		write(c.file)
		if got, err := connect(); err != nil || got != c.want {
			t.Errorf("file %q: password %q, %v; want %q", c.file, got, err, c.want)
		}
	}
	write("\n")
	if _, err := connect(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty file: err %v", err)
	}
	os.Remove(path)
	if _, err := connect(); err == nil {
		t.Error("missing file: no error")
	}
}

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const tlsURL = "postgres://relay@db.example.com:5432/app?sslmode=verify-full"
	for _, c := range []struct {
		name     string
		o        Options
		url      string
		wantHook bool
		wantErr  []string
	}{
		{"nothing", Options{}, "postgres://u:p@h/db", false, nil},
		{"password mode", Options{Auth: AuthPassword}, "postgres://u:p@h/db", false, nil},
		{"file", Options{PasswordFile: pwFile}, "postgres://u@h/db", true, nil},
		{"file and URL password", Options{PasswordFile: pwFile}, "postgres://u:p@h/db", false, []string{"--database-password-file and a password in --database-url"}},
		{"file and key=value password", Options{PasswordFile: pwFile}, "host=h user=u password=p", false, []string{"keep one"}},
		{"missing file", Options{PasswordFile: filepath.Join(dir, "none")}, "postgres://u@h/db", false, []string{"--database-password-file: read the password: stat"}},
		{"unknown mode", Options{Auth: "kerberos"}, "postgres://u@h/db", false, []string{`--database-auth "kerberos"`}},
		{"iam and file", Options{Auth: AuthRDSIAM, PasswordFile: pwFile, AWSRegion: "eu-west-1"}, tlsURL, false, []string{"drop the file"}},
		{"iam and URL password", Options{Auth: AuthRDSIAM, AWSRegion: "eu-west-1"}, "postgres://relay:pw@db.example.com/app?sslmode=require", false, []string{"drop it from the URL"}},
		{"iam without TLS", Options{Auth: AuthRDSIAM, AWSRegion: "eu-west-1"}, "postgres://relay@db.example.com/app?sslmode=disable", false, []string{"requires TLS"}},
		{"iam with prefer", Options{Auth: AuthRDSIAM, AWSRegion: "eu-west-1"}, "postgres://relay@db.example.com/app?sslmode=prefer", false, []string{"requires TLS on every attempt"}},
		{"iam with two hosts", Options{Auth: AuthRDSIAM, AWSRegion: "eu-west-1"}, "postgres://relay@a:5432,b:5432/app?sslmode=require", false, []string{"names several"}},
		{"iam", Options{Auth: AuthRDSIAM, AWSRegion: "eu-west-1"}, tlsURL, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			hook, err := c.o.Build(context.Background(), c.url)
			if (hook != nil) != c.wantHook {
				t.Errorf("hook %v, want one: %v", hook != nil, c.wantHook)
			}
			if len(c.wantErr) == 0 && err != nil {
				t.Fatalf("err %v", err)
			}
			for _, w := range c.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want it to contain %q", err, w)
				}
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}
