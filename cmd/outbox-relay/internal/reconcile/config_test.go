package reconcile

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Since: time.Hour, Settle: 30 * time.Second, MaxList: 50, ReadTimeout: 30 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no window", func(c *Config) { c.Since, c.Settle = 0, 0 }, "--since is required"},
		{"negative settle", func(c *Config) { c.Settle = -time.Second }, "--settle -1s: use 0 or more, less than --since"},
		{"settle covers the window", func(c *Config) { c.Settle = time.Hour }, "--settle 1h0m0s"},
		{"negative list", func(c *Config) { c.MaxList = -1 }, "--max-list must not be negative"},
		{"no read timeout", func(c *Config) { c.ReadTimeout = 0 }, "--read-timeout must be positive"},
		{"consumer url alone", func(c *Config) { c.ConsumerURL = "postgres://h/db" }, "--consumer-database-url needs --consumer"},
	} {
		c := ok
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Every problem is reported at once.
	err := Config{Settle: -1, MaxList: -1}.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("all errors at once: %v", err)
	}
}
