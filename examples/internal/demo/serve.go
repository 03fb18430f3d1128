package demo

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main runs an example app: run until SIGINT or SIGTERM, with the apps'
// JSON logger; if run fails, Main logs why and exits 1.
func Main(run func(ctx context.Context, logger *slog.Logger) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := NewLogger()
	err := run(ctx, logger)
	stop()
	if err != nil {
		logger.Error("exiting", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

// shutdownTimeout bounds how long requests in flight may take to finish.
const shutdownTimeout = 10 * time.Second

// Serve listens on addr (see Listen) and serves with serve until ctx ends,
// then shuts down with shutdown, which requests in flight get
// shutdownTimeout to finish under. It returns serve's error if serving
// stops first.
func Serve(ctx context.Context, addr string, logger *slog.Logger, serve func(net.Listener) error, shutdown func(context.Context) error) error {
	ln, err := Listen(addr, logger)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return shutdown(shutdownCtx)
}

// ServeHTTP is Serve for a net/http handler.
func ServeHTTP(ctx context.Context, addr string, logger *slog.Logger, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return Serve(ctx, addr, logger, srv.Serve, func(ctx context.Context) error {
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}
