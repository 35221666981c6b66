package httpserve

import (
	"net/http"
	"testing"
)

// TestServeStops: Serve answers on the address it returns, and after
// stop nothing does.
func TestServeStops(t *testing.T) {
	addr, stop, err := Serve("127.0.0.1:0", ProfileHandler(), Profiles)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/debug/pprof/"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	stop()
	http.DefaultClient.CloseIdleConnections()
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s after stop: %s", url, resp.Status)
	}
}
