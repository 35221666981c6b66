package httpserve

import (
	"net"
	"net/http"
	"net/http/pprof"
)

// Serve listens on addr and serves h within lim, in a goroutine of its
// own, until stop is called; it returns the address it listens on (addr
// may name port 0). The goroutine is the server's: stop closes the
// listener and every connection, which ends it.
func Serve(addr string, h http.Handler, lim Limits) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv, ln := Server(h, ln, lim)
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr(), func() { _ = srv.Close() }, nil
}

// ProfileHandler serves net/http/pprof's index, CPU profile, symbols and
// execution trace under /debug/pprof/, for a loopback server with the
// Profiles limits.
func ProfileHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
