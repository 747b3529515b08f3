package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
)

// newHTTPServer is the public server with its timeouts: a client has
// readHeaderTimeout to send its headers and at most maxHeaderBytes of
// them; an idle keep-alive connection closes after idleTimeout. Bodies
// and slow readers are bounded per request by httpapi (--body-timeout,
// --write-stall), not by a server-wide deadline that a long answer would
// hit. open counts the connections not yet closed.
func (m *Main) newHTTPServer(h http.Handler, open *atomic.Int64) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		},
	}
}

// stopHTTP stops taking requests and lets those running end within the
// grace period; then it closes the connections left (a client stuck
// sending its body, a reader that stopped reading) and says how many.
// Cutting them is the end of a graceful stop, not a failure.
func stopHTTP(ctx context.Context, srv *http.Server, open *atomic.Int64, grace context.Context, log *slog.Logger) error {
	err := srv.Shutdown(grace)
	if err == nil {
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("stop http: %w", err)
	}
	n := open.Load()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("stop http: %w", err)
	}
	log.LogAttrs(ctx, slog.LevelWarn, "cut connections left after the grace period", slog.Int64("connections", n))
	return nil
}
