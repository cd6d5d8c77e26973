package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Protocol selects the wire protocol the proxy parses.
type Protocol int

const (
	// Postgres is the PostgreSQL frontend/backend protocol version 3.
	Postgres Protocol = iota + 1
	// MySQL is the MySQL/MariaDB client/server protocol.
	MySQL
)

// String returns the protocol name.
func (p Protocol) String() string {
	switch p {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	default:
		return fmt.Sprintf("Protocol(%d)", int(p))
	}
}

// Fault is what the proxy does to a connection when it sees a COMMIT, or
// the request that a [Trigger] chose (the names say COMMIT; on a trigger
// they apply to that request).
type Fault int

const (
	// None forwards the COMMIT and its reply unchanged.
	None Fault = iota
	// DropBeforeCommit closes both sides without forwarding the COMMIT:
	// the server rolls the transaction back.
	DropBeforeCommit
	// DropAfterCommit forwards the COMMIT, reads the server's complete reply
	// and closes both sides without passing it on: the server committed.
	DropAfterCommit
	// StallReply forwards the COMMIT and holds the server's reply until
	// [Proxy.Release] is called or the proxy is closed; the client sees a
	// timeout if it has one.
	StallReply
	// DropMidReply forwards the COMMIT and then only part of the server's
	// reply, and closes both sides: on PostgreSQL every message of the
	// reply but its final ReadyForQuery (the client has seen the command
	// tag), on MySQL the reply's first packet without its last byte.
	DropMidReply
)

// String returns the fault name.
func (f Fault) String() string {
	switch f {
	case None:
		return "None"
	case DropBeforeCommit:
		return "DropBeforeCommit"
	case DropAfterCommit:
		return "DropAfterCommit"
	case StallReply:
		return "StallReply"
	case DropMidReply:
		return "DropMidReply"
	default:
		return fmt.Sprintf("Fault(%d)", int(f))
	}
}

func (f Fault) valid() bool { return f >= None && f <= DropMidReply }

// Stats counts what the proxy has seen since [Start].
type Stats struct {
	// Conns is the number of client connections proxied to the server;
	// PostgreSQL cancel request connections are not included.
	Conns int
	// Commits is the number of COMMIT statements recognised.
	Commits int
	// Requests is the number of requests seen (see [Trigger]).
	Requests int
	// Faults is the number of faults injected, by kind, at COMMITs and by
	// triggers; None is never a key.
	Faults map[Fault]int
	// Triggered is the number of triggers that fired.
	Triggered int
	// CancelRequestsBlocked is the number of PostgreSQL cancel requests
	// swallowed because of [Proxy.BlockCancelRequests].
	CancelRequestsBlocked int
	// CancelRequestsForwarded is the number of PostgreSQL cancel requests
	// passed on to the server.
	CancelRequestsForwarded int
}

// ErrUnknownProtocol is returned by [Start] for a Protocol other than
// [Postgres] and [MySQL].
var ErrUnknownProtocol = errors.New("faultproxy: unknown protocol")

// errMalformed ends a connection whose traffic cannot be parsed.
var errMalformed = errors.New("faultproxy: malformed message")

// errFault ends a connection closed on purpose by a fault.
var errFault = errors.New("faultproxy: fault injected")

// dialTimeout bounds connecting to the upstream server.
const dialTimeout = 10 * time.Second

// Proxy is a running fault-injection proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	upstream string
	proto    Protocol
	ln       net.Listener
	ctx      context.Context // canceled by Close
	cancel   context.CancelFunc

	blockCancel atomic.Bool
	wg          sync.WaitGroup
	closeOnce   sync.Once
	closeErr    error

	mu       sync.Mutex
	closed   bool
	armed    Fault
	policy   func(conn, commit int) Fault
	triggers []*trigger
	release  chan struct{}
	conns    map[net.Conn]struct{}
	nextConn int
	stats    Stats
}

// Start listens on 127.0.0.1 on a free port and forwards every accepted
// connection to upstream (host:port, for example "127.0.0.1:5432"), parsing
// it as proto. Close the returned proxy when done.
func Start(upstream string, proto Protocol) (*Proxy, error) {
	if proto != Postgres && proto != MySQL {
		return nil, fmt.Errorf("%w: %d", ErrUnknownProtocol, int(proto))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream,
		proto:    proto,
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		release:  make(chan struct{}),
		conns:    make(map[net.Conn]struct{}),
		stats:    Stats{Faults: make(map[Fault]int)},
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address clients connect to, "127.0.0.1:NNNNN".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the next COMMIT seen, on any connection, get fault f. It is
// one-shot: the fault is used once, then the proxy is back to its policy.
// Arm(None) disarms; values other than the declared faults are treated as
// None.
func (p *Proxy) Arm(f Fault) {
	if !f.valid() {
		f = None
	}
	p.mu.Lock()
	p.armed = f
	p.mu.Unlock()
}

// SetPolicy sets the function that chooses the fault for every COMMIT seen
// while nothing is armed. conn is the 1-based number of the proxied
// connection in accept order, commit the 1-based number of the COMMIT on that
// connection. The function is called from the connections' goroutines, so it
// must be safe for concurrent use. nil (the default) means None for every
// COMMIT; returned values other than the declared faults mean None.
func (p *Proxy) SetPolicy(policy func(conn, commit int) Fault) {
	p.mu.Lock()
	p.policy = policy
	p.mu.Unlock()
}

// Trigger chooses a request by its statement text and breaks its
// connection with Fault ([DropBeforeCommit], [DropAfterCommit],
// [DropMidReply] or [StallReply], applied to that request whatever it is).
//
// A request is a client message that runs or prepares a statement:
// PostgreSQL's Query, Parse and Execute (whose text is that of the
// statement bound to the portal executed), MySQL's COM_QUERY,
// COM_STMT_PREPARE and COM_STMT_EXECUTE (whose text is that of the
// prepared statement). A statement prepared once and executed later is
// thus two requests. The reply to a PostgreSQL request is the reply up to
// the ReadyForQuery of the Query or of the Sync that follows the Parse or
// Execute; to a MySQL request, the server's packets up to the client's
// next command.
type Trigger struct {
	// Match reports whether a request's statement text is one the trigger
	// counts; nil counts every request. It is called with the proxy's
	// lock held, one request at a time, and must not call the proxy.
	Match func(text string) bool
	// Nth is the 1-based number, among the requests that Match accepted
	// since the trigger was armed, on any connection, of the one that
	// gets Fault; below 1 means 1. When two triggers reach their number
	// at one request, the one armed first fires; the other fires at its
	// next match.
	Nth int
	// Fault is what the proxy does at that request; None counts the
	// request and does nothing.
	Fault Fault
}

// trigger is an armed Trigger; seen and the list are under the proxy's
// lock.
type trigger struct {
	Trigger
	seen  int
	fired atomic.Bool
}

// ArmAt arms t: it fires once, at the request it chooses, and is then
// disarmed. Triggers come before [Proxy.Arm] and the policy: a COMMIT
// chosen by a trigger gets the trigger's fault. It returns a function
// that reports whether t has fired. A Fault other than the declared ones
// is treated as None.
func (p *Proxy) ArmAt(t Trigger) (fired func() bool) {
	if !t.Fault.valid() {
		t.Fault = None
	}
	tr := &trigger{Trigger: t}
	p.mu.Lock()
	p.triggers = append(p.triggers, tr)
	p.mu.Unlock()
	return tr.fired.Load
}

// Disarm removes every trigger that has not fired and the fault set by
// [Proxy.Arm]; the policy stays.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	p.triggers, p.armed = nil, None
	p.mu.Unlock()
}

// BlockCancelRequests sets whether PostgreSQL CancelRequest connections are
// accepted and closed without being forwarded, as a network partition would
// do. The default is false: cancel requests are forwarded.
func (p *Proxy) BlockCancelRequests(block bool) { p.blockCancel.Store(block) }

// Release lets every reply held by [StallReply] go on to its client. Replies
// stalled after the call are held again until the next Release.
func (p *Proxy) Release() {
	p.mu.Lock()
	close(p.release)
	p.release = make(chan struct{})
	p.mu.Unlock()
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Faults = maps.Clone(p.stats.Faults)
	return s
}

// Close stops the listener, closes every proxied connection, releases
// stalled replies and waits for all of the proxy's goroutines to end. It
// returns the listener's close error; calling it again returns the same error.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		conns := make([]net.Conn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.ln.Close()
		for _, c := range conns {
			_ = c.Close()
		}
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			// Transient (for example too many open files): back off.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			switch p.proto {
			case Postgres:
				p.servePostgres(c)
			case MySQL:
				p.serveMySQL(c)
			}
		}()
	}
}

// track registers c so that Close closes it. It closes c and reports false if
// the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// untrack closes c and forgets it.
func (p *Proxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// dial connects to the upstream server; the connection is tracked.
func (p *Proxy) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: dial upstream: %w", err)
	}
	if !p.track(c) {
		return nil, net.ErrClosed
	}
	return c, nil
}

// newSession registers a proxied client connection.
func (p *Proxy) newSession(client, server net.Conn) *session {
	p.mu.Lock()
	p.nextConn++
	p.stats.Conns++
	id := p.nextConn
	p.mu.Unlock()
	return &session{p: p, id: id, client: client, server: server, done: make(chan struct{})}
}

// requestSeen counts a request on connection conn, with its statement text
// and whether it is a COMMIT, and chooses its fault: a trigger's, else for
// a COMMIT the armed fault or the policy's. commits is the connection's
// count of COMMITs, updated here.
func (p *Proxy) requestSeen(conn int, text string, commit bool, commits *int) (Fault, <-chan struct{}) {
	p.mu.Lock()
	p.stats.Requests++
	f := p.triggerLocked(text)
	var policy func(conn, commit int) Fault
	if commit {
		*commits++
		p.stats.Commits++
		if f == None {
			f, p.armed = p.armed, None
			policy = p.policy
		}
	}
	p.mu.Unlock()
	if f == None && policy != nil {
		f = policy(conn, *commits)
		if !f.valid() {
			f = None
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f != None {
		p.stats.Faults[f]++
	}
	return f, p.release
}

// triggerLocked counts a request of text for every armed trigger that
// matches it and fires the first one, in arming order, that reached its
// number: it returns that trigger's fault and disarms it.
func (p *Proxy) triggerLocked(text string) Fault {
	var fire *trigger
	for _, tr := range p.triggers {
		if tr.Match != nil && !tr.Match(text) {
			continue
		}
		tr.seen++
		if fire == nil && tr.seen >= max(tr.Nth, 1) {
			fire = tr
		}
	}
	if fire == nil {
		return None
	}
	p.triggers = slices.DeleteFunc(p.triggers, func(tr *trigger) bool { return tr == fire })
	fire.fired.Store(true)
	p.stats.Triggered++
	return fire.Fault
}

func (p *Proxy) countCancel(blocked bool) {
	p.mu.Lock()
	if blocked {
		p.stats.CancelRequestsBlocked++
	} else {
		p.stats.CancelRequestsForwarded++
	}
	p.mu.Unlock()
}

// pending is a fault whose server-side part is still to be done.
type pending struct {
	fault   Fault
	release <-chan struct{}
	// PostgreSQL only: the reply to the request starts after
	// ReadyForQuery number zBefore and ends with ReadyForQuery number
	// zTarget.
	zBefore, zTarget int
}

// session is one proxied client connection and its upstream connection.
type session struct {
	p              *Proxy
	id             int
	client, server net.Conn
	commits        int // COMMITs seen; client pump only

	closeOnce sync.Once
	done      chan struct{}

	mu      sync.Mutex
	pending []pending
}

// close closes both sides; it is safe to call more than once.
func (s *session) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		_ = s.client.Close()
		_ = s.server.Close()
	})
}

// request records a request seen by the client pump and returns its
// fault. For the faults that act on the reply (DropAfterCommit,
// DropMidReply, StallReply) the fault is queued for the server pump, with
// the protocol-specific fields of pf filled in by the caller; the caller
// forwards the request only afterwards.
func (s *session) request(text string, commit bool, pf pending) Fault {
	f, release := s.p.requestSeen(s.id, text, commit, &s.commits)
	if f == DropAfterCommit || f == DropMidReply || f == StallReply {
		pf.fault, pf.release = f, release
		s.mu.Lock()
		s.pending = append(s.pending, pf)
		s.mu.Unlock()
	}
	return f
}

// head returns the oldest queued fault.
func (s *session) head() (pending, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return pending{}, false
	}
	return s.pending[0], true
}

// pop removes the oldest queued fault.
func (s *session) pop() {
	s.mu.Lock()
	s.pending = s.pending[1:]
	s.mu.Unlock()
}

// stallReply sends what is buffered, holds the reply back until pf is
// released, and dequeues pf; errFault if the session or proxy closed first.
func (s *session) stallReply(w *bufio.Writer, pf pending) error {
	if err := w.Flush(); err != nil {
		return err
	}
	if !s.stall(pf) {
		return errFault
	}
	s.pop()
	return nil
}

// stall blocks until pf is released; it reports false if the session or the
// proxy closed first.
func (s *session) stall(pf pending) bool {
	select {
	case <-pf.release:
		return true
	case <-s.done:
		return false
	case <-s.p.ctx.Done():
		return false
	}
}

// hold blocks the client pump until the session ends (after a request
// whose reply is dropped was forwarded, nothing more may reach the server).
func (s *session) hold() error {
	<-s.done
	return errFault
}

// run runs both pumps and closes the session when either ends.
func (s *session) run(clientToServer, serverToClient func() error) {
	s.p.wg.Add(1)
	go func() {
		defer s.p.wg.Done()
		defer s.close()
		_ = clientToServer()
	}()
	defer s.close()
	_ = serverToClient()
}

// flushIfIdle flushes w unless r already holds at least a full header of the
// next message, so that messages are coalesced without being held back.
func flushIfIdle(r *bufio.Reader, w *bufio.Writer, header int) error {
	if r.Buffered() < header {
		return w.Flush()
	}
	return nil
}

// copyRaw flushes w and then copies everything from r to dst unparsed.
func copyRaw(dst io.Writer, w *bufio.Writer, r *bufio.Reader) error {
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := io.Copy(dst, r)
	return err
}

// readBody reads n bytes, allocating as data arrives rather than trusting n.
func readBody(r io.Reader, n int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, n))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != n {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// commitStatements are the normalized statement texts recognised as COMMIT.
var commitStatements = map[Protocol]map[string]bool{
	Postgres: {
		"commit": true, "commit work": true, "commit transaction": true,
		"end": true, "end work": true, "end transaction": true,
	},
	MySQL: {"commit": true, "commit work": true},
}

// maxCommitText bounds the statement text inspected for COMMIT.
const maxCommitText = 256

// isCommit reports whether the statement text is a COMMIT for proto.
func isCommit(proto Protocol, text string) bool {
	if len(text) > maxCommitText {
		return false
	}
	text = strings.TrimSpace(text)
	for strings.HasSuffix(text, ";") {
		text = strings.TrimSpace(strings.TrimSuffix(text, ";"))
	}
	return commitStatements[proto][strings.ToLower(strings.Join(strings.Fields(text), " "))]
}
