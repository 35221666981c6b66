package leader

import (
	"strings"
	"testing"
	"time"
)

func TestKey(t *testing.T) {
	a := Key("outbox", "outbox_relay")
	for _, other := range []int64{Key("outbox2", "outbox_relay"), Key("outbox", "outbox_relay2"), Key("outboxo", "utbox_relay")} {
		if other == a {
			t.Fatalf("distinct database/slot pairs share key %d", a)
		}
	}
	// The separator keeps ("ab", "c") and ("a", "bc") apart.
	if Key("ab", "c") == Key("a", "bc") {
		t.Fatal("Key ignores the database/slot boundary")
	}
}

func TestKeyPinned(t *testing.T) {
	// sha256("outbox-relay/leader\x00outbox\x00outbox_relay")[:8], big-endian.
	const pinnedKey int64 = 1807330627548398993
	got := Key("outbox", "outbox_relay")
	if got != pinnedKey {
		t.Fatalf("Key(outbox, outbox_relay) = %d, want %d: changing the derivation splits a rolling upgrade into two leaders", got, pinnedKey)
	}
}

func TestSplit(t *testing.T) {
	hi, lo := split(-1)
	if hi != 0xffffffff || lo != 0xffffffff {
		t.Fatalf("split(-1) = %x, %x", hi, lo)
	}
	hi, lo = split(0x0000000100000002)
	if hi != 1 || lo != 2 {
		t.Fatalf("split = %d, %d", hi, lo)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{PollInterval: 2 * time.Second, KeepaliveInterval: time.Second, Timeout: 10 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"short timeout":  {Config{PollInterval: 100 * time.Millisecond, KeepaliveInterval: 100 * time.Millisecond, Timeout: 500 * time.Millisecond}, "at least 1s"},
		"slow keepalive": {Config{PollInterval: time.Second, KeepaliveInterval: 5 * time.Second, Timeout: 10 * time.Second}, "keepalive"},
		"slow poll":      {Config{PollInterval: 6 * time.Second, KeepaliveInterval: time.Second, Timeout: 10 * time.Second}, "poll"},
		"zero poll":      {Config{KeepaliveInterval: time.Second, Timeout: 10 * time.Second}, "poll"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error mentioning %q", name, err, c.want)
		}
	}
}
