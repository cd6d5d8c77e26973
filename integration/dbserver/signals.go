//go:build unix

package dbserver

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// The throwaway servers of this process, stopped on SIGINT, SIGTERM or
// SIGHUP while any runs.
var locals struct {
	mu sync.Mutex
	// running are the servers started and not yet stopped.
	running map[*localServer]bool
	// watch is the signal watcher, while servers run.
	watch *sigWatch
	// manual is set by SetStopOnSignal(false).
	manual bool
	// exiting is set once a signal arrived.
	exiting bool
}

// stopSignals are the signals that stop the throwaway servers.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// SetStopOnSignal chooses what happens to the throwaway servers when the
// process receives SIGINT, SIGTERM or SIGHUP. With on (the default), the
// package stops them, removes their directories, and then lets the signal
// end the process as it would have without the package. A program that
// handles these signals itself and always closes its servers (such as
// withdb, which waits for its child first) calls SetStopOnSignal(false)
// before Find. Changing it while throwaway servers run takes effect when
// the next one starts after all have stopped.
func SetStopOnSignal(on bool) {
	locals.mu.Lock()
	defer locals.mu.Unlock()
	locals.manual = !on
}

// register records a started server and, for the first one, starts
// watching for signals.
func register(l *localServer) {
	locals.mu.Lock()
	defer locals.mu.Unlock()
	if locals.running == nil {
		locals.running = make(map[*localServer]bool)
	}
	locals.running[l] = true
	if locals.watch == nil && !locals.manual {
		locals.watch = startWatch()
	}
}

// unregister forgets a stopped server and, after the last one, stops
// watching for signals (so that no goroutine outlives the servers).
func unregister(l *localServer) {
	locals.mu.Lock()
	delete(locals.running, l)
	var w *sigWatch
	if len(locals.running) == 0 && !locals.exiting {
		w, locals.watch = locals.watch, nil
	}
	locals.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// sigWatch is a goroutine waiting for a stop signal.
type sigWatch struct {
	ch   chan os.Signal
	quit chan struct{}
	done chan struct{}
}

// startWatch starts watching for stop signals.
func startWatch() *sigWatch {
	w := &sigWatch{ch: make(chan os.Signal, 1), quit: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(w.ch, stopSignals...)
	go func() {
		defer close(w.done)
		select {
		case sig := <-w.ch:
			onSignal(sig.(syscall.Signal))
		case <-w.quit:
		}
	}()
	return w
}

// stop ends the watch.
func (w *sigWatch) stop() {
	signal.Stop(w.ch)
	close(w.quit)
	<-w.done
}

// onSignal stops every throwaway server, then delivers sig again with its
// default action, which ends the process.
func onSignal(sig syscall.Signal) {
	locals.mu.Lock()
	locals.exiting = true
	var list []*localServer
	for l := range locals.running {
		list = append(list, l)
	}
	locals.mu.Unlock()
	fmt.Fprintf(os.Stderr, "dbserver: %v: stopping %d throwaway server(s)\n", sig, len(list))
	var wg sync.WaitGroup
	for _, l := range list {
		wg.Go(func() {
			if err := l.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "dbserver: %v\n", err)
			}
		})
	}
	wg.Wait()
	signal.Reset(sig)
	_ = syscall.Kill(os.Getpid(), sig)
	// The signal is ignored (nohup, a parent's SIG_IGN): end anyway.
	time.Sleep(time.Second)
	os.Exit(128 + int(sig))
}
